"""Hypothesis properties of the placement algorithm.

Random fleets (labels, capacity, taints, cordons) and placements (replica
counts, groups, selectors, tolerations, priorities, modes) go through random
event sequences (nodes going offline and back, joining, leaving, relabelled;
placements scaled and updated; time passing). After every plan:

- no node is over capacity (requests of the pods bound to it, as written);
- every pod created in that plan is on a node that matched the placement,
  tolerated its NoSchedule/NoExecute taints, and (Replicas mode) was online
  and uncordoned;
- no two pods share a name;

and once the fleet is quiet and every pod Ready:

- another plan changes nothing (stability under no-op re-evaluation);
- no placement runs more replicas on online nodes than it wants (no duplicates).

A second property: placed from scratch with room to spare, Even spread gives
groups that differ by at most one replica, and nodes inside a group too.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from cloudhub.placement import LABEL_PLACEMENT
from cloudhub.placement.model import parse_placement
from cloudhub.placement.quantity import to_units
from cloudhub.placement.selectors import TaintEffect, parse_taints, parse_tolerations
from tests.cloudhub.placement.fleet import Fleet, template

SITES = ("a", "b", "c")

node_st = st.fixed_dictionaries(
    {
        "site": st.sampled_from(SITES),
        "tier": st.sampled_from(("edge", "core")),
        "cpu": st.sampled_from(("500m", "1", "2")),
        "taint": st.sampled_from((None, "NoSchedule", "NoExecute")),
        "cordon": st.booleans(),
    }
)

placement_st = st.fixed_dictionaries(
    {
        "mode": st.sampled_from(("Replicas", "Replicas", "PerNode")),
        "replicas": st.integers(0, 8),
        "grouped": st.booleans(),
        "skew": st.sampled_from((None, 1, 2)),
        "tier": st.sampled_from((None, "edge")),
        "tolerate": st.booleans(),
        "priority": st.integers(0, 2),
        "cpu": st.sampled_from(("100m", "250m", "400m")),
    }
)

event_st = st.one_of(
    st.tuples(st.just("offline"), st.integers(0, 30)),
    st.tuples(st.just("online"), st.integers(0, 30)),
    st.tuples(st.just("advance"), st.sampled_from((10, 200, 400))),
    st.tuples(st.just("scale"), st.integers(0, 5), st.integers(0, 8)),
    st.tuples(st.just("update"), st.integers(0, 5)),
    st.tuples(st.just("join"), node_st),
    st.tuples(st.just("leave"), st.integers(0, 30)),
    st.tuples(st.just("relabel"), st.integers(0, 30), st.sampled_from(SITES)),
)


_N = {"site": "a", "tier": "edge", "cpu": "500m", "taint": None, "cordon": False}
_P = {
    "mode": "Replicas",
    "replicas": 0,
    "grouped": False,
    "skew": None,
    "tier": None,
    "tolerate": False,
    "priority": 0,
    "cpu": "100m",
}


def _spec(p: dict[str, Any], version: int = 1) -> dict[str, Any]:
    tolerations = [{"key": "dedicated", "operator": "Exists"}] if p["tolerate"] else None
    spec: dict[str, Any] = {
        "template": template(
            f"registry.local/app:{version}", cpu=p["cpu"], tolerations=tolerations
        ),
        "mode": p["mode"],
        "priority": p["priority"],
        "offlineTolerationSeconds": 300,
    }
    if p["mode"] == "Replicas":
        spec["replicas"] = p["replicas"]
    if p["tier"]:
        spec["nodeSelector"] = {"matchLabels": {"tier": p["tier"]}}
    if p["grouped"]:
        spec["groups"] = {"byLabel": "site"}
        if p["skew"] and p["mode"] == "Replicas":
            spec["groups"]["maxSkew"] = p["skew"]
    return spec


def _add(fleet: Fleet, name: str, n: dict[str, Any]) -> None:
    taints = [{"key": "dedicated", "value": "x", "effect": n["taint"]}] if n["taint"] else []
    fleet.add_node(
        name,
        {"site": n["site"], "tier": n["tier"]},
        cpu=n["cpu"],
        memory="4Gi",
        taints=taints,
        unschedulable=n["cordon"],
    )


def _check_step(fleet: Fleet, plan: Any, facts: dict[str, Any]) -> None:
    used: Counter[str] = Counter()
    for pod in fleet.pods.values():
        for c in pod["spec"]["containers"]:
            used[pod["spec"]["nodeName"]] += to_units("cpu", c["resources"]["requests"]["cpu"])
    for name, millicores in used.items():
        if name in fleet.nodes:
            alloc = to_units("cpu", fleet.nodes[name]["status"]["allocatable"]["cpu"])
            assert millicores <= alloc, f"{name} over capacity: {millicores} > {alloc}"
    for create in plan.creates:
        node = fleet.nodes[create.node]
        labels = node["metadata"]["labels"]
        spec = create.placement.spec
        assert spec.node_selector.matches(labels), (create.node, create.placement.name)
        taints = parse_taints(node["spec"]["taints"])
        tolerations = parse_tolerations(create.template.template["spec"].get("tolerations"), "")
        for taint in taints:
            if taint.effect in (TaintEffect.NO_SCHEDULE, TaintEffect.NO_EXECUTE):
                assert any(t.tolerates(taint) for t in tolerations), (create.node, taint)
        if spec.mode.value == "Replicas":
            assert create.node not in fleet.offline
            assert not node["spec"]["unschedulable"]
        if spec.groups is not None:
            assert labels["site"] == create.group


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    nodes=st.lists(node_st, min_size=1, max_size=12),
    placements=st.lists(placement_st, min_size=1, max_size=5),
    events=st.lists(event_st, max_size=12),
)
# Found by this test: a PerNode update held up by a node with no room for the pod,
# leaving two stale pods on one node.
@example(
    nodes=[_N] * 4,
    placements=[_P, dict(_P, replicas=2, cpu="400m"), dict(_P, mode="PerNode", cpu="250m")],
    events=[("update", 2), ("offline", 0), ("offline", 0), ("update", 2)],
)
# Found by this test: an outdated pod on a disconnected node kept after its
# replacement was Ready.
@example(
    nodes=[_N] * 4,
    placements=[_P, dict(_P, replicas=1), _P],
    events=[("offline", 0), ("update", 1)],
)
# Found by this test (an oracle too strict, not a planner fault): an update surges a
# pod onto the only node, which goes away before either pod is proven; the update waits
# with two pods placed for one desired until the node is back.
@example(
    nodes=[_N],
    placements=[dict(_P, replicas=1), _P],
    events=[("update", 0), ("offline", 0)],
)
def test_invariants_hold_through_random_events(nodes, placements, events) -> None:
    fleet = Fleet()
    names = []
    for i, n in enumerate(nodes):
        names.append(f"n{i}")
        _add(fleet, f"n{i}", n)
    specs = {}
    for i, p in enumerate(placements):
        specs[f"p{i}"] = [p, 1]
        fleet.apply(f"p{i}", _spec(p), created=fleet.now - 1000 + i)
    _check_step(fleet, fleet.step(), {})
    joined = len(nodes)
    for event in events:
        kind = event[0]
        if kind in ("offline", "online", "leave", "relabel") and names:
            name = names[event[1] % len(names)]
            if kind == "offline" and name not in fleet.offline:
                fleet.go_offline(name)
            elif kind == "online" and name in fleet.offline:
                fleet.come_back(name)
            elif kind == "leave":
                fleet.planner.remove_node(name)
                del fleet.nodes[name]
                fleet.offline.pop(name, None)
                names.remove(name)
                for key in [k for k, p in fleet.pods.items() if p["spec"]["nodeName"] == name]:
                    del fleet.pods[key]
                    fleet.planner.remove_pod(*key)
            elif kind == "relabel":
                labels = dict(fleet.nodes[name]["metadata"]["labels"], site=event[2])
                fleet.update_node(name, labels=labels)
        elif kind == "advance":
            fleet.now += event[1]
        elif kind == "scale":
            key = f"p{event[1] % len(placements)}"
            specs[key][0] = dict(specs[key][0], replicas=event[2])
            fleet.apply(key, _spec(*specs[key]))
        elif kind == "update":
            key = f"p{event[1] % len(placements)}"
            specs[key][1] += 1
            fleet.apply(key, _spec(*specs[key]))
        elif kind == "join":
            name = f"n{joined}"
            joined += 1
            names.append(name)
            _add(fleet, name, event[1])
        _check_step(fleet, fleet.step(), {})

    # Quiet: every pod on an online node becomes Ready; let it settle.
    for _ in range(12):
        for pod in list(fleet.pods.values()):
            if pod["spec"]["nodeName"] not in fleet.offline:
                fleet.set_ready(pod["metadata"]["name"])
        plan = fleet.step()
        _check_step(fleet, plan, {})
        if not plan.creates and not plan.deletes:
            break
    else:
        raise AssertionError("did not settle")
    assert fleet.step().empty, "a no-op re-evaluation changed something"

    for name, obj in fleet.placements.items():
        placement = parse_placement(obj)
        status = fleet.planner.status(placement.key)
        online = [
            p
            for p in fleet.pods.values()
            if p["metadata"]["labels"][LABEL_PLACEMENT] == name
            and p["spec"]["nodeName"] not in fleet.offline
        ]
        if placement.spec.mode.value == "PerNode":
            per_node = Counter(p["spec"]["nodeName"] for p in online)
            assert all(v == 1 for v in per_node.values()), per_node
        else:
            assert len(online) <= placement.spec.total_replicas(), (name, len(online))
            away = [
                p
                for p in fleet.pods.values()
                if p["metadata"]["labels"][LABEL_PLACEMENT] == name
                and p["spec"]["nodeName"] in fleet.offline
            ]
            if not away:
                # With pods on a node that is away, an update may be stuck halfway
                # (its surge pod there cannot turn Ready): more placed than desired.
                assert status.placed <= status.desired


@settings(max_examples=60, deadline=None)
@given(
    per_site=st.lists(st.integers(1, 6), min_size=1, max_size=4),
    replicas=st.integers(0, 40),
)
def test_even_spread_from_scratch(per_site: list[int], replicas: int) -> None:
    fleet = Fleet()
    for s, count in enumerate(per_site):
        for i in range(count):
            fleet.add_node(f"s{s}-{i}", {"site": f"s{s}"}, cpu="64")
    fleet.apply(
        "web", {"template": template(), "replicas": replicas, "groups": {"byLabel": "site"}}
    )
    fleet.converge()
    groups = fleet.per_group("web")
    counts = [groups.get(f"s{s}", 0) for s in range(len(per_site))]
    assert sum(counts) == replicas
    assert max(counts) - min(counts) <= 1, counts
    per_node = fleet.per_node("web")
    for s, count in enumerate(per_site):
        inside = [per_node.get(f"s{s}-{i}", 0) for i in range(count)]
        assert max(inside) - min(inside) <= 1, inside
