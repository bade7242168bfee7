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
- :class:`~edgeagent.streams.HubStreams`, always: where the uplink picks up twin reports
  and metrics batches and hands back acknowledgements and ``twin_desired``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from edgeagent.streams import HubStreams

if TYPE_CHECKING:
    from edgeagent.agent import AgentContext, AgentService
    from edgeagent.devices import EdgeTwins
    from edgeagent.devices.feed import TwinFeed
    from edgeagent.runtime import ContainerRuntime
    from edgeagent.settings import AgentSettings
    from edgeagent.store import Store

__all__ = ["Builtins", "DeviceAPIService", "MetricsAgentService", "build_builtins"]

log = logging.getLogger(__name__)


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

    async def run(self, ctx: AgentContext) -> None:
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
    """Samples node and container metrics and delivers them through the streams.

    Args:
        settings: the agent settings (``metrics`` group).
        streams: the uplink seam (the metrics service's ``MetricsUplink``).
        wall_clock: seconds since the epoch.
        monotonic: monotonic seconds.
    """

    name = "metrics"

    def __init__(
        self,
        settings: AgentSettings,
        streams: HubStreams,
        *,
        wall_clock: Callable[[], float],
        monotonic: Callable[[], float],
    ) -> None:
        self._settings = settings
        self._streams = streams
        self._wall = wall_clock
        self._mono = monotonic

    async def run(self, ctx: AgentContext) -> None:
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
            self._streams,
            wall_clock=self._wall,
            mono_clock=self._mono,
        )
        self._streams.attach_metrics(service)
        try:
            await service.run()
        finally:
            self._streams.attach_metrics(None)


@dataclasses.dataclass
class Builtins:
    """The built-in parts of a running agent.

    Attributes:
        twins: the node's twins, ``None`` when devices are disabled.
        streams: the uplink's seam for twin reports and metrics batches.
        services: to start after READY (device API, metrics), as enabled.
    """

    twins: EdgeTwins | None
    streams: HubStreams
    services: list[AgentService]
    _feed: TwinFeed | None = None

    def close(self) -> None:
        """Stop following the store."""
        if self._feed is not None:
            self._feed.close()
        self.streams.close()


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
    services: list[AgentService] = []
    if settings.devices.enabled:
        from edgeagent.devices import EdgeTwins
        from edgeagent.devices.feed import TwinFeed

        twins = EdgeTwins(store.twins(), history_limit=settings.devices.history_limit)
        feed = TwinFeed(store, twins, settings.node_name)
        feed.start()
        services.append(DeviceAPIService(twins, settings))
    streams = HubStreams(store, settings.node_name, twins=twins)
    if settings.metrics.enabled:
        services.append(
            MetricsAgentService(settings, streams, wall_clock=wall_clock, monotonic=monotonic)
        )
    log.debug("built-in services: %s", ", ".join(s.name for s in services) or "none")
    return Builtins(twins, streams, services, feed)
