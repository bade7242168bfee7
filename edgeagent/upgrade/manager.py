"""The agent's side of an EdgeUpgrade: order in, progress out, the venvs switched.

:class:`UpgradeManager` carries out an :class:`~protocol.upgrade.UpgradeOrder` the hub
sent over the node's authenticated session:

1. Check the order (:mod:`protocol.upgrade`'s grammar for version, digest and wheel
   name; a downgrade only with ``allow_downgrade``; not while held). A refused order is
   reported ``Failed`` with the reason and changes nothing.
2. ``Downloading``: fetch the artifact in chunks over the session, resuming from what
   the cache has (a dropped link costs only the chunk in flight), within the cache's
   byte budget; ``Downloaded`` once its SHA-256 matched the order's (else ``Failed``,
   reason DigestMismatch, the bytes deleted; a resumed download that does not
   verify is fetched once more from the start first).
3. ``Installing``: build ``<prefix>.new`` beside the running venv and smoke-test it
   (:class:`~edgeagent.upgrade.venvs.Layout`); the running venv is untouched until then.
4. Start a probation (:mod:`~edgeagent.upgrade.guard`), switch the venvs, restart the
   agent through the process manager (systemd). Containers keep running: the new agent
   adopts them from the store, as after any agent restart.
5. The new agent, once welcomed by the hub (:meth:`UpgradeManager.on_connected`), ends
   the probation and reports ``Restarted``; the hub's health gate decides Healthy. If it
   crashes at start, hangs or cannot reach the hub, the guard (or
   :meth:`UpgradeManager.check_probation`) restores the previous venv and the agent that
   runs again reports ``RolledBack`` with the cause.

I/O goes through three callables given at construction, so that the session, the
outbox and the process manager stay where they are: ``fetch(sha256, offset, length)``
returns an :class:`~protocol.upgrade.ArtifactChunk`; ``report(progress)`` queues an
:class:`~protocol.upgrade.UpgradeProgress` in the persistent outbox; ``restart()`` asks
the process manager to restart the agent.
"""

from __future__ import annotations

import asyncio
import logging
import pathlib
import shutil
import time
from collections.abc import Awaitable, Callable

from edgeagent.upgrade import guard
from edgeagent.upgrade.artifact import ArtifactCache
from edgeagent.upgrade.errors import DigestMismatch, OrderRefused, UpgradeFailed
from edgeagent.upgrade.hold import Window, held
from edgeagent.upgrade.venvs import Layout
from protocol.upgrade import (
    ArtifactChunk,
    ArtifactError,
    UpgradeOrder,
    UpgradeProgress,
    UpgradeRollback,
    check_artifact_name,
    check_sha256,
    parse_version,
)

__all__ = ["CHUNK_BYTES", "UpgradeManager"]

log = logging.getLogger(__name__)

#: Bytes asked per artifact_request: small enough for a slow link, few enough round trips.
CHUNK_BYTES = 256 * 1024

_UNAVAILABLE = {
    "NotFound": " (no {name} in its upgrade.artifact_dir, or the hub cannot read it)",
    "WrongDigest": " (its {name} does not hash to the ordered sha256: check"
    " spec.artifact.sha256 against the file)",
    "NotOrdered": " (this node has no order for it now)",
}
"""The hub's ``artifact_chunk`` errors in words, for the node's status message."""

Fetch = Callable[[str, int, int], Awaitable[ArtifactChunk]]
Report = Callable[[UpgradeProgress], Awaitable[None]]
Restart = Callable[[], Awaitable[None]]


