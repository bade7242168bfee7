"""The agent daemon: store, runtime, pod reconciler, housekeeping and plug-in services.

Start-up order (what ``edgeagent run`` does):

1. open the store (a damaged file is moved aside; another agent holding it is fatal);
2. reach the container runtime, retrying while the engine is not up yet;
3. start the pod reconciler — every cached pod is brought back at once, with no hub;
4. load the device twins from the store's Device/DeviceModel objects (when enabled);
5. tell systemd ``READY=1`` (not waiting for the cloud: the agent works offline);
6. start the built-in services (the device API, metrics: :mod:`edgeagent.services`), the
   given services (the hub session plugs in here; it finds the up-going sources and
   down-handlers of the built-in parts in its :class:`AgentContext`) and the
   housekeeping loop (commits batched store writes, pings the systemd watchdog, keeps
   ``STATUS=`` current).

SIGTERM sets the stop event: the agent commits the store and exits; pods keep running,
as with kubelet.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from edgeagent.errors import ContainerRuntimeError, StoreError
from edgeagent.pods.reconciler import PodReconciler
from edgeagent.runtime import ContainerRuntime, make_runtime
from edgeagent.sdnotify import Notifier
from edgeagent.settings import AgentSettings
from edgeagent.store import Store
from edgeagent.tasks import TaskSet, wait_event

if TYPE_CHECKING:
    from edgeagent.devices import EdgeTwins
    from edgeagent.uplink.sources.base import DownHandler, UpSource

__all__ = ["Agent", "AgentContext", "AgentService", "detect_host_ip"]

log = logging.getLogger(__name__)

STATUS_REFRESH = 10.0
"""Seconds between checks of the one-line systemd status (sent only when it changed)."""


@dataclasses.dataclass(frozen=True)
class AgentContext:
    """What a service gets: the running agent's parts.

    Attributes:
        settings: the agent settings.
        store: the open store (objects in, outbox out, agent state).
        runtime: the connected container runtime.
        reconciler: the pod reconciler.
        node_name: this node's name.
        host_ip: this node's IP.
        twins: the node's device twins (``None`` when ``devices.enabled`` is off): the
            uplink has no need of them beyond ``streams``.
        streams: twin reports and metrics batches for the uplink, and where it hands
            back their acknowledgements and ``twin_desired`` (see ``edgeagent.streams``).
    """

    settings: AgentSettings
    store: Store
    runtime: ContainerRuntime
    reconciler: PodReconciler
    node_name: str
    host_ip: str
    twins: EdgeTwins | None = None
    sources: tuple[UpSource, ...] = ()
    handlers: Mapping[type, DownHandler] = dataclasses.field(default_factory=dict)


class AgentService(Protocol):
    """A long-running part of the agent started after READY (the hub uplink, later the
    device API and the metrics sampler). ``run`` returns only when cancelled; if it raises,
    the error is logged and the service is restarted after a pause."""

    name: str

    async def run(self, ctx: AgentContext) -> None: ...


def detect_host_ip() -> str:
    """The address of the interface that routes outwards (a UDP ``connect`` sends no
    packet); ``127.0.0.1`` when there is no route (offline boot)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))  # TEST-NET-1
            return str(s.getsockname()[0])
    except OSError:
        return "127.0.0.1"


