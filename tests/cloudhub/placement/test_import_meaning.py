"""``cloudhub placement import`` never changes what a policy means and exits 0 (issue 15
item 9): what has an EdgePlacement equivalent is translated (a Karmada field selector, a
plaintext image replace, clusters excluded), anything dropped that changes where or what
runs makes the command exit 1 naming it (file, document, path) unless ``--lossy``, and an
input with nothing translatable exits 1.

The policies are the real ones of tests/data (byte for byte from upstream), and variants
derived from them in the test (the field a test needs set on top, the file left as
upstream has it); the hostile ones break one field at a time.
"""

from __future__ import annotations

import copy
import pathlib
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

from cloudhub.placement import LABEL_GROUP
from cloudhub.placement.cli import placement
from cloudhub.placement.importers import (
    FIELD_LABELS,
    GROUP_LABEL,
    PROVIDER_LABEL,
    import_documents,
    load_documents,
)
from tests.cloudhub.placement.test_import import (
    EDGE_APP,
    KARMADA_LABELSEL,
    KARMADA_NGINX,
    KARMADA_OVERRIDE,
    KARMADA_PROBE,
    KURATOR,
    NODE_GROUP,
    SUPEREDGE_GRID,
    YURT_UD,
    place,
)
from tests.data import MANIFESTS

pytestmark = pytest.mark.skipif(
    not MANIFESTS.is_dir(), reason=f"shared manifests not found at {MANIFESTS}"
)

REGION = "topology.kubernetes.io/region"

#: The Deployment Karmada's nginx sample propagates (it lives elsewhere in Karmada's tree).
NGINX = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "nginx", "namespace": "default", "labels": {"app": "nginx"}},
    "spec": {
        "replicas": 2,
        "selector": {"matchLabels": {"app": "nginx"}},
        "template": {
            "metadata": {"labels": {"app": "nginx"}},
            "spec": {"containers": [{"name": "nginx", "image": "nginx:1.25"}]},
        },
    },
}


def run(*args: str) -> Result:
    return CliRunner().invoke(placement, ["import", *args])


def nginx_policy(**placement_fields: Any) -> dict[str, Any]:
    """Karmada's nginx sample policy, Duplicated, with ``placement_fields`` set on top."""
    ((_, policy),) = load_documents(KARMADA_NGINX.read_text(), str(KARMADA_NGINX))
    policy = copy.deepcopy(policy)
    policy["spec"]["placement"].pop("replicaScheduling")  # Karmada's default: Duplicated
    policy["spec"]["placement"].update(placement_fields)
    return policy


def write(tmp_path: pathlib.Path, name: str, *docs: dict[str, Any]) -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return str(path)


def override(rule_overriders: dict[str, Any], clusters: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "policy.karmada.io/v1alpha1",
        "kind": "OverridePolicy",
        "metadata": {"name": "nginx-override", "namespace": "default"},
        "spec": {
            "resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "nginx"}],
            "overrideRules": [
                {"targetCluster": {"clusterNames": clusters}, "overriders": rule_overriders}
            ],
        },
    }


# --- real policies -------------------------------------------------------------------


@pytest.mark.parametrize("path", [KARMADA_PROBE, YURT_UD, SUPEREDGE_GRID])
def test_real_policies_that_translate_faithfully_are_written(path: pathlib.Path) -> None:
    result = run(str(path))
    assert result.exit_code == 0, result.output
    assert [d["kind"] for d in yaml.safe_load_all(result.stdout)] == ["EdgePlacement"]
    assert "dropped:" not in result.stderr


def test_an_override_whose_clusters_are_unknown_is_refused_and_named(
    tmp_path: pathlib.Path,
) -> None:
    """The real OverridePolicy picks clusters by label; without their labels its image
    rules cannot reach any group: refused, each rule named by file, document and path."""
    refused = run(str(KARMADA_PROBE), str(KARMADA_OVERRIDE))
    assert refused.exit_code == 1 and refused.stdout == ""
    document = f"{KARMADA_OVERRIDE}#0 OverridePolicy default/example-override"
    for i in (0, 1):
        assert f"dropped: {document} spec.overrideRules[{i}].targetCluster.labelSelector" in (
            refused.stderr
        )
    assert "2 field(s) dropped would change where or what runs" in refused.stderr
    assert "--lossy" in refused.stderr
    # Allowed explicitly: written, and still listed.
    lossy = run(str(KARMADA_PROBE), str(KARMADA_OVERRIDE), "--lossy")
    assert lossy.exit_code == 0, lossy.output
    (obj,) = yaml.safe_load_all(lossy.stdout)
    assert obj["metadata"]["name"] == "http-probe-app" and "overrides" not in obj["spec"]
    assert f"dropped: {document} spec.overrideRules[1].targetCluster.labelSelector" in (
        lossy.stderr
    )
    assert "written with --lossy: 2 field(s) dropped" in lossy.stderr
    # With the clusters' labels nothing is dropped: the images are overridden per group.
    labels = tmp_path / "clusters.yaml"
    labels.write_text(yaml.safe_dump({"member1": {"location": "us"}}))
    resolved = run(str(KARMADA_PROBE), str(KARMADA_OVERRIDE), "--cluster-labels", str(labels))
    assert resolved.exit_code == 0, resolved.output


