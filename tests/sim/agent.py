"""A simulated edge agent: the real protocol over real QUIC or WebSocket, no container engine.

It does what the hub needs an agent to do, in memory: keep an inventory of the objects
the hub sends (uid -> resourceVersion and object), say hello with it, report a Running
status for every pod it receives, report ``pod_deleted`` for a pod the hub marks
terminating, keep every numbered message it sent until the hub acknowledges it, and resend
those after a reconnect (with the next sequence number kept across sessions). It
reconnects with back-off until stopped.

Tests observe it through its counters and :meth:`SimAgent.wait_for`; benchmarks read the
delivery latencies of pods annotated with :data:`CREATED_AT` (seconds since the epoch,
set when the pod was created in the API).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import random
import time
from collections.abc import Callable, Iterator
from typing import Any

from protocol.backoff import backoff, retry_delay
from protocol.config import SessionConfig
from protocol.errors import CloseCode, ConnectionClosed, StateError, TransportError
from protocol.events import Acked, Closed, MessageReceived, PeerError
from protocol.messages import (
    PROTOCOL_VERSION,
    Error,
    Hello,
    Message,
    ObjectDelete,
    ObjectRef,
    ObjectUpsert,
    PodDeleted,
    PodStatus,
    SyncDone,
    TwinDesired,
)
from protocol.transport import Link, TLSCredentials, connect_quic, connect_websocket

__all__ = ["CREATED_AT", "SimAgent", "running_status"]

log = logging.getLogger(__name__)

CREATED_AT = "sim.edgefleet.io/created-at"
"""Pod annotation: creation time (s since the epoch) for delivery-latency measurement."""


def running_status(pod: dict, host_ip: str, now: float, *, restarts: int = 0) -> dict:
    """The status a healthy node reports for a pod it runs (containers restarted
    ``restarts`` times)."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))
    containers = (pod.get("spec") or {}).get("containers") or []
    uid = (pod.get("metadata") or {}).get("uid", "")
    return {
        "phase": "Running",
        "hostIP": host_ip,
        "podIP": host_ip,
        "startTime": stamp,
        "conditions": [
            {"type": "Initialized", "status": "True", "lastTransitionTime": stamp},
            {"type": "Ready", "status": "True", "lastTransitionTime": stamp},
            {"type": "ContainersReady", "status": "True", "lastTransitionTime": stamp},
        ],
        "containerStatuses": [
            {
                "name": c.get("name", "c"),
                "ready": True,
                "started": True,
                "restartCount": restarts,
                "image": c.get("image", ""),
                "imageID": "sim://" + str(c.get("image", "")),
                "containerID": f"sim://{uid}/{c.get('name', 'c')}",
                "state": {"running": {"startedAt": stamp}},
            }
            for c in containers
        ],
    }


