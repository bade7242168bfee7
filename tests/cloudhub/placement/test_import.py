"""Foreign placement documents (the real ones in shared/data/manifests) imported and placed.

Each test imports the upstream files as they are, checks what was (not)
translated, then places the result on a small fleet shaped like the one the
authors had in mind and asserts the outcome they meant.
"""

from __future__ import annotations

import copy
import pathlib
from collections import Counter

import pytest
import yaml

from cloudhub.placement import LABEL_GROUP, TranslationError, parse_placement
from cloudhub.placement.importers import (
    GROUP_LABEL,
    KUBEEDGE_GROUP_LABEL,
    OPENYURT_POOL_LABEL,
    import_documents,
    import_files,
    load_documents,
)
from tests.cloudhub.placement.fleet import Fleet
from tests.data import MANIFESTS

KARMADA_NGINX = MANIFESTS / "karmada-io/karmada/samples/nginx/propagationpolicy.yaml"
KARMADA_LABELSEL = MANIFESTS / "karmada-io/karmada/artifacts/example/policy_with_labelSelector.yaml"
KARMADA_OVERRIDE = MANIFESTS / "karmada-io/karmada/artifacts/example/overridepolicy_image.yaml"
KARMADA_PROBE = (
    MANIFESTS / "karmada-io/website/docs/resources/tutorials/rollout/progressive/base/"
    "http-probe-app.yaml"
)
YURT_POOL = (
    MANIFESTS / "openyurtio/yurt-app-manager/config/yurt-app-manager/samples/nodepool/"
    "apps_v1alpha1_nodepool_edge.yaml"
)
YURT_UD = (
    MANIFESTS / "openyurtio/yurt-app-manager/config/yurt-app-manager/samples/uniteddeployment/"
    "uniteddeployment_deployment.yaml"
)
SUPEREDGE_GRID = MANIFESTS / "superedge/superedge/sample/application-grid/deploygrid.yaml"
KURATOR = MANIFESTS / "kurator-dev/kurator/examples/application/cluster-selector-demo.yaml"
BROKEN_YAML = (
    MANIFESTS / "kubeedge/mappers-go/mappers/device-v1beta1/mqtt-mapper/resource/"
    "mqttdevice-instance.yaml"
)

pytestmark = pytest.mark.skipif(
    not MANIFESTS.is_dir(), reason=f"shared manifests not found at {MANIFESTS}"
)


def place(placements: list[dict], nodes: dict[str, dict[str, str]], **node_kw) -> Fleet:
    fleet = Fleet()
    for name, labels in nodes.items():
        kw = dict(node_kw.get(name, {}))
        fleet.add_node(name, labels, **kw)
    for i, obj in enumerate(placements):
        obj = copy.deepcopy(obj)  # as the API stores it: with a uid and a creation time
        obj["metadata"]["uid"] = f"uid-{obj['metadata']['name']}-{i}"
        obj["metadata"]["creationTimestamp"] = "2024-01-01T00:00:00Z"
        parsed = parse_placement(obj)
        fleet.placements[parsed.name] = obj
        fleet.planner.upsert_placement(parsed)
    fleet.converge()
    return fleet


def clusters(n_per: int = 2, names=("member1", "member2", "member3")) -> dict:
    return {f"{c}-n{i}": {GROUP_LABEL: c} for c in names for i in range(n_per)}


