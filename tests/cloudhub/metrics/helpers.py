"""Builders for the hub's metrics tests: batches of a node and the pods behind them."""

from __future__ import annotations

from collections.abc import Mapping

from protocol.metrics_codec import Batch, Metric, Sample, SeriesKey, container_key, encode_batch

M = Metric
T0 = 1_700_000_000_000


def pod(namespace: str, name: str, node: str | None, *containers: str, labels=None) -> dict:
    """A raw Pod as the informer holds it."""
    spec: dict = {"containers": [{"name": c, "image": "busybox"} for c in containers]}
    if node is not None:
        spec["nodeName"] = node
    meta: dict = {"namespace": namespace, "name": name, "uid": f"uid-{name}"}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def node_values(
    *,
    cpu_ms: int = 3000,
    available_kib: int = 3_000_000,
    capacity_kib: int = 4_000_000,
    containers: Mapping[tuple[str, str, str], tuple[int, int]] | None = None,
    extra: Mapping[SeriesKey, int] | None = None,
) -> dict[SeriesKey, int]:
    """One sample's values; containers map (ns, pod, container) to (cpu ms, working set KiB)."""
    values: dict[SeriesKey, int] = {
        (M.NODE_CPU_USAGE_MS, None): cpu_ms,
        (M.NODE_CPU_CAPACITY_MILLICORES, None): 4000,
        (M.NODE_MEMORY_AVAILABLE_KIB, None): available_kib,
        (M.NODE_MEMORY_CAPACITY_KIB, None): capacity_kib,
        (M.NODE_FS_ROOT_CAPACITY_KIB, None): 1_000_000,
        (M.NODE_FS_ROOT_AVAILABLE_KIB, None): 500_000,
        (M.NODE_FS_ROOT_USED_KIB, None): 450_000,
        (M.NODE_NETWORK_RECEIVE_BYTES, None): 1000,
        (M.NODE_NETWORK_TRANSMIT_BYTES, None): 2000,
        (M.NODE_LOAD1_CENTI, None): 25,
        (M.NODE_UPTIME_SECONDS, None): 3600,
    }
    for (ns, pod_name, container), (cpu, ws) in (containers or {}).items():
        key = container_key(ns, pod_name, container)
        values[(M.CONTAINER_CPU_USAGE_MS, key)] = cpu
        values[(M.CONTAINER_MEMORY_WORKING_SET_KIB, key)] = ws
    values.update(extra or {})
    return values


def body(seq: int, *samples: Sample, stream: int = 77) -> bytes:
    return encode_batch(Batch(stream, seq, samples))


def sample(i: int, window_ms: int = 15_000, **kwargs) -> Sample:
    return Sample(T0 + i * 15_000, window_ms, node_values(**kwargs))
