"""Hypothesis properties of failover, with readiness under the test's control.

The fleet of ``test_properties`` makes every new pod Ready at once; here pods
become Ready (or stop being Ready) only through random events, so that the rules
about readiness are exercised:

- a Ready pod on an online node is deleted only while at least ``desired`` other
  Ready pods on online nodes remain (the surplus of a node that came back goes
  only after its replacement is Ready; no healthy replica moves without reason);
- a lost pod (its node away past the tolerance) is not deleted while the node is away;
- pods are created in Replicas mode only on online nodes, and only to replace
  what is missing: the pods on nodes that stayed online never outnumber ``desired``
  (no pile-up of replacements for a lost node);
- once every node is back and every pod Ready, the placement settles on exactly
  ``desired`` pods (no duplicates), and a further plan changes nothing.

Events: nodes going offline and back, time passing (within and past the offline
tolerance), pods becoming Ready or not Ready.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from cloudhub.placement import LABEL_PLACEMENT
from tests.cloudhub.placement.fleet import Fleet, template

TOLERANCE_S = 300

event_st = st.one_of(
    st.tuples(st.just("offline"), st.integers(0, 20)),
    st.tuples(st.just("online"), st.integers(0, 20)),
    st.tuples(st.just("advance"), st.sampled_from((10, 150, 400))),
    st.tuples(st.just("ready"), st.integers(0, 40)),
    st.tuples(st.just("unready"), st.integers(0, 40)),
    st.tuples(st.just("all-ready"), st.just(0)),
)


def _ready(pod: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in pod["status"].get("conditions") or []
    )


def _pods(fleet: Fleet) -> list[dict[str, Any]]:
    return [p for p in fleet.pods.values() if p["metadata"]["labels"][LABEL_PLACEMENT] == "web"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sites=st.lists(st.integers(1, 4), min_size=1, max_size=3),
    replicas=st.integers(1, 6),
    grouped=st.booleans(),
    events=st.lists(event_st, max_size=25),
)
# Found by this test: the whole group of a replica's node went away, the replica failed
# over to another group and became Ready there; when the node came back its group took
# its share again and the Ready replacement was deleted as the surplus, leaving only the
# returned pod, not Ready: no Ready replica at all.
@example(
    sites=[1, 1],
    replicas=1,
    grouped=True,
    events=[("offline", 0), ("advance", 400), ("all-ready", 0), ("online", 0)],
)
# Found by this test: a node came back after its replica was replaced and went away
# again before the replacement was Ready; its pod, the surplus, was deleted at once,
# though it was the only replica last seen Ready.
@example(
    sites=[1, 1],
    replicas=1,
    grouped=False,
    events=[("all-ready", 0), ("offline", 0), ("advance", 400), ("online", 0), ("offline", 0)],
)
def test_failover_never_drops_ready_replicas_below_desired(
    sites: list[int], replicas: int, grouped: bool, events: list[tuple[str, int]]
) -> None:
    fleet = Fleet()
    fleet.auto_ready = False
    names = []
    for s, count in enumerate(sites):
        for i in range(count):
            names.append(f"s{s}-{i}")
            fleet.add_node(names[-1], {"site": f"s{s}"}, cpu="64")
    spec: dict[str, Any] = {
        "template": template(),
        "replicas": replicas,
        "offlineTolerationSeconds": TOLERANCE_S,
    }
    if grouped:
        spec["groups"] = {"byLabel": "site"}
    fleet.apply("web", spec)
    ever_offline: set[str] = set()

    def step() -> Any:
        before = {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in _pods(fleet)}
        ready_online = sum(
            1 for p in before.values() if _ready(p) and p["spec"]["nodeName"] not in fleet.offline
        )
        plan = fleet.step()
        deleted = [
            before[(d.namespace, d.name)] for d in plan.deletes if (d.namespace, d.name) in before
        ]
        for pod in deleted:
            node = pod["spec"]["nodeName"]
            lost = node in fleet.offline and fleet.now - fleet.offline[node] >= TOLERANCE_S
            assert not lost, f"deleted {pod['metadata']['name']} on {node}, lost and still away"
        # Pods last seen Ready, on online nodes or on nodes away again, may be running:
        # deleting one needs `replicas` Ready pods on online nodes left after the plan.
        dropped = [p for p in deleted if _ready(p)]
        left = ready_online - sum(1 for p in dropped if p["spec"]["nodeName"] not in fleet.offline)
        if dropped:
            assert left >= replicas, (
                f"deleted {len(dropped)} Ready pod(s) leaving {left} Ready of {replicas} desired"
            )
        for create in plan.creates:
            assert create.node not in fleet.offline, f"created on disconnected {create.node}"
        steady = [p for p in _pods(fleet) if p["spec"]["nodeName"] not in ever_offline]
        assert len(steady) <= replicas, f"{len(steady)} pods on never-disconnected nodes"
        return plan

    step()
    for kind, arg in events:
        pods = sorted(_pods(fleet), key=lambda p: p["metadata"]["name"])
        if kind == "offline":
            name = names[arg % len(names)]
            if name not in fleet.offline:
                fleet.go_offline(name)
                ever_offline.add(name)
        elif kind == "online":
            name = names[arg % len(names)]
            if name in fleet.offline:
                fleet.come_back(name)
        elif kind == "advance":
            fleet.now += arg
        elif kind in ("ready", "unready") and pods:
            pod = pods[arg % len(pods)]
            if pod["spec"]["nodeName"] not in fleet.offline:
                fleet.set_ready(pod["metadata"]["name"], kind == "ready")
        elif kind == "all-ready":
            for pod in pods:
                if pod["spec"]["nodeName"] not in fleet.offline:
                    fleet.set_ready(pod["metadata"]["name"])
        step()

    # Every node back, every pod Ready: the placement settles on exactly `replicas`.
    for name in list(fleet.offline):
        fleet.come_back(name)
    for _ in range(15):
        for pod in _pods(fleet):
            if not _ready(pod):
                fleet.set_ready(pod["metadata"]["name"])
        if step().empty:
            break
    else:
        raise AssertionError("did not settle")
    assert len(_pods(fleet)) == replicas, sorted(p["spec"]["nodeName"] for p in _pods(fleet))
