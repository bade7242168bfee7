"""cloudhub.upgrade.rollout: batches, the health gate, failure/offline policies, holds.

Driven by a tests.clock.ManualClock: each test plays the nodes (their facts and their
reports) and reads the orders the machine gives.
"""

from __future__ import annotations

from typing import Any

import pytest

from cloudhub.upgrade import (
    IllegalTransition,
    NodeFacts,
    NodePhase,
    Order,
    Rollback,
    Rollout,
    RolloutPhase,
    parse_spec,
)
from cloudhub.upgrade.rollout import TRANSITIONS
from tests.clock import ManualClock

OLD, NEW = "0.4.0", "0.5.0"
DIGEST = "ab" * 32


def spec(**fields: Any):
    return parse_spec(
        {
            "version": NEW,
            "artifact": {"sha256": DIGEST, "name": "edgefleet-0.5.0-py3-none-any.whl"},
            **fields,
        }
    )


class Fleet:
    """The nodes' side: facts the hub sees, and the reports an agent sends."""

    def __init__(self, count: int, **spec_fields: Any) -> None:
        self.clock = ManualClock(1_700_000_000.0)
        self.facts = {
            f"n{i:02d}": NodeFacts(f"n{i:02d}", connected=True, version=OLD) for i in range(count)
        }
        self.rollout = Rollout(spec(**spec_fields))

    def step(self) -> list[Order | Rollback]:
        return self.rollout.step(self.facts, self.clock())

    def set(self, name: str, **changes: Any) -> None:
        fact = self.facts[name]
        self.facts[name] = NodeFacts(
            name,
            changes.get("connected", fact.connected),
            changes.get("version", fact.version),
            changes.get("pods_ready", fact.pods_ready),
            changes.get("held", fact.held),
        )

    def upgrade(self, name: str) -> None:
        """The agent does its part and comes back with the new version."""
        for phase in (NodePhase.DOWNLOADING, NodePhase.DOWNLOADED, NodePhase.INSTALLING):
            self.rollout.report(name, phase, self.clock())
        self.set(name, version=NEW)

    def phase(self, name: str) -> NodePhase:
        return self.rollout.nodes[name].phase


def ordered(actions: list[Order | Rollback]) -> list[str]:
    return [a.node for a in actions if isinstance(a, Order)]


def test_batches_of_ten_percent_in_name_order_one_at_a_time() -> None:
    fleet = Fleet(30, maxUnavailable="10%")
    first = fleet.step()
    assert first == [Order("n00", 1), Order("n01", 1), Order("n02", 1)]
    assert fleet.step() == []  # the batch is upgrading: nothing new
    for name in ordered(first):
        fleet.upgrade(name)
    second = fleet.step()
    assert [fleet.phase(n) for n in ordered(first)] == [NodePhase.HEALTHY] * 3
    assert ordered(second) == ["n03", "n04", "n05"]
    assert all(o.batch == 2 for o in second)
    for _ in range(9):
        for name in fleet.rollout.upgrading():
            fleet.upgrade(name)
        fleet.step()
    status = fleet.rollout.to_status(generation=1)
    assert status["phase"] == "Completed" and status["healthy"] == 30
    assert status["batch"] == 10 and status["upgrading"] == 0 and status["failed"] == 0


def test_soak_holds_healthy_until_it_has_passed_and_restarts_when_the_gate_breaks() -> None:
    fleet = Fleet(2, maxUnavailable=1, healthGate={"soakSeconds": 30})
    fleet.step()
    fleet.upgrade("n00")
    fleet.step()
    assert fleet.phase("n00") is NodePhase.RESTARTED
    fleet.clock.advance(20)
    fleet.set("n00", pods_ready=False)  # a pod is not Ready again yet: the soak restarts
    assert fleet.step() == [] and fleet.phase("n00") is NodePhase.RESTARTED
    fleet.set("n00", pods_ready=True)
    fleet.step()
    fleet.clock.advance(29)
    assert fleet.step() == [] and fleet.phase("n00") is NodePhase.RESTARTED
    fleet.clock.advance(1)
    assert fleet.step() == [Order("n01", 2)]
    assert fleet.phase("n00") is NodePhase.HEALTHY


