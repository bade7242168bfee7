"""The EdgePlacement model: parsing, validation errors naming fields, the CRD schema."""

from __future__ import annotations

import copy
import pathlib
import time

import jsonschema
import pytest
import yaml

from cloudhub.placement import InvalidSpec, Mode, Spread, parse_placement, parse_spec
from cloudhub.placement.model import IntOrPercent, UpdateStrategy, apply_overrides, pod_shape
from cloudhub.placement.quantity import to_units
from cloudhub.placement.selectors import (
    Taint,
    TaintEffect,
    parse_label_selector,
    parse_node_affinity,
    parse_tolerations,
)
from tests.cloudhub.placement.fleet import placement_obj, template

ROOT = pathlib.Path(__file__).resolve().parents[3]
CRD = ROOT / "deploy" / "crds" / "edgeplacements.apps.edgefleet.io.yaml"

FULL_SPEC = {
    "template": template(node_selector={"kubernetes.io/arch": "arm64"}),
    "mode": "Replicas",
    "replicas": 7,
    "nodeSelector": {
        "matchLabels": {"node-role.kubernetes.io/edge": ""},
        "matchExpressions": [
            {"key": "site", "operator": "In", "values": ["a", "b", "c"]},
            {"key": "retired", "operator": "DoesNotExist"},
        ],
    },
    "groups": {
        "byLabel": "site",
        "spread": "Weighted",
        "maxSkew": 2,
        "members": [{"value": "a", "weight": 2}, {"value": "b"}, {"value": "c", "weight": 1}],
    },
    "overrides": [
        {"group": "a", "replicas": 3, "image": "registry.local/app:2", "container": "app"},
        {"group": "b", "env": [{"name": "MODE", "value": "b"}], "args": ["--fast"]},
        {"group": "c", "resources": {"requests": {"cpu": "300m"}}},
    ],
    "priority": 10,
    "offlineTolerationSeconds": 120,
    "updateStrategy": {"maxUnavailable": 1, "maxSurge": "50%"},
}


def test_full_spec_parses_into_typed_fields() -> None:
    placement = parse_placement(placement_obj("web", copy.deepcopy(FULL_SPEC)))
    spec = placement.spec
    assert spec.mode is Mode.REPLICAS
    assert spec.replicas == 7
    assert spec.groups is not None and spec.groups.spread is Spread.WEIGHTED
    assert spec.groups.weight("a") == 2 and spec.groups.weight("b") == 1
    assert spec.groups.weight("zzz") == 0
    assert spec.fixed_replicas() == {"a": 3}
    assert spec.priority == 10 and spec.offline_toleration_seconds == 120
    assert spec.update_strategy == UpdateStrategy(IntOrPercent(1), IntOrPercent(50, True))
    assert spec.node_selector.matches({"node-role.kubernetes.io/edge": "", "site": "b"})
    assert not spec.node_selector.matches(
        {"node-role.kubernetes.io/edge": "", "site": "b", "retired": "yes"}
    )
    assert placement.key.name == "web" and placement.owner.kind == "EdgePlacement"


def test_overrides_never_touch_the_template_node_selector() -> None:
    placement = parse_placement(placement_obj("web", copy.deepcopy(FULL_SPEC)))
    for group in ("a", "b", "c"):
        spec = placement.group_template(group).template["spec"]
        assert spec["nodeSelector"] == {"kubernetes.io/arch": "arm64"}
    a = placement.group_template("a").template["spec"]["containers"][0]
    assert a["image"] == "registry.local/app:2"
    b = placement.group_template("b").template["spec"]["containers"][0]
    assert b["args"] == ["--fast"] and {"name": "MODE", "value": "b"} in b["env"]
    c = placement.group_template("c")
    assert c.shape.requests.cpu == 300 and c.shape.requests.memory == 64 * 2**20
    base = placement.group_template("")
    assert len({base.hash, placement.group_template("a").hash, c.hash}) == 3
    # A group without template overrides shares the base template and hash.
    assert placement.group_template("d").hash == base.hash


