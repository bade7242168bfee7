"""Prometheus exposition of edge metrics.

Names follow the Prometheus conventions: an ``edgefleet_`` prefix, base units in the name
(``_bytes``, ``_seconds``, ``_celsius``, ``_hertz``, ``_ratio``), ``_total`` on counters.
Node series carry a ``node`` label; container series ``node``, ``namespace``, ``pod`` and
``container``; filesystems a ``filesystem`` label (``root``: the filesystem of ``/``;
``state``: the one of the agent's state directory), thermal zones ``zone``, GPUs ``gpu``.

Counters (``*_total``) are the hub's running sums of the increments the edge reported:
they start at zero when the hub starts (a counter reset to Prometheus) and ``rate()``
over them is the edge's CPU and network rate. Gauges are the latest sample's values;
``edgefleet_node_last_sample_timestamp_seconds`` tells how old they are (an offline node
keeps its last values).

Two renderings of the same rows (:func:`node_rows`):

- :class:`EdgeMetricsExposition` writes the text format (0.0.4) itself and caches each
  node's lines until a new batch or pod change arrives for that node. This is what the hub
  serves: 10,000 nodes with five containers each are about 190,000 samples, and
  prometheus-client cannot render that in the 2 s goal on our 2-core machines (measured:
  2.3-2.8 s for the first scrape after every node reported, 1.0-1.5 s for a repeat; half
  of it is creating one ``Sample`` tuple and label dict per series, which the garbage
  collector then walks, the other half ``generate_latest`` formatting each line).
- :class:`EdgeMetricsCollector` is a prometheus-client ``Collector`` over the same rows,
  for registering edge metrics in an ordinary registry when the fleet is small.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

from prometheus_client.metrics_core import Metric as PromMetric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample as PromSample

from cloudhub.metrics.pods import PodIndex
from cloudhub.metrics.store import EdgeMetricsStore, NodeState
from protocol.metrics_codec import Metric

__all__ = [
    "FAMILIES",
    "EdgeMetricsCollector",
    "EdgeMetricsExposition",
    "Family",
    "Row",
    "node_rows",
]


@dataclass(frozen=True, slots=True)
class Family:
    """One exposed metric family.

    Attributes:
        name: the family name (without ``_total`` for counters).
        type: ``"gauge"`` or ``"counter"``.
        help: the HELP text.
        extra_label: the name of the label beyond ``node`` (``"zone"``...), or ``""``.
    """

    name: str
    type: str
    help: str
    extra_label: str = ""

    @property
    def sample_name(self) -> str:
        """The name its samples carry (``_total`` added for counters)."""
        return self.name + "_total" if self.type == "counter" else self.name


_F = Family
FAMILIES: tuple[Family, ...] = (
    _F("edgefleet_node_cpu_usage_seconds", "counter", "CPU time used by the edge node."),
    _F("edgefleet_node_cpu_capacity_cores", "gauge", "Online CPUs of the edge node."),
    _F(
        "edgefleet_node_memory_working_set_bytes",
        "gauge",
        "Memory in use on the edge node: capacity minus available.",
    ),
    _F("edgefleet_node_memory_available_bytes", "gauge", "MemAvailable of the edge node."),
    _F("edgefleet_node_memory_capacity_bytes", "gauge", "MemTotal of the edge node."),
    _F(
        "edgefleet_node_filesystem_capacity_bytes",
        "gauge",
        "Size of the filesystem (root: /, state: the agent's state directory).",
        "filesystem",
    ),
    _F(
        "edgefleet_node_filesystem_available_bytes",
        "gauge",
        "Space unprivileged writers may still use on the filesystem.",
        "filesystem",
    ),
    _F(
        "edgefleet_node_filesystem_used_bytes",
        "gauge",
        "Space used on the filesystem (size minus free).",
        "filesystem",
    ),
    _F(
        "edgefleet_node_network_receive_bytes",
        "counter",
        "Bytes received on the edge node's interfaces (loopback and container links excluded).",
    ),
    _F(
        "edgefleet_node_network_transmit_bytes",
        "counter",
        "Bytes sent on the edge node's interfaces (loopback and container links excluded).",
    ),
    _F("edgefleet_node_load1", "gauge", "1-minute load average of the edge node."),
    _F("edgefleet_node_load5", "gauge", "5-minute load average of the edge node."),
    _F("edgefleet_node_load15", "gauge", "15-minute load average of the edge node."),
    _F("edgefleet_node_uptime_seconds", "gauge", "Seconds since the edge node booted."),
    _F(
        "edgefleet_node_temperature_celsius",
        "gauge",
        "Temperature of a thermal zone of the edge node.",
        "zone",
    ),
    _F("edgefleet_node_gpu_utilization_ratio", "gauge", "GPU busy fraction (0-1).", "gpu"),
    _F("edgefleet_node_gpu_memory_used_bytes", "gauge", "GPU memory in use.", "gpu"),
    _F("edgefleet_node_gpu_memory_capacity_bytes", "gauge", "GPU memory size.", "gpu"),
    _F("edgefleet_node_gpu_frequency_hertz", "gauge", "GPU clock.", "gpu"),
    _F(
        "edgefleet_node_last_sample_timestamp_seconds",
        "gauge",
        "Time of the latest sample received from the edge node (the node's clock).",
    ),
    _F(
        "edgefleet_node_sampled_seconds",
        "counter",
        "Time covered by the samples received from the edge node (sum of their windows): "
        "a rate below 1 means samples are late (a backlog) or were lost.",
    ),
    _F(
        "edgefleet_container_cpu_usage_seconds",
        "counter",
        "CPU time used by a container on an edge node.",
    ),
    _F(
        "edgefleet_container_memory_working_set_bytes",
        "gauge",
        "Working set of a container on an edge node (usage minus inactive file pages).",
    ),
)

_INDEX = {f.name: i for i, f in enumerate(FAMILIES)}
_CPU_TOTAL = _INDEX["edgefleet_node_cpu_usage_seconds"]
_RX = _INDEX["edgefleet_node_network_receive_bytes"]
_TX = _INDEX["edgefleet_node_network_transmit_bytes"]
_LAST = _INDEX["edgefleet_node_last_sample_timestamp_seconds"]
_SAMPLED = _INDEX["edgefleet_node_sampled_seconds"]
_C_CPU = _INDEX["edgefleet_container_cpu_usage_seconds"]
_C_WS = _INDEX["edgefleet_container_memory_working_set_bytes"]

# Node gauge → (family index, scale to the base unit, fixed extra label value or None).
_GAUGES: dict[int, tuple[int, float, str | None]] = {
    Metric.NODE_CPU_CAPACITY_MILLICORES: (_INDEX["edgefleet_node_cpu_capacity_cores"], 1e-3, None),
    Metric.NODE_MEMORY_WORKING_SET_KIB: (
        _INDEX["edgefleet_node_memory_working_set_bytes"],
        1024,
        None,
    ),
    Metric.NODE_MEMORY_AVAILABLE_KIB: (_INDEX["edgefleet_node_memory_available_bytes"], 1024, None),
    Metric.NODE_MEMORY_CAPACITY_KIB: (_INDEX["edgefleet_node_memory_capacity_bytes"], 1024, None),
    Metric.NODE_FS_ROOT_CAPACITY_KIB: (
        _INDEX["edgefleet_node_filesystem_capacity_bytes"],
        1024,
        "root",
    ),
    Metric.NODE_FS_ROOT_AVAILABLE_KIB: (
        _INDEX["edgefleet_node_filesystem_available_bytes"],
        1024,
        "root",
    ),
    Metric.NODE_FS_ROOT_USED_KIB: (_INDEX["edgefleet_node_filesystem_used_bytes"], 1024, "root"),
    Metric.NODE_FS_STATE_CAPACITY_KIB: (
        _INDEX["edgefleet_node_filesystem_capacity_bytes"],
        1024,
        "state",
    ),
    Metric.NODE_FS_STATE_AVAILABLE_KIB: (
        _INDEX["edgefleet_node_filesystem_available_bytes"],
        1024,
        "state",
    ),
    Metric.NODE_FS_STATE_USED_KIB: (_INDEX["edgefleet_node_filesystem_used_bytes"], 1024, "state"),
    Metric.NODE_LOAD1_CENTI: (_INDEX["edgefleet_node_load1"], 0.01, None),
    Metric.NODE_LOAD5_CENTI: (_INDEX["edgefleet_node_load5"], 0.01, None),
    Metric.NODE_LOAD15_CENTI: (_INDEX["edgefleet_node_load15"], 0.01, None),
    Metric.NODE_UPTIME_SECONDS: (_INDEX["edgefleet_node_uptime_seconds"], 1, None),
    Metric.NODE_TEMPERATURE_DECICELSIUS: (_INDEX["edgefleet_node_temperature_celsius"], 0.1, None),
    Metric.NODE_GPU_UTILIZATION_PERMILLE: (
        _INDEX["edgefleet_node_gpu_utilization_ratio"],
        1e-3,
        None,
    ),
    Metric.NODE_GPU_MEMORY_USED_KIB: (_INDEX["edgefleet_node_gpu_memory_used_bytes"], 1024, None),
    Metric.NODE_GPU_MEMORY_CAPACITY_KIB: (
        _INDEX["edgefleet_node_gpu_memory_capacity_bytes"],
        1024,
        None,
    ),
    Metric.NODE_GPU_FREQUENCY_MHZ: (_INDEX["edgefleet_node_gpu_frequency_hertz"], 1e6, None),
}


Row = tuple[tuple[tuple[str, str], ...], float]
"""One sample of a family: label pairs sorted by label name, and the value."""


def node_rows(state: NodeState, pods: PodIndex) -> tuple[list[list[Row]], int]:
    """Compute one node's samples, per family of :data:`FAMILIES`.

    Args:
        state: the node's latest metrics.
        pods: resolves container keys to names.

    Returns:
        One list of rows per family (same order as :data:`FAMILIES`), and how many
        containers could not be resolved (their pod is unknown to the hub).
    """
    out: list[list[Row]] = [[] for _ in FAMILIES]
    node = state.node
    base = (("node", node),)
    for (metric_id, label), value in state.gauges.items():
        spec = _GAUGES.get(metric_id)
        if spec is None:
            continue  # a metric newer than this hub
        index, scale, fixed = spec
        extra = FAMILIES[index].extra_label
        labels = base
        if extra:
            pair = (extra, fixed if fixed is not None else str(label))
            labels = (pair, *base) if extra < "node" else (*base, pair)
        out[index].append((labels, value * scale))
    totals = state.totals
    for index, metric, scale in (
        (_CPU_TOTAL, Metric.NODE_CPU_USAGE_MS, 1e-3),
        (_RX, Metric.NODE_NETWORK_RECEIVE_BYTES, 1),
        (_TX, Metric.NODE_NETWORK_TRANSMIT_BYTES, 1),
    ):
        total = totals.get((metric, None))
        if total is not None:
            out[index].append((base, total * scale))
    if state.t_ms:
        out[_LAST].append((base, state.t_ms / 1000))
        out[_SAMPLED].append((base, state.sampled_ms / 1000))
    missing = 0
    for key, container in state.containers.items():
        names = pods.resolve(node, key)
        if names is None:
            missing += 1
            continue
        labels = (
            ("container", names.container),
            ("namespace", names.namespace),
            ("node", node),
            ("pod", names.pod),
        )
        out[_C_CPU].append((labels, container.cpu_total_ms / 1000))
        if container.memory_working_set_kib is not None:
            out[_C_WS].append((labels, container.memory_working_set_kib * 1024))
    return out, missing


def _hub_rows(store: EdgeMetricsStore, unresolved: int) -> list[tuple[Family, list[Row]]]:
    stats = store.stats
    return [
        (
            Family("edgefleet_hub_metrics_batches", "counter", "Metrics batches from edge nodes."),
            [
                ((("result", "accepted"),), stats.accepted),
                ((("result", "duplicate"),), stats.duplicate),
                ((("result", "rejected"),), stats.rejected),
            ],
        ),
        (
            Family(
                "edgefleet_hub_metrics_unresolved_containers",
                "gauge",
                "Container series whose pod the hub does not know (not exposed).",
            ),
            [((), unresolved)],
        ),
    ]


def _escape(value: str) -> str:
    if "\\" in value or "\n" in value or '"' in value:
        return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    return value


def _number(value: float) -> str:
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


def _render_rows(name: str, rows: list[Row], memo: dict[tuple, str]) -> bytes:
    lines = []
    for labels, value in rows:
        text = memo.get(labels)
        if text is None:
            inner = ",".join([f'{k}="{_escape(v)}"' for k, v in labels])
            text = memo[labels] = f"{{{inner}}}" if inner else ""
        lines.append(f"{name}{text} {_number(value)}\n")
    return "".join(lines).encode()


def _header(family: Family) -> bytes:
    name = family.sample_name
    return f"# HELP {name} {family.help}\n# TYPE {name} {family.type}\n".encode()


_HEADERS = [_header(f) for f in FAMILIES]


def _render_node(rows: list[list[Row]]) -> list[bytes]:
    memo: dict[tuple, str] = {}  # a node's label sets repeat across families
    return [
        _render_rows(FAMILIES[i].sample_name, r, memo) if r else b"" for i, r in enumerate(rows)
    ]


def _prom_node(rows: list[list[Row]]) -> list[list[PromSample]]:
    return [
        [PromSample(FAMILIES[i].sample_name, dict(labels), value) for labels, value in r]
        for i, r in enumerate(rows)
    ]


T = TypeVar("T")


class _NodeCache(Generic[T]):
    """Per-node results of :func:`node_rows`, keyed by the node's and pods' versions."""

    def __init__(
        self, store: EdgeMetricsStore, pods: PodIndex, build: Callable[[list[list[Row]]], T]
    ) -> None:
        self.store = store
        self.pods = pods
        self.build = build
        self.entries: dict[str, tuple[int, int, T, int]] = {}

    def refresh(self) -> tuple[list[T], int]:
        """Return every node's built rows (rebuilding the changed ones) and the unresolved."""
        values = []
        unresolved = 0
        live = set()
        for state in self.store.nodes():
            live.add(state.node)
            generation = self.pods.generation(state.node)
            entry = self.entries.get(state.node)
            if entry is None or entry[0] != state.version or entry[1] != generation:
                rows, missing = node_rows(state, self.pods)
                entry = (state.version, generation, self.build(rows), missing)
                self.entries[state.node] = entry
            values.append(entry[2])
            unresolved += entry[3]
        if len(live) != len(self.entries):
            for gone in [n for n in self.entries if n not in live]:
                del self.entries[gone]
        return values, unresolved


