"""Prometheus exposition: parses with prometheus_client, right names, labels and values."""

from __future__ import annotations

import re

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from cloudhub.metrics import (
    FAMILIES,
    EdgeMetricsCollector,
    EdgeMetricsExposition,
    EdgeMetricsStore,
    PodIndex,
)
from protocol.metrics_codec import Metric
from tests.cloudhub.metrics.helpers import T0, body, pod, sample

M = Metric
WEB = ("default", "web-0", "app")
JOB = ("batch", "job-1", "main")


@pytest.fixture
def fleet() -> tuple[EdgeMetricsStore, PodIndex]:
    store = EdgeMetricsStore()
    pods = PodIndex()
    pods.observe_pod(pod("default", "web-0", "pi-1", "app"))
    pods.observe_pod(pod("batch", "job-1", "pi-1", "main"))
    extra = {
        (M.NODE_TEMPERATURE_DECICELSIUS, "cpu-thermal"): 487,
        (M.NODE_TEMPERATURE_DECICELSIUS, 'odd "zone"\\n'): -25,
        (M.NODE_FS_STATE_CAPACITY_KIB, None): 2_000_000,
        (M.NODE_FS_STATE_AVAILABLE_KIB, None): 1_500_000,
        (M.NODE_FS_STATE_USED_KIB, None): 400_000,
        (M.NODE_GPU_UTILIZATION_PERMILLE, "ga10b"): 347,
        (M.NODE_GPU_MEMORY_USED_KIB, "ga10b"): 1024,
        (M.NODE_GPU_FREQUENCY_MHZ, "ga10b"): 918,
    }
    containers = {WEB: (150, 20_000), JOB: (30, 1000)}
    store.ingest(
        "pi-1",
        body(
            1,
            sample(0, cpu_ms=1000, containers=containers, extra=extra),
            sample(1, cpu_ms=2500, containers=containers, extra=extra),
        ),
        now=0.0,
    )
    store.ingest("pi-2", body(1, sample(0, cpu_ms=10)), now=0.0)
    store.ingest("pi-2", body(1, sample(0, cpu_ms=10)), now=0.0)  # a duplicate
    return store, pods


