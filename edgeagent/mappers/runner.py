"""Run one handler task per device of a protocol, following devices as they come and go.

Layers (STYLE.md §7): ``serve_devices`` is the outer loop (list devices, start/stop one
task per device, resync every ``resync_interval`` s, survive the agent being away); a
handler is the inner loop for one device. A handler task is restarted when its Device
changes (new uid or new configuration) and cancelled when the Device leaves the node.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Awaitable, Callable

from edgeagent.mappers.sdk import (
    APIUnavailable,
    DeviceAPIError,
    DeviceClient,
    DeviceInfo,
    within,
)

log = logging.getLogger(__name__)

DeviceHandler = Callable[[DeviceClient, DeviceInfo], Awaitable[None]]
"""``async def handler(client, device)``: serves one device until cancelled."""


async def serve_devices(
    client: DeviceClient,
    protocol_name: str,
    handler: DeviceHandler,
    *,
    stop: asyncio.Event,
    resync_interval: float = 30.0,
) -> None:
    """Serve every device of ``protocol_name`` on this node with ``handler`` until ``stop``.

    Args:
        client: the device API client.
        protocol_name: devices whose ``spec.protocol.protocolName`` equals this are served.
        handler: run once per device, as its own task.
        stop: set it to return; all handler tasks are cancelled and awaited first.
        resync_interval: seconds between device list refreshes; a handler that ended
            (returned or raised) is started again at the next refresh.
    """
    running: dict[str, tuple[DeviceInfo, asyncio.Task[None]]] = {}
    try:
        while not stop.is_set():
            try:
                devices = [
                    d for d in await client.list_devices() if d.protocol_name == protocol_name
                ]
            except (APIUnavailable, DeviceAPIError) as exc:
                log.warning("cannot list devices (%s); retrying in %.0f s", exc, resync_interval)
            else:
                wanted = {d.uid: d for d in devices}
                for uid in list(running):
                    info, task = running[uid]
                    if uid not in wanted or wanted[uid] != info or task.done():
                        await _stop(task)
                        del running[uid]
                for uid, info in wanted.items():
                    if uid not in running:
                        log.info("serving device %s/%s", info.namespace, info.name)
                        task = asyncio.create_task(
                            _guard(handler, client, info), name=f"mapper:{info.name}"
                        )
                        running[uid] = (info, task)
            with contextlib.suppress(asyncio.TimeoutError):
                await within(resync_interval, stop.wait())
    finally:
        for _, task in running.values():
            await _stop(task)


async def _guard(handler: DeviceHandler, client: DeviceClient, device: DeviceInfo) -> None:
    try:
        await handler(client, device)
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("handler for %s/%s failed; restarting at next resync", *_name(device))


def _name(device: DeviceInfo) -> tuple[str, str]:
    return device.namespace, device.name


async def _stop(task: asyncio.Task[None]) -> None:
    """Cancel ``task`` and wait until it is done, without swallowing our own cancellation.

    Cancels again while it runs on: a handler may have lost one cancellation inside
    ``asyncio.wait_for`` (CPython gh-86296, before 3.12).
    """
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=1.0)


def run_main(main: Callable[[asyncio.Event], Awaitable[None]]) -> int:
    """Run ``main(stop)`` under asyncio; SIGTERM and SIGINT set ``stop``. Returns 0."""

    async def runner() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await main(stop)

    asyncio.run(runner())
    return 0