def test_karmada_divided_without_preference_is_even_and_override_images_by_cluster() -> None:
    labels = {
        "member1": {"location": "us"},
        "member2": {"location": "cn"},
        "member3": {"location": "eu"},
    }
    results = import_files([KARMADA_PROBE, KARMADA_OVERRIDE], cluster_labels=labels)
    by_kind = {r.kind: r for r in results}
    policy = by_kind["PropagationPolicy"]
    (obj,) = policy.placements
    assert obj["metadata"]["name"] == "http-probe-app"
    # The Service and Ingress it also selects are reported, not silently dropped.
    assert any("Service http-probe-app-service" in u for u in policy.untranslated)
    assert any("Ingress http-probe-app-ingress" in u for u in policy.untranslated)
    spec = obj["spec"]
    assert spec["replicas"] == 6 and spec["updateStrategy"] == {"maxUnavailable": 0, "maxSurge": 1}
    container = spec["template"]["spec"]["containers"][0]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"

    fleet = place(policy.placements, clusters())
    assert fleet.per_group("http-probe-app") == {"member1": 2, "member2": 2, "member3": 2}
    images = {
        p["metadata"]["labels"][LABEL_GROUP]: p["spec"]["containers"][0]["image"]
        for p in fleet.pods_of("http-probe-app")
    }
    assert images == {
        "member1": "fictional.registry.us/cmontemuino/http-probe-test-app:v0.5.0",
        "member2": "fictional.registry.cn/cmontemuino/http-probe-test-app:v0.5.0",
        "member3": "ghcr.io/cmontemuino/http-probe-test-app:v0.5.0",
    }
    assert "override rules considered" in by_kind["OverridePolicy"].notes[0]


def test_karmada_override_by_cluster_labels_is_reported_when_labels_are_unknown() -> None:
    results = import_files([KARMADA_PROBE, KARMADA_OVERRIDE])
    (policy,) = [r for r in results if r.kind == "PropagationPolicy"]
    unresolved = [u for u in policy.untranslated if "selects clusters by labels" in u]
    assert len(unresolved) == 2 and "location" in unresolved[0]
    assert "overrides" not in policy.placements[0]["spec"]


def test_karmada_policy_without_its_workload_says_so_then_weights_1_to_1() -> None:
    (alone,) = import_files([KARMADA_NGINX])
    assert alone.placements == []
    assert any(
        "Deployment default/nginx is not among the documents" in u for u in alone.untranslated
    )
    # The sample's Deployment lives elsewhere in Karmada; derive one to complete it.
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "nginx", "labels": {"app": "nginx"}},
        "spec": {
            "replicas": 5,
            "selector": {"matchLabels": {"app": "nginx"}},
            "template": {
                "metadata": {"labels": {"app": "nginx"}},
                "spec": {"containers": [{"name": "nginx", "image": "nginx"}]},
            },
        },
    }
    docs = load_documents(KARMADA_NGINX.read_text(), str(KARMADA_NGINX))
    (result,) = import_documents([*docs, ("derived#0", deployment)])
    (obj,) = result.placements
    assert obj["spec"]["groups"]["spread"] == "Weighted"
    fleet = place(result.placements, clusters())
    groups = fleet.per_group("nginx")
    assert sorted(groups.values()) == [2, 3] and set(groups) == {"member1", "member2"}


def test_karmada_label_selector_policy_duplicates_to_each_cluster() -> None:
    (alone,) = import_files([KARMADA_LABELSEL])
    assert any("spreadConstraints" in u for u in alone.untranslated)
    assert any("schedulerName" in u for u in alone.untranslated)
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "nginx", "namespace": "default", "labels": {"a": "b"}},
        "spec": {
            "replicas": 2,
            "template": {
                "metadata": {"labels": {"app": "nginx"}},
                "spec": {"containers": [{"name": "nginx", "image": "nginx"}]},
            },
        },
    }
    unlabelled = copy.deepcopy(deployment)
    unlabelled["metadata"]["labels"] = {"a": "c"}
    docs = load_documents(KARMADA_LABELSEL.read_text(), str(KARMADA_LABELSEL))
    (miss,) = import_documents([*docs, ("derived#0", unlabelled)])
    assert miss.placements == []  # the labelSelector a=b does not select it
    (hit,) = import_documents([*docs, ("derived#0", deployment)])
    assert hit.placements[0]["spec"]["replicasPerGroup"] == 2  # Karmada's default: Duplicated
    fleet = place(hit.placements, clusters(names=("cluster1", "cluster2", "cluster3", "other")))
    assert fleet.per_group("nginx") == {"cluster1": 2, "cluster2": 2, "cluster3": 2}