def test_env_override_merges_by_name() -> None:
    tmpl = template()
    env = [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]
    tmpl["spec"]["containers"][0]["env"] = env
    spec = parse_spec(
        {
            "template": tmpl,
            "groups": {"byLabel": "site"},
            "overrides": [{"group": "x", "env": [{"name": "B", "value": "3"}]}],
        }
    )
    out = apply_overrides(spec.template, spec.overrides_for("x"))
    assert out["spec"]["containers"][0]["env"] == [
        {"name": "A", "value": "1"},
        {"name": "B", "value": "3"},
    ]
    assert spec.template["spec"]["containers"][0]["env"][1]["value"] == "2"  # not mutated


def test_defaults() -> None:
    spec = parse_spec({"template": template()})
    assert spec.mode is Mode.REPLICAS and spec.total_replicas() == 1
    assert spec.offline_toleration_seconds == 300
    assert spec.update_strategy.budgets(4) == (1, 1)
    assert spec.update_strategy.budgets(1) == (0, 1)  # 25% of 1: unavailable rounds down
    # Both rounding to zero is impossible: maxUnavailable becomes 1, as Deployments do.
    assert UpdateStrategy(IntOrPercent(10, True), IntOrPercent(0)).budgets(3) == (1, 0)


def _spec_with(**changes: object) -> dict:
    spec = {"template": template(), "replicas": 3, "groups": {"byLabel": "site"}}
    for key, value in changes.items():
        if value is None:
            spec.pop(key, None)
        else:
            spec[key] = value
    return spec


