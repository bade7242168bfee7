"""The rollout of one EdgeUpgrade: a pure state machine, fed facts and the time.

No I/O and no clock: :meth:`Rollout.step` takes what the hub knows of each selected
node (:class:`NodeFacts`) and ``now`` (epoch seconds), and returns the orders to send
(:class:`Order`, :class:`Rollback`); :meth:`Rollout.report` applies a node's progress
report. The controller persists :meth:`Rollout.to_status` in the resource's status and
rebuilds the machine from it with :meth:`Rollout.from_status` (the API is the state of
record: a restarted hub carries on where the last one was).

Per node (one table, :data:`TRANSITIONS`)::

    Pending -> Downloading -> Downloaded -> Installing -> Restarted -> Healthy
                  \\______________\\______________\\___________\\----> Failed
                                                 Installing/Restarted/Healthy -> RolledBack
    Pending -> Skipped (offline with offlinePolicy Skip, or a refused downgrade)
    Pending -> Healthy (already at the version)

Forward skips are legal: an agent with the artifact cached reports Downloaded first, the
hub infers Restarted when the node comes back with the new version, and progress reports
are latest-wins (coalesced in the agent's outbox), so RolledBack may follow any earlier
phase.

The rollout: batches of ``maxUnavailable`` nodes (a percentage of the selected nodes,
rounded down, at least 1), in name order; a batch starts when no node is upgrading.
A node is Healthy when it is connected with the new version (and its pods are Ready,
if the gate asks) for ``soakSeconds``; it is Failed when that has not happened
``timeoutSeconds`` after its order. Once more than ``maxFailures`` nodes failed or
rolled back, no batch starts (phase Paused, reason FailureBudgetExceeded) and with
failurePolicy RollbackBatch the failed nodes' batches are rolled back. An offline node
does not hold its batch: with offlinePolicy Wait it stays Pending and goes with the
first batch after it returns. A held node (``edgeagent hold``, or outside its
maintenance window) waits the same way.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any

from cloudhub.upgrade.errors import IllegalTransition
from cloudhub.upgrade.model import FailurePolicy, OfflinePolicy, UpgradeSpec
from protocol.upgrade import ArtifactError, parse_version

__all__ = [
    "IN_PROGRESS",
    "TERMINAL",
    "TRANSITIONS",
    "NodeFacts",
    "NodePhase",
    "NodeState",
    "Order",
    "Rollback",
    "Rollout",
    "RolloutPhase",
]


class NodePhase(str, enum.Enum):
    """Where one node's upgrade is (the status's ``nodes[].phase``)."""

    PENDING = "Pending"
    DOWNLOADING = "Downloading"
    DOWNLOADED = "Downloaded"
    INSTALLING = "Installing"
    RESTARTED = "Restarted"
    HEALTHY = "Healthy"
    ROLLED_BACK = "RolledBack"
    FAILED = "Failed"
    SKIPPED = "Skipped"


class RolloutPhase(str, enum.Enum):
    """The status's ``phase``."""

    PROGRESSING = "Progressing"
    PAUSED = "Paused"
    COMPLETED = "Completed"


P = NodePhase
IN_PROGRESS = frozenset({P.DOWNLOADING, P.DOWNLOADED, P.INSTALLING, P.RESTARTED})
TERMINAL = frozenset({P.HEALTHY, P.ROLLED_BACK, P.FAILED, P.SKIPPED})
#: The legal transitions of one node (forward skips included, see the module docstring).
TRANSITIONS: Mapping[NodePhase, frozenset[NodePhase]] = {
    P.PENDING: frozenset(
        {P.DOWNLOADING, P.DOWNLOADED, P.INSTALLING, P.RESTARTED, P.HEALTHY, P.SKIPPED}
        | {P.ROLLED_BACK, P.FAILED}
    ),
    P.DOWNLOADING: frozenset(
        {P.DOWNLOADED, P.INSTALLING, P.RESTARTED, P.HEALTHY, P.ROLLED_BACK, P.FAILED}
    ),
    P.DOWNLOADED: frozenset({P.INSTALLING, P.RESTARTED, P.HEALTHY, P.ROLLED_BACK, P.FAILED}),
    P.INSTALLING: frozenset({P.RESTARTED, P.HEALTHY, P.ROLLED_BACK, P.FAILED}),
    P.RESTARTED: frozenset({P.HEALTHY, P.ROLLED_BACK, P.FAILED}),
    P.HEALTHY: frozenset({P.ROLLED_BACK}),
    P.ROLLED_BACK: frozenset(),
    P.FAILED: frozenset({P.ROLLED_BACK}),
    P.SKIPPED: frozenset(),
}
#: What a node may report itself (Healthy and Skipped are the hub's to decide).
REPORTABLE = frozenset(IN_PROGRESS | {P.ROLLED_BACK, P.FAILED})


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """What the hub knows of a selected node now.

    Attributes:
        name: the Node's name.
        connected: it has a session with the hub.
        version: the agent version it reported in its hello ("" when never seen).
        pods_ready: every pod bound to it is Running and Ready.
        held: it defers upgrades (``edgeagent hold`` or outside its maintenance window).
    """

    name: str
    connected: bool
    version: str = ""
    pods_ready: bool = True
    held: bool = False