def test_openyurt_united_deployment_pools() -> None:
    (result,) = import_files([YURT_UD])
    (obj,) = result.placements
    assert any("revisionHistoryLimit" in n for n in result.notes)
    key = "openyurt.io/uniteddeployment"
    nodes = {f"cloud{i}": {key: "cloud"} for i in range(3)}
    nodes.update({f"edge{i}": {key: "edge"} for i in range(3)})
    taint = [{"key": "openyurt.io/taints", "value": "x", "effect": "NoSchedule"}]
    fleet = place([obj], nodes, **{f"edge{i}": {"taints": taint} for i in range(3)})
    # Two replicas in the cloud pool, one in the tainted edge pool (its toleration).
    assert fleet.per_group("ud-deployment") == {"cloud": 2, "edge": 1}
    for pod in fleet.pods_of("ud-deployment"):
        assert pod["spec"]["containers"][0]["image"] == "nginx:1.19.3"
        assert pod["metadata"]["labels"]["app"] == "ud-deployment"
        tolerated = {t.get("key") for t in pod["spec"]["tolerations"]}
        assert ("openyurt.io/taints" in tolerated) == (
            pod["metadata"]["labels"][LABEL_GROUP] == "edge"
        )


def test_openyurt_node_pool_is_reported_as_node_labels() -> None:
    (result,) = import_files([YURT_POOL])
    assert result.placements == [] and result.name == "hangzhou"
    text = " ".join(result.untranslated)
    assert "spec.taints" in text and "spec.labels" in text and "spec.annotations" in text
    assert f"{OPENYURT_POOL_LABEL}=hangzhou" in result.notes[0]


def test_superedge_deployment_grid_runs_two_per_zone() -> None:
    (result,) = import_files([SUPEREDGE_GRID])
    (obj,) = result.placements
    nodes = {
        "z1-a": {"zone": "zone1"},
        "z1-b": {"zone": "zone1"},
        "z1-c": {"zone": "zone1"},
        "z2-a": {"zone": "zone2"},
        "z2-b": {"zone": "zone2"},
        "z3-a": {"zone": "zone3"},
        "nozone": {},
    }
    fleet = place([obj], nodes)
    assert fleet.per_group("deploymentgrid-demo") == {"zone1": 2, "zone2": 2, "zone3": 2}
    assert fleet.per_node("deploymentgrid-demo")["z3-a"] == 2
    assert "nozone" not in fleet.per_node("deploymentgrid-demo")
    pod = fleet.pods_of("deploymentgrid-demo")[0]
    env = {
        e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"]
        for e in pod["spec"]["containers"][0]["env"]
    }
    assert env == {
        "NODE_NAME": "spec.nodeName",
        "POD_NAME": "metadata.name",
        "POD_NAMESPACE": "metadata.namespace",
        "POD_IP": "status.podIP",
    }
    assert pod["metadata"]["labels"]["appGrid"] == "echo"


def test_unknown_kinds_and_broken_yaml() -> None:
    (result,) = import_files([KURATOR])
    assert result.placements == [] and "apps.kurator.dev" in result.untranslated[0]
    with pytest.raises(TranslationError) as info:
        import_files([BROKEN_YAML])
    assert "not valid YAML" in str(info.value) and str(BROKEN_YAML) in str(info.value)
    with pytest.raises(TranslationError, match="cannot read"):
        import_files([MANIFESTS / "no-such-file.yaml"])


