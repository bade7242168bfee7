"""Ingest of ``metrics_batch`` bodies: de-duplication and the latest samples per node.

The hub keeps, per edge node, what its latest sample says (gauges), the latest rate of
each counter (increment and window), hub-side running totals of the counters (for the
``_total`` series of the exposition), and the same per container. History stays on the
edge until delivered; after ingest only the latest values are kept (a consumer that wants
every sample, e.g. a remote-write exporter, takes ``IngestResult.batch``).

De-duplication: a batch is identified by ``(stream id, batch seq)``. Batches of a stream
arrive in order (the session is ordered and the agent resends oldest first), so the hub
keeps the highest seq accepted per stream and drops anything at or below it. A node has
one stream per agent store; a reinstalled agent starts a new one. The state lives in this
process: after a hub restart a resent batch is accepted once more, which only repeats
counter increments into totals that restarted from zero anyway (a counter reset, which
Prometheus handles).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from cloudhub.metrics.errors import BatchRejected
from protocol.metrics_codec import (
    Batch,
    Metric,
    MetricKind,
    MetricsBodyError,
    SeriesKey,
    decode_batch,
    from_samples_field,
    metric_kind,
)

__all__ = ["ContainerState", "EdgeMetricsStore", "IngestResult", "NodeState", "Rate"]

MAX_STREAMS_PER_NODE = 4

MAX_T_MS = 253_402_300_799_999
"""9999-12-31T23:59:59.999Z in ms since the epoch: the last time RFC 3339 (and so the
metrics API's ``timestamp``) can carry."""


class Rate(NamedTuple):
    """A counter's latest increment and the window it covers.

    Attributes:
        increment: in the metric's unit (ms of CPU, bytes).
        window_ms: the window (ms); always > 0.
        t_ms: end of the window (ms since the epoch).
    """

    increment: int
    window_ms: int
    t_ms: int

    def per_second(self) -> float:
        """Return the increment per second of window."""
        return self.increment * 1000 / self.window_ms


@dataclass(slots=True)
class ContainerState:
    """Latest figures of one container.

    Attributes:
        t_ms: time of the latest sample that had the container.
        memory_working_set_kib: latest working set (KiB), or ``None``.
        cpu: latest CPU rate (ms of CPU per window), or ``None`` before the first window.
        cpu_total_ms: CPU time summed over the increments the hub received (ms).
    """

    t_ms: int
    memory_working_set_kib: int | None = None
    cpu: Rate | None = None
    cpu_total_ms: int = 0


@dataclass(slots=True)
class NodeState:
    """What the hub knows about one node's metrics.

    Attributes:
        node: the node's name.
        t_ms: time of the latest sample (ms since the epoch, the edge's clock).
        window_ms: window of the latest sample (ms).
        gauges: series key → value of every gauge in the latest sample (node series).
        rates: series key → latest :class:`Rate` of each node counter.
        totals: series key → running sum of each node counter's increments.
        containers: container key → :class:`ContainerState`, for the containers of the
            latest sample.
        received_at: hub time (s since the epoch) of the latest accepted batch.
        version: increases with every accepted batch (a cache key).
        streams: stream id → highest batch seq accepted.
        sampled_ms: the sum of the windows of every sample accepted (ms): how much of the
            node's time the hub has figures for. Down-sampling keeps it (merged windows
            add up); a sample lost or dropped on the edge leaves it short of the time
            since ``first_t_ms``.
        first_t_ms: start of the first accepted sample's window (ms since the epoch), 0
            before any.
    """

    node: str
    t_ms: int = 0
    window_ms: int = 0
    gauges: dict[SeriesKey, int] = field(default_factory=dict)
    rates: dict[SeriesKey, Rate] = field(default_factory=dict)
    totals: dict[SeriesKey, int] = field(default_factory=dict)
    containers: dict[int, ContainerState] = field(default_factory=dict)
    received_at: float = 0.0
    version: int = 0
    streams: dict[int, int] = field(default_factory=dict)
    sampled_ms: int = 0
    first_t_ms: int = 0

    def gauge(self, metric: Metric, label: str | None = None) -> int | None:
        """Return a node gauge's latest value, or ``None``."""
        return self.gauges.get((metric, label))


class IngestResult(NamedTuple):
    """What :meth:`EdgeMetricsStore.ingest` did.

    Attributes:
        accepted: False when the batch was a duplicate (acknowledge it all the same).
        batch: the decoded batch.
    """

    accepted: bool
    batch: Batch


@dataclass(slots=True)
class IngestStats:
    """Batches seen by the store since the hub started."""

    accepted: int = 0
    duplicate: int = 0
    rejected: int = 0


_CPU = int(Metric.CONTAINER_CPU_USAGE_MS)
_WS = int(Metric.CONTAINER_MEMORY_WORKING_SET_KIB)


class EdgeMetricsStore:
    """Latest metrics of every edge node, in memory."""

    def __init__(self) -> None:
        self._nodes: dict[str, NodeState] = {}
        self.stats = IngestStats()

    def ingest(self, node: str, samples: Mapping[str, object] | bytes, now: float) -> IngestResult:
        """Take one ``metrics_batch`` from ``node``.

        Args:
            node: the node's name *as its certificate says*, never the message's own
                ``node_name`` field (a node may only report for itself).
            samples: the message's ``samples`` field, or the encoded body inside it.
            now: hub wall-clock time (s since the epoch).

        Returns:
            Whether the batch was new, and the decoded batch.

        Raises:
            BatchRejected: the body does not decode; acknowledge it anyway and answer
                ``Error(INVALID_MESSAGE)``: a resend would fail the same way.
        """
        try:
            body = samples if isinstance(samples, bytes) else from_samples_field(samples)
            batch = decode_batch(body)
        except MetricsBodyError as exc:
            self.stats.rejected += 1
            raise BatchRejected(node, str(exc)) from exc
        latest = max(sample.t_ms for sample in batch.samples)
        if latest > MAX_T_MS:
            self.stats.rejected += 1
            raise BatchRejected(
                node,
                f"sample time {latest} ms is past the year 9999 "
                "(no Kubernetes timestamp can show it)",
            )
        state = self._nodes.get(node)
        if state is None:
            state = self._nodes[node] = NodeState(node)
        highest = state.streams.get(batch.stream_id, 0)
        if batch.batch_seq <= highest:
            self.stats.duplicate += 1
            return IngestResult(False, batch)
        state.streams.pop(batch.stream_id, None)
        state.streams[batch.stream_id] = batch.batch_seq
        while len(state.streams) > MAX_STREAMS_PER_NODE:
            del state.streams[next(iter(state.streams))]  # least recently used
        _apply(state, batch)
        state.received_at = now
        state.version += 1
        self.stats.accepted += 1
        return IngestResult(True, batch)

    def node(self, name: str) -> NodeState | None:
        """Return a node's state, or ``None`` if it never sent metrics."""
        return self._nodes.get(name)

    def nodes(self) -> Iterator[NodeState]:
        """Iterate over every node's state."""
        return iter(list(self._nodes.values()))

    def forget_node(self, name: str) -> None:
        """Drop a node's metrics (its Node object was deleted)."""
        self._nodes.pop(name, None)

    def __len__(self) -> int:
        return len(self._nodes)


def _apply(state: NodeState, batch: Batch) -> None:
    containers = state.containers
    if not state.first_t_ms:
        first = batch.samples[0]
        state.first_t_ms = first.t_ms - first.window_ms
    for sample in batch.samples:
        t, window = sample.t_ms, sample.window_ms
        state.sampled_ms += window
        for key, value in sample.values.items():
            metric_id, label = key
            if isinstance(label, int):  # a container series: its label is the key
                c = containers.get(label)
                if c is None:
                    c = containers[label] = ContainerState(t)
                c.t_ms = t
                if metric_id == _WS:
                    c.memory_working_set_kib = value
                elif metric_id == _CPU and window > 0:
                    c.cpu = Rate(value, window, t)
                    c.cpu_total_ms += value
            elif metric_kind(metric_id) is MetricKind.COUNTER:
                if window > 0:
                    state.rates[key] = Rate(value, window, t)
                    state.totals[key] = state.totals.get(key, 0) + value
    last = batch.samples[-1]
    state.t_ms = last.t_ms
    state.window_ms = last.window_ms
    state.gauges = {
        key: value
        for key, value in last.values.items()
        if not isinstance(key[1], int) and metric_kind(key[0]) is MetricKind.GAUGE
    }
    ws = (Metric.NODE_MEMORY_WORKING_SET_KIB, None)
    capacity = state.gauges.get((Metric.NODE_MEMORY_CAPACITY_KIB, None))
    available = state.gauges.get((Metric.NODE_MEMORY_AVAILABLE_KIB, None))
    if ws not in state.gauges and capacity is not None and available is not None:
        state.gauges[ws] = max(capacity - available, 0)  # the agent leaves it out when derived
    present = {key[1] for key in last.values if isinstance(key[1], int)}
    for key in [k for k in containers if k not in present]:
        del containers[key]
