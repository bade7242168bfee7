"""The cloud hub: every part wired together, started in order and stopped in reverse.

Start (:meth:`Hub.start`):

1. the observability server (``/healthz`` answers from the first moment, ``/readyz`` says
   why it is not ready yet);
2. the Kubernetes client: kubeconfig, in-cluster, or the embedded API server;
3. the shared informers (pods bound to a node, ConfigMaps, Secrets, edge Nodes) and the
   parts that use them; extensions run here (see below);
4. wait until every informer has listed once — serving an edge before that would make its
   sync delete everything it holds;
5. the writers (pod reports, Events, node lifecycle), and the edge listeners (QUIC, WebSocket).

Stop (:meth:`Hub.aclose`) closes the listeners first (every session gets ``GOING_AWAY``),
then the background tasks, the client and the embedded API.

**Extensions** are how other parts plug in: ``Hub(settings, extensions=[install, ...])``,
each ``install(hub)`` called (and awaited if it returns an awaitable) after step 3's core
is built and before the informers start. An extension may add informers
(:meth:`Hub.add_informer`), message handlers (``hub.dispatcher.register(kind, handler)``),
per-node objects sent down like pods (``hub.objects.add_source`` / ``add_kind`` /
``changed``), session hooks (``hub.registry.on_connect`` / ``on_synced`` /
``on_disconnect``), peer checks
(``hub.edge.peer_checks``: certificate revocation), Node-deletion hooks
(``hub.on_node_deleted``), background tasks (:meth:`Hub.add_task`), collectors
(``hub.metrics.registry``, ``hub.metrics.add_exposition``), Node conditions
(``hub.lifecycle.condition_providers``) and in-process API groups on the embedded API
(``hub.embedded_api.add_api``).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import random
import socket
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from cloudhub.bridge.authz import NodeAuthorizer
from cloudhub.bridge.deadletters import DeadLetter, DeadLetters, pods_using
from cloudhub.bridge.dispatch import Dispatcher, Inbound
from cloudhub.bridge.objects import NodeObjects
from cloudhub.bridge.registry import SessionRegistry
from cloudhub.bridge.server import EdgeServer, Refusal
from cloudhub.credentials import CredentialsReloader, FileCredentials
from cloudhub.errors import ConfigError, HubError, KubeAPIError, KubeNotFound
from cloudhub.events import EventRecorder
from cloudhub.ha import (
    REPLICA_LABEL,
    NodeOwnership,
    ReplicaLeases,
    full_jitter,
    renew_before_stop,
    shutdown_spread,
)
from cloudhub.ha.keeper import LoopThread
from cloudhub.ha.overload import LoopLag
from cloudhub.heap import HeapTrimmer
from cloudhub.kube import (
    CONFIGMAPS,
    LEASES,
    NODES,
    PODS,
    SECRETS,
    Informer,
    KubeClient,
    ResourceType,
    TokenBucket,
    scoped_informers,
    strip_object,
)
from cloudhub.nodes.lifecycle import NodeLifecycle
from cloudhub.nodes.model import EDGE_ROLE_LABEL, slim_node
from cloudhub.observability.http import HealthServer
from cloudhub.observability.metrics import HubMetrics
from cloudhub.pods.handlers import PodHandlers
from cloudhub.pods.source import POD_INDEXERS, PodSource
from cloudhub.pods.writer import PodReportWriter
from cloudhub.settings import HubSettings
from protocol.errors import CloseCode, ErrorCode, InvalidMessage, MessageTooLarge
from protocol.messages import Message, ObjectUpsert
from protocol.tasks import TaskScope
from protocol.transport import TLSCredentials, serve_quic, serve_websocket
from protocol.undelivered import PLACEHELD_KINDS, placeholder

__all__ = ["Extension", "Hub"]

log = logging.getLogger(__name__)

#: Longest a stopping hub spends renewing Leases before it closes its sessions (a pod has
#: terminationGracePeriodSeconds, 30 s by default, for everything).
_RENEW_BEFORE_STOP_S = 10.0

#: ``install(hub)``: plug a part into the hub before it starts serving.
Extension = Callable[["Hub"], "Awaitable[None] | None"]


class Hub:
    """The cloud hub.

    Args:
        settings: the hub's settings.
        credentials: TLS material for the edge listeners; read from ``settings.tls`` files
            when omitted (the certificates part will pass what it loads from its Secret).
        extensions: parts to plug in (see the module docstring).
    """

    def __init__(
        self,
        settings: HubSettings,
        *,
        credentials: TLSCredentials | None = None,
        extensions: list[Extension] | None = None,
    ) -> None:
        self.settings = settings
        self.metrics = HubMetrics()
        self.registry = SessionRegistry()
        self.dead_letters = DeadLetters()
        """Hub messages no link could send (bounded; :mod:`cloudhub.bridge.deadletters`)."""
        self.objects = NodeObjects()
        self.dispatcher = Dispatcher()
        self.authorizer = NodeAuthorizer(
            self.objects, enabled=settings.authorization.node_authorization
        )
        self.on_node_deleted: list[Callable[[str], None]] = []
        self.identity = f"{socket.gethostname()}-{os.getpid()}"
        self.credentials = credentials  # the PKI extension may set it
        self.credentials_source: Callable[[], TLSCredentials] | None = None
        """Where the listeners' credentials come from while the hub runs (an extension
        sets it: the PKI's reissuing ``serving_credentials``); without it ``credentials``
        as given, else the ``tls.*`` files, re-read when they change on disk."""
        self.reloader: CredentialsReloader | None = None
        self.heap: HeapTrimmer | None = None  # after bursts of unfinished handshakes
        self._extensions = list(extensions or ())
        self._informers: list[Informer] = []
        self._scope = TaskScope(on_failure=self._task_failed)
        self._failed = asyncio.Event()
        self._failure: BaseException | None = None
        self._embedded: Any = None
        self._lease_kube: KubeClient | None = None
        self._lease_thread: LoopThread | None = None
        self._servers: list[Any] = []
        self._started = False
        self.kube: KubeClient | None = None
        self.edge: EdgeServer | None = None
        self.lifecycle: NodeLifecycle | None = None
        self.events: EventRecorder | None = None
        self.pod_writer: PodReportWriter | None = None
        self.replicas: ReplicaLeases | None = None  # with ha.enabled
        self.ownership: NodeOwnership | None = None
        self.overload: LoopLag | None = None  # with ha.overload_lag > 0
        self._claims_in_flight = 0
        self.claims_refused = 0  # sessions turned away at ha.claims_in_flight_max
        self.health = HealthServer(
            self.metrics,
            self.readiness,
            settings.observability.http_host,
            settings.observability.http_port,
        )
        self.quic_port: int | None = None
        self.quic_receive_buffer: int | None = None
        """Bytes of UDP receive buffer the kernel granted the QUIC socket (as it reports
        them: twice what it holds for data, on Linux)."""
        self.websocket_port: int | None = None

    # -- for extensions ------------------------------------------------------------------------

    def add_informer(self, rt: ResourceType, **kwargs: Any) -> Informer:
        """A shared informer started with the hub's (and waited for before serving).

        Raises:
            HubError: called after the hub started serving.
        """
        if self.kube is None or self._started:
            raise HubError("add_informer() is for extensions, before the hub serves")
        k = self.settings.kube
        view, informers = scoped_informers(
            self.kube, rt, k.namespaces, watch_timeout=k.watch_timeout, **kwargs
        )
        self._informers += informers
        return view  # type: ignore[return-value]  # same reading side (cloudhub.kube.scoped)

    def add_task(self, coro: Coroutine[Any, Any, Any], name: str) -> None:
        """Run a background coroutine owned by the hub (cancelled at close; if it fails,
        the hub stops)."""
        self._scope.create_task(coro, name=name)

    @property
    def embedded_api(self) -> Any:
        """The embedded API server (``cloudhub.standalone.EmbeddedAPIServer``) when the
        hub runs one (no kubeconfig, not in a cluster), else ``None``: extensions serve
        in-process API groups on it (``add_api``)."""
        return self._embedded

    @property
    def informers(self) -> list[Informer]:
        """Every shared informer."""
        return list(self._informers)

    @property
    def http_port(self) -> int:
        """The bound port of ``/metrics``, ``/healthz``, ``/readyz``."""
        return self.health.port

    # -- start and stop --------------------------------------------------------------------------

    async def __aenter__(self) -> Hub:
        try:
            await self.start()
        except BaseException:
            await self.aclose()
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def start(self) -> None:
        """Start everything; returns once edges are being served.

        Raises:
            ConfigError: unusable settings (TLS files, kubeconfig, ports).
            TransportError: an edge listener cannot bind.
        """
        s = self.settings
        await self.health.start()
        self.kube = await self._connect_kube()
        if s.ha.enabled:
            # The replica Lease's renewals on a client of their own, as kube-controller-
            # manager's leader election has: queued behind a burst of node writes on the
            # shared pool (64 connections; 3,333 claims at a replica's start), a renewal
            # missed its deadline and fenced a replica whose API was reachable.
            # Since 2026-12-05 on a thread of its own as well (cloudhub/ha/keeper.py): a
            # serving loop 6.4 s late in a 10,000-node ramp fenced replicas the same way.
            self._lease_thread = LoopThread("replica-lease")
            self._lease_kube = await self._lease_thread.call(self._connect_kube(max_connections=2))
        self._build()
        for extension in self._extensions:
            result = extension(self)
            if inspect.isawaitable(result):
                await result
        for informer in self._informers:
            self._scope.create_task(informer.run(), name=f"informer-{informer.rt.plural}")
        await self._wait_synced()
        for node in self._nodes.items():
            name = (node.get("metadata") or {}).get("name")
            if name and name not in self.registry:
                self.lifecycle.watch_unseen(name)  # type: ignore[union-attr]
        assert self.pod_writer is not None and self.events is not None
        assert self.lifecycle is not None
        self._scope.create_task(self.pod_writer.run(), name="pod-writer")
        self._scope.create_task(self.events.run(), name="events")
        self._scope.create_task(self.lifecycle.run(), name="node-lifecycle")
        if self.replicas is not None:
            try:
                await self.replicas.start()
            except KubeNotFound as exc:
                raise ConfigError(
                    f"ha.namespace {s.ha.namespace!r} does not exist: create it (the hub's "
                    "namespace) or set ha.namespace"
                ) from exc
            self._scope.create_task(self.replicas.run(), name="replica-lease")
        source = self._credentials_source()
        await self._listen(source())  # after extensions
        self.metrics.watch_listeners(
            lambda: self._servers, lambda: self.heap.trims if self.heap is not None else 0
        )
        self.reloader = CredentialsReloader(
            source,
            self._servers,
            interval_s=s.listen.credentials_check_interval,
            on_change=self.metrics.serving_certificate,
        )
        self.reloader.check()
        self._scope.create_task(self.reloader.run(), name="credentials")
        self._started = True
        log.info(
            "serving edges: quic %s, websocket %s, metrics :%s",
            self.quic_port,
            self.websocket_port,
            self.http_port,
        )

    def _credentials_source(self) -> Callable[[], TLSCredentials]:
        if self.credentials_source is not None:
            return self.credentials_source
        fixed = self.credentials
        if fixed is not None:
            return lambda: fixed
        return _file_credentials(self.settings)

    async def _connect_kube(self, **extra: Any) -> KubeClient:
        """A client of the API the settings name (``extra``: KubeClient options, e.g.
        ``max_connections``); the embedded API is started by the first call."""
        k = self.settings.kube
        kwargs = {"request_timeout": k.request_timeout, "observer": self.metrics.observe_request}
        kwargs.update(extra)
        if k.mode == "kubeconfig":
            assert k.kubeconfig is not None
            return await KubeClient.from_kubeconfig(str(k.kubeconfig), context=k.context, **kwargs)
        if k.mode == "in-cluster":
            return KubeClient.in_cluster(**kwargs)
        if self._embedded is not None:
            return await KubeClient.from_kubeconfig(str(self._embedded.kubeconfig_path), **kwargs)
        from cloudhub.standalone import APIServerSettings, EmbeddedAPIServer, StandaloneError

        try:
            self._embedded = EmbeddedAPIServer(
                APIServerSettings(
                    data_dir=k.embedded_data_dir,
                    host=k.embedded_host,
                    port=k.embedded_port,
                    event_ttl_s=k.embedded_event_ttl,
                )
            )
            await self._embedded.__aenter__()
        except (StandaloneError, OSError) as exc:
            self._embedded = None
            raise ConfigError(f"cannot start the embedded API server: {exc}") from exc
        log.info("embedded API server at %s", self._embedded.url)
        return await KubeClient.from_kubeconfig(str(self._embedded.kubeconfig_path), **kwargs)

    def _build(self) -> None:
        s = self.settings
        kube = self.kube
        assert kube is not None
        watch = s.kube.watch_timeout
        scope = s.kube.namespaces  # namespaced mode: one informer per listed namespace
        pods, pod_informers = scoped_informers(
            kube,
            PODS,
            scope,
            field_selector="spec.nodeName!=",
            indexers=POD_INDEXERS,
            transform=strip_object,
            watch_timeout=watch,
        )
        configmaps, cm_informers = scoped_informers(
            kube, CONFIGMAPS, scope, transform=strip_object, watch_timeout=watch
        )
        secrets, secret_informers = scoped_informers(
            kube, SECRETS, scope, transform=strip_object, watch_timeout=watch
        )
        self._nodes = Informer(
            kube, NODES, label_selector=EDGE_ROLE_LABEL, transform=slim_node, watch_timeout=watch
        )
        self._informers += [*pod_informers, *cm_informers, *secret_informers, self._nodes]
        self.pods = pods
        self.nodes = self._nodes  # edge Nodes, slim (_slim_node): labels and conditions
        PodSource(pods, configmaps, secrets, self.objects)
        node_bucket = TokenBucket(s.nodes.qps, s.nodes.burst)
        self.events = EventRecorder(
            kube,
            node_bucket,
            self.metrics,
            namespace=s.nodes.event_namespace,
            instance=self.identity,
        )
        self.pod_writer = PodReportWriter(
            kube,
            pods,
            TokenBucket(s.status.qps, s.status.burst),
            self.metrics,
            workers=s.status.workers,
            retry_cap=s.status.retry_cap,
            on_refused=self._pod_report_refused,
            may_write=self._owns,
        )
        PodHandlers(self.authorizer, self.pod_writer).register(self.dispatcher)
        self.events.register(self.dispatcher, self.authorizer)
        if s.ha.enabled:
            self._build_ha()
        self.lifecycle = NodeLifecycle(
            kube,
            s.nodes,
            node_bucket,
            self.metrics,
            self.events,
            self.registry,
            cached_node=lambda name: self._nodes.get(name),
            ownership=self.ownership,
        )
        self.edge = EdgeServer(
            self.registry,
            self.objects,
            self.dispatcher,
            self.metrics,
            heartbeat_interval=s.session.heartbeat_interval,
            on_refused=self._refused,
            on_dead_letter=self._dead_letter,
            on_sent=self._sent,
        )
        self.edge.on_session_refused.append(self._session_refused)
        if s.ha.overload_lag > 0:  # before the claim: a refused session costs no write
            self.overload = LoopLag(s.ha.overload_lag, s.ha.overload_retry_max)
            self.edge.admission.append(self.overload.admit)
            self._scope.create_task(self.overload.run(), name="loop-lag")
        if self.ownership is not None:
            self.edge.admission.append(self._claim)
            self.edge.on_abandoned.append(self._abandoned)
        self._nodes.add_handler(self._on_node)
        self.metrics.watch(
            sessions=self.registry.sessions,
            informers=lambda: self._informers,
            status_pending=lambda: len(self.pod_writer) if self.pod_writer is not None else 0,
        )

    def _build_ha(self) -> None:
        """Replica Leases and node ownership (docs/hub.md, "High availability")."""
        s = self.settings
        assert self.kube is not None
        if self._lease_kube is not None:
            replicas = ReplicaLeases(
                self._lease_kube,
                s.ha,
                s.ha.identity or self.identity,
                thread=self._lease_thread,
                reader=self.kube,
            )
        else:
            replicas = ReplicaLeases(self.kube, s.ha, s.ha.identity or self.identity)
        self.replicas = replicas
        informer = Informer(
            self.kube,
            LEASES,
            namespace=s.ha.namespace,
            label_selector=REPLICA_LABEL,
            watch_timeout=s.kube.watch_timeout,
        )
        informer.add_handler(replicas.observe)
        self._informers.append(informer)
        self.ownership = NodeOwnership(
            self.kube,
            replicas,
            lease_namespace=s.nodes.lease_namespace,
            lease_duration=s.nodes.lease_duration,
        )
        registry = self.registry
        self.ownership.on_lost.append(
            lambda node, reason: registry.close_node(node, CloseCode.GOING_AWAY, reason)
        )
        registry.on_disconnect.append(self._release_node)

    def _turning_away(self) -> bool:
        """Whether a session arriving now would be turned away once past TLS: the claims
        in flight are at ``ha.claims_in_flight_max``, or the loop is later than
        ``ha.overload_lag``. The WebSocket listener then sheds arrivals before TLS
        (``listen.max_pending_handshakes_busy``)."""
        if self.ownership is not None and self._claims_full():
            return True
        return self.overload is not None and self.overload.behind

    def _claims_full(self) -> bool:
        return self._claims_in_flight >= self.settings.ha.claims_in_flight_max

    async def _claim(self, link: Any) -> Refusal | None:
        assert self.ownership is not None and link.hello is not None
        ha = self.settings.ha
        if self._claims_full():
            self.claims_refused += 1
            return Refusal(
                CloseCode.OVERLOADED,
                f"{self._claims_in_flight} node ownership claims are being written to the API "
                "already: come back later",
                retry_after=random.random() * ha.claims_retry_max,  # full jitter
            )
        self._claims_in_flight += 1
        try:
            claim = await self.ownership.claim(link.hello.node_name)
        except KubeAPIError as exc:
            node = link.hello.node_name
            disown = self.ownership.disown(node)  # its write may have landed unanswered
            if disown is not None:
                self._scope.create_task(disown, name=f"disown-{node}")
            return Refusal(
                CloseCode.OVERLOADED,
                f"cannot record this node's owner in the API: {exc}",
                # full jitter: the agent takes retry_after as its delay (edgeagent dialer)
                retry_after=random.random() * self.settings.ha.replica_renew_interval,
            )
        finally:
            self._claims_in_flight -= 1
        if claim.granted:
            return None
        return Refusal(CloseCode.GOING_AWAY, claim.reason, retry_after=claim.retry_after)

    def _abandoned(self, link: Any) -> None:
        """A link closed during admission: if its claim was granted and no session of the
        node is served here, release the node at once (held without a session, every
        other replica would turn the agent away as served here until this one stops)."""
        node = link.hello.node_name if link.hello is not None else ""
        if not node or self.ownership is None or self.registry.get(node) is not None:
            return
        clear = self.ownership.release(node)
        if clear is not None:
            self._scope.create_task(clear, name=f"release-{node}")

    def _owns(self, node: str) -> bool:
        """Whether this replica may write for ``node`` (always, without HA)."""
        return self.ownership is None or self.ownership.holds(node)

    def _release_node(self, session: Any, was_current: bool) -> None:
        if not was_current or self.ownership is None:
            return
        clear = self.ownership.release(session.node)
        if clear is not None:
            self._scope.create_task(clear, name=f"release-{session.node}")

    async def _wait_synced(self) -> None:
        pending = {asyncio.ensure_future(i.synced.wait()) for i in self._informers}
        failed = asyncio.ensure_future(self._failed.wait())
        try:
            while pending:
                done, pending = await asyncio.wait(
                    pending | {failed}, return_when=asyncio.FIRST_COMPLETED
                )
                if failed in done:
                    raise HubError(f"a hub task failed while starting: {self._failure!r}")
                pending.discard(failed)
        finally:
            for future in (*pending, failed):
                future.cancel()
            await asyncio.gather(*pending, failed, return_exceptions=True)

    async def _listen(self, credentials: TLSCredentials) -> None:
        s = self.settings
        assert self.edge is not None
        config = s.session.session_config()
        if s.listen.quic:
            quic = await serve_quic(
                self.edge.handle,
                s.listen.quic_host,
                s.listen.quic_port,
                credentials=credentials,
                config=config,
                hello_timeout=s.listen.hello_timeout,
                receive_buffer=s.listen.quic_receive_buffer,
                max_datagram_size=s.listen.quic_max_datagram_size,
                loopback_datagram_size=s.listen.quic_loopback_datagram_size,
            )
            self._servers.append(quic)
            self.quic_port = quic.port
            self.quic_receive_buffer = quic.receive_buffer
            if s.listen.quic_receive_buffer:
                # Linux reports twice the bytes it holds for data (bookkeeping included).
                log.info(
                    "QUIC receive buffer %d bytes (asked %d; net.core.rmem_max caps it)",
                    quic.receive_buffer // 2,
                    s.listen.quic_receive_buffer,
                )
        if s.listen.websocket:
            ws = await serve_websocket(
                self.edge.handle,
                s.listen.websocket_host,
                s.listen.websocket_port,
                credentials=credentials,
                config=config,
                hello_timeout=s.listen.hello_timeout,
                backlog=s.listen.backlog,
                max_pending_per_source=s.listen.max_pending_handshakes_per_source,
                max_pending=s.listen.max_pending_handshakes,
                busy=self._turning_away,
                max_pending_busy=s.listen.max_pending_handshakes_busy,
            )
            self._servers.append(ws)
            self.websocket_port = ws.port
            self.heap = HeapTrimmer(lambda: ws.unfinished)
            self._scope.create_task(self.heap.run(), name="heap-trim")

    async def aclose(self) -> None:
        """Stop serving and release everything (idempotent).

        The agents are sent away with ``GOING_AWAY`` and a ``retry_after`` spread over
        sessions / ``ha.shutdown_reconnect_rate`` seconds (at most ``ha.shutdown_spread_max``,
        full jitter); Leases that could go stale meanwhile are renewed first
        (:mod:`cloudhub.ha.handover`).
        """
        ha = self.settings.ha
        spread = shutdown_spread(
            len(self.registry), ha.shutdown_reconnect_rate, ha.shutdown_spread_max
        )
        going_away = full_jitter(spread)
        if self.edge is not None:
            self.edge.going_away_retry = going_away
            self.edge.closing = True
        if self._started and self.lifecycle is not None and self.kube is not None:
            self._started = False
            older_than = renew_before_stop(self.settings.nodes.not_ready_grace, spread)
            try:
                renewed = await asyncio.wait_for(
                    self.lifecycle.renew_stale(older_than), _RENEW_BEFORE_STOP_S
                )
            except asyncio.TimeoutError:
                log.warning(
                    "stopping: Lease renewals took over %.0f s; stopped them", _RENEW_BEFORE_STOP_S
                )
            else:
                log.info(
                    "stopping: renewed %d node Leases older than %.1f s; "
                    "agents reconnect over %.1f s",
                    renewed,
                    older_than,
                    spread,
                )
        if self.replicas is not None and self.kube is not None:
            # The handover: stop writing for every node, then delete this replica's Lease
            # (one write) so that the others take the nodes over as their agents arrive.
            assert self.ownership is not None
            self.ownership.drop_all()
            await self.replicas.release()
        servers, self._servers = self._servers, []
        await asyncio.gather(
            *(server.aclose(going_away) for server in servers), return_exceptions=True
        )
        await self.dispatcher.aclose()
        if self.edge is not None:
            self.edge.turned_away.close()
        await self._scope.aclose()
        if self.replicas is not None:
            self.replicas.close()
        if self.kube is not None:
            await self.kube.close()
            self.kube = None
        if self._lease_kube is not None:
            assert self._lease_thread is not None
            with contextlib.suppress(Exception):
                await self._lease_thread.call(self._lease_kube.close())
            self._lease_kube = None
        if self._lease_thread is not None:
            await asyncio.to_thread(self._lease_thread.close)
            self._lease_thread = None
        if self._embedded is not None:
            embedded, self._embedded = self._embedded, None
            await embedded.__aexit__(None, None, None)
        await self.health.aclose()

    async def serve_forever(self) -> None:
        """Wait until a background task fails (then raise it); cancel to stop.

        Raises:
            HubError: a background task failed (its exception chained).
        """
        await self._failed.wait()
        raise HubError(f"a hub task failed: {self._failure!r}") from self._failure

    def _task_failed(self, task: asyncio.Task[Any], exc: BaseException) -> None:
        log.error("hub task %s failed", task.get_name(), exc_info=exc)
        self._failure = exc
        self._failed.set()

    # -- glue ---------------------------------------------------------------------------------

    async def readiness(self) -> list[str]:
        """Why the hub is not ready (empty when it is): API unreachable, informers not
        synced, not serving yet."""
        reasons = []
        if self.kube is None:
            return ["no Kubernetes client yet"]
        try:
            await self.kube.version(timeout=self.settings.observability.ready_api_timeout)
        except KubeAPIError as exc:
            reasons.append(f"Kubernetes API unreachable: {exc}")
        for informer in self._informers:
            if not informer.synced.is_set():
                reasons.append(f"informer {informer.rt.plural} not synced")
        if not self._started:
            reasons.append("not serving edges yet")
        return reasons

    def _on_node(self, event: str, node: dict, old: dict | None) -> None:
        if event != "DELETED":
            return
        name = (node.get("metadata") or {}).get("name") or ""
        log.info("Node deleted", extra={"node": name})
        self.registry.close_node(name, CloseCode.UNAUTHORIZED, f"Node {name} was deleted")
        self.registry.forget(name)
        if self.lifecycle is not None:
            self.lifecycle.forget(name)
        for hook in self.on_node_deleted:
            try:
                hook(name)
            except Exception:
                log.exception("on_node_deleted hook failed", extra={"node": name})

    def status_refused(
        self, resource: str, involved: dict, node: str, what: str, error: KubeAPIError
    ) -> None:
        """An edge's report the API refused for good (e.g. 422): a Warning Event
        ``FailedStatusUpdate`` on the object and ``edgefleet_hub_status_writes_refused_total``
        (the writers of pod and Device status call it).

        Args:
            resource: the plural, for the metric (``pods``, ``devices``).
            involved: the Event's ``involvedObject``.
            node: the node whose report it was.
            what: what was refused, in words (``"status"``).
            error: the API's answer.
        """
        self.metrics.status_refused.labels(resource, error.reason or str(error.status)).inc()
        if self.events is not None:
            self.events.record(
                involved,
                "Warning",
                "FailedStatusUpdate",
                f"the API refused the {what} reported by node {node}, so what the API shows "
                f"is stale: {error}",
                host=node,
            )

    def _pod_report_refused(self, node: str, ref: Any, what: str, error: KubeAPIError) -> None:
        involved = {
            "apiVersion": "v1",
            "kind": "Pod",
            "namespace": ref.namespace,
            "name": ref.name,
            "uid": ref.uid,
        }
        self.status_refused("pods", involved, node, what, error)

    def _session_refused(self, link: Any, reason: str) -> None:
        # On the Node the certificate names (not whatever the hello claims).
        node = link.peer_node_name or (link.hello.node_name if link.hello else "")
        if self.events is not None and node:
            self.events.node_event(
                node, "Warning", "SessionRefused", f"{link.transport} session refused: {reason}"
            )

    def _sent(self, session: Any, message: Message) -> None:
        """A message reached a node's link: an object dead-lettered earlier that now went
        (a smaller version, or its delete) leaves the table."""
        settled = self.dead_letters.delivered(session.node, message)
        if settled is not None:
            session.log.info("dead letter settled: %s %s sent", message.kind, settled.ref)

    def _dead_letter(self, session: Any, message: Message, error: InvalidMessage) -> None:
        """A message for a node that cannot be sent (:mod:`cloudhub.bridge.deadletters`):
        the metric, the table, and a Warning Event on the object and on the node's pods
        that use it (so ``kubectl describe pod`` says why its ConfigMap never arrives)."""
        too_large = isinstance(error, MessageTooLarge)
        reason = "too_large" if too_large else "invalid"
        self.metrics.dead_letters.labels("down", message.kind, reason).inc()
        node = session.node
        ref = message.ref if isinstance(message, ObjectUpsert) else None
        what = message.kind if ref is None else f"{ref.kind} {ref.namespace}/{ref.name}"
        if too_large:
            assert isinstance(error, MessageTooLarge)
            detail = (
                f"{what} is {error.size / 1048576:.1f} MiB ({error.size} bytes) encoded, over "
                f"the {error.limit} bytes the session to node {node} carries "
                "(session.max_message_size of the hub and the agent, the smaller)"
            )
        else:
            detail = f"{what} cannot be sent to node {node}: {error}"
        self.dead_letters.add(DeadLetter(node, message.kind, ref, detail, time.time()))
        session.log.error("dead letter: %s", detail)
        if too_large and ref is not None and ref.kind in PLACEHELD_KINDS:
            # In its place, its identity: the pods on the edge say why, not "not found".
            assert isinstance(error, MessageTooLarge)
            assert isinstance(message, ObjectUpsert)
            body = placeholder(message.object, error.size, error.limit)
            session.send(ObjectUpsert(ref, message.resource_version, body))
        if ref is None or self.events is None:
            return
        involved = {"apiVersion": "v1", "kind": ref.kind, "namespace": ref.namespace}
        involved.update(name=ref.name, uid=ref.uid)
        self.events.record(involved, "Warning", "ObjectTooLarge", f"not sent: {detail}", host=node)
        for pod in pods_using(ref, session.objects.desired(node).values()):
            meta = pod.get("metadata") or {}
            self.events.record(
                {"apiVersion": "v1", "kind": "Pod", "namespace": meta.get("namespace", "")}
                | {"name": meta.get("name", ""), "uid": meta.get("uid", "")},
                "Warning",
                "ObjectTooLarge",
                f"the pod cannot start on node {node}: {detail}",
                host=node,
            )

    def _refused(self, inbound: Inbound, code: ErrorCode, text: str) -> None:
        kind = type(inbound.message).kind
        self.metrics.refused.labels(kind, code.name).inc()
        inbound.session.log.warning(
            "refused %s (seq %s): %s: %s", kind, inbound.seq, code.name, text
        )
        if self.events is not None and code is not ErrorCode.UNSUPPORTED:
            self.events.node_event(
                inbound.node, "Warning", "MessageRefused", f"{kind} refused: {code.name}: {text}"
            )


def _file_credentials(settings: HubSettings) -> FileCredentials:
    tls = settings.tls
    missing = [k for k in ("ca_file", "cert_file", "key_file") if getattr(tls, k) is None]
    if missing:
        raise ConfigError("TLS material is required: set " + ", ".join(f"tls.{k}" for k in missing))
    return FileCredentials(tls.ca_file, tls.cert_file, tls.key_file)  # type: ignore[arg-type]