def _malformed(path: pathlib.Path, where: list, value: object) -> list[tuple[str, dict]]:
    """The documents of a real file, with the field at ``where`` (in the first placement
    document) replaced by a value of the wrong type."""
    docs = load_documents(path.read_text(), str(path))
    for _, doc in docs:
        if doc.get("kind") in ("PropagationPolicy", "UnitedDeployment", "DeploymentGrid"):
            node = doc
            for key in where[:-1]:
                node = node[key]
            node[where[-1]] = value
            return docs
    raise AssertionError(f"no placement document in {path}")


@pytest.mark.parametrize(
    ("path", "where", "value"),
    [
        (KARMADA_PROBE, ["spec", "resourceSelectors"], [["nested"]]),
        (KARMADA_PROBE, ["spec", "placement", "clusterAffinity"], ["member1"]),
        (KARMADA_PROBE, ["spec", "placement", "clusterAffinity", "clusterNames"], [["a"], 7]),
        (KARMADA_PROBE, ["spec", "placement", "replicaScheduling"], 3),
        (YURT_UD, ["spec", "topology", "pools"], [["cloud"]]),
        (YURT_UD, ["spec", "topology", "pools", 0, "nodeSelectorTerm"], ["x"]),
        (SUPEREDGE_GRID, ["spec"], True),
        (SUPEREDGE_GRID, ["spec", "template"], ["x"]),
    ],
)
def test_documents_of_the_wrong_shape_are_reported_not_raised(
    path: pathlib.Path, where: list, value: object
) -> None:
    """Foreign documents are untrusted input: a field of the wrong type makes that
    document untranslated, with a reason, and the other documents still translate."""
    docs = _malformed(path, where, value)
    results = import_documents(docs)
    broken = [r for r in results if any("nothing translated" in u for u in r.untranslated)]
    assert len(broken) == 1 and broken[0].placements == []
    assert str(path) in broken[0].source


