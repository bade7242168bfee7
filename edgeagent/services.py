"""The agent's built-in services: device twins with their local API, and metrics.

:func:`build_builtins` makes, from the settings, what the agent starts besides the pod
reconciler (each part only when enabled in the settings; both are by default):

- **device twins** (``devices.enabled``): ``EdgeTwins`` over the store's twin tables, fed
  from the store's Device and DeviceModel objects (:class:`~edgeagent.devices.feed.TwinFeed`:
  loaded here, before any service runs, then followed), and :class:`DeviceAPIService`, the
  local device API on ``devices.socket_path`` (default ``<state_dir>/devices.sock``). A
  report is answered once committed (``Store.wait_committed``).
- **metrics** (``metrics.enabled``): :class:`MetricsAgentService` samples the node and the
  runtime's containers (``ContainerRuntime.container_stats``) every
  ``metrics.sample_interval_s`` into the store's metrics buffer and delivers batches while
  a hub session is up. psutil is imported at the first sample.
- the uplink's sources for these streams, always: :class:`~edgeagent.uplink.sources.twins.
  TwinSource` (twin reports up; its ``on_desired`` the handler for ``twin_desired``) and,
  with metrics, :class:`~edgeagent.uplink.sources.metrics.MetricsSource` (sealed batches
  up). The hub session (``edgeagent.uplink.HubLink``) finds them in the
  :class:`~edgeagent.agent.AgentContext` (``sources``, ``handlers``) and drains them
  after the store's outbox.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, Union

from edgeagent.uplink.sources.metrics import MetricsSource
from edgeagent.uplink.sources.twins import TwinSource

if TYPE_CHECKING:
    from edgeagent.devices import EdgeTwins
    from edgeagent.devices.feed import TwinFeed
    from edgeagent.runtime import ContainerRuntime
    from edgeagent.settings import AgentSettings
    from edgeagent.store import Store
    from edgeagent.uplink.sources.base import DownHandler, UpSource

__all__ = [
    "Builtins",
    "DeviceAPIService",
    "MetricsAgentService",
    "ServiceContext",
    "build_builtins",
]

log = logging.getLogger(__name__)


class ServiceContext(Protocol):
    """What the built-in services use of the running agent (``edgeagent.agent.AgentContext``
    has it; passed in, so that this module does not import the agent)."""

    @property
    def store(self) -> Store: ...
    @property
    def runtime(self) -> ContainerRuntime: ...


class DeviceAPIService:
    """Serves the twins to mappers on the device API until cancelled.

    Args:
        twins: the node's twins.
        settings: the agent settings (``devices`` group; the socket path resolved).
    """

    name = "device-api"

    def __init__(self, twins: EdgeTwins, settings: AgentSettings) -> None:
        self._twins = twins
        self._settings = settings

    async def run(self, ctx: ServiceContext) -> None:
        """Listen until cancelled.

        Raises:
            APIStartError: the socket cannot be made (the agent retries after a pause).
        """
        from edgeagent.devices import DeviceAPIServer

        path = self._settings.device_socket_path()
        if not path.parent.exists():
            path.parent.mkdir(parents=True, mode=0o750, exist_ok=True)
        config = dataclasses.replace(self._settings.devices, socket_path=str(path))
        async with DeviceAPIServer(self._twins, config, durable=ctx.store.wait_committed):
            log.info("device API on %s (%d device(s))", path, len(self._twins.devices()))
            await asyncio.Event().wait()


class MetricsAgentService:
    """Samples node and container metrics into the store's buffer; the uplink's
    :class:`MetricsSource` delivers them.

    Args:
        settings: the agent settings (``metrics`` group).
        source: the uplink's metrics source (given the forwarder while this runs).
        wall_clock: seconds since the epoch.
        monotonic: monotonic seconds.
    """

    name = "metrics"

    def __init__(
        self,
        settings: AgentSettings,
        source: MetricsSource,
        *,
        wall_clock: Callable[[], float],
        monotonic: Callable[[], float],
    ) -> None:
        self._settings = settings
        self._source = source
        self._wall = wall_clock
        self._mono = monotonic

    async def run(self, ctx: ServiceContext) -> None:
        """Sample and deliver until cancelled.

        Raises:
            StoreError: the metrics buffer could not be created or written (the agent
                retries after a pause).
        """
        from edgeagent.metrics import MetricsForwarder, MetricsService, Sampler

        settings = self._settings.metrics
        if not settings.state_dir:
            settings = dataclasses.replace(settings, state_dir=str(self._settings.state_dir))
        forwarder = MetricsForwarder(ctx.store.metrics(), settings)
        service = MetricsService(
            settings,
            Sampler(settings, containers=ctx.runtime),
            forwarder,
            on_batch_due=self._source.batch_due,
            wall_clock=self._wall,
            mono_clock=self._mono,
        )
        self._source.attach(forwarder)
        try:
            await service.run()
        finally:
            self._source.attach(None)


BuiltinService = Union[DeviceAPIService, "MetricsAgentService"]
"""An agent service (``edgeagent.agent.AgentService``) built in."""


@dataclasses.dataclass
class Builtins:
    """The built-in parts of a running agent.

    Attributes:
        twins: the node's twins, ``None`` when devices are disabled.
        twin_source: the uplink's twin stream (reports up, ``twin_desired`` down).
        metrics_source: the uplink's metrics stream, ``None`` when metrics are disabled.
        services: to start after READY (device API, metrics), as enabled.
    """

    twins: EdgeTwins | None
    twin_source: TwinSource
    metrics_source: MetricsSource | None
    services: list[BuiltinService]
    _feed: TwinFeed | None = None

    @property
    def sources(self) -> tuple[UpSource, ...]:
        """The up-going streams for the hub session, besides the store's outbox."""
        sources: list[UpSource] = [self.twin_source]
        if self.metrics_source is not None:
            sources.append(self.metrics_source)
        return tuple(sources)

    @property
    def handlers(self) -> dict[type, DownHandler]:
        """The down-going kinds these parts handle (``twin_desired``)."""
        from protocol.messages import TwinDesired

        return {TwinDesired: self.twin_source.on_desired}

    def close(self) -> None:
        """Stop following the store."""
        if self._feed is not None:
            self._feed.close()
        self.twin_source.close()


