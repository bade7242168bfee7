"""The hub's side of day-2 streams: one :class:`~protocol.transport.streams.StreamEndpoint`
per node session, opened toward the node that runs the pod.

- The endpoint is made when a session becomes current (``registry.on_connect``) and ends
  every stream on it when the session ends (``on_disconnect``): the caller then gets
  ``node X's session ended``, not a hang.
- Only the hub opens streams: ``stream_open`` is a hub-to-edge kind, which the session
  refuses from an edge, so a node can never open a stream toward another node; a
  stream message from a node names a stream of that node's session only.
- :meth:`HubStreams.open` fails at once for a node without a session:
  ``node pi-01 is offline since 2026-12-02T06:40:00Z`` (the time its session ended, or
  the hub's start when this hub never saw it), unless, with several replicas
  (:attr:`HubStreams.relay`), another live replica serves the node: the stream is then
  relayed to it (:mod:`cloudhub.kubelet.relay`).
- Metrics: ``edgefleet_hub_streams_open{kind}`` and
  ``edgefleet_hub_streams_total{kind,result}`` (result ``ok``, ``offline``, ``refused``,
  ``reset``, ``cancelled``, ``lost``).
"""

from __future__ import annotations

import datetime
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from prometheus_client import Counter, Gauge

from cloudhub.kubelet.errors import NodeOffline, RelayRefused, StreamUnavailable
from protocol.errors import ErrorCode, UsageError
from protocol.stream_messages import StreamClose, StreamData, StreamReset, StreamWindow
from protocol.streams import StreamMux
from protocol.transport.streams import Stream, StreamEndpoint

if TYPE_CHECKING:
    from cloudhub.bridge.dispatch import Dispatcher, Inbound
    from cloudhub.bridge.registry import SessionRegistry
    from cloudhub.bridge.session import NodeSession
    from cloudhub.kubelet.relay import RemoteStream, StreamRelay

__all__ = ["HubStreams", "NodeOffline", "StreamUnavailable"]

log = logging.getLogger(__name__)


WINDOW = 256 * 1024
"""Bytes of a node's output the hub buffers per stream by default: what one stream may
cost when its caller reads slowly. Measured (bench ``streams``): 1 MiB gave no more
throughput than 256 KiB on loopback, and made small messages beside a saturating stream
wait longer (until the transport's priority lanes land, bulk data queues ahead of them)."""