BAD_SPECS = [
    (_spec_with(template=None), "spec.template"),
    (_spec_with(template={"spec": {"containers": []}}), "spec.template.spec.containers"),
    (
        _spec_with(template={"spec": {"containers": [{"name": "x"}]}}),
        "spec.template.spec.containers[0].image",
    ),
    (
        _spec_with(template=template(cpu="lots")),
        "spec.template.spec.containers[0].resources.requests.cpu",
    ),
    (
        _spec_with(template=template(cpu="-1")),
        "spec.template.spec.containers[0].resources.requests.cpu",
    ),
    (_spec_with(mode="Sometimes"), "spec.mode"),
    (_spec_with(replicas=-1), "spec.replicas"),
    (_spec_with(replicas="3"), "spec.replicas"),
    (_spec_with(replicasPerGroup=2), "spec.replicasPerGroup"),
    (
        _spec_with(nodeSelector={"matchExpressions": [{"key": "a", "operator": "Near"}]}),
        "spec.nodeSelector.matchExpressions[0].operator",
    ),
    (
        _spec_with(nodeSelector={"matchExpressions": [{"key": "a", "operator": "In"}]}),
        "spec.nodeSelector.matchExpressions[0].values",
    ),
    (
        _spec_with(
            nodeSelector={"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}
        ),
        "spec.nodeSelector.matchExpressions[0].values",
    ),
    (_spec_with(nodeSelector={"matchLabels": {"bad key!": "x"}}), "spec.nodeSelector.matchLabels"),
    (_spec_with(nodeSelector={"matchLabel": {"a": "b"}}), "spec.nodeSelector"),
    (_spec_with(groups={"spread": "Even"}), "spec.groups.byLabel"),
    (_spec_with(groups={"byLabel": "site", "spread": "Weighted"}), "spec.groups.members"),
    (_spec_with(groups={"byLabel": "site", "maxSkew": 0}), "spec.groups.maxSkew"),
    (
        _spec_with(groups={"byLabel": "site", "members": [{"value": "a"}, {"value": "a"}]}),
        "spec.groups.members[1].value",
    ),
    (
        _spec_with(groups={"byLabel": "site", "members": [{"value": "a", "weight": 3}]}),
        "spec.groups.members[0].weight",
    ),
    (
        _spec_with(overrides=[{"group": "a", "container": "nope", "image": "x"}]),
        "spec.overrides[0].container",
    ),
    (
        _spec_with(overrides=[{"group": "a", "replicas": 2}, {"group": "a", "replicas": 3}]),
        "spec.overrides[1].replicas",
    ),
    (_spec_with(overrides=[{"group": "a", "replicas": 5}]), "spec.overrides"),
    (_spec_with(overrides=[{"group": "a", "nodeSelector": {"x": "y"}}]), "spec.overrides[0]"),
    (_spec_with(overrides=[{"group": "a", "args": "--x"}]), "spec.overrides[0].args"),
    (
        _spec_with(overrides=[{"group": "a", "resources": {"requests": {"memory": "1Qi"}}}]),
        "spec.overrides[0].resources.requests.memory",
    ),
    (_spec_with(groups=None, overrides=[{"group": "a", "image": "x"}]), "spec.overrides"),
    (_spec_with(mode="PerNode"), "spec.replicas"),
    (_spec_with(offlineTolerationSeconds=-5), "spec.offlineTolerationSeconds"),
    (_spec_with(updateStrategy={"maxUnavailable": "150%"}), "spec.updateStrategy.maxUnavailable"),
    (_spec_with(updateStrategy={"maxUnavailable": 0, "maxSurge": 0}), "spec.updateStrategy"),
    (_spec_with(priority=2**40), "spec.priority"),
    (_spec_with(surprise=True), "spec"),
    (
        _spec_with(
            template=template(tolerations=[{"key": "a", "operator": "Exists", "value": "x"}])
        ),
        "spec.template.spec.tolerations[0].value",
    ),
]


@pytest.mark.parametrize(("spec", "path"), BAD_SPECS, ids=[p for _, p in BAD_SPECS])
def test_invalid_specs_name_the_field(spec: dict, path: str) -> None:
    with pytest.raises(InvalidSpec) as info:
        parse_spec(spec)
    assert info.value.path == path, str(info.value)
    assert str(info.value).startswith(f"{path}: ")


def test_invalid_metadata_and_kind() -> None:
    obj = placement_obj("web", _spec_with())
    obj["metadata"]["name"] = "Not_A_Name"
    with pytest.raises(InvalidSpec, match=r"metadata\.name"):
        parse_placement(obj)
    obj = placement_obj("web", _spec_with())
    obj["kind"] = "Deployment"
    with pytest.raises(InvalidSpec, match="kind"):
        parse_placement(obj)
    obj = placement_obj("web", _spec_with())
    obj["metadata"]["creationTimestamp"] = "yesterday"
    with pytest.raises(InvalidSpec, match="creationTimestamp"):
        parse_placement(obj)


@pytest.mark.parametrize(
    ("resource", "text", "units"),
    [
        ("cpu", "250m", 250),
        ("cpu", "1.5", 1500),
        ("cpu", 2, 2000),
        ("cpu", "100u", 1),  # rounded up to a whole millicore
        ("memory", "64Mi", 64 * 2**20),
        ("memory", "1G", 10**9),
        ("memory", "1.5Gi", 3 * 2**29),
        ("memory", "2e3", 2000),
        ("memory", "128974848", 128974848),
        ("ephemeral-storage", "10Gi", 10 * 2**30),
        ("nvidia.com/gpu", "1", 1),
        ("nvidia.com/gpu", 2, 2),
    ],
)
def test_quantities(resource: str, text: object, units: int) -> None:
    assert to_units(resource, text) == units


@pytest.mark.parametrize("text", ["", "1.2.3", "ten", "5Xi", "1e", True, None])
def test_bad_quantities(text: object) -> None:
    with pytest.raises(InvalidSpec, match=r"x\.y"):
        to_units("memory", text, "x.y")


@pytest.mark.parametrize(
    "text",
    [
        "1e999999999",  # 10 ** 999999999 exactly: minutes of CPU and gigabytes
        "1e-999999999",
        "1e41",
        "1" * 5000,  # past Python's int-from-text limit (a plain ValueError)
        "0." + "1" * 5000,
        float("inf"),
        float("nan"),
        10**300,
    ],
    ids=[
        "1e999999999",
        "1e-999999999",
        "1e41",
        "5000-digits",
        "5000-decimals",
        "inf",
        "nan",
        "10**300",
    ],
)
def test_hostile_quantities_are_invalid_at_once(text: object) -> None:
    """Quantities come from anyone who can write a Node, Pod or EdgePlacement: a bad one
    is an InvalidSpec naming its path, found without computing the value."""
    loop_start = time.perf_counter()
    with pytest.raises(InvalidSpec, match=r"x\.y"):
        to_units("cpu", text, "x.y")
    assert time.perf_counter() - loop_start < 1.0


def test_hostile_quantity_in_a_placement_or_node_is_reported_not_raised() -> None:
    from cloudhub.placement.errors import InvalidObject
    from cloudhub.placement.nodes import parse_node
    from tests.cloudhub.placement.fleet import node

    obj = placement_obj("p", {"template": template(cpu="1e999999999"), "replicas": 1})
    with pytest.raises(InvalidSpec, match=r"resources\.requests\.cpu"):
        parse_placement(obj)
    with pytest.raises(InvalidObject, match="allocatable"):
        parse_node(node("n", cpu="9" * 5000))


def test_requests_follow_the_scheduler() -> None:
    tmpl = {
        "spec": {
            "containers": [
                {"name": "a", "image": "i", "resources": {"requests": {"cpu": "100m"}}},
                {
                    "name": "b",
                    "image": "i",
                    "resources": {"limits": {"cpu": "200m", "memory": "1Gi"}},
                },
            ],
            "initContainers": [
                {
                    "name": "init",
                    "image": "i",
                    "resources": {"requests": {"cpu": "500m", "nvidia.com/gpu": 1}},
                },
            ],
            "overhead": {"memory": "10Mi"},
        }
    }
    shape = pod_shape(tmpl, "t")
    # cpu: max(100m + 200m from the limit, 500m init); memory: 1Gi + overhead.
    assert shape.requests.cpu == 500
    assert shape.requests.memory == 2**30 + 10 * 2**20
    assert shape.requests.extended == (("nvidia.com/gpu", 1),)


def test_selector_semantics() -> None:
    sel = parse_label_selector(
        {
            "matchLabels": {"tier": "edge"},
            "matchExpressions": [
                {"key": "zone", "operator": "NotIn", "values": ["z9"]},
                {"key": "gpu", "operator": "Exists"},
            ],
        },
        "s",
    )
    assert sel.matches({"tier": "edge", "gpu": "1"})  # NotIn matches an absent key
    assert not sel.matches({"tier": "edge", "gpu": "1", "zone": "z9"})
    assert not sel.matches({"tier": "edge"})
    assert parse_label_selector(None, "s").matches({})


def test_node_affinity_terms_are_ored_and_expressions_anded() -> None:
    terms = parse_node_affinity(
        {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "a", "operator": "Exists"},
                                {"key": "cores", "operator": "Gt", "values": ["4"]},
                            ]
                        },
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": ["special"]}
                            ]
                        },
                    ]
                }
            }
        },
        "affinity",
    )
    assert terms is not None
    assert any(t.matches("n1", {"a": "", "cores": "8"}) for t in terms)
    assert not any(t.matches("n1", {"a": "", "cores": "4"}) for t in terms)
    assert not any(t.matches("n1", {"cores": "8"}) for t in terms)
    assert any(t.matches("special", {}) for t in terms)