def test_files_that_are_not_text_or_too_deep_are_translation_errors(
    tmp_path: pathlib.Path,
) -> None:
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(bytes(range(256)))
    with pytest.raises(TranslationError, match="not UTF-8"):
        import_files([binary])
    deep = tmp_path / "deep.yaml"
    deep.write_text("a: " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(TranslationError, match="nested too deeply"):
        import_files([deep])


# KubeEdge EdgeApplication/NodeGroup and OpenYurt YurtAppSet v1beta1: the corpus
# holds no real ones, so these documents are written from the upstream API types
# (apps.kubeedge.io/v1alpha1 edgeapplication_types.go, apps.openyurt.io/v1beta1
# yurtappset_types.go).
EDGE_APP = yaml.safe_load("""
apiVersion: apps.kubeedge.io/v1alpha1
kind: EdgeApplication
metadata: {name: camera-app, namespace: factory}
spec:
  workloadTemplate:
    manifests:
      - apiVersion: apps/v1
        kind: Deployment
        metadata: {name: camera, namespace: factory}
        spec:
          replicas: 2
          selector: {matchLabels: {app: camera}}
          template:
            metadata: {labels: {app: camera}}
            spec:
              nodeSelector: {kubernetes.io/arch: arm64}
              containers:
                - name: cam
                  image: registry.local/camera:1.0
                  env: [{name: MODE, value: default}]
                  resources: {requests: {cpu: 100m}}
      - apiVersion: v1
        kind: Service
        metadata: {name: camera}
        spec: {ports: [{port: 80}]}
  workloadScope:
    targetNodeGroups:
      - name: hangzhou
        overriders:
          replicas: 3
          imageOverriders: [{component: Tag, operator: replace, value: "2.0"}]
          envOverriders: [{containerName: cam, operator: replace,
                           value: [{name: MODE, value: hangzhou}]}]
      - name: beijing
        overriders:
          resourcesOverriders: [{containerName: cam, value: {requests: {cpu: 300m}}}]
          commandOverriders: [{containerName: cam, operator: add, value: [--x]}]
""")

NODE_GROUP = yaml.safe_load("""
apiVersion: apps.kubeedge.io/v1alpha1
kind: NodeGroup
metadata: {name: hangzhou}
spec: {nodes: [edge-1, edge-2]}
""")

YURT_APP_SET = yaml.safe_load("""
apiVersion: apps.openyurt.io/v1beta1
kind: YurtAppSet
metadata: {name: web, namespace: default}
spec:
  pools: [beijing]
  nodepoolSelector: {matchLabels: {region: south}}
  workload:
    workloadTemplate:
      deploymentTemplate:
        metadata: {labels: {app: web}}
        spec:
          replicas: 1
          template:
            metadata: {labels: {app: web}}
            spec: {containers: [{name: web, image: nginx:1.25}]}
    workloadTweaks:
      - pools: [shenzhen]
        tweaks:
          replicas: 2
          containerImages: [{name: web, targetImage: "nginx:1.26"}]
""")


def test_kubeedge_edge_application_per_node_group() -> None:
    results = import_documents([("app#0", EDGE_APP), ("ng#0", NODE_GROUP)])
    app, group = results
    (obj,) = app.placements
    assert obj["metadata"]["name"] == "camera" and obj["metadata"]["namespace"] == "factory"
    assert any("manifests[1] (Service)" in u for u in app.untranslated)
    assert any("commandOverriders" in u for u in app.untranslated)
    assert group.placements == [] and f"{KUBEEDGE_GROUP_LABEL}=hangzhou" in group.untranslated[0]
    nodes = {
        f"hz{i}": {KUBEEDGE_GROUP_LABEL: "hangzhou", "kubernetes.io/arch": "arm64"}
        for i in range(3)
    }
    nodes.update(
        {
            f"bj{i}": {KUBEEDGE_GROUP_LABEL: "beijing", "kubernetes.io/arch": "arm64"}
            for i in range(2)
        }
    )
    nodes["bj-x86"] = {KUBEEDGE_GROUP_LABEL: "beijing", "kubernetes.io/arch": "amd64"}
    fleet = place(app.placements, nodes)
    assert fleet.per_group("camera") == {"hangzhou": 3, "beijing": 2}
    assert "bj-x86" not in fleet.per_node("camera")  # the template's own nodeSelector holds
    for pod in fleet.pods_of("camera"):
        container = pod["spec"]["containers"][0]
        if pod["metadata"]["labels"][LABEL_GROUP] == "hangzhou":
            assert container["image"] == "registry.local/camera:2.0"
            assert container["env"] == [{"name": "MODE", "value": "hangzhou"}]
        else:
            assert container["image"] == "registry.local/camera:1.0"
            assert container["resources"]["requests"]["cpu"] == "300m"
        assert pod["spec"]["nodeSelector"] == {"kubernetes.io/arch": "arm64"}


def test_openyurt_yurt_app_set_pools_and_tweaks() -> None:
    pools = [
        {
            "apiVersion": "apps.openyurt.io/v1beta1",
            "kind": "NodePool",
            "metadata": {"name": name, "labels": {"region": region}},
            "spec": {"type": "Edge"},
        }
        for name, region in (("shenzhen", "south"), ("guangzhou", "south"), ("harbin", "north"))
    ]
    results = import_documents(
        [("yas#0", YURT_APP_SET)] + [(f"np#{i}", p) for i, p in enumerate(pools)]
    )
    (obj,) = results[0].placements
    nodes = {
        f"{pool}-{i}": {OPENYURT_POOL_LABEL: pool}
        for pool in ("beijing", "shenzhen", "guangzhou", "harbin")
        for i in range(2)
    }
    fleet = place([obj], nodes)
    assert fleet.per_group("web") == {"beijing": 1, "shenzhen": 2, "guangzhou": 1}
    images = Counter(p["spec"]["containers"][0]["image"] for p in fleet.pods_of("web"))
    assert images == {"nginx:1.26": 2, "nginx:1.25": 2}