@dataclass(frozen=True, slots=True)
class NodeState:
    """One node's upgrade, as the status records it.

    Attributes:
        name: the Node's name.
        phase: where it is.
        batch: the batch it was ordered in (1-based), 0 before its order.
        from_version: the version it ran when ordered ("" before).
        reason: a CamelCase reason for the phase ("" when none).
        message: words for humans.
        start_time: epoch seconds of its order, or None.
        last_transition: epoch seconds of the last phase change.
        healthy_since: epoch seconds since when it passed the gate (soak), or None.
        rollback_ordered: the hub asked it to roll back.
        deferred_until: epoch seconds before which it is not ordered again (it reported
            Deferred: held, or outside its maintenance window), or None.
    """

    name: str
    phase: NodePhase = NodePhase.PENDING
    batch: int = 0
    from_version: str = ""
    reason: str = ""
    message: str = ""
    start_time: float | None = None
    last_transition: float = 0.0
    healthy_since: float | None = None
    rollback_ordered: bool = False
    deferred_until: float | None = None

    @property
    def ordered(self) -> bool:
        """The hub sent it the order (it is in a batch)."""
        return self.batch > 0

    @property
    def upgrading(self) -> bool:
        """Ordered and not finished: it counts against the batch."""
        return self.ordered and self.phase not in TERMINAL


@dataclass(frozen=True, slots=True)
class Order:
    """Send ``node`` the upgrade order (again, if it reconnects before it is done)."""

    node: str
    batch: int


@dataclass(frozen=True, slots=True)
class Rollback:
    """Ask ``node`` to go back to its previous version."""

    node: str
    reason: str


def _iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _epoch(text: object) -> float | None:
    if not isinstance(text, str):
        return None
    try:
        return (
            datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()
        )
    except ValueError:
        return None


