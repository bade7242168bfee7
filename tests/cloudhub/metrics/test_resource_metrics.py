"""NodeMetrics / PodMetrics in the metrics.k8s.io/v1beta1 shapes kubectl top reads."""

from __future__ import annotations

import re

import pytest

from cloudhub.metrics import (
    BatchRejected,
    EdgeMetricsStore,
    MetricsNotFound,
    PodIndex,
    ResourceMetricsAPI,
)
from cloudhub.metrics.resource_metrics import go_duration
from protocol.metrics_codec import Sample
from tests.cloudhub.metrics.helpers import body, node_values, pod, sample

NOW = 1_700_000_100.0
RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")
NANOCORES = re.compile(r"\d+n")
KIBIBYTES = re.compile(r"\d+Ki")


@pytest.fixture
def api() -> ResourceMetricsAPI:
    store = EdgeMetricsStore()
    pods = PodIndex()
    pods.observe_pod(pod("default", "web-0", "pi-1", "app", "sidecar", labels={"app": "web"}))
    pods.observe_pod(pod("kube-system", "agent-x", "pi-1", "main"))
    pods.observe_pod(pod("default", "pending", "pi-1", "main"))  # no metrics yet
    containers = {
        ("default", "web-0", "app"): (300, 20_000),
        ("default", "web-0", "sidecar"): (15, 4_096),
        ("kube-system", "agent-x", "main"): (1, 512),
    }
    store.ingest(
        "pi-1",
        body(1, sample(0, containers=containers), sample(1, cpu_ms=1500, containers=containers)),
        now=0.0,
    )
    store.ingest("pi-2", body(1, sample(0, window_ms=0)), now=0.0)  # no CPU window yet
    return ResourceMetricsAPI(store, pods)


def test_node_metrics_shape_and_values(api: ResourceMetricsAPI) -> None:
    nm = api.node_metrics("pi-1", NOW, labels={"kubernetes.io/hostname": "pi-1"})
    assert nm["kind"] == "NodeMetrics"
    assert nm["apiVersion"] == "metrics.k8s.io/v1beta1"
    assert nm["metadata"] == {
        "name": "pi-1",
        "creationTimestamp": "2023-11-14T22:15:00Z",
        "labels": {"kubernetes.io/hostname": "pi-1"},
    }
    assert RFC3339.fullmatch(nm["timestamp"])
    assert nm["timestamp"] == "2023-11-14T22:13:35Z"  # end of the latest window
    assert nm["window"] == "15s"
    assert nm["usage"] == {"cpu": "100000000n", "memory": "1000000Ki"}  # 1500 ms / 15 s


def test_node_metrics_list_leaves_out_nodes_without_a_window(api: ResourceMetricsAPI) -> None:
    listed = api.list_node_metrics(NOW)
    assert listed["kind"] == "NodeMetricsList"
    assert listed["apiVersion"] == "metrics.k8s.io/v1beta1"
    assert [i["metadata"]["name"] for i in listed["items"]] == ["pi-1"]
    assert api.list_node_metrics(NOW, names=["pi-2", "nope"])["items"] == []
    with pytest.raises(MetricsNotFound) as info:
        api.node_metrics("pi-2", NOW)
    assert (info.value.kind, info.value.name) == ("NodeMetrics", "pi-2")


def test_pod_metrics_shape_and_values(api: ResourceMetricsAPI) -> None:
    pm = api.pod_metrics("default", "web-0", NOW)
    assert pm["kind"] == "PodMetrics"
    assert pm["apiVersion"] == "metrics.k8s.io/v1beta1"
    assert pm["metadata"]["name"] == "web-0"
    assert pm["metadata"]["namespace"] == "default"
    assert pm["metadata"]["labels"] == {"app": "web"}
    assert RFC3339.fullmatch(pm["metadata"]["creationTimestamp"])
    assert pm["window"] == "15s"
    assert pm["containers"] == [
        {"name": "app", "usage": {"cpu": "20000000n", "memory": "20000Ki"}},
        {"name": "sidecar", "usage": {"cpu": "1000000n", "memory": "4096Ki"}},
    ]
    for c in pm["containers"]:
        assert NANOCORES.fullmatch(c["usage"]["cpu"]) and KIBIBYTES.fullmatch(c["usage"]["memory"])


def test_pod_metrics_list_and_namespaces(api: ResourceMetricsAPI) -> None:
    listed = api.list_pod_metrics(NOW)
    assert listed["kind"] == "PodMetricsList"
    names = [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in listed["items"]]
    assert names == [("default", "web-0"), ("kube-system", "agent-x")]
    only = api.list_pod_metrics(NOW, namespace="kube-system")["items"]
    assert [i["metadata"]["name"] for i in only] == ["agent-x"]
    assert "labels" not in only[0]["metadata"]


@pytest.mark.parametrize(
    ("namespace", "name"), [("default", "pending"), ("default", "nope"), ("other", "web-0")]
)
def test_pod_without_metrics_is_not_found(api: ResourceMetricsAPI, namespace, name) -> None:
    with pytest.raises(MetricsNotFound) as info:
        api.pod_metrics(namespace, name, NOW)
    assert (info.value.kind, info.value.namespace, info.value.name) == (
        "PodMetrics",
        namespace,
        name,
    )


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (0, "0s"),
        (15_000, "15s"),
        (15_012, "15.012s"),
        (14_500, "14.5s"),
        (60_000, "1m0s"),
        (75_250, "1m15.25s"),
        (3_600_000, "1h0m0s"),
        (5_430_000, "1h30m30s"),
    ],
)
def test_go_duration_strings(ms: int, text: str) -> None:
    assert go_duration(ms) == text


def test_a_batch_dated_past_year_9999_is_rejected_and_the_others_still_list() -> None:
    """One node's clock (or a hostile node) must not break kubectl top for every node:
    a time no RFC 3339 timestamp can show is refused at ingest."""
    store = EdgeMetricsStore()
    api = ResourceMetricsAPI(store, PodIndex())
    store.ingest("pi-1", body(1, sample(0), sample(1)), now=0.0)
    far = 10**17  # milliseconds since the epoch: about the year 3.2 million
    bad = body(1, Sample(far, 15_000, node_values()), Sample(far + 15_000, 15_000, node_values()))
    with pytest.raises(BatchRejected) as info:
        store.ingest("pi-9", bad, now=0.0)
    assert "year" in str(info.value)
    assert [i["metadata"]["name"] for i in api.list_node_metrics(NOW)["items"]] == ["pi-1"]