def test_spread_constraints_and_an_unknown_scheduler_are_refused(tmp_path: pathlib.Path) -> None:
    deployment = write(
        tmp_path, "nginx.yaml", {**NGINX, "metadata": {**NGINX["metadata"], "labels": {"a": "b"}}}
    )
    result = run(str(KARMADA_LABELSEL), deployment)
    assert result.exit_code == 1 and result.stdout == ""
    source = f"{KARMADA_LABELSEL}#0: PropagationPolicy default/example-policy -> nginx"
    assert source in result.stderr
    assert "dropped: spec.placement.spreadConstraints:" in result.stderr
    assert "dropped: spec.schedulerName:" in result.stderr
    # Karmada's association flag changes nothing here (the hub sends what pods reference).
    assert "not translated: spec.association" in result.stderr


@pytest.mark.parametrize(
    "paths",
    [[KURATOR], [KARMADA_OVERRIDE], [KARMADA_NGINX], [KURATOR, KARMADA_OVERRIDE]],
    ids=["unknown-kind", "override-alone", "policy-without-workload", "both"],
)
def test_nothing_translatable_exits_1_even_when_lossy(paths: list[pathlib.Path]) -> None:
    for args in ([str(p) for p in paths], [*map(str, paths), "--lossy"]):
        result = run(*args)
        assert result.exit_code == 1 and result.stdout == ""
        assert "nothing to import: no document given translates" in result.stderr


# --- translated: field selectors, exclusions, plaintext --------------------------------


def test_a_field_selector_becomes_the_node_selector_it_corresponds_to(
    tmp_path: pathlib.Path,
) -> None:
    selector = {
        "matchExpressions": [
            {"key": "region", "operator": "In", "values": ["eu-west"]},
            {"key": "provider", "operator": "NotIn", "values": ["acme"]},
        ]
    }
    policy = nginx_policy(
        clusterAffinity={"clusterNames": ["member1", "member2"], "fieldSelector": selector}
    )
    result = run(write(tmp_path, "policy.yaml", policy, NGINX))
    assert result.exit_code == 0, result.output
    (obj,) = yaml.safe_load_all(result.stdout)
    assert obj["spec"]["nodeSelector"] == {
        "matchExpressions": [
            {"key": REGION, "operator": "In", "values": ["eu-west"]},
            {"key": PROVIDER_LABEL, "operator": "NotIn", "values": ["acme"]},
        ]
    }
    assert FIELD_LABELS == {
        "provider": PROVIDER_LABEL,
        "region": REGION,
        "zone": "topology.kubernetes.io/zone",
    }
    # Placed: only the member clusters' nodes in eu-west, not of provider acme (Karmada
    # would not pick a cluster of another region or of acme).
    nodes = {
        "m1-eu": {GROUP_LABEL: "member1", REGION: "eu-west"},
        "m1-us": {GROUP_LABEL: "member1", REGION: "us-east"},
        "m2-eu": {GROUP_LABEL: "member2", REGION: "eu-west"},
        "m2-eu-acme": {GROUP_LABEL: "member2", REGION: "eu-west", PROVIDER_LABEL: "acme"},
        "m3-eu": {GROUP_LABEL: "member3", REGION: "eu-west"},
    }
    fleet = place([obj], nodes)
    assert fleet.per_node("nginx") == {"m1-eu": 2, "m2-eu": 2}


