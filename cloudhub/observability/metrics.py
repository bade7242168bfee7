"""The hub's Prometheus metrics (prometheus-client), on a registry of its own.

Nothing is labelled per node but the one figure operators alert on per node: when each
connected node's client certificate expires (one series per connected node). Otherwise,
with 10,000 nodes, per-node series would cost the Prometheus server more than the hub.
Per-session figures (unacknowledged depth, outbox depth) are exported as gauge histograms
computed at scrape time: how many sessions are in each bucket right now.

Other parts add their collectors to :attr:`HubMetrics.registry`, or, for exposition too
large for prometheus-client's per-sample objects, a renderer of the text format with
:meth:`HubMetrics.add_exposition` (edge metrics: ``EdgeMetricsExposition.render``).
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeHistogramMetricFamily,
    GaugeMetricFamily,
)
from prometheus_client.registry import Collector

__all__ = ["DEPTH_BUCKETS", "HubMetrics"]

NS = "edgefleet_hub"

DEPTH_BUCKETS = (0.0, 1.0, 4.0, 16.0, 64.0, 256.0, 1024.0)
"""Upper bounds of the per-session depth gauge histograms (messages)."""

_API_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class HubMetrics:
    """Every metric the hub exports.

    Attributes:
        registry: the collector registry ``/metrics`` renders.
    """

    def __init__(self) -> None:
        self.registry = registry = CollectorRegistry(auto_describe=True)
        # process_* (CPU seconds, resident memory, open file descriptors, start time) and
        # python_info: what an operator's standard alerts and dashboards expect.
        ProcessCollector(registry=registry)
        PlatformCollector(registry=registry)
        self.build_info = Gauge(
            f"{NS}_build_info",
            "Always 1; the labels say which EdgeFleet and Python this hub runs",
            ["version", "python_version"],
            registry=registry,
        )
        self.build_info.labels(_edgefleet_version(), platform.python_version()).set(1)
        self._add_session_metrics(registry)
        self._add_api_metrics(registry)
        self.serving_not_after = Gauge(
            f"{NS}_serving_certificate_expiry_timestamp_seconds",
            "When the certificate the edge listeners present expires (Unix time); it "
            "changes when a reissued or rotated one is picked up",
            registry=registry,
        )
        self.edge_store_recoveries = Counter(
            f"{NS}_edge_store_recoveries",
            "Edge agents that found their store damaged and started with an empty one, "
            "keeping their running pods until the hub's full sync (their StoreRecovered "
            "Warning Events on their Nodes)",
            registry=registry,
        )
        self.events_dropped = Counter(
            f"{NS}_events_dropped",
            "Hub Events not recorded: the event queue was full, or the object had too many "
            "Events of that reason (the correlator's spam filter)",
            registry=registry,
        )
        self._bytes = {("in", "quic"): 0, ("in", "websocket"): 0}
        self._bytes.update({("out", "quic"): 0, ("out", "websocket"): 0})
        self._live: Callable[[], Iterable[Any]] | None = None
        self._informers: Callable[[], Iterable[Any]] | None = None
        self._status_pending: Callable[[], int] | None = None
        self._listeners: Callable[[], Iterable[Any]] = tuple
        self._heap_trims: Callable[[], int] = int
        registry.register(_ScrapeTime(self))
        self._expositions: list[Callable[[], bytes]] = []

    def _add_session_metrics(self, registry: CollectorRegistry) -> None:
        """Sessions and the messages they carry."""
        self.connected = Gauge(
            f"{NS}_connected_nodes", "Nodes with an open session", ["transport"], registry=registry
        )
        self.sessions_opened = Counter(
            f"{NS}_sessions_opened", "Sessions accepted", ["transport"], registry=registry
        )
        self.sessions_closed = Counter(
            f"{NS}_sessions_closed",
            "Sessions ended, by close code",
            ["transport", "code"],
            registry=registry,
        )
        self.sessions_refused = Counter(
            f"{NS}_sessions_refused",
            "Hellos refused (identity mismatch, revoked certificate)",
            ["transport"],
            registry=registry,
        )
        self.messages = Counter(
            f"{NS}_messages",
            "Application messages by direction (in: from edges) and kind",
            ["direction", "kind"],
            registry=registry,
        )
        self.resends = Counter(
            f"{NS}_resends",
            "Edge messages received again after a reconnect (sent before, not acknowledged)",
            registry=registry,
        )
        self.refused = Counter(
            f"{NS}_refused_messages",
            "Edge messages answered with an error, by kind and error code",
            ["kind", "code"],
            registry=registry,
        )

    def _add_api_metrics(self, registry: CollectorRegistry) -> None:
        """Kubernetes API calls and what the hub writes, refuses or gives up."""
        self.api_latency = Histogram(
            f"{NS}_api_request_duration_seconds",
            "Kubernetes API request latency by verb and resource (watch: until it opened)",
            ["verb", "resource"],
            buckets=_API_LATENCY_BUCKETS,
            registry=registry,
        )
        self.api_errors = Counter(
            f"{NS}_api_request_errors",
            "Kubernetes API requests that failed, by verb and HTTP status (0: no answer)",
            ["verb", "resource", "code"],
            registry=registry,
        )
        self.status_writes = Counter(
            f"{NS}_pod_status_writes",
            "Pod status reports by outcome (written, unchanged, gone, refused, conflict, retried)",
            ["result"],
            registry=registry,
        )
        self.pod_deletions = Counter(
            f"{NS}_pod_deletions",
            "Pods finalised (deleted with grace period 0) after their edge confirmed",
            ["result"],
            registry=registry,
        )
        self.node_writes = Counter(
            f"{NS}_node_writes",
            "Writes about nodes (node, lease, heartbeat, unknown, event) by outcome (fenced: not "
            "written, this replica stopped owning the node while the write waited)",
            ["what", "result"],
            registry=registry,
        )
        self.status_refused = Counter(
            f"{NS}_status_writes_refused",
            "Status writes the API refused for good (4xx other than 404/409: e.g. 422 "
            "Invalid), by resource and the API's reason; each also gets a Warning Event on "
            "the object",
            ["resource", "reason"],
            registry=registry,
        )
        self.controller_backoffs = Counter(
            f"{NS}_controller_backoffs",
            "Workload pods not recreated at once because the ones before failed on the "
            "node (back-off, as Kubernetes' controllers do for failing pods), by kind",
            ["kind"],
            registry=registry,
        )
        self.dead_letters = Counter(
            f"{NS}_dead_letters",
            "Messages given up for good, by direction (down: hub to edge, not sendable; up: "
            "edge messages refused for size), kind and reason (too_large, invalid); each "
            "also gets a Warning Event on the object",
            ["direction", "kind", "reason"],
            registry=registry,
        )

    # -- feeds --------------------------------------------------------------------------------

    def serving_certificate(self, credentials: Any) -> None:
        """The edge listeners now present ``credentials`` (a ``TLSCredentials``)."""
        self.serving_not_after.set(credentials.chain[0].not_valid_after_utc.timestamp())

    def observe_request(self, verb: str, resource: str, status: int, seconds: float) -> None:
        """A :data:`cloudhub.kube.RequestObserver` for the hub's KubeClient."""
        self.api_latency.labels(verb, resource).observe(seconds)
        if status == 0 or status >= 400:
            self.api_errors.labels(verb, resource, str(status)).inc()

    def add_link_bytes(self, link: Any) -> None:
        """Add an ended link's byte counts to the totals."""
        self._bytes["in", link.transport] += link.bytes_in
        self._bytes["out", link.transport] += link.bytes_out

    def watch(
        self,
        *,
        sessions: Callable[[], Iterable[Any]],
        informers: Callable[[], Iterable[Any]],
        status_pending: Callable[[], int],
    ) -> None:
        """Say where scrape-time figures come from: the live sessions, the informers, and
        the number of pod reports waiting to be written."""
        self._live, self._informers, self._status_pending = sessions, informers, status_pending

    def watch_listeners(
        self, listeners: Callable[[], Iterable[Any]], heap_trims: Callable[[], int] = int
    ) -> None:
        """Say where the edge listeners are (their ``unfinished`` and ``refused_pending``
        connection counts, when they keep them, are exported at scrape time) and how many
        times the heap was trimmed after them (``cloudhub.heap``)."""
        self._listeners, self._heap_trims = listeners, heap_trims

    def add_exposition(self, render: Callable[[], bytes]) -> None:
        """Append ``render()`` (Prometheus text format 0.0.4, whole families with their
        HELP and TYPE lines, names not used by the registry) to every scrape. For
        exposition too large for prometheus-client's per-sample objects: the edge
        metrics of a fleet (``cloudhub.metrics.EdgeMetricsExposition``)."""
        self._expositions.append(render)

    def render(self) -> bytes:
        """The Prometheus text exposition of everything registered."""
        from prometheus_client import generate_latest

        body = generate_latest(self.registry)
        if not self._expositions:
            return body
        return b"".join([body, *(render() for render in self._expositions)])