def test_pods_not_ready_keep_the_gate_shut_unless_it_does_not_ask() -> None:
    strict, lax = Fleet(1), Fleet(1, healthGate={"podsReady": False})
    for fleet in (strict, lax):
        fleet.step()
        fleet.upgrade("n00")
        fleet.set("n00", pods_ready=False)
        fleet.step()
    assert strict.phase("n00") is NodePhase.RESTARTED
    assert lax.phase("n00") is NodePhase.HEALTHY


def test_a_rolled_back_node_pauses_the_rollout_and_the_others_in_flight_finish() -> None:
    fleet = Fleet(9, maxUnavailable=3)
    assert ordered(fleet.step()) == ["n00", "n01", "n02"]
    fleet.rollout.report("n01", NodePhase.INSTALLING, fleet.clock())
    fleet.rollout.report("n01", NodePhase.ROLLED_BACK, fleet.clock(), "CrashedAtStart", "exit 1")
    fleet.upgrade("n00")
    assert fleet.step() == []  # halted: no new batch, and Pause rolls nothing back
    phase, reason = fleet.rollout.phase()
    assert (phase, reason) == (RolloutPhase.PAUSED, "FailureBudgetExceeded")
    fleet.upgrade("n02")
    assert fleet.step() == []
    assert fleet.phase("n02") is NodePhase.HEALTHY and fleet.phase("n03") is NodePhase.PENDING
    status = fleet.rollout.to_status(1)
    entry = next(e for e in status["nodes"] if e["name"] == "n01")
    assert (entry["phase"], entry["reason"], entry["message"]) == (
        "RolledBack",
        "CrashedAtStart",
        "exit 1",
    )
    # Raising maxFailures (a new generation) resumes it.
    resumed = Rollout(spec(maxUnavailable=3, maxFailures=1), fleet.rollout.nodes.values(), 1)
    assert ordered(resumed.step(fleet.facts, fleet.clock())) == ["n03", "n04", "n05"]


def test_rollback_batch_rolls_back_the_failed_nodes_batch_only() -> None:
    fleet = Fleet(6, maxUnavailable=2, failurePolicy="RollbackBatch", maxFailures=0)
    fleet.step()
    fleet.upgrade("n00")
    fleet.upgrade("n01")
    fleet.step()
    fleet.step()  # batch 2: n02, n03
    fleet.upgrade("n02")
    fleet.step()
    assert fleet.phase("n02") is NodePhase.HEALTHY
    fleet.rollout.report("n03", NodePhase.FAILED, fleet.clock(), "DigestMismatch")
    actions = fleet.step()
    assert actions == [Rollback("n02", "BatchRolledBack")]  # batch 1 stays on the new one
    assert fleet.step() == []  # ordered once
    fleet.rollout.report("n02", NodePhase.ROLLED_BACK, fleet.clock(), "Requested")
    assert fleet.rollout.to_status(1)["failed"] == 2


def test_a_node_that_never_comes_back_fails_at_the_gate_timeout() -> None:
    fleet = Fleet(2, maxUnavailable=1, healthGate={"timeoutSeconds": 120}, maxFailures=1)
    fleet.step()
    fleet.rollout.report("n00", NodePhase.INSTALLING, fleet.clock())
    fleet.set("n00", connected=False)
    fleet.clock.advance(119)
    assert fleet.step() == []
    fleet.clock.advance(1)
    actions = fleet.step()
    assert actions == [Rollback("n00", "HealthGateTimeout"), Order("n01", 2)]
    assert fleet.phase("n00") is NodePhase.FAILED
    assert fleet.rollout.order_for("n00") is None


def test_an_offline_node_waits_without_holding_its_batch_and_goes_when_back() -> None:
    fleet = Fleet(4, maxUnavailable=2)
    fleet.set("n00", connected=False)
    assert ordered(fleet.step()) == ["n01", "n02"]
    assert fleet.rollout.nodes["n00"].reason == "NodeOffline"
    fleet.upgrade("n01")
    fleet.upgrade("n02")
    assert ordered(fleet.step()) == ["n03"]
    fleet.upgrade("n03")
    assert fleet.step() == []
    assert fleet.rollout.phase()[0] is RolloutPhase.PROGRESSING  # n00 still to do
    fleet.set("n00", connected=True)
    assert fleet.step() == [Order("n00", 3)]
    fleet.upgrade("n00")
    fleet.step()
    assert fleet.rollout.phase()[0] is RolloutPhase.COMPLETED