class Agent:
    """The edge agent process.

    Args:
        settings: loaded settings.
        notifier: systemd notifier (a disabled one outside systemd).
        services: started after READY, each in its own task.
        wall_clock: seconds since the epoch.
        monotonic: monotonic seconds (commit and watchdog scheduling).
    """

    def __init__(
        self,
        settings: AgentSettings,
        *,
        notifier: Notifier,
        services: Sequence[AgentService] = (),
        wall_clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.notifier = notifier
        self.services = list(services)
        self._wall = wall_clock
        self._mono = monotonic
        self._dirty = asyncio.Event()
        self._status_line = ""
        self._flush_error_at: float | None = None
        self.context: AgentContext | None = None

    async def run(self, stop: asyncio.Event) -> None:
        """Run until ``stop`` is set.

        Raises:
            StoreError: the store cannot be opened (e.g. another agent holds it).
            ConfigError: bad settings.
        """
        settings = self.settings
        store = Store.open(
            settings.store_path, settings.store, wall_clock=self._wall, monotonic=self._mono
        )
        runtime: ContainerRuntime | None = None
        builtins = None
        tasks = TaskSet("agent")
        try:
            store.add_dirty_hook(self._dirty.set)
            store.set_state("node.name", settings.node_name)
            host_ip = settings.node_ip or detect_host_ip()
            runtime = make_runtime(settings.runtime, settings.state_dir, host_ip)
            if not await self._connect(runtime, stop):
                return
            reconciler = PodReconciler(
                store,
                runtime,
                settings,
                node_name=settings.node_name,
                host_ip=host_ip,
                wall_clock=self._wall,
            )
            from edgeagent.services import build_builtins

            builtins = build_builtins(
                settings, store, runtime, wall_clock=self._wall, monotonic=self._mono
            )
            ctx = AgentContext(
                settings,
                store,
                runtime,
                reconciler,
                settings.node_name,
                host_ip,
                twins=builtins.twins,
                sources=builtins.sources,
                handlers=builtins.handlers,
            )
            self.context = ctx
            core = [
                tasks.spawn(reconciler.run(), "reconciler"),
                tasks.spawn(self._housekeeping(store, reconciler), "housekeeping"),
            ]
            self.notifier.ready(self._status(store, reconciler))
            log.info(
                "edge agent ready: node %s, %s, %d cached pod(s)",
                settings.node_name,
                runtime.kind,
                len(store.list_objects("Pod")),
            )
            for service in [*builtins.services, *self.services]:
                tasks.spawn(self._supervise(service, ctx), service.name)
            stopper = asyncio.ensure_future(stop.wait())
            try:
                done, _ = await asyncio.wait([stopper, *core], return_when=asyncio.FIRST_COMPLETED)
            finally:
                stopper.cancel()
            for task in core:
                if task in done and not task.cancelled() and task.exception() is not None:
                    raise task.exception()  # type: ignore[misc]
        finally:
            self.notifier.stopping("stopping; pods keep running")
            await tasks.close()
            if builtins is not None:
                builtins.close()
            if runtime is not None:
                await runtime.close()
            try:
                store.close()
            except StoreError as exc:
                log.error("final store commit failed: %s", exc)

    async def _connect(self, runtime: ContainerRuntime, stop: asyncio.Event) -> bool:
        delay = self.settings.runtime.connect_retry
        while not stop.is_set():
            try:
                description = await runtime.connect()
                log.info("container runtime: %s", description)
                return True
            except ContainerRuntimeError as exc:
                self.notifier.status(f"waiting for the container runtime: {exc}")
                self.notifier.watchdog()
                log.warning("%s; retrying in %.0fs", exc, delay)
            await wait_event(stop, delay)
        return False

    async def _supervise(self, service: AgentService, ctx: AgentContext) -> None:
        while True:
            try:
                await service.run(ctx)
                return
            except asyncio.CancelledError:
                raise
            except StoreError as exc:  # a known condition (disk full, damage): its words
                log.error("service %s failed: %s; restarting in 5s", service.name, exc)
            except Exception:
                log.exception("service %s failed; restarting in 5s", service.name)
            await asyncio.sleep(5.0)

    def _status(self, store: Store, reconciler: PodReconciler) -> str:
        counts = reconciler.summary()
        total = sum(counts.values())
        hub = (store.get_state("hub.session") or {}).get("state", "no hub session")
        return (
            f"{total} pod(s), {counts.get('Running', 0)} running; "
            f"outbox {store.outbox_depth()}; hub: {hub}"
        )

    async def _store_upkeep(self, store: Store) -> None:
        """Win the write lock back after writes failed on another process's (the writers
        are told to write again), at most one second at a time so that the watchdog
        keeps its pace; give free pages back once a backlog drained."""
        if store.write_lock_lost:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(store.wait_writable(), timeout=1.0)
        try:
            store.reclaim()
        except StoreError as exc:
            log.warning("giving the store's free space back failed: %s", exc)

    async def _housekeeping(self, store: Store, reconciler: PodReconciler) -> None:
        """Commit batched writes when due, ping the watchdog, refresh STATUS=."""
        watchdog = self.notifier.watchdog_interval
        next_watchdog = self._mono() if watchdog else float("inf")
        next_status = self._mono() + STATUS_REFRESH
        while True:
            if store.damaged is not None:
                raise store.damaged
            now = self._mono()
            due = store.flush_due()
            if due is not None and self._flush_error_at is not None:
                due = max(due, self._flush_error_at + self.settings.store.full_retry)
            if due is not None and due <= now:
                try:
                    store.flush()
                    self._flush_error_at = None
                except StoreError as exc:
                    self._flush_error_at = now
                    reconciler.store_failed(exc)
            await self._store_upkeep(store)
            if next_watchdog <= now:
                self.notifier.watchdog()
                next_watchdog = now + watchdog  # type: ignore[operator]
            if next_status <= now:
                line = self._status(store, reconciler)
                if line != self._status_line:
                    self._status_line = line
                    self.notifier.status(line)
                next_status = now + STATUS_REFRESH
            wake = min(next_watchdog, next_status)
            due = store.flush_due()
            if due is not None:
                if self._flush_error_at is not None:
                    due = max(due, self._flush_error_at + self.settings.store.full_retry)
                wake = min(wake, due)
            if store.write_lock_lost:
                wake = self._mono()  # back to waiting for the lock (_store_upkeep)
            self._dirty.clear()
            await wait_event(self._dirty, max(wake - self._mono(), 0))
