"""The agent's metrics loops: sample every 15 s, deliver every 60 s while connected.

Sampling runs on an absolute schedule (no drift); delivery follows every
``batch_interval_s / sample_interval_s``-th sample (4 by default), so a batch always holds
whole samples and leaves at a steady cadence. Between batches an idle session sends only
its pings.

:class:`MetricsService` owns two loops (:meth:`MetricsService.run`).
It talks to the uplink through :class:`MetricsUplink`, three small methods the agent's
session code implements; the session code calls back :meth:`MetricsService.batch_acked`
when the hub acknowledges a batch, and :meth:`MetricsService.flush_soon` after a
(re)connect so that the backlog leaves without waiting for the next interval.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Protocol

from edgeagent.metrics.errors import SamplingError
from edgeagent.metrics.forwarder import MetricsForwarder
from edgeagent.metrics.sampler import Sampler
from edgeagent.metrics.settings import MetricsSettings
from edgeagent.metrics.storage import SealedBatch

__all__ = ["MetricsService", "MetricsUplink"]

log = logging.getLogger(__name__)


class MetricsUplink(Protocol):
    """What the metrics service needs from the agent's connection to the hub."""

    def connection_id(self) -> int | None:
        """Return an id of the current session, or ``None`` while offline.

        The id must change on every new session: batches sent on an earlier session and
        not acknowledged are sent again on the new one.
        """
        ...

    async def send_metrics_batch(self, batch: SealedBatch) -> None:
        """Queue ``batch.message(node_name)`` on the current session.

        The uplink remembers which session sequence number carries which
        ``batch.batch_seq`` and calls :meth:`MetricsService.batch_acked` when the hub's
        cumulative ack covers it. Metrics batches must not also go into the generic
        persistent outbox: the forwarder's storage is their outbox.

        Raises:
            Exception: the session went away or its window is full; the batch stays
                unacknowledged and is sent again on the next flush or session.
        """
        ...


class MetricsService:
    """Runs sampling and delivery for one agent.

    Args:
        settings: the metrics settings.
        sampler: produces samples.
        forwarder: the store-and-forward buffer.
        uplink: the connection to the hub.
        wall_clock: wall-clock time in seconds since the epoch (``time.time``).
        mono_clock: monotonic time in seconds (``time.monotonic``).
    """

    def __init__(
        self,
        settings: MetricsSettings,
        sampler: Sampler,
        forwarder: MetricsForwarder,
        uplink: MetricsUplink,
        *,
        wall_clock: Callable[[], float] = time.time,
        mono_clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._settings = settings
        self._sampler = sampler
        self._forwarder = forwarder
        self._uplink = uplink
        self._wall = wall_clock
        self._mono = mono_clock
        self._kick = asyncio.Event()
        self._sent_on: int | None = None
        self._sent: set[int] = set()

    async def run(self) -> None:
        """Sample and deliver until cancelled; both loops end together.

        (``asyncio.TaskGroup`` would do, but the agent supports Python 3.10.)
        """
        tasks = [
            asyncio.ensure_future(self._sample_loop()),
            asyncio.ensure_future(self._flush_loop()),
        ]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def sample_once(self) -> bool:
        """Take one sample into the buffer; return False if the host could not be read."""
        try:
            sample = await self._sampler.sample(
                wall_ms=int(self._wall() * 1000), mono_s=self._mono()
            )
        except SamplingError as exc:
            log.warning("metrics: sample skipped: %s", exc)
            return False
        self._forwarder.add(sample)
        return True

    async def flush(self) -> int:
        """Send what is due on the current session; return the number of batches sent.

        Unacknowledged batches not yet sent on this session go first (oldest first),
        then new batches are sealed and sent until the backlog is empty or
        ``max_in_flight`` batches await their ack.
        """
        conn = self._uplink.connection_id()
        if conn is None:
            return 0
        if conn != self._sent_on:
            self._sent_on = conn
            self._sent = set()
        sent = 0
        for batch in self._forwarder.unacked():
            if batch.batch_seq in self._sent:
                continue
            if not await self._send(batch):
                return sent
            sent += 1
        while (batch := self._forwarder.seal()) is not None:
            if not await self._send(batch):
                break
            sent += 1
        return sent

    def batch_acked(self, batch_seq: int) -> None:
        """The hub acknowledged every batch up to ``batch_seq``; seal more if backlogged."""
        self._forwarder.acked(batch_seq)
        self._sent = {s for s in self._sent if s > batch_seq}
        if self._forwarder.backlog():
            self._kick.set()

    def flush_soon(self) -> None:
        """Deliver now rather than at the next interval (call after a reconnect)."""
        self._kick.set()

    async def _send(self, batch: SealedBatch) -> bool:
        try:
            await self._uplink.send_metrics_batch(batch)
        except Exception as exc:  # kept for the next session; never fatal
            log.info("metrics: batch %d not sent (%s); will resend", batch.batch_seq, exc)
            return False
        self._sent.add(batch.batch_seq)
        return True

    async def _sample_loop(self) -> None:
        interval = self._settings.sample_interval_s
        per_batch = max(1, round(self._settings.batch_interval_s / interval))
        taken = 0
        next_at = self._mono()
        while True:
            if await self.sample_once():
                taken += 1
                if taken % per_batch == 0:
                    self._kick.set()  # a batch's worth: deliver right after the sample
            next_at += interval
            now = self._mono()
            if next_at < now:  # fell behind (suspend, overload): skip, do not burst
                next_at = now + interval
            await asyncio.sleep(next_at - now)

    async def _flush_loop(self) -> None:
        while True:
            await self._kick.wait()
            self._kick.clear()
            await self.flush()