def test_excluded_clusters_are_left_out_by_node_selector(tmp_path: pathlib.Path) -> None:
    policy = nginx_policy(clusterAffinity={"exclude": ["member2"]})
    result = run(write(tmp_path, "policy.yaml", policy, NGINX))
    assert result.exit_code == 0, result.output
    (obj,) = yaml.safe_load_all(result.stdout)
    nodes = {f"{c}-n0": {GROUP_LABEL: c} for c in ("member1", "member2", "member3")}
    fleet = place([obj], nodes)
    assert fleet.per_group("nginx") == {"member1": 2, "member3": 2}


def test_a_plaintext_image_replace_becomes_an_image_override(tmp_path: pathlib.Path) -> None:
    plaintext = {
        "plaintext": [
            {
                "path": "/spec/template/spec/containers/0/image",
                "operator": "replace",
                "value": "registry.eu/nginx:1.25-eu",
            },
            {"path": "/spec/replicas", "operator": "replace", "value": 3},
        ]
    }
    docs = [nginx_policy(), NGINX, override(plaintext, ["member1"])]
    result = run(write(tmp_path, "policy.yaml", *docs))
    assert result.exit_code == 0, result.output
    (obj,) = yaml.safe_load_all(result.stdout)
    assert obj["spec"]["overrides"] == [
        {"group": "member1", "container": "nginx", "image": "registry.eu/nginx:1.25-eu"},
        {"group": "member1", "replicas": 3},
    ]
    fleet = place(
        [obj], {f"{c}-n{i}": {GROUP_LABEL: c} for c in ("member1", "member2") for i in (0, 1)}
    )
    images = sorted(
        (p["metadata"]["labels"][LABEL_GROUP], p["spec"]["containers"][0]["image"])
        for p in fleet.pods_of("nginx")
    )
    assert images == [
        ("member1", "registry.eu/nginx:1.25-eu"),
        ("member1", "registry.eu/nginx:1.25-eu"),
        ("member1", "registry.eu/nginx:1.25-eu"),
        ("member2", "nginx:1.25"),
        ("member2", "nginx:1.25"),
    ]


# --- hostile ----------------------------------------------------------------------------

HOSTILE_PLAINTEXT = [
    (
        {"path": "/spec/template/spec/containers/7/image", "operator": "replace", "value": "x:1"},
        "no container 7",
    ),
    (
        {"path": "/spec/template/spec/containers/00/image", "operator": "replace", "value": "x:1"},
        "no container 00",
    ),
    (
        {"path": "/spec/template/spec/containers/-/image", "operator": "add", "value": "x:1"},
        "no container -",
    ),
    (
        {"path": "/spec/template/spec/containers/0/image", "operator": "replace", "value": 42},
        "non-empty string",
    ),
    (
        {"path": "/spec/template/spec/containers/0/image", "operator": "remove"},
        "only add and replace",
    ),
    (
        {"path": "spec/template/spec/containers/0/image", "operator": "replace", "value": "x:1"},
        "not a JSON pointer",
    ),
    (
        {"path": "/spec/template/spec/containers/0/env", "operator": "replace", "value": []},
        "not its env",
    ),
    (
        {"path": "/spec/template/spec/containers/0/args", "operator": "replace", "value": "--x"},
        "list of strings",
    ),
    ({"path": "/spec/replicas", "operator": "replace", "value": True}, "must be a count"),
    ({"path": "/metadata/labels/app", "operator": "replace", "value": "x"}, "image or args"),
    ("not-a-rule", "malformed"),
]


@pytest.mark.parametrize(("rule", "why"), HOSTILE_PLAINTEXT, ids=[w for _, w in HOSTILE_PLAINTEXT])
def test_a_plaintext_rule_that_cannot_be_said_is_refused_by_its_path(
    tmp_path: pathlib.Path, rule: object, why: str
) -> None:
    good = {
        "path": "/spec/template/spec/containers/0/image",
        "operator": "add",
        "value": "nginx:1.26",
    }
    docs = [nginx_policy(), NGINX, override({"plaintext": [good, rule]}, ["member1"])]
    path = write(tmp_path, "policy.yaml", *docs)
    result = run(path)
    assert result.exit_code == 1 and result.stdout == ""
    document = f"{path}#2 OverridePolicy default/nginx-override"
    where = f"{document} spec.overrideRules[0].overriders.plaintext[1]"
    (line,) = [line for line in result.stderr.splitlines() if "dropped:" in line]
    assert where in line and why in line
    # The rule beside it is translated all the same.
    lossy = run(path, "--lossy")
    assert lossy.exit_code == 0, lossy.output
    (obj,) = yaml.safe_load_all(lossy.stdout)
    assert {"group": "member1", "container": "nginx", "image": "nginx:1.26"} in obj["spec"][
        "overrides"
    ]