def test_an_offline_node_is_skipped_when_the_policy_says_so() -> None:
    fleet = Fleet(2, maxUnavailable=1, offlinePolicy="Skip")
    fleet.set("n00", connected=False)
    assert fleet.step() == [Order("n01", 1)]
    assert fleet.phase("n00") is NodePhase.SKIPPED
    assert fleet.rollout.nodes["n00"].reason == "NodeOffline"


def test_an_upgrading_node_that_reconnects_gets_its_order_again() -> None:
    fleet = Fleet(1)
    fleet.step()
    assert fleet.rollout.order_for("n00") == Order("n00", 1)
    fleet.upgrade("n00")
    fleet.step()
    assert fleet.rollout.order_for("n00") is None


def test_a_held_node_waits_and_goes_once_unheld() -> None:
    fleet = Fleet(2, maxUnavailable=1)
    fleet.set("n00", held=True)
    assert fleet.step() == [Order("n01", 1)]
    assert fleet.rollout.nodes["n00"].reason == "Held"
    fleet.upgrade("n01")
    assert fleet.step() == []
    fleet.set("n00", held=False)
    assert fleet.step() == [Order("n00", 2)]


def test_paused_starts_nothing_and_running_nodes_finish() -> None:
    fleet = Fleet(4, maxUnavailable=2)
    fleet.step()
    paused = Rollout(spec(maxUnavailable=2, paused=True), fleet.rollout.nodes.values(), 1)
    fleet.upgrade("n00")
    fleet.upgrade("n01")
    assert paused.step(fleet.facts, fleet.clock()) == []
    assert paused.nodes["n00"].phase is NodePhase.HEALTHY
    assert paused.phase() == (RolloutPhase.PAUSED, "PausedBySpec")


def test_nodes_at_the_version_are_healthy_and_newer_ones_are_not_downgraded() -> None:
    fleet = Fleet(3, maxUnavailable=1)
    fleet.set("n00", version=NEW)
    fleet.set("n01", version="0.6.0")
    assert fleet.step() == [Order("n02", 1)]
    assert fleet.phase("n00") is NodePhase.HEALTHY
    assert fleet.rollout.nodes["n00"].reason == "AlreadyAtVersion"
    assert fleet.phase("n01") is NodePhase.SKIPPED
    assert fleet.rollout.nodes["n01"].reason == "DowngradeRefused"


def test_a_downgrade_is_ordered_when_allowed() -> None:
    fleet = Fleet(1, allowDowngrade=True)
    fleet.set("n00", version="0.6.0")
    assert fleet.step() == [Order("n00", 1)]
    assert fleet.rollout.nodes["n00"].from_version == "0.6.0"


def test_reports_the_table_does_not_allow_are_refused() -> None:
    fleet = Fleet(2, maxUnavailable=1)
    fleet.step()
    now = fleet.clock()
    with pytest.raises(IllegalTransition):
        fleet.rollout.report("n01", NodePhase.DOWNLOADING, now)  # not ordered
    with pytest.raises(IllegalTransition):
        fleet.rollout.report("nobody", NodePhase.DOWNLOADING, now)
    with pytest.raises(IllegalTransition):
        fleet.rollout.report("n00", NodePhase.HEALTHY, now)  # the hub's to decide
    fleet.rollout.report("n00", NodePhase.INSTALLING, now)
    with pytest.raises(IllegalTransition) as caught:
        fleet.rollout.report("n00", NodePhase.DOWNLOADING, now)  # backwards
    assert (caught.value.current, caught.value.wanted) == (
        NodePhase.INSTALLING,
        NodePhase.DOWNLOADING,
    )
    assert fleet.rollout.report("n00", NodePhase.INSTALLING, now).phase is NodePhase.INSTALLING


def test_terminal_phases_lead_nowhere_but_rollback() -> None:
    for phase in (NodePhase.ROLLED_BACK, NodePhase.SKIPPED):
        assert TRANSITIONS[phase] == frozenset()
    assert TRANSITIONS[NodePhase.HEALTHY] == {NodePhase.ROLLED_BACK}


