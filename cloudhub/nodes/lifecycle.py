"""Node health as Kubernetes sees it: registration, Lease renewal, Ready, Ready=Unknown.

While a node is connected the hub does what its kubelet would: register (create or update)
its Node, renew its Lease in ``kube-node-lease`` every ``nodes.lease_interval`` seconds and
refresh the Ready heartbeat every ``nodes.status_report_interval``. When its session ends
the hub stops renewing, and once ``nodes.not_ready_grace`` has passed with no new session
and a stale Lease it sets every kubelet condition to Unknown, as the node lifecycle
controller does for a silent kubelet (in a real cluster that controller reaches the same
verdict from the same stale Lease).

All of it runs on one timer heap and two small worker pools (Lease renewals never wait
behind rate-limited Node writes), not one task per node: 10,000 idle nodes cost heap
entries, not tasks. Each node has a *generation*, bumped at every connect and disconnect;
a job scheduled under an older generation is dropped, so a fast reconnect never sees its
Lease stop or its node marked Unknown by the cleanup of the session it replaced.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import random
import time
from collections import deque
from collections.abc import Callable
from functools import partial

from cloudhub.bridge.registry import SessionRegistry
from cloudhub.bridge.session import NodeSession
from cloudhub.errors import KubeAPIError, KubeConflict, KubeNotFound
from cloudhub.events import EventRecorder
from cloudhub.ha import NodeOwnership, owner_of
from cloudhub.kube import LEASES, NODES, KubeClient, TokenBucket, micro_time, parse_time
from cloudhub.kube.retry import update_with_retry
from cloudhub.nodes import model
from cloudhub.observability.metrics import HubMetrics
from cloudhub.settings import NodeSettings
from protocol.errors import CloseCode
from protocol.session import Closed
from protocol.tasks import TaskScope

__all__ = ["NodeLifecycle", "disconnect_event"]

log = logging.getLogger(__name__)

REGISTER, LEASE, HEARTBEAT, UNKNOWN = "register", "lease", "heartbeat", "unknown"
CONDITIONS = "conditions"  # an extra status write: a provider's conditions changed

#: ``provider(node, now) -> conditions``: condition dicts that replace the defaults of the
#: same type (``nodes.model.ready_conditions``) in every status write of a connected node.
ConditionProvider = Callable[[str, float], "list[dict]"]


#: Close codes of the hub's own that end a session because something is wrong with the
#: node, not the link: its EdgeDisconnected Event is a Warning saying why.
_WARNING_CLOSES = frozenset(
    {CloseCode.UNAUTHORIZED, CloseCode.PROTOCOL_ERROR, CloseCode.VERSION_MISMATCH}
)


def disconnect_event(closed: Closed | None) -> tuple[str, str]:
    """The type and message of a node's ``EdgeDisconnected`` Event.

    ``Normal`` for a link that ended (the agent stopped, the network dropped, the hub
    restarted); ``Warning`` when the hub closed it because of the node (a revoked
    certificate, a deleted Node, a protocol violation), with the hub's reason, so that
    ``kubectl describe node`` says why the node is gone rather than only that it is.

    Args:
        closed: how the session ended (``Link.close_event``), ``None`` if unknown.
    """
    if closed is None:
        return "Normal", "Edge agent disconnected"
    detail = f"{closed.code.name}: {closed.reason}" if closed.reason else closed.code.name
    if not closed.by_peer and closed.code in _WARNING_CLOSES:
        return "Warning", f"Edge agent disconnected by the hub ({detail})"
    if closed.code in (CloseCode.PEER_DEAD, CloseCode.CONNECTION_LOST):
        return "Normal", f"Edge agent disconnected ({detail})"
    who = "the agent" if closed.by_peer else "the hub"
    return "Normal", f"Edge agent disconnected ({detail}, closed by {who})"


class _State:
    __slots__ = ("failures", "generation", "registered", "renewed_at", "session", "uid")

    def __init__(self) -> None:
        self.generation = 0
        self.session: NodeSession | None = None
        self.uid = ""
        self.registered = False
        self.failures = 0
        self.renewed_at = float("-inf")  # monotonic s of this session's last Lease renewal


class NodeLifecycle:
    """Registers edge nodes, renews their Leases, and marks silent ones Unknown.

    Args:
        client: the API client.
        settings: the ``nodes`` settings group.
        bucket: rate limiter for Node writes (Lease renewals are paced by their interval).
        metrics: the hub's metrics.
        events: where connect/disconnect Events go.
        registry: sessions (to close one whose name belongs to a non-edge Node).
        cached_node: the nodes informer's copy of a Node (slim: identity, labels, our
            annotations, conditions), or ``None``.
        clock: wall clock, seconds since the epoch (written into the API).
        ownership: with hub HA, the node ownership: Lease renewals are its fenced
            renewals, and Node writes happen only for nodes it holds.
        jitter: ``() -> [0, 1)``, the draw of each renewal's jitter (``nodes.lease_jitter``).
    """

    def __init__(
        self,
        client: KubeClient,
        settings: NodeSettings,
        bucket: TokenBucket,
        metrics: HubMetrics,
        events: EventRecorder,
        registry: SessionRegistry,
        *,
        cached_node: Callable[[str], dict | None] = lambda name: None,
        clock: Callable[[], float] = time.time,
        ownership: NodeOwnership | None = None,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        self.client = client
        self.ownership = ownership
        self._jitter = jitter
        # Nodes that moved to another live replica, by that replica: rechecked when it dies
        # (its replica Lease deleted or expired), never by reading their Leases meanwhile.
        self._moved: dict[str, dict[str, int]] = {}  # owner -> {node: generation}
        self._owner_timers: dict[str, asyncio.TimerHandle] = {}
        if ownership is not None:
            ownership.replicas.on_dead.append(self._owner_gone)
        self.settings = settings
        self.bucket = bucket
        self.metrics = metrics
        self.events = events
        self.registry = registry
        self.kubelet_endpoint: tuple[str, int] | None = None
        """The hub's kubelet API ``(address, port)`` published in every Node's status (the
        kubelet extension sets it), or ``None``."""
        self._clock = clock
        self._cached_node = cached_node
        self._states: dict[str, _State] = {}
        self._heap: list[tuple[float, int, str, str, int]] = []
        self._tie = itertools.count()
        self._timer_wake = asyncio.Event()
        self._lease_jobs: deque[tuple[str, str, int]] = deque()
        self._node_jobs: deque[tuple[str, str, int]] = deque()
        self._lease_wake = asyncio.Event()
        self._node_wake = asyncio.Event()
        self._scope = TaskScope()
        self.condition_providers: list[ConditionProvider] = []
        """Extensions add ``provider(node, now)`` here (the metrics extension's
        MemoryPressure and DiskPressure); call :meth:`conditions_changed` when one's
        answer changes."""
        registry.on_connect.append(self.connected)
        registry.on_disconnect.append(self.disconnected)

    def __len__(self) -> int:
        return len(self._states)

    def registered(self, node: str) -> bool:
        """Whether the node's current session has registered its Node."""
        state = self._states.get(node)
        return state is not None and state.registered

    # -- hooks ----------------------------------------------------------------------------

    def connected(self, session: NodeSession) -> None:
        """Registry hook: a session became current: register now, then keep it healthy."""
        state = self._states.get(session.node)
        if state is None:
            state = self._states[session.node] = _State()
        state.generation += 1
        state.session = session
        state.registered = False
        state.failures = 0
        # The Lease first and on its own: a fleet rejoining a restarted hub must not go
        # NotReady while its registrations wait for rate-limiter tokens.
        self._run_now(session.node, LEASE, state.generation)
        self._run_now(session.node, REGISTER, state.generation)
        self.events.node_event(
            session.node,
            "Normal",
            "EdgeConnected",
            f"Edge agent connected over {session.transport}",
        )

    def disconnected(self, session: NodeSession, was_current: bool) -> None:
        """Registry hook: stop renewing and start the grace period (only if no newer
        session took over)."""
        if not was_current:
            return
        state = self._states.get(session.node)
        if state is None:
            return
        state.generation += 1
        state.session = None
        state.registered = False
        self._schedule(
            time.monotonic() + self.settings.not_ready_grace,
            session.node,
            UNKNOWN,
            state.generation,
        )
        type_, message = disconnect_event(session.link.close_event)
        self.events.node_event(session.node, type_, "EdgeDisconnected", message)

    def watch_unseen(self, node: str) -> None:
        """A Node this hub has no session for (seen at start, or held by nobody): mark it
        Unknown after the grace period unless a session arrives or its Lease is fresh."""
        if node in self._states:
            return
        state = self._states[node] = _State()
        state.generation = 1
        self._schedule(time.monotonic() + self.settings.not_ready_grace, node, UNKNOWN, 1)

    def forget(self, node: str) -> None:
        """The Node was deleted: drop everything pending for it."""
        self._states.pop(node, None)

    async def renew_stale(self, older_than: float) -> int:
        """Renew now the Lease of every connected node this replica serves whose last
        renewal is more than ``older_than`` seconds old (a stopping hub, so that no node
        passes the node-monitor grace while its agent waits out the shutdown spread:
        :func:`cloudhub.ha.renew_before_stop`). At most ``nodes.writers`` writes at once.

        Returns:
            How many Leases were renewed. API errors are logged, not raised (the node then
            keeps the age it had).
        """
        now = time.monotonic()
        due = [
            (node, state)
            for node, state in self._states.items()
            if state.session is not None and now - state.renewed_at > older_than
        ]
        gate = asyncio.Semaphore(self.settings.writers)
        renewed = 0

        async def renew(node: str, state: _State) -> None:
            nonlocal renewed
            async with gate:
                if not self._holds(node):
                    return
                try:
                    await self._renew_lease(node, state)
                except KubeAPIError as exc:
                    log.warning("Lease renewal before stop failed: %s", exc, extra={"node": node})
                    return
                renewed += 1

        await asyncio.gather(*(renew(node, state) for node, state in due))
        return renewed

    # -- nodes another replica serves ------------------------------------------------------

    def _moved_to(self, owner: str) -> bool:
        """Whether ``owner`` is another replica, alive by its replica Lease."""
        assert self.ownership is not None
        return (
            bool(owner)
            and owner != self.ownership.identity
            and self.ownership.replicas.alive(owner)
        )

    def _park(self, node: str, owner: str, generation: int) -> None:
        """``node`` is served by live replica ``owner``: that replica marks it Unknown if it
        goes silent there; this one looks again only once ``owner`` dies."""
        self._moved.setdefault(owner, {})[node] = generation
        if owner not in self._owner_timers:
            self._arm_owner(owner)

    def _arm_owner(self, owner: str) -> None:
        assert self.ownership is not None
        # When its replica Lease would expire unless renewed (the watch moves that on).
        delay = self.ownership.replicas.seconds_left(owner) + 0.05
        loop = asyncio.get_running_loop()
        self._owner_timers[owner] = loop.call_later(delay, self._check_owner, owner)

    def _check_owner(self, owner: str) -> None:
        assert self.ownership is not None
        self._owner_timers.pop(owner, None)
        nodes = self._moved.get(owner)
        if not nodes:
            self._moved.pop(owner, None)
            return
        if self.ownership.replicas.alive(owner):
            self._arm_owner(owner)
            return
        del self._moved[owner]
        for node, generation in nodes.items():
            if self._current(node, generation) is not None:
                self._run_now(node, UNKNOWN, generation)  # one read of its Lease: who now?

    def _owner_gone(self, owner: str) -> None:
        """``ReplicaLeases.on_dead`` hook: replica ``owner``'s Lease was deleted."""
        timer = self._owner_timers.pop(owner, None)
        if timer is not None:
            timer.cancel()
        if owner in self._moved:
            self._check_owner(owner)

    def conditions_changed(self, node: str) -> None:
        """A condition provider's answer for ``node`` changed: write the Node's status
        soon (rate-limited like every Node write). Nothing happens for a node with no
        registered session: its registration writes the providers' conditions anyway."""
        state = self._states.get(node)
        if state is None or state.session is None or not state.registered:
            return
        self._run_now(node, CONDITIONS, state.generation)

    def _extra_conditions(self, node: str, now: float) -> list[dict]:
        extra: list[dict] = []
        for provider in self.condition_providers:
            try:
                extra.extend(provider(node, now))
            except Exception:
                log.exception("condition provider failed", extra={"node": node})
        return extra

    # -- scheduling -----------------------------------------------------------------------

    def _schedule(self, at: float, node: str, job: str, generation: int) -> None:
        heap = self._heap
        first = heap[0][0] if heap else None
        heapq.heappush(heap, (at, next(self._tie), node, job, generation))
        if first is None or at < first:
            self._timer_wake.set()

    def _run_now(self, node: str, job: str, generation: int) -> None:
        if job == LEASE:
            self._lease_jobs.append((node, job, generation))
            self._lease_wake.set()
        else:
            self._node_jobs.append((node, job, generation))
            self._node_wake.set()

    def _current(self, node: str, generation: int) -> _State | None:
        state = self._states.get(node)
        if state is None or state.generation != generation:
            return None
        return state

    async def run(self) -> None:
        """The timer and the workers, until cancelled."""
        scope = self._scope
        writers = self.settings.writers
        for i in range(writers):
            scope.create_task(self._worker(self._lease_jobs, self._lease_wake), name=f"lease-{i}")
            scope.create_task(self._worker(self._node_jobs, self._node_wake), name=f"node-{i}")
        try:
            await self._timer()
        finally:
            for timer in self._owner_timers.values():
                timer.cancel()
            self._owner_timers.clear()
            await scope.aclose()

    async def _timer(self) -> None:
        # Woken by a loop timer rather than asyncio.wait_for(), which on Python < 3.12 can
        # swallow a cancellation that arrives as its inner wait completes (gh-86296):
        # this loop must always stop when the hub closes.
        heap = self._heap
        loop = asyncio.get_running_loop()
        wake = self._timer_wake
        handle: asyncio.TimerHandle | None = None
        try:
            while True:
                now = time.monotonic()
                while heap and heap[0][0] <= now:
                    _, _, node, job, generation = heapq.heappop(heap)
                    if self._current(node, generation) is not None:
                        self._run_now(node, job, generation)
                wake.clear()
                if heap:
                    handle = loop.call_later(heap[0][0] - now, wake.set)
                await wake.wait()
                if handle is not None:
                    handle.cancel()
                    handle = None
        finally:
            if handle is not None:
                handle.cancel()

    async def _worker(self, jobs: deque[tuple[str, str, int]], wake: asyncio.Event) -> None:
        while True:
            while not jobs:
                wake.clear()
                await wake.wait()
            node, job, generation = jobs.popleft()
            state = self._current(node, generation)
            if state is None:
                continue
            try:
                await self._do(job, node, state, generation)
            except KubeAPIError as exc:
                self._failed(job, node, state, generation, exc)
            except Exception:
                log.exception("node %s job failed", job, extra={"node": node})
                self._failed(job, node, state, generation, None)

    async def _do(self, job: str, node: str, state: _State, generation: int) -> None:
        s = self.settings
        if job != UNKNOWN and not self._holds(node):
            return  # another replica owns it now: its session here is being closed
        if job == REGISTER:
            next_heartbeat = await self._register(node, state)
            if next_heartbeat is not None and self._current(node, generation) is state:
                state.registered = True
                state.failures = 0
                self._schedule(time.monotonic() + next_heartbeat, node, HEARTBEAT, generation)
        elif job == LEASE:
            renewed = await self._renew_lease(node, state)
            state.failures = 0
            # A new node's Lease waits for its Node (the owner); retry soon meanwhile.
            if renewed:
                delay = s.lease_interval * (1 + s.lease_jitter * (2 * self._jitter() - 1))
            else:
                delay = min(0.2, s.lease_interval)
            self._schedule(time.monotonic() + delay, node, LEASE, generation)
        elif job == HEARTBEAT:
            await self._heartbeat(node, state)
            self._schedule(time.monotonic() + s.status_report_interval, node, HEARTBEAT, generation)
        elif job == CONDITIONS:
            await self._heartbeat(node, state)
        elif job == UNKNOWN:
            await self._mark_unknown(node, state, generation)

    def _failed(
        self, job: str, node: str, state: _State, generation: int, exc: KubeAPIError | None
    ) -> None:
        state.failures += 1
        what = {
            REGISTER: "node",
            LEASE: "lease",
            HEARTBEAT: "heartbeat",
            CONDITIONS: "heartbeat",
            UNKNOWN: "unknown",
        }[job]
        self.metrics.node_writes.labels(what, "retried").inc()
        # kubelet retries its lease with back-off up to 7 s; never beyond the interval.
        delay = min(0.2 * 2 ** min(state.failures, 8), self.settings.lease_interval)
        log.warning(
            "%s write failed (%s); retrying in %.1f s", what, exc, delay, extra={"node": node}
        )
        self._schedule(time.monotonic() + delay, node, job, generation)

    # -- the writes ---------------------------------------------------------------------------

    async def _register(self, node: str, state: _State) -> float | None:
        """Create or update the Node; returns seconds until its next heartbeat, or
        ``None`` if it cannot be registered."""
        session = state.session
        if session is None or session.link.hello is None:
            return None
        hello = session.link.hello
        facts = model.node_facts(hello)
        if facts.problems:
            session.log.warning("node info: %s", "; ".join(facts.problems))
        now = self._clock()
        transport = session.transport
        interval = self.settings.status_report_interval
        cached = self._cached_node(node)
        if model.up_to_date(cached, facts, transport, now, interval):
            # Nothing to write: refresh the heartbeat when it would have gone stale.
            assert cached is not None
            state.uid = (cached.get("metadata") or {}).get("uid") or ""
            self.metrics.node_writes.labels("node", "unchanged").inc()
            beat = _ready_heartbeat(cached) or now
            return max(0.0, beat + interval - now)
        await self.bucket.acquire()
        try:
            existing = await self.client.get(NODES, node)
        except KubeNotFound:
            existing = None
        if existing is None:
            try:
                await self.bucket.acquire()
                created = await self.client.create(
                    NODES,
                    model.build_node(
                        node,
                        facts,
                        hello,
                        transport,
                        now,
                        self._extra_conditions(node, now),
                        self.kubelet_endpoint,
                    ),
                )
            except KubeConflict:  # created meanwhile (another replica, a retry): update it
                existing = await self.client.get(NODES, node)
            except KubeAPIError as exc:
                if exc.retryable:
                    raise
                return self._unregistrable(session, f"the API refused the Node: {exc}")
            else:
                state.uid = (created.get("metadata") or {}).get("uid") or ""
                self.metrics.node_writes.labels("node", "created").inc()
                session.log.info("registered Node %s", node)
                return interval
        if not model.is_edge_node(existing):
            return self._unregistrable(
                session,
                f"Node {node} exists and is not an edge node (no {model.EDGE_ROLE_LABEL} label)",
            )
        try:
            await self._update_node(node, facts, hello, transport, now)
        except KubeNotFound:  # deleted between the read and the write: next attempt creates
            raise KubeAPIError(503, "", "the Node vanished during registration") from None
        except KubeAPIError as exc:
            # Conflicts past update_with_retry's attempts mean other writers of the Node
            # (another session of it, the node controller, a user): retried with back-off.
            if exc.retryable or isinstance(exc, KubeConflict):
                raise
            return self._unregistrable(session, f"the API refused the Node update: {exc}")
        state.uid = (existing.get("metadata") or {}).get("uid") or ""
        self.metrics.node_writes.labels("node", "updated").inc()
        return interval

    async def _update_node(self, node, facts, hello, transport, now) -> None:
        def metadata(current: dict) -> dict | None:
            return model.node_metadata(current, facts, hello, transport)

        extra = self._extra_conditions(node, now)

        def status(current: dict) -> dict:
            return {
                **current,
                "status": model.node_status(
                    current.get("status") or {},
                    facts,
                    transport,
                    now,
                    extra,
                    kubelet=self.kubelet_endpoint,
                ),
            }

        held = partial(self._holds, node)
        await self.bucket.acquire()
        await update_with_retry(self.client, NODES, node, None, metadata, fence=held)
        await self.bucket.acquire()
        await update_with_retry(
            self.client, NODES, node, None, status, subresource="status", fence=held
        )

    def _holds(self, node: str) -> bool:
        """Whether this replica may write for ``node`` now (always, without HA): the fence
        of its writes, asked before each attempt, after the rate limit's wait."""
        return self.ownership is None or self.ownership.holds(node)

    def _unregistrable(self, session: NodeSession, reason: str) -> None:
        session.log.error("cannot register the node: %s", reason)
        self.metrics.node_writes.labels("node", "refused").inc()
        if self.registry.get(session.node) is session:
            self.registry.close_node(session.node, CloseCode.UNAUTHORIZED, reason)
        return None

    async def _renew_lease(self, node: str, state: _State) -> bool:
        """Renew (or create) the node's Lease; ``False`` if it cannot be created yet
        because the Node does not exist yet (its uid names the Lease's owner)."""
        s = self.settings
        if self.ownership is not None:
            uid = state.uid or ((self._cached_node(node) or {}).get("metadata") or {}).get("uid")
            started = time.monotonic()
            if await self.ownership.renew(node, uid or ""):
                state.renewed_at = started
                self.metrics.node_writes.labels("lease", "renewed").inc()
            return True
        now = self._clock()
        started = time.monotonic()
        patch = {
            "spec": {
                "holderIdentity": node,
                "leaseDurationSeconds": s.lease_duration,
                "renewTime": micro_time(now),
            }
        }
        try:
            await self.client.patch(LEASES, node, patch, s.lease_namespace)
        except KubeNotFound:
            uid = state.uid or ((self._cached_node(node) or {}).get("metadata") or {}).get("uid")
            if not uid:
                return False
            lease = model.build_lease(
                node, s.lease_namespace, node_uid=uid, duration=s.lease_duration, now=now
            )
            try:
                await self.client.create(LEASES, lease)
            except KubeConflict:  # created meanwhile: renew it
                await self.client.patch(LEASES, node, patch, s.lease_namespace)
            state.renewed_at = started
            self.metrics.node_writes.labels("lease", "created").inc()
            return True
        state.renewed_at = started
        self.metrics.node_writes.labels("lease", "renewed").inc()
        return True

    async def _heartbeat(self, node: str, state: _State) -> None:
        session = state.session
        if session is None:
            return
        now = self._clock()
        transport = session.transport
        extra = self._extra_conditions(node, now)

        def refresh(current: dict) -> dict:
            status = current.get("status") or {}
            conditions = model.set_conditions(
                status.get("conditions"), model.ready_conditions(now, transport, extra)
            )
            return {**current, "status": {**status, "conditions": conditions}}

        await self.bucket.acquire()
        try:
            written = await update_with_retry(
                self.client,
                NODES,
                node,
                None,
                refresh,
                subresource="status",
                fence=partial(self._holds, node),
            )
        except KubeNotFound:
            return  # deleted: the nodes informer closes the session
        if written is None:  # lost meanwhile (taken over, or this replica fenced)
            self.metrics.node_writes.labels("heartbeat", "fenced").inc()
            return
        self.metrics.node_writes.labels("heartbeat", "written").inc()

    async def _mark_unknown(self, node: str, state: _State, generation: int) -> None:
        s = self.settings
        if state.session is not None:
            return
        # Another hub replica may hold the node now: its Lease is then fresh.
        try:
            lease = await self.client.get(LEASES, node, s.lease_namespace)
        except KubeNotFound:
            lease = None
        renewed = parse_time(((lease or {}).get("spec") or {}).get("renewTime"))
        now = self._clock()
        fresh = renewed is not None and now - renewed < s.not_ready_grace
        owner = owner_of(lease)
        if fresh and self.ownership is not None and self._moved_to(owner):
            self._park(node, owner, generation)
            return
        if fresh:
            assert renewed is not None
            self._schedule(
                time.monotonic() + s.not_ready_grace - (now - renewed) + 0.05,
                node,
                UNKNOWN,
                generation,
            )
            return

        def unknown(current: dict) -> dict | None:
            status = current.get("status") or {}
            conditions = model.unknown_conditions(status.get("conditions"), now)
            if conditions == status.get("conditions"):
                return None
            return {**current, "status": {**status, "conditions": conditions}}

        await self.bucket.acquire()
        try:
            written = await update_with_retry(
                self.client, NODES, node, None, unknown, subresource="status"
            )
        except KubeNotFound:
            written = None
        if self._current(node, generation) is state:
            del self._states[node]
        if written is not None:
            self.metrics.node_writes.labels("unknown", "written").inc()
            log.info(
                "no session for %.0f s: Ready=Unknown", s.not_ready_grace, extra={"node": node}
            )


def _ready_heartbeat(node: dict) -> float | None:
    for condition in (node.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "Ready":
            return parse_time(condition.get("lastHeartbeatTime"))
    return None