class EdgeMetricsExposition:
    """Renders edge metrics in the Prometheus text format (version 0.0.4).

    Serve :meth:`render` with :attr:`CONTENT_TYPE`; to serve the hub's own metrics on the
    same endpoint, append ``prometheus_client.generate_latest(hub_registry)`` (the
    families are disjoint).

    Args:
        store: the ingested metrics.
        pods: resolves container keys to names; unresolvable containers (a pod deleted
            meanwhile) are left out and counted in
            ``edgefleet_hub_metrics_unresolved_containers``.
    """

    CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

    def __init__(self, store: EdgeMetricsStore, pods: PodIndex) -> None:
        self._store = store
        self._cache = _NodeCache(store, pods, _render_node)
        self.unresolved = 0

    def render(self) -> bytes:
        """Return the whole exposition; a node's lines are re-rendered only after it changed."""
        chunks, self.unresolved = self._cache.refresh()
        out: list[bytes] = []
        for index, header in enumerate(_HEADERS):
            out.append(header)
            out.extend(node[index] for node in chunks)
        for family, rows in _hub_rows(self._store, self.unresolved):
            out.append(_header(family))
            out.append(_render_rows(family.sample_name, rows, {}))
        return b"".join(out)


class EdgeMetricsCollector(Collector):
    """The same exposition as a prometheus-client collector (for small fleets).

    Args:
        store: the ingested metrics.
        pods: resolves container keys to names.
    """

    def __init__(self, store: EdgeMetricsStore, pods: PodIndex) -> None:
        self._store = store
        self._cache = _NodeCache(store, pods, _prom_node)
        self.unresolved = 0

    def describe(self) -> list[PromMetric]:
        """Return no descriptions: registering must not run a whole collection."""
        return []

    def collect(self) -> Iterator[PromMetric]:
        """Yield one metric family per entry of :data:`FAMILIES` plus the hub's counters."""
        per_node, self.unresolved = self._cache.refresh()
        for index, family in enumerate(FAMILIES):
            metric = PromMetric(family.name, family.help, family.type)
            for node in per_node:
                metric.samples.extend(node[index])
            yield metric
        for family, rows in _hub_rows(self._store, self.unresolved):
            metric = PromMetric(family.name, family.help, family.type)
            metric.samples = [PromSample(family.sample_name, dict(pairs), v) for pairs, v in rows]
            yield metric
