"""Which ConfigMaps and Secrets a pod references (the Node authorizer's graph)."""

from __future__ import annotations

from protocol.podrefs import pod_references, reference_keys


def test_every_place_a_pod_names_a_configmap_or_secret() -> None:
    pod = {
        "metadata": {"namespace": "ns"},
        "spec": {
            "volumes": [
                {"name": "a", "configMap": {"name": "cm-vol"}},
                {"name": "b", "secret": {"secretName": "sec-vol"}},
                {
                    "name": "c",
                    "projected": {
                        "sources": [
                            {"configMap": {"name": "cm-proj"}},
                            {"secret": {"name": "sec-proj"}},
                            {"serviceAccountToken": {"path": "t"}},
                        ]
                    },
                },
                {"name": "d", "emptyDir": {}},
            ],
            "initContainers": [{"name": "i", "envFrom": [{"configMapRef": {"name": "cm-init"}}]}],
            "containers": [
                {
                    "name": "c",
                    "env": [
                        {
                            "name": "A",
                            "valueFrom": {"configMapKeyRef": {"name": "cm-env", "key": "k"}},
                        },
                        {
                            "name": "B",
                            "valueFrom": {"secretKeyRef": {"name": "sec-env", "key": "k"}},
                        },
                        {"name": "C", "value": "plain"},
                        {"name": "D", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                    ],
                    "envFrom": [{"secretRef": {"name": "sec-envfrom"}}],
                }
            ],
            "ephemeralContainers": [{"name": "e", "envFrom": [{"secretRef": {"name": "sec-eph"}}]}],
            "imagePullSecrets": [{"name": "pull"}, {"name": "cm-vol"}],
        },
    }
    assert pod_references(pod) == [
        ("ConfigMap", "cm-vol"),
        ("Secret", "sec-vol"),
        ("ConfigMap", "cm-proj"),
        ("Secret", "sec-proj"),
        ("ConfigMap", "cm-init"),
        ("ConfigMap", "cm-env"),
        ("Secret", "sec-env"),
        ("Secret", "sec-envfrom"),
        ("Secret", "sec-eph"),
        ("Secret", "pull"),
        ("Secret", "cm-vol"),
    ]
    assert reference_keys(pod)[0] == "ConfigMap/ns/cm-vol"


def test_duplicates_once_and_malformed_parts_skipped() -> None:
    pod = {
        "metadata": {"namespace": "ns"},
        "spec": {
            "volumes": ["junk", {"configMap": {"name": "x"}}, {"configMap": {"name": "x"}}],
            "containers": [
                {"env": [None, {"valueFrom": "bad"}], "envFrom": [{"configMapRef": {}}]}
            ],
            "imagePullSecrets": [{"name": ""}],
        },
    }
    assert pod_references(pod) == [("ConfigMap", "x")]
    assert pod_references({"spec": "nonsense"}) == []
    assert pod_references({}) == []
