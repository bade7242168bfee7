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
  probation, report a rollback), then a probation check every ``probation_check_s``.

Progress reports go into the store's outbox (kind ``upgrade_progress``, never coalesced:
the hub's rollout wants every move): they survive an agent restart (the ``Installing``
the old agent queued right before it stopped goes up from the new one), are sent
at-least-once with the pod statuses and events, and the hub acknowledges each once the
EdgeUpgrade's status holds it (it drops duplicates by ``observed_at``). The rest that must
survive a restart is on disk too: the probation and the rollback result (the guard's
files), the artifact (the cache).
"""

from __future__ import annotations

import asyncio
import dataclasses
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
    from edgeagent.store import Store
    from edgeagent.uplink.session import HubLink

__all__ = ["UpgradeService"]

log = logging.getLogger(__name__)

REPORT_WAIT_S = 2.0
"""Seconds a restart waits for the hub to acknowledge the queued progress reports."""


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
        self._store: Store | None = None
        self._early: list[UpgradeProgress] = []
        """Reports made before :meth:`run` gave the store (queued there at once then)."""
        link.register(UpgradeOrder, self._on_order)
        link.register(UpgradeRollback, self._on_rollback)
        link.register(ArtifactChunk, self._on_chunk)
        link.add_session_task(self._per_session)

    async def run(self, ctx: Any) -> None:
        """Own the service's tasks until the agent stops (``ctx.store``: the outbox)."""
        self._store = ctx.store
        early, self._early = self._early, []
        for progress in early:
            await self._report(progress)
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
        """Queue ``progress`` in the store's outbox (the outbox hook wakes the link).

        Raises:
            StoreFullError: the store has no space (the manager's step fails with it).
        """
        if self._store is None:
            self._early.append(progress)
            return
        body = {f.name: getattr(progress, f.name) for f in dataclasses.fields(progress)}
        self._store.outbox_append(UpgradeProgress.kind, body)

    def reports_pending(self) -> int:
        """Progress reports in the outbox the hub has not acknowledged yet."""
        if self._store is None:
            return len(self._early)
        entries = [*self._store.outbox_sent(), *self._store.outbox_unsent()]
        return sum(e.kind == UpgradeProgress.kind for e in entries)

    async def deliver_reports(self, timeout_s: float, poll_s: float = 0.05) -> bool:
        """Wait up to ``timeout_s`` seconds for the hub to acknowledge the queued progress
        reports (before a restart: the status then shows ``Installing`` at once; what is
        not acknowledged goes up from the new agent anyway). Returns whether it did."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        while self.reports_pending():
            if asyncio.get_running_loop().time() >= deadline:
                return False
            await asyncio.sleep(poll_s)
        return True

    async def _per_session(self, link: Any) -> None:
        await self.manager.on_connected()
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
        if not await service.deliver_reports(REPORT_WAIT_S):
            log.info("restarting with progress not yet acknowledged (sent after the restart)")
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

    service = UpgradeService(link, make)
    return service