class Rollout:
    """One EdgeUpgrade's rollout (see the module docstring for the rules).

    Args:
        spec: the validated spec.
        states: per-node states to start from (from :meth:`from_status`), or None.
        batch: the last batch number started.
    """

    def __init__(self, spec: UpgradeSpec, states: Iterable[NodeState] = (), batch: int = 0) -> None:
        self.spec = spec
        self.nodes: dict[str, NodeState] = {state.name: state for state in states}
        self.batch = batch
        self.reason = ""

    # -- reports from the nodes ----------------------------------------------------------

    def report(
        self, node: str, phase: NodePhase, now: float, reason: str = "", message: str = ""
    ) -> NodeState:
        """Apply ``node``'s progress report.

        Returns:
            The node's new state (unchanged if it repeated its phase).

        Raises:
            IllegalTransition: the node is not ordered in this rollout, reported a phase
                that is the hub's to decide, or a move the table does not allow.
        """
        state = self.nodes.get(node)
        if state is None or not state.ordered or phase not in REPORTABLE:
            raise IllegalTransition(node, state.phase if state else None, phase)
        if phase == state.phase:
            return state
        return self._move(state, phase, now, reason, message)

    def defer(
        self, node: str, now: float, reason: str, recheck_s: float = 300.0, message: str = ""
    ) -> NodeState:
        """``node`` reported Deferred (it holds upgrades): it leaves its batch untouched
        and is not ordered again for ``recheck_s`` seconds; ``message`` (the hold's own
        reason, ``Held: ...``) is shown in its status entry.

        Raises:
            IllegalTransition: it is not ordered, or it already started.
        """
        state = self.nodes.get(node)
        if state is None or not state.ordered or state.phase is not P.PENDING:
            raise IllegalTransition(node, state.phase if state else None, "Deferred")
        deferred = replace(
            state,
            batch=0,
            start_time=None,
            reason=reason or "Held",
            message=message,
            last_transition=now,
            deferred_until=now + recheck_s,
        )
        self.nodes[node] = deferred
        return deferred

    def _move(
        self, state: NodeState, phase: NodePhase, now: float, reason: str, message: str = ""
    ) -> NodeState:
        if phase not in TRANSITIONS[state.phase]:
            raise IllegalTransition(state.name, state.phase, phase)
        moved = replace(state, phase=phase, reason=reason, message=message, last_transition=now)
        if phase not in IN_PROGRESS:
            moved = replace(moved, healthy_since=None)
        self.nodes[state.name] = moved
        return moved

    # -- the hub's decisions --------------------------------------------------------------

    @property
    def failures(self) -> int:
        """Nodes that failed or rolled back."""
        return sum(s.phase in (P.FAILED, P.ROLLED_BACK) for s in self.nodes.values())

    @property
    def halted(self) -> bool:
        """More than ``maxFailures`` nodes failed: no batch starts."""
        return self.failures > self.spec.max_failures

    def step(self, facts: Mapping[str, NodeFacts], now: float) -> list[Order | Rollback]:
        """Decide, given the selected nodes' facts at ``now``.

        Args:
            facts: every node the resource selects (and the creator may see), by name.
            now: epoch seconds.

        Returns:
            The orders to send, in node-name order; the caller sends them, and sends
            :meth:`order_for` again to an upgrading node that reconnects.
        """
        self._membership(facts, now)
        actions: list[Order | Rollback] = []
        for state in list(self.nodes.values()):
            if state.upgrading:
                actions.extend(self._gate(state, facts.get(state.name), now))
        if self.halted and self.spec.failure_policy is FailurePolicy.ROLLBACK_BATCH:
            actions.extend(self._rollback_batches(now))
        if not self.spec.paused and not self.halted and not self.upgrading():
            actions.extend(self._next_batch(facts, now))
        actions.sort(key=lambda action: action.node)
        return actions

    def _membership(self, facts: Mapping[str, NodeFacts], now: float) -> None:
        for name in facts:
            if name not in self.nodes:
                self.nodes[name] = NodeState(name, last_transition=now)
        for name, state in list(self.nodes.items()):
            if name not in facts and not state.ordered and state.phase is P.PENDING:
                del self.nodes[name]

    def _gate(self, state: NodeState, fact: NodeFacts | None, now: float) -> list[Rollback]:
        gate = self.spec.gate
        back = fact is not None and fact.connected and self._is_target(fact.version)
        if back and state.phase is not P.RESTARTED:
            state = self._move(state, P.RESTARTED, now, "NewVersionConnected")
        if back and (fact.pods_ready or not gate.pods_ready):
            since = state.healthy_since if state.healthy_since is not None else now
            state = replace(state, healthy_since=since)
            self.nodes[state.name] = state
            if now - since >= gate.soak_s:
                self._move(state, P.HEALTHY, now, "HealthGatePassed")
                return []
        elif state.healthy_since is not None:
            self.nodes[state.name] = replace(state, healthy_since=None)
        started = state.start_time if state.start_time is not None else state.last_transition
        if now - started >= gate.timeout_s:
            failed = self._move(
                state,
                P.FAILED,
                now,
                "HealthGateTimeout",
                f"not healthy on {self.spec.version} within {gate.timeout_s:g} s",
            )
            self.nodes[state.name] = replace(failed, rollback_ordered=True)
            return [Rollback(state.name, "HealthGateTimeout")]
        return []

    def _rollback_batches(self, now: float) -> list[Rollback]:
        batches = {s.batch for s in self.nodes.values() if s.phase in (P.FAILED, P.ROLLED_BACK)}
        actions = []
        for state in self.nodes.values():
            if (
                state.batch in batches
                and not state.rollback_ordered
                and (state.phase is P.HEALTHY or state.upgrading)
            ):
                self.nodes[state.name] = replace(state, rollback_ordered=True)
                actions.append(Rollback(state.name, "BatchRolledBack"))
        return actions

    def _next_batch(self, facts: Mapping[str, NodeFacts], now: float) -> list[Order]:
        size = self.spec.batching.size(len(facts))
        orders: list[Order] = []
        for name in sorted(self.nodes):
            state = self.nodes[name]
            if state.phase is not P.PENDING or state.ordered:
                continue
            fact = facts[name]
            if not fact.connected:
                if self.spec.offline_policy is OfflinePolicy.SKIP:
                    self._move(state, P.SKIPPED, now, "NodeOffline")
                else:
                    self.nodes[name] = replace(state, reason="NodeOffline")
                continue
            if fact.held:
                self.nodes[name] = replace(state, reason="Held")
                continue
            if state.deferred_until is not None and now < state.deferred_until:
                continue
            if self._is_target(fact.version):
                self._move(state, P.HEALTHY, now, "AlreadyAtVersion")
                continue
            if self._is_downgrade(fact.version) and not self.spec.allow_downgrade:
                self._move(
                    state,
                    P.SKIPPED,
                    now,
                    "DowngradeRefused",
                    f"runs {fact.version}, newer than {self.spec.version}; allowDowngrade is false",
                )
                continue
            if len(orders) == size:
                continue  # the batch is full; later nodes still get their reasons above
            self.nodes[name] = replace(
                state,
                batch=self.batch + 1,
                from_version=fact.version,
                start_time=now,
                reason="",
                message="",
                deferred_until=None,
                last_transition=now,
            )
            orders.append(Order(name, self.batch + 1))
        if orders:
            self.batch += 1
        return orders

    def _is_target(self, version: str) -> bool:
        try:
            return parse_version(version).key == self.spec.version.key
        except ArtifactError:
            return False

    def _is_downgrade(self, version: str) -> bool:
        try:
            return parse_version(version) > self.spec.version
        except ArtifactError:
            return False

    def upgrading(self) -> list[str]:
        """Names of the nodes ordered and not finished."""
        return sorted(name for name, state in self.nodes.items() if state.upgrading)

    def order_for(self, node: str) -> Order | None:
        """The order to send ``node`` again when it (re)connects, or None."""
        state = self.nodes.get(node)
        if state is None or not state.upgrading or state.rollback_ordered:
            return None
        return Order(node, state.batch)

    # -- status -------------------------------------------------------------------------

    def phase(self) -> tuple[RolloutPhase, str]:
        """The rollout's phase and its reason."""
        if not self.nodes:
            return RolloutPhase.PROGRESSING, "NoMatchingNodes"
        if all(s.phase in TERMINAL for s in self.nodes.values()):
            return RolloutPhase.COMPLETED, ""
        if self.halted:
            return RolloutPhase.PAUSED, "FailureBudgetExceeded"
        if self.spec.paused:
            return RolloutPhase.PAUSED, "PausedBySpec"
        return RolloutPhase.PROGRESSING, ""

    def to_status(self, generation: int) -> dict[str, Any]:
        """The resource's ``status`` (counts for the printer columns, one entry per node)."""
        phase, reason = self.phase()
        states = [self.nodes[name] for name in sorted(self.nodes)]
        nodes = []
        for s in states:
            entry: dict[str, Any] = {"name": s.name, "phase": s.phase.value, "batch": s.batch}
            for key, value in (
                ("fromVersion", s.from_version),
                ("reason", s.reason),
                ("message", s.message),
                ("startTime", _iso(s.start_time)),
                ("lastTransitionTime", _iso(s.last_transition)),
                ("healthySince", _iso(s.healthy_since)),
                ("deferredUntil", _iso(s.deferred_until)),
            ):
                if value:
                    entry[key] = value
            if s.rollback_ordered:
                entry["rollbackOrdered"] = True
            nodes.append(entry)
        return {
            "observedGeneration": generation,
            "phase": phase.value,
            "reason": reason,
            # Always written: a merge patch without it would keep an Invalid's message.
            "message": "the nodeSelector matches no Node (a label typo?); nothing to do until "
            "one does"
            if reason == "NoMatchingNodes"
            else "",
            "nodeCount": len(states),
            "healthy": sum(s.phase is P.HEALTHY for s in states),
            "upgrading": sum(s.upgrading for s in states),
            "failed": self.failures,
            "batch": self.batch,
            "nodes": nodes,
        }

    @classmethod
    def from_status(
        cls,
        spec: UpgradeSpec,
        status: Mapping[str, Any],
        selected: Collection[str] | None = None,
    ) -> Rollout:
        """Rebuild a rollout from a status :meth:`to_status` wrote (entries that do not
        parse are dropped: the node starts again from Pending).

        Args:
            selected: when given, the nodes ``spec`` selects now: an entry of another node
                that is still upgrading is dropped (a finished one stays: the history and
                the failure count). The status is not the spec: whoever may write
                ``edgeupgrades/status`` (no admission check) could list there a node the
                creator may not see, and a restored upgrading entry is ordered again when
                its node reconnects.
        """
        states = []
        for entry in status.get("nodes") or ():
            try:
                phase = NodePhase(entry["phase"])
                name = str(entry["name"])
                batch = int(entry.get("batch", 0))
            except (KeyError, TypeError, ValueError):
                continue
            states.append(
                NodeState(
                    name=name,
                    phase=phase,
                    batch=batch,
                    from_version=str(entry.get("fromVersion", "")),
                    reason=str(entry.get("reason", "")),
                    message=str(entry.get("message", "")),
                    start_time=_epoch(entry.get("startTime")),
                    last_transition=_epoch(entry.get("lastTransitionTime")) or 0.0,
                    healthy_since=_epoch(entry.get("healthySince")),
                    rollback_ordered=bool(entry.get("rollbackOrdered", False)),
                    deferred_until=_epoch(entry.get("deferredUntil")),
                )
            )
            if selected is not None and name not in selected and states[-1].upgrading:
                del states[-1]
        batch = status.get("batch", 0)
        return cls(spec, states, batch if isinstance(batch, int) else 0)
