"""Prometheus exposition of edge metrics: a prometheus-client custom collector.

Register :class:`EdgeMetricsCollector` in a ``prometheus_client.CollectorRegistry`` and
serve it with ``prometheus_client.generate_latest`` (or the library's ASGI/WSGI apps).
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

Speed: a scrape of 10,000 nodes with five containers each is about 300,000 samples.
Building the ``Sample`` tuples is cached per node and rebuilt only when a new batch or a
pod change arrived for that node, so a scrape costs mostly prometheus-client's text
rendering.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client.metrics_core import Metric as PromMetric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample as PromSample

from cloudhub.metrics.pods import PodIndex
from cloudhub.metrics.store import EdgeMetricsStore, NodeState
from protocol.metrics_codec import Metric

__all__ = ["FAMILIES", "EdgeMetricsCollector", "Family"]


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


class EdgeMetricsCollector(Collector):
    """A prometheus-client collector over the hub's edge metrics.

    Args:
        store: the ingested metrics.
        pods: resolves container keys to namespace, pod and container names;
            containers it cannot resolve (a pod deleted meanwhile) are not exposed and are
            counted in :attr:`unresolved`.
    """

    def __init__(self, store: EdgeMetricsStore, pods: PodIndex) -> None:
        self._store = store
        self._pods = pods
        self._cache: dict[str, tuple[int, int, list[list[PromSample]]]] = {}
        self._missing: dict[str, int] = {}
        self.unresolved = 0

    def describe(self) -> list[PromMetric]:
        """Return no descriptions: registering must not run a whole collection."""
        return []

    def collect(self) -> Iterator[PromMetric]:
        """Yield one metric family per entry of :data:`FAMILIES` plus the ingest counters."""
        per_family: list[list[PromSample]] = [[] for _ in FAMILIES]
        live = set()
        unresolved = 0
        for state in self._store.nodes():
            live.add(state.node)
            generation = self._pods.generation(state.node)
            cached = self._cache.get(state.node)
            if cached is None or cached[0] != state.version or cached[1] != generation:
                samples, missing = self._node_samples(state)
                cached = (state.version, generation, samples)
                self._cache[state.node] = cached
                self._missing[state.node] = missing
            unresolved += self._missing.get(state.node, 0)
            for target, items in zip(per_family, cached[2], strict=True):
                target.extend(items)
        for gone in [n for n in self._cache if n not in live]:
            del self._cache[gone]
            self._missing.pop(gone, None)
        self.unresolved = unresolved
        for family, samples in zip(FAMILIES, per_family, strict=True):
            metric = PromMetric(family.name, family.help, family.type)
            metric.samples = samples
            yield metric
        stats = self._store.stats
        batches = PromMetric(
            "edgefleet_hub_metrics_batches", "Metrics batches received from edge nodes.", "counter"
        )
        for result, value in (
            ("accepted", stats.accepted),
            ("duplicate", stats.duplicate),
            ("rejected", stats.rejected),
        ):
            batches.samples.append(
                PromSample("edgefleet_hub_metrics_batches_total", {"result": result}, value)
            )
        yield batches
        gauge = PromMetric(
            "edgefleet_hub_metrics_unresolved_containers",
            "Container series whose pod the hub does not know (not exposed).",
            "gauge",
        )
        gauge.samples.append(
            PromSample("edgefleet_hub_metrics_unresolved_containers", {}, unresolved)
        )
        yield gauge

    def _node_samples(self, state: NodeState) -> tuple[list[list[PromSample]], int]:
        out: list[list[PromSample]] = [[] for _ in FAMILIES]
        node = state.node
        base = {"node": node}
        for (metric_id, label), value in state.gauges.items():
            spec = _GAUGES.get(metric_id)
            if spec is None:
                continue  # a metric newer than this hub
            index, scale, fixed = spec
            family = FAMILIES[index]
            if family.extra_label:
                labels = {"node": node, family.extra_label: fixed if fixed else str(label)}
            else:
                labels = base
            out[index].append(PromSample(family.name, labels, value * scale))
        totals = state.totals
        for index, metric, scale in (
            (_CPU_TOTAL, Metric.NODE_CPU_USAGE_MS, 1e-3),
            (_RX, Metric.NODE_NETWORK_RECEIVE_BYTES, 1),
            (_TX, Metric.NODE_NETWORK_TRANSMIT_BYTES, 1),
        ):
            total = totals.get((metric, None))
            if total is not None:
                out[index].append(PromSample(FAMILIES[index].sample_name, base, total * scale))
        if state.t_ms:
            out[_LAST].append(PromSample(FAMILIES[_LAST].name, base, state.t_ms / 1000))
        missing = 0
        cpu_name = FAMILIES[_C_CPU].sample_name
        ws_name = FAMILIES[_C_WS].name
        for key, container in state.containers.items():
            names = self._pods.resolve(node, key)
            if names is None:
                missing += 1
                continue
            labels = {
                "node": node,
                "namespace": names.namespace,
                "pod": names.pod,
                "container": names.container,
            }
            out[_C_CPU].append(PromSample(cpu_name, labels, container.cpu_total_ms / 1000))
            if container.memory_working_set_kib is not None:
                out[_C_WS].append(
                    PromSample(ws_name, labels, container.memory_working_set_kib * 1024)
                )
        return out, missing