def test_toleration_matching_rules() -> None:
    tols = parse_tolerations(
        [
            {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"},
            {"key": "flaky", "operator": "Exists"},
        ],
        "t",
    )
    gpu = Taint("dedicated", "gpu", TaintEffect.NO_SCHEDULE)
    other = Taint("dedicated", "infra", TaintEffect.NO_SCHEDULE)
    execute = Taint("dedicated", "gpu", TaintEffect.NO_EXECUTE)
    flaky = Taint("flaky", "whatever", TaintEffect.NO_EXECUTE)
    assert tols[0].tolerates(gpu)
    assert not tols[0].tolerates(other)
    assert not tols[0].tolerates(execute)  # the effect must agree
    assert tols[1].tolerates(flaky)
    everything = parse_tolerations([{"operator": "Exists"}], "t")[0]
    assert all(everything.tolerates(t) for t in (gpu, other, execute, flaky))


# --- the CRD -----------------------------------------------------------------------


def _schema() -> dict:
    crd = yaml.safe_load(CRD.read_text())
    assert crd["spec"]["group"] == "apps.edgefleet.io"
    assert crd["spec"]["scope"] == "Namespaced"
    (version,) = crd["spec"]["versions"]
    assert version["name"] == "v1alpha1" and version["subresources"] == {"status": {}}
    return version["schema"]["openAPIV3Schema"]


def _structural_ok(schema: dict, path: str = "") -> None:
    """Every node of a structural schema has a type (or int-or-string / preserve-unknown)."""
    assert (
        "type" in schema
        or schema.get("x-kubernetes-int-or-string")
        or schema.get("x-kubernetes-preserve-unknown-fields")
    ), path
    for name, sub in (schema.get("properties") or {}).items():
        _structural_ok(sub, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        _structural_ok(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        _structural_ok(schema["additionalProperties"], f"{path}{{}}")


def test_crd_schema_is_structural() -> None:
    _structural_ok(_schema())


def test_crd_accepts_what_the_model_accepts() -> None:
    schema = _schema()
    for spec in (
        FULL_SPEC,
        {"template": template(), "mode": "PerNode"},
        {"template": template(), "replicasPerGroup": 2, "groups": {"byLabel": "zone"}},
    ):
        obj = placement_obj("ok", copy.deepcopy(spec))
        jsonschema.validate(obj, schema)
        parse_placement(obj)


@pytest.mark.parametrize(
    "spec",
    [
        _spec_with(mode="Sometimes"),
        _spec_with(replicas=-1),
        _spec_with(template={"spec": {"containers": []}}),
        _spec_with(template={"spec": {"containers": [{"name": "x"}]}}),
        _spec_with(groups={"byLabel": "site", "maxSkew": 0}),
        _spec_with(nodeSelector={"matchExpressions": [{"key": "a", "operator": "Near"}]}),
        _spec_with(updateStrategy={"maxUnavailable": "150%"}),
        _spec_with(offlineTolerationSeconds=-5),
    ],
)
def test_crd_and_model_reject_the_same_bad_fields(spec: dict) -> None:
    obj = placement_obj("bad", spec)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(obj, _schema())
    with pytest.raises(InvalidSpec):
        parse_placement(obj)


def test_packaged_crd_is_the_deployed_one() -> None:
    packaged = ROOT / "cloudhub" / "placement" / "crd.yaml"
    assert packaged.read_bytes() == CRD.read_bytes()


def test_offline_since_reads_the_ready_condition_and_heartbeat() -> None:
    from cloudhub.placement.nodes import offline_since
    from tests.cloudhub.placement.fleet import node, stamp

    now = 1_700_000_000.0

    def with_ready(status: str | None, heartbeat: float | None) -> dict:
        obj = node("n")
        obj["metadata"]["creationTimestamp"] = stamp(now - 1000)
        if status is not None:
            cond = {"type": "Ready", "status": status, "lastTransitionTime": stamp(now - 500)}
            if heartbeat is not None:
                cond["lastHeartbeatTime"] = stamp(heartbeat)
            obj["status"]["conditions"] = [cond]
        return obj

    assert offline_since(with_ready("True", now - 10), now) is None
    assert offline_since(with_ready("True", now - 100), now) == now - 100  # stale heartbeat
    assert offline_since(with_ready("True", now - 100), now, heartbeat_grace_s=200) is None
    assert offline_since(with_ready("Unknown", now - 60), now) == now - 60
    assert offline_since(with_ready("False", None), now) == now - 500  # the transition
    assert offline_since(with_ready(None, None), now) == now - 1000  # never reported


def test_malformed_nodes_and_pods_are_rejected_with_their_name() -> None:
    from cloudhub.placement import InvalidObject, Planner

    planner = Planner()
    with pytest.raises(InvalidObject, match="Node <unnamed>"):
        planner.upsert_node({"metadata": {}}, offline_since=None)
    with pytest.raises(InvalidObject, match=r"Node n1: status\.allocatable\.cpu"):
        planner.upsert_node(
            {"metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "lots"}}},
            offline_since=None,
        )
    with pytest.raises(InvalidObject, match="Pod p1"):
        planner.upsert_pod(
            {
                "metadata": {"name": "p1"},
                "spec": {
                    "nodeName": "n",
                    "containers": [
                        {"name": "c", "image": "i", "resources": {"requests": {"memory": "xx"}}}
                    ],
                },
            }
        )
    # Nothing was half-recorded: the planner still plans an empty fleet.
    assert planner.plan(0).empty


def test_condition_taints_are_left_to_the_offline_policy() -> None:
    """A Node carrying the not-ready/unreachable condition taints keeps its other taints,
    but placement does not read those two: connectivity decides, not the taint."""
    from cloudhub.placement.nodes import parse_node

    node = {
        "metadata": {"name": "n1", "labels": {}},
        "spec": {
            "taints": [
                {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"},
                {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"},
                {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
            ]
        },
        "status": {"allocatable": {"cpu": "2", "memory": "1Gi", "pods": "10"}},
    }
    facts = parse_node(node)
    assert [t.key for t in facts.taints] == ["dedicated"]