class SimAgent:
    """One simulated node.

    Args:
        name: the node name (must match the certificate).
        credentials: the node's TLS credentials (hub CA + node certificate).
        host / quic_port / websocket_port: where the hub listens.
        transport: ``"quic"`` or ``"websocket"``: always dial this one.
        node_info: the hello's ``node_info`` (labels, capacity, nodeInfo, addresses).
        auto_status: report Running for every pod received (once per resourceVersion).
        auto_delete: answer a terminating pod with ``pod_deleted``.
        report_on_connect: at every new session, report a fresh status for every pod held,
            as if its containers restarted while offline (``restartCount`` = sessions - 1):
            what makes a reconnecting fleet a status storm.
        config: session settings.
        backoff_base / backoff_cap: reconnect delays, seconds (full jitter).
        connect_timeout: seconds per dial.
        host_ip: reported as the pods' hostIP.
        agent_version: the hello's agent version (an upgrade test changes it).
    """

    def __init__(
        self,
        name: str,
        credentials: TLSCredentials,
        *,
        host: str = "127.0.0.1",
        quic_port: int = 0,
        websocket_port: int = 0,
        transport: str = "websocket",
        node_info: dict[str, Any] | None = None,
        auto_status: bool = True,
        auto_delete: bool = True,
        report_on_connect: bool = False,
        config: SessionConfig | None = None,
        backoff_base: float = 0.05,
        backoff_cap: float = 1.0,
        connect_timeout: float = 10.0,
        host_ip: str = "10.0.0.1",
        agent_version: str = "sim-0.1",
    ) -> None:
        if transport not in ("quic", "websocket"):
            raise ValueError(f"transport must be quic or websocket, got {transport!r}")
        self.name = name
        self.credentials = credentials
        self.host = host
        self.quic_port = quic_port
        self.websocket_port = websocket_port
        self.transport = transport
        self.node_info = node_info if node_info is not None else default_node_info(name)
        self.auto_status = auto_status
        self.auto_delete = auto_delete
        self.report_on_connect = report_on_connect
        self.config = config or SessionConfig()
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.connect_timeout = connect_timeout
        self.host_ip = host_ip
        self.agent_version = agent_version
        # hub messages of kinds this simulation does not act on (upgrade orders...), in order
        self.others: list[Message] = []
        # what the edge holds: uid -> (ref, resourceVersion, object)
        self.store: dict[str, tuple[ObjectRef, str, dict]] = {}
        # numbered messages sent and not acknowledged: seq -> message (resent on reconnect)
        self.unacked: dict[int, Message] = {}
        self.next_seq = 1
        self._acked_up_to = 0
        # observations
        self.upserts: collections.Counter[tuple[str, str]] = collections.Counter()
        self.deletes: collections.Counter[str] = collections.Counter()
        self.sync_done: list[int] = []
        self.errors: list[Error] = []
        self.latencies: list[float] = []
        self._timed: set[str] = set()
        self.sessions = 0
        self.refusals: list[str] = []
        self.closes: list[Closed] = []
        self.link: Link | None = None
        self.changed = asyncio.Condition()
        self._waiting: dict[Any, Message] = {}  # queued while offline (latest wins)
        self._flush: asyncio.Task[None] | None = None
        self._reported: dict[str, float] = {}  # pod uid -> when first reported (its start)
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._synced_in_session = False
        self._cut_on: Callable[[Message], bool] | None = None
        # device twins: uid -> the newest twin_desired received (what a mapper would see),
        # and (uid, version, wall-clock arrival) of every one received, in order
        self.desired: dict[str, TwinDesired] = {}
        self.desired_log: list[tuple[str, int, float]] = []

    # -- observation ----------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        """A session is open."""
        return self.link is not None and not self.link.closed

    @property
    def synced(self) -> bool:
        """The current session's ``sync_done`` has arrived."""
        return self.connected and self._synced_in_session

    @property
    def all_acked(self) -> bool:
        """Everything the agent wanted to send was sent and acknowledged."""
        return not self.unacked and not self._waiting

    def holds(self, kind: str, namespace: str, name: str) -> dict | None:
        """The stored object of that kind and name, if any."""
        for ref, _, obj in self.store.values():
            if ref.kind == kind and ref.namespace == namespace and ref.name == name:
                return obj
        return None

    def inventory(self) -> dict[str, str]:
        """uid -> resourceVersion of everything held (what the hello carries)."""
        return {uid: rv for uid, (_, rv, _) in self.store.items()}

    async def _notify(self) -> None:
        async with self.changed:
            self.changed.notify_all()

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 20.0) -> None:
        """Wait until ``predicate()`` holds (checked after every change).

        Raises:
            TimeoutError: not within ``timeout`` seconds.
        """
        async with self.changed:
            await asyncio.wait_for(self.changed.wait_for(predicate), timeout)

    # -- life -----------------------------------------------------------------------------

    def start(self) -> None:
        """Start connecting (and reconnecting) in a task this agent owns."""
        self._stop.clear()
        self._task = asyncio.get_running_loop().create_task(self.run(), name=f"sim-{self.name}")

    async def stop(self) -> None:
        """Close the session and stop reconnecting (the inventory and outbox are kept, as
        an agent's store survives a restart)."""
        self._stop.set()
        link = self.link
        if link is not None:
            await link.close(CloseCode.GOING_AWAY, "agent stopping")
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    def cut(self) -> None:
        """Drop the connection without a protocol close, as a lost network would; the agent
        reconnects after its back-off."""
        link = self.link
        if link is not None:
            link.connection_lost("cut by the test")

    def cut_on(self, predicate: Callable[[Message], bool]) -> None:
        """Cut the link when the next message matching ``predicate`` arrives, before it is
        applied: that message was in flight when the link went down."""
        self._cut_on = predicate

    def abandon(self) -> None:
        """Stop reconnecting but leave the current link as it is, like an agent process
        that froze: the hub only learns of it when something supersedes or times it out."""
        self._stop.set()

    def restarted(self, **kwargs: Any) -> SimAgent:
        """A new agent for the same node with this one's persisted state (store, outbox,
        next seq), as the same machine after a restart."""
        agent = SimAgent(
            self.name,
            self.credentials,
            host=self.host,
            quic_port=self.quic_port,
            websocket_port=self.websocket_port,
            transport=kwargs.pop("transport", self.transport),
            node_info=self.node_info,
            config=self.config,
            backoff_base=self.backoff_base,
            backoff_cap=self.backoff_cap,
            **kwargs,
        )
        agent.store = dict(self.store)
        agent.unacked = dict(self.unacked)
        agent.next_seq = self.next_seq
        return agent

    async def run(self) -> None:
        """Dial, serve the session, back off, again; until :meth:`stop`."""
        delays = backoff(uniform=random.uniform, base=self.backoff_base, cap=self.backoff_cap)
        try:
            while not self._stop.is_set():
                try:
                    link = await self.dial()
                except TransportError as exc:
                    self.refusals.append(str(exc))
                    log.debug("%s: dial failed: %s", self.name, exc)
                    await self._pause(self._delay(delays, exc))
                    continue
                if self._stop.is_set():
                    # stop() ran while this dial was in flight and saw no link to close
                    await link.close(CloseCode.GOING_AWAY, "agent stopping")
                    break
                delays = backoff(
                    uniform=random.uniform, base=self.backoff_base, cap=self.backoff_cap
                )
                await self._serve(link)
                if not self._stop.is_set():
                    await self._pause(self._delay(delays, link.close_event))
        finally:
            self.link = None
            await self._stop_flush()

    def _delay(self, delays: Iterator[float], answer: Any) -> float:
        """As the agent's dialer: an ``OVERLOADED``/``GOING_AWAY`` ``retry_after`` is the
        delay itself (the hub jittered it); otherwise the back-off draw, floored by it."""
        code, retry_after = getattr(answer, "code", None), getattr(answer, "retry_after", None)
        if retry_after is not None and code in (CloseCode.OVERLOADED, CloseCode.GOING_AWAY):
            return min(retry_after, self.backoff_cap)
        return retry_delay(next(delays), retry_after)

    async def _pause(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self._stop.wait(), seconds)
        except asyncio.TimeoutError:
            pass

    async def dial(self) -> Link:
        """Dial the hub once with the current inventory and outbox; return the open link.

        Raises:
            protocol.transport.TransportError: refused, unreachable or rejected.
        """
        hello = Hello(
            min_version=PROTOCOL_VERSION,
            max_version=PROTOCOL_VERSION,
            node_name=self.name,
            agent_version=self.agent_version,
            capabilities=(),
            inventory=self.inventory(),
            node_info=self.node_info,
        )
        connect = connect_quic if self.transport == "quic" else connect_websocket
        port = self.quic_port if self.transport == "quic" else self.websocket_port
        return await connect(
            self.host,
            port,
            credentials=self.credentials,
            hello=hello,
            pending=sorted(self.unacked.items()),
            next_seq=self.next_seq,
            config=self.config,
            timeout=self.connect_timeout,
        )

    async def _serve(self, link: Link) -> None:
        self.link = link
        self.sessions += 1
        self._synced_in_session = False
        # the session has resent what the welcome did not cover; it may have moved next_seq
        self.next_seq = link.session.next_seq
        if self.report_on_connect:
            for ref, _, obj in list(self.store.values()):
                if ref.kind == "Pod" and not (obj.get("metadata") or {}).get("deletionTimestamp"):
                    self._report(ref, obj)
        await self._notify()
        self._kick()
        try:
            async for event in link:
                if event.__class__ is MessageReceived:
                    self._on_message(event.message)
                elif isinstance(event, Acked):
                    self._acked_up_to = max(self._acked_up_to, event.up_to)
                    for seq in [s for s in self.unacked if s <= event.up_to]:
                        del self.unacked[seq]
                    self._kick()
                elif isinstance(event, PeerError):
                    self.errors.append(event.error)
                elif isinstance(event, Closed):
                    self.closes.append(event)
                await self._notify()
        finally:
            await self._stop_flush()
            self.link = None
            await self._notify()

    # -- receiving ------------------------------------------------------------------------

    def _on_message(self, message: Message) -> None:
        if self._cut_on is not None and self._cut_on(message):
            self._cut_on = None
            self.cut()
            return
        if isinstance(message, ObjectUpsert):
            ref = message.ref
            self.store[ref.uid] = (ref, message.resource_version, message.object)
            self.upserts[ref.uid, message.resource_version] += 1
            annotations = (message.object.get("metadata") or {}).get("annotations") or {}
            created = annotations.get(CREATED_AT)
            if created is not None and ref.uid not in self._timed:  # first arrival only
                self._timed.add(ref.uid)
                try:
                    self.latencies.append(time.time() - float(created))
                except ValueError:
                    pass
            if ref.kind == "Pod":
                self._on_pod(ref, message.resource_version, message.object)
        elif isinstance(message, ObjectDelete):
            self.store.pop(message.ref.uid, None)
            self._reported.pop(message.ref.uid, None)
            self.deletes[message.ref.uid] += 1
        elif isinstance(message, SyncDone):
            self.sync_done.append(message.inventory_size)
            self._synced_in_session = True
        elif isinstance(message, Error):
            self.errors.append(message)
        elif isinstance(message, TwinDesired):
            uid = message.ref.uid
            self.desired_log.append((uid, message.version, time.time()))
            held = self.desired.get(uid)
            if uid in self.store and (held is None or message.version > held.version):
                self.desired[uid] = message  # as the edge does: newer versions of known devices
        else:
            self.others.append(message)

    def _on_pod(self, ref: ObjectRef, rv: str, pod: dict) -> None:
        terminating = bool((pod.get("metadata") or {}).get("deletionTimestamp"))
        if terminating:
            if self.auto_delete:
                self.send(PodDeleted(ref=ref))
            return
        # Report once per pod, as an agent reports when the status changes, not when the
        # pod's resourceVersion does (every status write changes that).
        if self.auto_status and ref.uid not in self._reported:
            self._reported[ref.uid] = time.time()
            self._report(ref, pod)

    def _report(self, ref: ObjectRef, pod: dict) -> None:
        started = self._reported.setdefault(ref.uid, time.time())
        restarts = self.sessions - 1 if self.report_on_connect else 0
        status = running_status(pod, self.host_ip, started, restarts=restarts)
        self.send(PodStatus(ref=ref, status=status, observed_at=time.time()))

    # -- sending --------------------------------------------------------------------------

    def send(self, message: Message) -> None:
        """Queue an edge message (latest wins per coalescing key while not yet sent)."""
        key = message.coalesce_key()
        if key is None:
            key = object()
        self._waiting.pop(key, None)
        self._waiting[key] = message
        self._kick()

    def _kick(self) -> None:
        if self._flush is None and self._waiting and self.connected:
            self._flush = asyncio.get_running_loop().create_task(
                self._flush_waiting(), name=f"sim-send-{self.name}"
            )

    async def _flush_waiting(self) -> None:
        try:
            while self._waiting and self.connected:
                key = next(iter(self._waiting))
                message = self._waiting.pop(key)
                link = self.link
                assert link is not None
                try:
                    seq = await link.send(message)
                except (ConnectionClosed, StateError):  # closed or closing
                    self._waiting[key] = message  # sent next session
                    break
                if seq is not None:
                    self.next_seq = seq + 1
                    if seq > self._acked_up_to:  # the ack may have been read already
                        self.unacked[seq] = message
        finally:
            self._flush = None

    async def _stop_flush(self) -> None:
        task, self._flush = self._flush, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


def default_node_info(name: str) -> dict[str, Any]:
    """A Raspberry-Pi-like node."""
    return {
        "labels": {"edgefleet.io/site": "sim"},
        "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110", "ephemeral-storage": "64Gi"},
        "allocatable": {"cpu": "3800m", "memory": "7Gi", "pods": "110"},
        "nodeInfo": {
            "operatingSystem": "linux",
            "architecture": "arm64",
            "kernelVersion": "6.1.0-sim",
            "osImage": "Simulated Linux",
            "containerRuntimeVersion": "sim://1.0",
        },
        "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
    }