def _edgefleet_version() -> str:
    """The installed EdgeFleet distribution's version ("unknown" when run from a tree that
    is not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("edgefleet")
    except PackageNotFoundError:
        return "unknown"


def _node_certificate_expiry(sessions: Iterable[Any]) -> GaugeMetricFamily:
    """When each connected node's client certificate expires (Unix time, seconds), from
    the certificate its session's link verified; nodes without one (an outside CA's
    sessions before the handshake recorded it) are left out."""
    family = GaugeMetricFamily(
        f"{NS}_node_certificate_expiry_timestamp_seconds",
        "When each connected node's client certificate expires (Unix time); alert on it "
        "minus time(): a node renews at 70-90 % of the lifetime while connected",
        labels=["node"],
    )
    for session in sessions:
        cert = getattr(session.link, "peer_certificate", None)
        if cert is not None:
            family.add_metric([session.node], cert.not_valid_after_utc.timestamp())
    return family


def _gauge_histogram(name: str, doc: str, values: Iterable[int]) -> GaugeHistogramMetricFamily:
    counts = [0] * (len(DEPTH_BUCKETS) + 1)
    total = 0
    n = 0
    for value in values:
        n += 1
        total += value
        for i, bound in enumerate(DEPTH_BUCKETS):
            if value <= bound:
                counts[i] += 1
                break
        else:
            counts[-1] += 1
    cumulative, buckets = 0, []
    for bound, count in zip((*DEPTH_BUCKETS, float("inf")), counts, strict=False):
        cumulative += count
        buckets.append(("+Inf" if bound == float("inf") else repr(bound), cumulative))
    return GaugeHistogramMetricFamily(name, doc, buckets=buckets, gsum_value=total)


class _ScrapeTime(Collector):
    """Figures computed when Prometheus scrapes: per-session depths, bytes, informers."""

    def __init__(self, metrics: HubMetrics) -> None:
        self.m = metrics

    def collect(self) -> Iterator[Any]:
        m = self.m
        sessions = list(m._live()) if m._live is not None else []
        yield _gauge_histogram(
            f"{NS}_session_unacked_messages",
            "Sessions by edge messages received and not yet acknowledged (effect not durable)",
            (s.acks.in_progress for s in sessions),
        )
        yield _gauge_histogram(
            f"{NS}_session_outbox_messages",
            "Sessions by hub messages queued and not yet handed to the transport",
            (len(s.outbox) for s in sessions),
        )
        yield _node_certificate_expiry(sessions)
        totals = dict(m._bytes)
        for s in sessions:
            link = s.link
            totals["in", link.transport] += link.bytes_in
            totals["out", link.transport] += link.bytes_out
        family = CounterMetricFamily(
            f"{NS}_bytes",
            "Protocol bytes by direction and transport (frames, length prefixes included)",
            labels=["direction", "transport"],
        )
        for (direction, transport), value in sorted(totals.items()):
            family.add_metric([direction, transport], value)
        yield family
        lag = GaugeMetricFamily(
            f"{NS}_informer_lag_seconds",
            "Seconds since each informer last heard from the API (event, bookmark or list)",
            labels=["resource"],
        )
        synced = GaugeMetricFamily(
            f"{NS}_informer_synced",
            "1 once the informer's first list is applied",
            labels=["resource"],
        )
        relists = CounterMetricFamily(
            f"{NS}_informer_relists",
            "Lists after the first one (410 Gone, failed lists)",
            labels=["resource"],
        )
        now = time.monotonic()
        # Namespaced mode (kube.namespaces) runs one informer per namespace of a resource:
        # one sample per resource still, its worst lag, synced once all are, relists summed.
        per: dict[str, tuple[float, float, int]] = {}
        for informer in m._informers() if m._informers is not None else ():
            heard = informer.last_heard
            age = now - heard if heard else float("inf")
            done = 1.0 if informer.synced.is_set() else 0.0
            old = per.get(informer.rt.plural)
            if old is not None:
                age, done = max(age, old[0]), min(done, old[1])
            per[informer.rt.plural] = (age, done, informer.relists + (old[2] if old else 0))
        for name, (age, done, count) in per.items():
            lag.add_metric([name], age if age != float("inf") else float("nan"))
            synced.add_metric([name], done)
            relists.add_metric([name], count)
        yield lag
        yield synced
        yield relists
        unfinished = CounterMetricFamily(
            f"{NS}_handshakes_unfinished",
            "WebSocket connections that ended before their upgrade (TLS failed or timed "
            "out, closed half-open)",
        )
        limited = CounterMetricFamily(
            f"{NS}_handshakes_refused",
            "WebSocket connections dropped on arrival: their address had "
            "listen.max_pending_handshakes_per_source pending already",
        )
        shed = CounterMetricFamily(
            f"{NS}_handshakes_shed",
            "WebSocket connections dropped on arrival: listen.max_pending_handshakes "
            "(listen.max_pending_handshakes_busy while the hub turns sessions away) were "
            "pending from all addresses (a fleet reconnecting at once waits at its agents)",
        )
        listeners = list(m._listeners())
        unfinished.add_metric([], sum(getattr(x, "unfinished", 0) for x in listeners))
        limited.add_metric([], sum(getattr(x, "refused_pending", 0) for x in listeners))
        shed.add_metric([], sum(getattr(x, "refused_busy", 0) for x in listeners))
        trims = CounterMetricFamily(
            f"{NS}_heap_trims",
            "malloc_trim(0) calls after bursts of unfinished handshakes (freed heap given "
            "back to the OS)",
        )
        trims.add_metric([], m._heap_trims())
        yield unfinished
        yield limited
        yield shed
        yield trims
        pending = GaugeMetricFamily(
            f"{NS}_pod_status_pending", "Pod reports (status or deletion) waiting to be written"
        )
        pending.add_metric([], m._status_pending() if m._status_pending is not None else 0)
        yield pending

    def describe(self) -> Iterator[Any]:
        return iter(())
