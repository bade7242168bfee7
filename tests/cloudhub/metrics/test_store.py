"""Hub ingest: de-duplication by batch identity, and the latest values per node/container."""

from __future__ import annotations

import pytest

from cloudhub.metrics import BatchRejected, EdgeMetricsStore, PodIndex, Rate
from edgeagent.metrics import MemoryMetricsStorage, MetricsForwarder, MetricsSettings
from protocol.messages import MetricsBatch
from protocol.metrics_codec import Metric, Sample, container_key
from tests.cloudhub.metrics.helpers import T0, body, pod, sample

M = Metric
WEB = ("default", "web-0", "app")
WEB_KEY = container_key(*WEB)


def test_duplicates_are_dropped_per_stream() -> None:
    store = EdgeMetricsStore()
    assert store.ingest("n1", body(1, sample(0)), now=10.0).accepted
    assert not store.ingest("n1", body(1, sample(0)), now=11.0).accepted  # resent
    assert store.ingest("n1", body(2, sample(1)), now=12.0).accepted
    assert not store.ingest("n1", body(1, sample(0)), now=13.0).accepted  # late resend
    # A reinstalled agent starts a new stream at 1: not a duplicate.
    assert store.ingest("n1", body(1, sample(2), stream=99), now=14.0).accepted
    # The same identity from another node is that node's own.
    assert store.ingest("n2", body(1, sample(0)), now=15.0).accepted
    assert (store.stats.accepted, store.stats.duplicate) == (4, 2)
    assert store.node("n1").received_at == 14.0


def test_a_duplicate_changes_nothing() -> None:
    store = EdgeMetricsStore()
    store.ingest("n1", body(5, sample(0, cpu_ms=100)), now=0.0)
    state = store.node("n1")
    version = state.version
    store.ingest("n1", body(5, sample(0, cpu_ms=100)), now=0.0)
    assert state.version == version
    assert state.totals[(M.NODE_CPU_USAGE_MS, None)] == 100


@pytest.mark.parametrize("bad", [b"", b"\x01\x02", b"\x09" + b"\x00" * 20, "text"])
def test_undecodable_bodies_are_rejected_with_the_node_named(bad) -> None:
    store = EdgeMetricsStore()
    with pytest.raises(BatchRejected) as info:
        store.ingest("n7", bad, now=0.0)
    assert info.value.node == "n7"
    assert store.stats.rejected == 1
    assert store.node("n7") is None


def test_latest_values_rates_and_totals() -> None:
    store = EdgeMetricsStore()
    containers = {WEB: (150, 20_000)}
    store.ingest(
        "n1",
        body(
            1,
            sample(0, window_ms=0, containers={WEB: (0, 19_000)}),  # agent start: no counters
            sample(1, cpu_ms=3000, containers=containers),
            sample(2, cpu_ms=6000, available_kib=2_000_000, containers=containers),
        ),
        now=1.0,
    )
    state = store.node("n1")
    assert state.t_ms == T0 + 30_000
    assert state.rates[(M.NODE_CPU_USAGE_MS, None)] == Rate(6000, 15_000, T0 + 30_000)
    assert state.totals[(M.NODE_CPU_USAGE_MS, None)] == 9000
    assert state.gauge(M.NODE_MEMORY_AVAILABLE_KIB) == 2_000_000
    # The working set the agent left out is derived: capacity - available.
    assert state.gauge(M.NODE_MEMORY_WORKING_SET_KIB) == 2_000_000
    c = state.containers[WEB_KEY]
    assert c.cpu == Rate(150, 15_000, T0 + 30_000)
    assert c.cpu_total_ms == 300
    assert c.memory_working_set_kib == 20_000
    assert Rate(6000, 15_000, 0).per_second() == 400.0


def test_containers_absent_from_the_latest_sample_are_gone() -> None:
    store = EdgeMetricsStore()
    other = ("default", "job-1", "main")
    store.ingest("n1", body(1, sample(0, containers={WEB: (1, 1), other: (2, 2)})), now=0.0)
    store.ingest("n1", body(2, sample(1, containers={WEB: (1, 1)})), now=0.0)
    assert set(store.node("n1").containers) == {WEB_KEY}