def test_the_status_round_trips_so_a_restarted_hub_carries_on() -> None:
    fleet = Fleet(4, maxUnavailable=2, healthGate={"soakSeconds": 60})
    fleet.step()
    fleet.upgrade("n00")
    fleet.step()
    status = fleet.rollout.to_status(generation=7)
    assert status["observedGeneration"] == 7 and status["upgrading"] == 2
    again = Rollout.from_status(fleet.rollout.spec, status)
    assert again.batch == 1
    assert again.nodes == fleet.rollout.nodes
    fleet.clock.advance(60)
    fleet.upgrade("n01")
    assert again.step(fleet.facts, fleet.clock()) == []
    assert again.nodes["n00"].phase is NodePhase.HEALTHY


def test_unparseable_status_entries_start_again_from_pending() -> None:
    status = {"batch": "x", "nodes": [{"name": "n00", "phase": "Exploded"}, {"phase": "Healthy"}]}
    again = Rollout.from_status(spec(), status)
    assert again.nodes == {} and again.batch == 0


def test_a_restored_status_orders_only_nodes_the_spec_selects() -> None:
    # edgeupgrades/status passes no admission check: an entry for a node the creator may
    # not see, "upgrading" in the current batch, was ordered again when that node
    # reconnected after a hub restart (and held the batch, so the selected one waited)
    status = {
        "batch": 1,
        "nodes": [
            {"name": "hidden", "phase": "Downloading", "batch": 1},
            {"name": "gone", "phase": "Failed", "batch": 1, "reason": "HealthGateTimeout"},
        ],
    }
    unchecked = Rollout.from_status(spec(), status)
    assert unchecked.order_for("hidden") == Order("hidden", 1)
    facts = {"n00": NodeFacts("n00", connected=True, version=OLD)}
    again = Rollout.from_status(spec(maxFailures=1), status, selected=facts)
    assert again.order_for("hidden") is None and "hidden" not in again.nodes
    # a finished entry stays: its history, and its failure counts against maxFailures
    assert again.nodes["gone"].phase is NodePhase.FAILED and again.failures == 1
    assert again.step(facts, 1_700_000_000.0) == [Order("n00", 2)]


def test_nodes_leaving_the_selection_before_their_order_are_dropped() -> None:
    fleet = Fleet(3, maxUnavailable=1)
    fleet.step()
    del fleet.facts["n02"]
    fleet.step()
    assert set(fleet.rollout.nodes) == {"n00", "n01"}


def test_a_node_that_reports_deferred_leaves_its_batch_and_is_asked_again_later() -> None:
    fleet = Fleet(2, maxUnavailable=1)
    assert fleet.step() == [Order("n00", 1)]
    fleet.rollout.defer("n00", fleet.clock(), "Held", recheck_s=300)
    assert fleet.rollout.nodes["n00"].reason == "Held" and not fleet.rollout.nodes["n00"].ordered
    assert fleet.step() == [Order("n01", 2)]  # the held node did not hold the batch
    fleet.upgrade("n01")
    assert fleet.step() == []  # n00 is not asked again before its recheck
    assert fleet.rollout.to_status(1)["failed"] == 0
    again = Rollout.from_status(fleet.rollout.spec, fleet.rollout.to_status(1))
    assert again.nodes["n00"].deferred_until == fleet.rollout.nodes["n00"].deferred_until
    fleet.clock.advance(300)
    assert fleet.step() == [Order("n00", 3)]
    with pytest.raises(IllegalTransition):
        fleet.rollout.defer("n01", fleet.clock(), "Held")  # finished: nothing to defer
    fleet.rollout.report("n00", NodePhase.DOWNLOADING, fleet.clock())
    with pytest.raises(IllegalTransition):
        fleet.rollout.defer("n00", fleet.clock(), "Held")  # started already


def test_a_selector_that_matches_no_node_says_so() -> None:
    """Found by breakit5: an EdgeUpgrade whose nodeSelector matched nothing showed
    ``Progressing`` with 0 nodes forever, no reason (a typo in a label looked like a
    rollout that had not started yet)."""
    fleet = Fleet(0, nodeSelector={"matchLabels": {"fleet": "pj"}})
    assert fleet.step() == []
    status = fleet.rollout.to_status(1)
    assert (status["phase"], status["reason"], status["nodeCount"]) == (
        "Progressing",
        "NoMatchingNodes",
        0,
    )
    assert "matches no Node" in status["message"]