def build_builtins(
    settings: AgentSettings,
    store: Store,
    runtime: ContainerRuntime,
    *,
    wall_clock: Callable[[], float],
    monotonic: Callable[[], float],
) -> Builtins:
    """Make the enabled built-in parts; the twins are loaded from the store before return.

    Args:
        settings: the agent settings.
        store: the open store.
        runtime: the connected runtime (container stats for metrics).
        wall_clock: seconds since the epoch.
        monotonic: monotonic seconds.

    Raises:
        StoreError: the twins could not be loaded from the store.
    """
    twins = feed = None
    services: list[BuiltinService] = []
    if settings.devices.enabled:
        from edgeagent.devices import EdgeTwins
        from edgeagent.devices.feed import TwinFeed

        twins = EdgeTwins(store.twins(), history_limit=settings.devices.history_limit)
        feed = TwinFeed(store, twins, settings.node_name)
        feed.start()
        services.append(DeviceAPIService(twins, settings))
    twin_source = TwinSource(
        twins, wall_clock=wall_clock, dead_letters=store, node_name=settings.node_name
    )
    metrics_source = None
    if settings.metrics.enabled:
        metrics_source = MetricsSource(settings.node_name, dead_letters=store)
        services.append(
            MetricsAgentService(
                settings, metrics_source, wall_clock=wall_clock, monotonic=monotonic
            )
        )
    log.debug("built-in services: %s", ", ".join(s.name for s in services) or "none")
    return Builtins(twins, twin_source, metrics_source, services, feed)