class UpgradeManager:
    """Carries out upgrade orders on this node (see the module docstring).

    Args:
        state_dir: the agent's state directory (probation, result, hold, cache).
        layout: the venvs.
        cache: the artifact cache (its budget bounds the download).
        running_version: the version of this process.
        fetch, report, restart: the I/O (see the module docstring).
        window: the maintenance window, or None.
        max_attempts: starts of a new agent before the guard rolls back.
        clock: epoch seconds.
    """

    def __init__(
        self,
        state_dir: pathlib.Path,
        layout: Layout,
        cache: ArtifactCache,
        *,
        running_version: str,
        fetch: Fetch,
        report: Report,
        restart: Restart,
        window: Window | None = None,
        max_attempts: int = 3,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.state_dir = pathlib.Path(state_dir)
        self.layout = layout
        self.cache = cache
        self.running_version = running_version
        self._fetch = fetch
        self._report = report
        self._restart = restart
        self.window = window
        self.max_attempts = max_attempts
        self.clock = clock
        self._busy: str | None = None

    async def _progress(self, order, phase: str, reason: str = "", message: str = "") -> None:
        await self._report(
            UpgradeProgress(
                upgrade=order.upgrade,
                uid=order.uid,
                phase=phase,
                version=self.running_version,
                observed_at=self.clock(),
                reason=reason,
                message=message[:1000],
            )
        )

    def deferred(self) -> str:
        """Why orders wait now ("" when they do not): a hold or the window."""
        return held(self.state_dir, self.window, self.clock())

    async def handle_order(self, order: UpgradeOrder) -> str:
        """Carry out ``order`` (again, if it was interrupted: downloads resume).

        Returns:
            What happened: ``"restarting"``, ``"current"`` (already this version),
            ``"busy"``, ``"deferred"``, or ``"failed"`` (reported to the hub).
        """
        if self._busy is not None:
            return "busy"
        if parse_version_or_none(order.version) == parse_version_or_none(self.running_version):
            return "current"
        why = self.deferred()
        if why:
            await self._progress(order, "Deferred", why.split(":")[0], why)
            return "deferred"
        self._busy = order.uid
        try:
            await self._carry_out(order)
        except UpgradeFailed as exc:
            log.warning("upgrade %s to %s failed: %s", order.upgrade, order.version, exc)
            await self._progress(order, "Failed", exc.reason, str(exc))
            return "failed"
        finally:
            self._busy = None
        return "restarting"

    def _check(self, order: UpgradeOrder) -> None:
        try:
            target = parse_version(order.version)
            check_sha256(order.sha256)
            if order.artifact:
                check_artifact_name(order.artifact)
        except ArtifactError as exc:
            raise OrderRefused(str(exc), reason="InvalidOrder") from exc
        if order.url:
            raise OrderRefused(
                "fetching artifacts from a URL is not supported yet", reason="URLNotSupported"
            )
        current = parse_version_or_none(self.running_version)
        if current is not None and target.key < current and not order.allow_downgrade:
            raise OrderRefused(
                f"{order.version} is older than the running {self.running_version}",
                reason="DowngradeRefused",
            )

    async def _carry_out(self, order: UpgradeOrder) -> None:
        self._check(order)
        wheel = self.cache.cached(order.sha256, order.artifact)
        if wheel is None:
            await self._progress(order, "Downloading")
            wheel = await self._download(order)
        await self._progress(order, "Downloaded")
        await self._progress(order, "Installing")
        installed = await asyncio.to_thread(self.layout.stage, wheel, order.sha256)
        if parse_version_or_none(installed) != parse_version_or_none(order.version):
            shutil.rmtree(self.layout.staging, ignore_errors=True)
            raise OrderRefused(
                f"the artifact installs edgefleet {installed or 'nothing'}, not {order.version}",
                reason="VersionMismatch",
            )
        upgrade_dir = self.state_dir / "upgrade"
        upgrade_dir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(guard.__file__, upgrade_dir / "guard.py")
        guard.write_probation(
            self.state_dir,
            {
                "upgrade": order.upgrade,
                "uid": order.uid,
                "version": installed,
                "previous_version": self.running_version,
                "prefix": str(self.layout.prefix),
                "deadline": self.clock() + order.gate_s,
                "max_attempts": self.max_attempts,
            },
        )
        await asyncio.to_thread(self.layout.switch)
        await self._restart()

    async def _download(self, order: UpgradeOrder) -> pathlib.Path:
        """Fetch the artifact (resuming) and verify it. A resumed download that does not
        verify is fetched once more from the start: its partial bytes may be what broke
        (a power cut can leave zeros at the end of a file being written)."""
        resumed = self.cache.offset(order.sha256) > 0
        await self._fetch_all(order)
        try:
            return self.cache.complete(order.sha256, order.artifact)
        except DigestMismatch:
            if not resumed:
                raise
            log.warning("upgrade %s: the resumed download did not verify; again", order.upgrade)
        await self._fetch_all(order)  # complete() deleted the bytes: from offset 0
        return self.cache.complete(order.sha256, order.artifact)

    async def _fetch_all(self, order: UpgradeOrder) -> None:
        offset = self.cache.offset(order.sha256)
        total = order.size or None
        if total is not None:
            self.cache.reserve(order.sha256, total)
        while total is None or offset < total:
            chunk = await self._fetch(order.sha256, offset, CHUNK_BYTES)
            if chunk.error:
                why = _UNAVAILABLE.get(chunk.error, "").format(name=order.artifact)
                raise UpgradeFailed(
                    f"the hub has no artifact: {chunk.error}{why}", reason="ArtifactUnavailable"
                )
            if chunk.sha256 != order.sha256 or chunk.offset != offset:
                raise OrderRefused("a chunk of another artifact or offset", reason="BadChunk")
            if total is None:
                total = chunk.total
                self.cache.reserve(order.sha256, total)
            elif chunk.total != total:
                raise OrderRefused(
                    f"artifact size {chunk.total}, ordered {total}", reason="SizeMismatch"
                )
            if not chunk.data and offset < total:
                raise UpgradeFailed("the hub sent an empty chunk", reason="BadChunk")
            offset = self.cache.append(order.sha256, offset, chunk.data, total)

    async def handle_rollback(self, message: UpgradeRollback) -> bool:
        """The hub's failure policy: go back to the previous venv and restart.

        Returns:
            True when a previous venv was put back (the agent is restarting); False when
            this node made no switch for that upgrade (nothing is touched).
        """
        probation = guard.probation(self.state_dir)
        last = guard.last_switch(self.state_dir)
        if probation is not None and probation.get("uid") == message.uid:
            guard.roll_back(self.state_dir, message.reason, "asked by the hub", self.clock())
        elif probation is None and last is not None and last.get("uid") == message.uid:
            # Only the switch this upgrade made is undone: a node that never switched (held,
            # refused, failed before the switch) or was rolled back already keeps its venv.
            try:
                await asyncio.to_thread(self.layout.rollback)
            except UpgradeFailed as exc:
                log.warning("rollback asked by the hub: %s", exc)
                return False
            guard.forget_last_switch(self.state_dir)
            guard.write_result(
                self.state_dir,
                {
                    "upgrade": message.upgrade,
                    "uid": message.uid,
                    "phase": "RolledBack",
                    "reason": message.reason,
                    "message": "asked by the hub",
                    "version": self.layout.version(),
                    "at": self.clock(),
                },
            )
        else:
            log.info("rollback of %s asked, but this node did not switch for it", message.upgrade)
            return False
        await self._restart()
        return True

    async def on_connected(self) -> None:
        """The hub welcomed this agent: end a probation (report Restarted), or report
        the rollback that put this agent back (RolledBack with its cause)."""
        probation = guard.probation(self.state_dir)
        if probation is not None and parse_version_or_none(
            str(probation.get("version", ""))
        ) == parse_version_or_none(self.running_version):
            guard.confirm(self.state_dir)
            await self._report(
                UpgradeProgress(
                    upgrade=str(probation.get("upgrade", "")),
                    uid=str(probation.get("uid", "")),
                    phase="Restarted",
                    version=self.running_version,
                    observed_at=self.clock(),
                )
            )
        result = guard.read_result(self.state_dir)
        if result is not None and result.get("upgrade") and result.get("uid"):
            await self._report(
                UpgradeProgress(
                    upgrade=str(result["upgrade"]),
                    uid=str(result["uid"]),
                    phase="RolledBack",
                    version=self.running_version,
                    observed_at=self.clock(),
                    reason=str(result.get("reason", "")),
                    message=str(result.get("message", ""))[:1000],
                )
            )
            guard.read_result(self.state_dir, consume=True)

    async def check_probation(self) -> bool:
        """Called periodically by the new agent: past the deadline without a welcome
        (it cannot reach the hub), go back and restart. Returns True when it did."""
        probation = guard.probation(self.state_dir)
        if probation is None or self.clock() <= float(probation.get("deadline", 0)):
            return False
        guard.roll_back(
            self.state_dir,
            "HubUnreachable",
            f"agent {self.running_version} did not reach the hub before its deadline",
            self.clock(),
        )
        await self._restart()
        return True


def parse_version_or_none(text: str) -> tuple[int, ...] | None:
    """The version's sort key, or None when ``text`` is not a version."""
    try:
        return parse_version(text).key
    except ArtifactError:
        return None