def _iso(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class HubStreams:
    """Streams toward the nodes connected to this hub.

    Args:
        registry: the hub's sessions.
        dispatcher: where edge stream messages are registered.
        metrics_registry: the hub's Prometheus registry.
        window: bytes of a node's data buffered per stream (the slow reader's bound;
            default :data:`WINDOW`).
        clock: wall clock, seconds since the epoch (offline times).
    """

    def __init__(
        self,
        registry: SessionRegistry,
        dispatcher: Dispatcher,
        metrics_registry: Any,
        *,
        window: int | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._registry = registry
        self._window = window
        self._clock = clock
        self._started = clock()
        self._endpoints: dict[str, tuple[NodeSession, StreamEndpoint]] = {}
        self.relay: StreamRelay | None = None
        """With several replicas: reaches nodes that another replica serves."""
        self._offline_since: dict[str, float] = {}
        self.open_streams = Gauge(
            "edgefleet_hub_streams_open",
            "Day-2 streams open (kubectl logs, exec, attach, port-forward)",
            ["kind"],
            registry=metrics_registry,
        )
        self.streams_total = Counter(
            "edgefleet_hub_streams",
            "Day-2 streams by kind and how they ended",
            ["kind", "result"],
            registry=metrics_registry,
        )
        registry.on_connect.append(self._connected)
        registry.on_disconnect.append(self._disconnected)
        for kind in (StreamData, StreamWindow, StreamClose, StreamReset):
            dispatcher.register(kind, self._feed)

    def endpoint(self, node: str) -> StreamEndpoint | None:
        """The node's current endpoint, if it has a session."""
        held = self._endpoints.get(node)
        return held[1] if held is not None else None

    async def reachable(self, node: str) -> bool:
        """Whether a stream to ``node`` can be opened: it has a session here, or another
        live replica serves it and published its relay address."""
        if self.endpoint(node) is not None:
            return True
        return self.relay is not None and await self.relay.locate(node) is not None

    def _connected(self, session: NodeSession) -> None:
        mux = StreamMux(hub=True, window=self._window or WINDOW)
        old = self._endpoints.get(session.node)
        if old is not None:
            old[1].session_ended(f"node {session.node} reconnected (a newer session)")
        self._endpoints[session.node] = (session, StreamEndpoint(mux, session.link.send))
        self._offline_since.pop(session.node, None)

    def _disconnected(self, session: NodeSession, was_current: bool) -> None:
        held = self._endpoints.get(session.node)
        if held is None or held[0] is not session:
            return
        del self._endpoints[session.node]
        now = self._clock()
        self._offline_since[session.node] = now
        held[1].session_ended(f"node {session.node} went offline at {_iso(now)}")

    def _feed(self, inbound: Inbound) -> None:
        held = self._endpoints.get(inbound.node)
        if held is None or held[0] is not inbound.session:
            return  # a late message of an ended session
        held[1].feed(inbound.message)

    def offline_message(self, node: str) -> str:
        """``node X is offline since <time>`` for a node without a session."""
        since = self._offline_since.get(node)
        if since is None:
            return f"node {node} is offline since {_iso(self._started)} (not connected to this hub)"
        return f"node {node} is offline since {_iso(since)}"

    async def open(
        self,
        node: str,
        operation: str,
        namespace: str,
        pod: str,
        container: str,
        params: dict[str, Any] | None = None,
        *,
        user: str = "",
        relay: bool = True,
    ) -> Stream | RemoteStream:
        """Open a stream on ``node``'s session, here or (``relay``) at the replica that
        serves it.

        Raises:
            NodeOffline: the node has no session here, and no other replica serves it.
            StreamUnavailable: too many streams on its session, or it ended meanwhile, or
                the replica serving it cannot be reached.
        """
        endpoint = self.endpoint(node)
        if endpoint is None and relay and self.relay is not None:
            where = await self.relay.locate(node)
            if where is not None:
                return await self._open_relayed(
                    where, node, operation, namespace, pod, container, params or {}, user
                )
        if endpoint is None:
            self.streams_total.labels(operation, "offline").inc()
            raise NodeOffline(self.offline_message(node))
        try:
            stream = await endpoint.open(operation, namespace, pod, container, params, user=user)
        except UsageError as exc:
            self.streams_total.labels(operation, "refused").inc()
            raise StreamUnavailable(f"node {node}: {exc}") from exc
        except ConnectionError as exc:
            self.streams_total.labels(operation, "offline").inc()
            raise NodeOffline(self.offline_message(node)) from exc
        self.open_streams.labels(operation).inc()
        log.info(
            "%s %s/%s/%s on node %s for %s (stream %d)",
            operation,
            namespace,
            pod,
            container,
            node,
            user or "(unknown user)",
            stream.id,
        )
        return stream

    async def _open_relayed(
        self,
        where: tuple[str, str],
        node: str,
        operation: str,
        namespace: str,
        pod: str,
        container: str,
        params: dict[str, Any],
        user: str,
    ) -> RemoteStream:
        assert self.relay is not None
        owner = where[0]
        try:
            stream = await self.relay.open(
                where, node, operation, namespace, pod, container, params, user
            )
        except RelayRefused as exc:
            self.streams_total.labels(operation, "offline" if exc.offline else "refused").inc()
            raise (NodeOffline if exc.offline else StreamUnavailable)(str(exc)) from exc
        except ConnectionError as exc:
            self.streams_total.labels(operation, "offline").inc()
            raise StreamUnavailable(f"node {node} is served by hub replica {owner}: {exc}") from exc
        self.open_streams.labels(operation).inc()
        log.info(
            "%s %s/%s/%s on node %s for %s (relayed to hub replica %s, stream %d there)",
            operation,
            namespace,
            pod,
            container,
            node,
            user or "(unknown user)",
            owner,
            stream.id,
        )
        return stream

    def finished(self, stream: Stream | RemoteStream, *, cancelled: bool = False) -> None:
        """Count a stream opened by :meth:`open` once its caller is done with it."""
        kind = stream.open.operation
        self.open_streams.labels(kind).dec()
        ended = stream.ended
        if cancelled or ended is None:
            result = "cancelled"
        elif ended.code is None:
            result = "ok"
        elif ended.code is ErrorCode.INTERNAL and "offline" in ended.reason:
            result = "lost"
        elif ended.code in (ErrorCode.NOT_FOUND, ErrorCode.UNSUPPORTED, ErrorCode.FORBIDDEN):
            result = "refused"
        else:
            result = "reset"
        self.streams_total.labels(kind, result).inc()
