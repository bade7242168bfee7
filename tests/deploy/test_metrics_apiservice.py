"""deploy/metrics-apiservice.yaml registers metrics.k8s.io/v1beta1 with the hub's Service."""

from __future__ import annotations

import pathlib

import yaml

MANIFEST = pathlib.Path(__file__).resolve().parents[2] / "deploy" / "metrics-apiservice.yaml"


def test_apiservice_and_rbac() -> None:
    docs = {d["kind"]: d for d in yaml.safe_load_all(MANIFEST.read_text())}
    api = docs["APIService"]
    assert api["apiVersion"] == "apiregistration.k8s.io/v1"
    assert api["metadata"]["name"] == "v1beta1.metrics.k8s.io"  # <version>.<group>
    spec = api["spec"]
    assert (spec["group"], spec["version"]) == ("metrics.k8s.io", "v1beta1")
    assert spec["service"] == {"name": "cloudhub", "namespace": "edgefleet", "port": 443}
    assert "insecureSkipTLSVerify" not in spec and spec["caBundle"]
    assert docs["RoleBinding"]["roleRef"]["name"] == "extension-apiserver-authentication-reader"
    assert docs["RoleBinding"]["metadata"]["namespace"] == "kube-system"
    assert docs["ClusterRoleBinding"]["roleRef"]["name"] == "system:auth-delegator"
    for binding in (docs["RoleBinding"], docs["ClusterRoleBinding"]):
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "cloudhub", "namespace": "edgefleet"}
        ]
    rule = docs["ClusterRole"]["rules"][0]
    assert rule["apiGroups"] == ["metrics.k8s.io"] and set(rule["resources"]) == {"pods", "nodes"}
