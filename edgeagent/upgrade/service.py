"""The upgrade manager on the agent's hub link: orders in, chunks fetched, progress out.

:class:`UpgradeService` is an agent service (``Agent(services=[link, upgrades])``). Made
before the link runs, it registers on the :class:`~edgeagent.uplink.session.HubLink`:

- ``upgrade_order`` and ``upgrade_rollback``: carried out by the
  :class:`~edgeagent.upgrade.manager.UpgradeManager` in tasks the service owns (one at a
  time; an order cut by a lost session is dropped: the hub sends it again after the
  reconnect and the download resumes);
- ``artifact_chunk``: the answer to the manager's ``artifact_request``, matched by digest
  and offset;
- a task per session: once the hub welcomed this agent, ``on_connected`` (end a
  probation, report a rollback), then the progress reports that found no session, then a
  probation check every ``probation_check_s``.

Progress reports that find no session wait in memory for the next one. What must survive
a restart does so on disk instead: the probation and the rollback result (the guard's
files), the artifact (the cache).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from edgeagent.errors import HubUnavailable
from edgeagent.tasks import TaskSet
from edgeagent.upgrade.manager import UpgradeManager
from protocol.upgrade import (
    ArtifactChunk,
    ArtifactRequest,
    UpgradeOrder,
    UpgradeProgress,
    UpgradeRollback,
)

if TYPE_CHECKING:
    from edgeagent.uplink.session import HubLink

__all__ = ["UpgradeService"]

log = logging.getLogger(__name__)


class UpgradeService:
    """Agent upgrades over the hub link (see the module docstring).

    Args:
        link: the agent's hub link (not running yet).
        make_manager: ``(fetch, report) -> UpgradeManager`` with this service's I/O.
        chunk_timeout_s: seconds to wait for an ``artifact_chunk``.
        probation_check_s: seconds between two probation deadline checks.
    """

    name = "upgrades"

    def __init__(
        self,
        link: HubLink,
        make_manager: Callable[..., UpgradeManager],
        *,
        chunk_timeout_s: float = 30.0,
        probation_check_s: float = 5.0,
    ) -> None:
        self.link = link
        self.manager = make_manager(fetch=self._fetch, report=self._report)
        self.chunk_timeout_s = chunk_timeout_s
        self.probation_check_s = probation_check_s
        self._tasks = TaskSet("upgrades")
        self._waiting: dict[tuple[str, int], asyncio.Future[ArtifactChunk]] = {}
        self._unsent: list[UpgradeProgress] = []
        link.register(UpgradeOrder, self._on_order)
        link.register(UpgradeRollback, self._on_rollback)
        link.register(ArtifactChunk, self._on_chunk)
        link.add_session_task(self._per_session)

    async def run(self, ctx: Any) -> None:
        """Own the service's tasks until the agent stops."""
        try:
            await asyncio.Event().wait()
        finally:
            await self._tasks.close()

    # -- down --------------------------------------------------------------------------------

    def _on_order(self, order: UpgradeOrder) -> None:
        self._spawn(self.manager.handle_order(order), "order")

    def _on_rollback(self, message: UpgradeRollback) -> None:
        self._spawn(self.manager.handle_rollback(message), "rollback")

    def _spawn(self, work: Awaitable[Any], what: str) -> None:
        async def guarded() -> None:
            try:
                await work
            except (HubUnavailable, ConnectionError, TimeoutError) as exc:
                log.info("upgrade %s interrupted (%s); the hub sends it again", what, exc)

        self._tasks.spawn(guarded(), what)

    def _on_chunk(self, chunk: ArtifactChunk) -> None:
        future = self._waiting.pop((chunk.sha256, chunk.offset), None)
        if future is not None and not future.done():
            future.set_result(chunk)

    # -- the manager's I/O -----------------------------------------------------------------

    async def _fetch(self, sha256: str, offset: int, length: int) -> ArtifactChunk:
        key = (sha256, offset)
        future: asyncio.Future[ArtifactChunk] = asyncio.get_running_loop().create_future()
        self._waiting[key] = future
        try:
            await self.link.send(ArtifactRequest(sha256, offset, length))
            return await asyncio.wait_for(future, self.chunk_timeout_s)
        finally:
            self._waiting.pop(key, None)

    async def _report(self, progress: UpgradeProgress) -> None:
        try:
            await self.link.send(progress)
        except HubUnavailable:
            self._unsent.append(progress)

    async def _per_session(self, link: Any) -> None:
        await self.manager.on_connected()
        unsent, self._unsent = self._unsent, []
        for progress in unsent:
            await self._report(progress)
        while True:
            await asyncio.sleep(self.probation_check_s)
            if await self.manager.check_probation():
                return


def upgrade_service(settings: Any, link: HubLink, stop: asyncio.Event) -> UpgradeService:
    """The service ``edgeagent run`` starts (settings group ``upgrade``): the venv at
    ``upgrade.prefix`` (default: this interpreter's), the cache under
    ``<state_dir>/upgrade/artifacts``, and a restart that stops this agent (the unit's
    ``Restart=always`` starts the switched venv; ``KillMode=process`` keeps the pods)."""
    import pathlib
    import sys

    from edgeagent.nodeinfo import AGENT_VERSION
    from edgeagent.upgrade.artifact import ArtifactCache
    from edgeagent.upgrade.hold import parse_window
    from edgeagent.upgrade.venvs import Layout

    group = settings.upgrade
    state_dir = pathlib.Path(settings.state_dir)

    async def restart() -> None:
        log.info("restarting into the new agent")
        stop.set()

    def make(fetch, report) -> UpgradeManager:
        return UpgradeManager(
            state_dir,
            Layout(pathlib.Path(group.prefix or sys.prefix)),
            ArtifactCache(state_dir / "upgrade" / "artifacts", group.cache_budget),
            running_version=AGENT_VERSION,
            fetch=fetch,
            report=report,
            restart=restart,
            window=parse_window(group.window),
            max_attempts=group.max_attempts,
        )

    return UpgradeService(link, make)
