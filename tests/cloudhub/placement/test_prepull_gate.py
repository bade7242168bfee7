"""``updateStrategy.prePull``: a rolling update replaces pods only where the new images
were pulled (the planner's ``set_pulled``), through the simulated API (fleet.py); and the
pure helpers that turn EdgePlacements and EdgeImagePrePulls into what the planner gets."""

from __future__ import annotations

import pytest

from cloudhub.placement import LABEL_TEMPLATE_HASH, PlacementKey
from cloudhub.placement.errors import InvalidSpec
from cloudhub.placement.model import parse_placement
from cloudhub.placement.prepull import prepull_for, pulled_nodes, template_images
from tests.cloudhub.placement.fleet import Fleet, placement_obj, template

KEY = PlacementKey("EdgePlacement", "default", "web")
V2 = "registry.local/app:2"


def fleet_of(count: int) -> Fleet:
    fleet = Fleet()
    for i in range(count):
        fleet.add_node(f"a{i}", {"site": "a", "edge": "true"})
    return fleet


def hash_by_node(fleet: Fleet) -> dict[str, str]:
    return {
        p["spec"]["nodeName"]: p["metadata"]["labels"][LABEL_TEMPLATE_HASH]
        for p in fleet.pods_of("web")
    }


def run(fleet: Fleet, steps: int = 30) -> None:
    for _ in range(steps):
        plan = fleet.step()
        for create in plan.creates:
            fleet.set_ready(create.name)
        if not plan.creates and not plan.deletes:
            return


@pytest.mark.parametrize("mode", ["PerNode", "Replicas"])
def test_nothing_is_replaced_before_the_pull(mode: str) -> None:
    fleet = fleet_of(4)
    strategy = {"maxUnavailable": 2, "maxSurge": 1, "prePull": True}
    extra = {"mode": "PerNode"} if mode == "PerNode" else {"replicas": 4}
    fleet.apply("web", {"template": template(), "updateStrategy": strategy, **extra})
    fleet.converge()
    before = hash_by_node(fleet)
    fleet.auto_ready = False
    fleet.apply("web", {"template": template(V2), "updateStrategy": strategy, **extra})
    run(fleet)
    assert hash_by_node(fleet) == before  # no node pulled: the old pods stay
    fleet.planner.set_pulled(KEY, frozenset({"a0", "a1", "a2"}))
    run(fleet)
    if mode == "PerNode":  # node by node: the three that pulled, not a3
        after = hash_by_node(fleet)
        assert after["a3"] == before["a3"]
        assert all(after[n] != before[n] for n in ("a0", "a1", "a2"))
    else:  # the group waits for every online candidate node
        assert hash_by_node(fleet) == before
    fleet.planner.set_pulled(KEY, frozenset({"a0", "a1", "a2", "a3"}))
    run(fleet)
    assert len(fleet.hashes("web")) == 1 and set(hash_by_node(fleet).values()).isdisjoint(
        before.values()
    )


def test_without_pre_pull_the_update_does_not_wait() -> None:
    fleet = fleet_of(2)
    strategy = {"maxUnavailable": 1, "maxSurge": 0}
    fleet.apply("web", {"template": template(), "mode": "PerNode", "updateStrategy": strategy})
    fleet.converge()
    before = hash_by_node(fleet)
    fleet.apply("web", {"template": template(V2), "mode": "PerNode", "updateStrategy": strategy})
    run(fleet)
    assert set(hash_by_node(fleet).values()).isdisjoint(before.values())


@pytest.mark.parametrize("value", ["yes", 1, None, {"on": True}])
def test_pre_pull_must_be_a_boolean(value: object) -> None:
    obj = placement_obj("web", {"template": template(), "updateStrategy": {"prePull": value}})
    with pytest.raises(InvalidSpec) as caught:
        parse_placement(obj)
    assert caught.value.path == "spec.updateStrategy.prePull"


def test_the_pre_pull_a_placement_asks_for() -> None:
    spec = {
        "template": template(V2),
        "mode": "PerNode",
        "nodeSelector": {"matchLabels": {"site": "a"}},
        "updateStrategy": {"prePull": True},
    }
    spec["template"]["spec"]["initContainers"] = [{"name": "init", "image": "registry.local/i:1"}]
    obj = placement_obj("web", spec)
    want = prepull_for(obj)
    assert want is not None
    assert want["kind"] == "EdgeImagePrePull" and want["metadata"]["name"] == "web"
    assert want["spec"] == {
        "images": ["registry.local/i:1", V2],
        "nodeSelector": {"matchLabels": {"site": "a"}},
    }
    owner = want["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("EdgePlacement", "web", True)
    spec["updateStrategy"] = {"prePull": False}
    assert prepull_for(placement_obj("web", spec)) is None
    assert template_images({"spec": {"containers": [{"name": "c"}]}}) == ()


def test_pulled_nodes_are_those_of_the_current_images_and_generation() -> None:
    obj = {
        "metadata": {"generation": 3},
        "spec": {"images": [V2]},
        "status": {
            "nodes": [
                {"name": "a0", "phase": "Pulled", "generation": 3},
                {"name": "a1", "phase": "Pulled", "generation": 2},
                {"name": "a2", "phase": "Failed", "generation": 3},
                {"name": "a3", "phase": "Pulling", "generation": 3},
            ]
        },
    }
    assert pulled_nodes(obj, (V2,)) == {"a0"}
    assert pulled_nodes(obj, ("registry.local/app:3",)) == frozenset()
    assert pulled_nodes({}, (V2,)) == frozenset()


@pytest.mark.parametrize("count", [33, 1], ids=["33-images", "bad-reference"])
def test_a_template_whose_images_cannot_be_pre_pulled_is_refused(count: int) -> None:
    """Found by breakit5: with prePull, a template of more than 32 images (or one the
    reference grammar refuses) asked for an EdgeImagePrePull the API refuses; the hub
    retried the create every second with a warning, and the rolling update waited for a
    pull that could never happen, forever, with nothing in the placement's status."""
    spec = {"template": template(), "updateStrategy": {"prePull": True}}
    if count == 1:
        spec["template"]["spec"]["containers"][0]["image"] = "Registry.Local/App:1"
    else:
        spec["template"]["spec"]["initContainers"] = [
            {"name": f"i{i}", "image": f"registry.local/i:{i}"} for i in range(count - 1)
        ]
    with pytest.raises(InvalidSpec) as caught:
        parse_placement(placement_obj("web", spec))
    assert caught.value.path == "spec.updateStrategy.prePull"
    assert "cannot be pre-pulled" in caught.value.reason
    spec["updateStrategy"] = {"prePull": False}  # without the pre-pull, nothing to refuse
    parse_placement(placement_obj("web", spec))