def test_plaintext_replicas_of_a_divided_policy_is_refused(tmp_path: pathlib.Path) -> None:
    ((_, divided),) = load_documents(KARMADA_NGINX.read_text(), str(KARMADA_NGINX))
    rule = {"path": "/spec/replicas", "operator": "replace", "value": 4}
    path = write(
        tmp_path, "policy.yaml", divided, NGINX, override({"plaintext": [rule]}, ["member1"])
    )
    result = run(path)
    assert result.exit_code == 1
    assert "plaintext[0]: " in result.stderr and "no equivalent with Divided" in result.stderr


HOSTILE_FIELDS = [
    (
        {"matchExpressions": [{"key": "name", "operator": "In", "values": ["a"]}]},
        "matchExpressions[0]",
    ),
    ({"matchExpressions": [{"key": "zone", "operator": "Exists"}]}, "matchExpressions[0]"),
    (
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": "eu-1"}]},
        "matchExpressions[0]",
    ),
    (
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": []}]},
        "matchExpressions[0]",
    ),
    (
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": [7]}]},
        "matchExpressions[0]",
    ),
    ({"matchExpressions": ["zone=eu-1"]}, "matchExpressions[0]"),
    ({"matchExpressions": {"key": "zone"}}, "matchExpressions"),
    (["zone"], "matchExpressions"),
]


@pytest.mark.parametrize(("selector", "where"), HOSTILE_FIELDS)
def test_a_field_selector_that_cannot_be_said_is_refused_by_its_path(
    tmp_path: pathlib.Path, selector: object, where: str
) -> None:
    """Dropping any of these would widen the placement to clusters Karmada excludes."""
    policy = nginx_policy(clusterAffinity={"clusterNames": ["member1"], "fieldSelector": selector})
    result = run(write(tmp_path, "policy.yaml", policy, NGINX))
    assert result.exit_code == 1 and result.stdout == ""
    assert f"dropped: spec.placement.clusterAffinity.fieldSelector.{where}:" in result.stderr


def test_a_field_selector_of_an_override_rule_is_refused(tmp_path: pathlib.Path) -> None:
    """Those select clusters, which EdgeFleet does not have: the rule cannot be narrowed."""
    by_fields = {
        "fieldSelector": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}]}
    }
    rule = override(
        {"imageOverrider": [{"component": "Tag", "operator": "replace", "value": "2"}]}, ["member1"]
    )
    rule["spec"]["overrideRules"][0]["targetCluster"].update(by_fields)
    result = run(write(tmp_path, "policy.yaml", nginx_policy(), NGINX, rule))
    assert result.exit_code == 1
    assert "spec.overrideRules[0].targetCluster.fieldSelector: " in result.stderr


def test_every_drop_says_whether_it_changes_the_meaning() -> None:
    """The library view: a Service the policy also propagates does not change where or
    what runs; a workload of the policy missing from the documents does."""
    docs = load_documents(KARMADA_PROBE.read_text(), str(KARMADA_PROBE))
    (result,) = [r for r in import_documents(docs) if r.kind == "PropagationPolicy"]
    assert result.lossy == [] and len(result.dropped) == 2
    (alone,) = import_documents(load_documents(KARMADA_NGINX.read_text(), str(KARMADA_NGINX)))
    assert [(d.path, d.changes_meaning) for d in alone.lossy] == [
        ("spec.resourceSelectors[0]", True)
    ]


def test_kubeedge_overriders_without_equivalent_are_refused_by_path(
    tmp_path: pathlib.Path,
) -> None:
    path = write(tmp_path, "app.yaml", EDGE_APP, NODE_GROUP)
    result = run(path)
    assert result.exit_code == 1 and result.stdout == ""
    overriders = "spec.workloadScope.targetNodeGroups[1].overriders"
    assert f"dropped: {overriders}.commandOverriders: node group beijing" in result.stderr
    # The Service beside the Deployment, and the NodeGroup's labelling advice, are not drops.
    assert "not translated: workloadTemplate.manifests[1] (Service)" in result.stderr
    assert "not translated: a NodeGroup is node membership" in result.stderr
    assert "1 field(s) dropped" in result.stderr
    alone = run(write(tmp_path, "group.yaml", NODE_GROUP))
    assert alone.exit_code == 1 and "nothing to import" in alone.stderr