def test_gauges_follow_the_latest_sample_but_counter_totals_persist() -> None:
    store = EdgeMetricsStore()
    zone = (M.NODE_TEMPERATURE_DECICELSIUS, "cpu-thermal")
    store.ingest("n1", body(1, sample(0, extra={zone: 450})), now=0.0)
    # After an agent restart: the first sample has no counters and the zone is gone.
    store.ingest("n1", body(2, Sample(T0 + 99_000, 0, {(M.NODE_LOAD1_CENTI, None): 7})), now=0.0)
    state = store.node("n1")
    assert state.gauge(M.NODE_TEMPERATURE_DECICELSIUS, "cpu-thermal") is None
    assert state.gauge(M.NODE_LOAD1_CENTI) == 7
    assert state.totals[(M.NODE_CPU_USAGE_MS, None)] == 3000
    assert state.window_ms == 0


def test_unknown_metrics_from_a_newer_agent_are_kept_but_harmless() -> None:
    store = EdgeMetricsStore()
    store.ingest("n1", body(1, sample(0, extra={(999, None): 5})), now=0.0)
    assert store.node("n1").gauges[(999, None)] == 5


def test_forget_node_and_listing() -> None:
    store = EdgeMetricsStore()
    for n in ("a", "b"):
        store.ingest(n, body(1, sample(0)), now=0.0)
    assert sorted(s.node for s in store.nodes()) == ["a", "b"]
    store.forget_node("a")
    store.forget_node("never-seen")
    assert len(store) == 1 and store.node("a") is None


# --- pod index ----------------------------------------------------------------------------


def test_pod_index_resolves_containers_of_bound_pods() -> None:
    index = PodIndex()
    p = pod("default", "web-0", "n1", "app", "sidecar", labels={"app": "web"})
    p["spec"]["initContainers"] = [{"name": "init"}]
    index.observe_pod(p)
    name = index.resolve("n1", WEB_KEY)
    assert (name.namespace, name.pod, name.container) == WEB
    assert index.resolve("n1", container_key("default", "web-0", "init")).container == "init"
    assert index.resolve("n2", WEB_KEY) is None
    assert index.pod_labels("default", "web-0") == {"app": "web"}
    assert index.pod_node("default", "web-0") == "n1"


def test_pod_index_follows_binding_changes_and_deletes() -> None:
    index = PodIndex()
    index.observe_pod(pod("default", "web-0", None, "app"))  # not bound yet: ignored
    assert index.resolve("n1", WEB_KEY) is None
    g0 = index.generation("n1")
    index.observe_pod(pod("default", "web-0", "n1", "app"))
    assert index.generation("n1") > g0
    g1 = index.generation("n1")
    index.observe_pod(pod("default", "web-0", "n1", "app", labels={"v": "2"}))  # labels only
    assert index.generation("n1") == g1
    assert index.pod_labels("default", "web-0") == {"v": "2"}
    index.observe_pod(pod("default", "web-0", "n2", "app"))  # rescheduled elsewhere
    assert index.resolve("n1", WEB_KEY) is None and index.resolve("n2", WEB_KEY) is not None
    index.forget_pod(pod("default", "web-0", "n2", "app"))
    assert index.resolve("n2", WEB_KEY) is None
    assert index.pod_labels("default", "web-0") == {}
    assert index.pod_node("default", "web-0") is None
    index.forget_pod({"metadata": {}})  # unknown: nothing to do


def test_pod_index_relist_replaces_a_nodes_pods() -> None:
    index = PodIndex()
    index.observe_pod(pod("default", "web-0", "n1", "app"))
    index.observe_pod(pod("default", "gone", "n1", "x"))
    index.replace_node_pods("n1", [pod("default", "web-0", "n1", "app")])
    assert index.resolve("n1", container_key("default", "gone", "x")) is None
    assert index.resolve("n1", WEB_KEY) is not None


def test_ingest_takes_the_message_field_from_a_sealed_batch() -> None:
    storage = MemoryMetricsStorage()
    forwarder = MetricsForwarder(storage, MetricsSettings())
    forwarder.add(sample(0))
    sealed = forwarder.seal()
    assert sealed is not None
    message = sealed.message("pi-1")
    assert isinstance(message, MetricsBatch) and message.node_name == "pi-1"
    store = EdgeMetricsStore()
    result = store.ingest("pi-1", message.samples, now=0.0)
    assert result.accepted and result.batch.batch_seq == sealed.batch_seq
    with pytest.raises(BatchRejected, match=r"b\.samples\.p"):
        store.ingest("pi-1", {"p": ["not bytes"]}, now=0.0)