def parse(text: bytes) -> dict[tuple[str, tuple], float]:
    out = {}
    for family in text_string_to_metric_families(text.decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_names_labels_and_values(fleet) -> None:
    store, pods = fleet
    samples = parse(EdgeMetricsExposition(store, pods).render())
    node = (("node", "pi-1"),)
    assert samples[("edgefleet_node_cpu_usage_seconds_total", node)] == 3.5
    assert samples[("edgefleet_node_cpu_capacity_cores", node)] == 4.0
    assert samples[("edgefleet_node_memory_available_bytes", node)] == 3_000_000 * 1024
    assert samples[("edgefleet_node_memory_working_set_bytes", node)] == 1_000_000 * 1024
    assert samples[("edgefleet_node_memory_capacity_bytes", node)] == 4_000_000 * 1024
    fs_root = (("filesystem", "root"), ("node", "pi-1"))
    fs_state = (("filesystem", "state"), ("node", "pi-1"))
    assert samples[("edgefleet_node_filesystem_available_bytes", fs_root)] == 500_000 * 1024
    assert samples[("edgefleet_node_filesystem_used_bytes", fs_state)] == 400_000 * 1024
    assert samples[("edgefleet_node_network_receive_bytes_total", node)] == 2000
    assert samples[("edgefleet_node_network_transmit_bytes_total", node)] == 4000
    assert samples[("edgefleet_node_load1", node)] == 0.25
    assert samples[("edgefleet_node_uptime_seconds", node)] == 3600
    zone = (("node", "pi-1"), ("zone", "cpu-thermal"))
    assert samples[("edgefleet_node_temperature_celsius", zone)] == pytest.approx(48.7)
    odd = (("node", "pi-1"), ("zone", 'odd "zone"\\n'))
    assert samples[("edgefleet_node_temperature_celsius", odd)] == pytest.approx(-2.5)
    gpu = (("gpu", "ga10b"), ("node", "pi-1"))
    assert samples[("edgefleet_node_gpu_utilization_ratio", gpu)] == pytest.approx(0.347)
    assert samples[("edgefleet_node_gpu_memory_used_bytes", gpu)] == 1024 * 1024
    assert samples[("edgefleet_node_gpu_frequency_hertz", gpu)] == 918e6
    assert samples[("edgefleet_node_last_sample_timestamp_seconds", node)] == (T0 + 15_000) / 1000
    web = (("container", "app"), ("namespace", "default"), ("node", "pi-1"), ("pod", "web-0"))
    assert samples[("edgefleet_container_cpu_usage_seconds_total", web)] == 0.3
    assert samples[("edgefleet_container_memory_working_set_bytes", web)] == 20_000 * 1024
    job = (("container", "main"), ("namespace", "batch"), ("node", "pi-1"), ("pod", "job-1"))
    assert samples[("edgefleet_container_memory_working_set_bytes", job)] == 1000 * 1024
    assert samples[("edgefleet_hub_metrics_batches_total", (("result", "accepted"),))] == 2
    assert samples[("edgefleet_hub_metrics_batches_total", (("result", "duplicate"),))] == 1
    assert samples[("edgefleet_hub_metrics_unresolved_containers", ())] == 0
    assert ("edgefleet_node_cpu_usage_seconds_total", (("node", "pi-2"),)) in samples


def test_naming_conventions() -> None:
    units = ("_bytes", "_seconds", "_celsius", "_hertz", "_ratio", "_cores")
    for family in FAMILIES:
        assert re.fullmatch(r"edgefleet_(node|container)_[a-z0-9_]+", family.name)
        assert not family.name.endswith("_total")
        if family.type == "counter":
            assert family.sample_name == family.name + "_total"
            assert family.name.endswith(units)
        elif not re.fullmatch(r"edgefleet_node_load(1|5|15)", family.name):
            assert family.name.endswith(units), family.name


def test_types_are_declared(fleet) -> None:
    store, pods = fleet
    families = {
        f.name: f.type
        for f in text_string_to_metric_families(
            EdgeMetricsExposition(store, pods).render().decode()
        )
    }
    assert families["edgefleet_node_cpu_usage_seconds"] == "counter"
    assert families["edgefleet_container_cpu_usage_seconds"] == "counter"
    assert families["edgefleet_node_memory_available_bytes"] == "gauge"


def test_hand_built_text_equals_the_prometheus_client_collector(fleet) -> None:
    store, pods = fleet
    registry = CollectorRegistry()
    registry.register(EdgeMetricsCollector(store, pods))
    assert parse(EdgeMetricsExposition(store, pods).render()) == parse(generate_latest(registry))


def test_unresolved_containers_are_counted_not_exposed(fleet) -> None:
    store, pods = fleet
    exposition = EdgeMetricsExposition(store, pods)
    pods.forget_pod(pod("batch", "job-1", "pi-1", "main"))
    samples = parse(exposition.render())
    assert samples[("edgefleet_hub_metrics_unresolved_containers", ())] == 1
    assert exposition.unresolved == 1
    assert not [k for k in samples if ("pod", "job-1") in k[1]]


def test_cache_follows_new_batches_pod_changes_and_deleted_nodes(fleet) -> None:
    store, pods = fleet
    exposition = EdgeMetricsExposition(store, pods)
    first = exposition.render()
    assert exposition.render() == first  # cached, identical
    store.ingest("pi-2", body(2, sample(1, cpu_ms=990)), now=1.0)
    samples = parse(exposition.render())
    assert samples[("edgefleet_node_cpu_usage_seconds_total", (("node", "pi-2"),))] == 1.0
    pods.observe_pod(pod("default", "web-0", "pi-2", "app"))  # rescheduled: no metrics yet
    samples = parse(exposition.render())
    assert not [k for k in samples if ("pod", "web-0") in k[1]]
    store.forget_node("pi-1")
    samples = parse(exposition.render())
    assert not [k for k in samples if ("node", "pi-1") in k[1]]


def test_content_type_is_the_text_format() -> None:
    assert EdgeMetricsExposition.CONTENT_TYPE.startswith("text/plain; version=0.0.4")


def test_empty_store_renders_headers_only() -> None:
    text = EdgeMetricsExposition(EdgeMetricsStore(), PodIndex()).render()
    samples = parse(text)
    assert set(k[0] for k in samples) == {
        "edgefleet_hub_metrics_batches_total",
        "edgefleet_hub_metrics_unresolved_containers",
    }
