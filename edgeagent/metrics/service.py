"""The agent's metrics sampling: every 15 s into the store-and-forward buffer.

Sampling runs on an absolute schedule (no drift); every
``batch_interval_s / sample_interval_s``-th sample (4 by default) the service says a batch
is due (``on_batch_due``), so a batch always holds whole samples and leaves at a steady
cadence. Delivery is the uplink's (``edgeagent.uplink.sources.metrics.MetricsSource``:
sealing, sending, acknowledgements); between batches an idle session sends only its pings.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from edgeagent.metrics.errors import SamplingError
from edgeagent.metrics.forwarder import MetricsForwarder
from edgeagent.metrics.sampler import Sampler
from edgeagent.metrics.settings import MetricsSettings

__all__ = ["MetricsService"]

log = logging.getLogger(__name__)


class MetricsService:
    """Samples the node into the buffer for one agent.

    Args:
        settings: the metrics settings.
        sampler: produces samples.
        forwarder: the store-and-forward buffer.
        on_batch_due: called (synchronously; it only sets a flag or an event) after every
            batch interval's worth of samples.
        wall_clock: wall-clock time in seconds since the epoch (``time.time``).
        mono_clock: monotonic time in seconds (``time.monotonic``).
    """

    def __init__(
        self,
        settings: MetricsSettings,
        sampler: Sampler,
        forwarder: MetricsForwarder,
        *,
        on_batch_due: Callable[[], None] = lambda: None,
        wall_clock: Callable[[], float] = time.time,
        mono_clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._settings = settings
        self._sampler = sampler
        self._forwarder = forwarder
        self._on_batch_due = on_batch_due
        self._wall = wall_clock
        self._mono = mono_clock

    async def run(self) -> None:
        """Sample until cancelled."""
        interval = self._settings.sample_interval_s
        per_batch = max(1, round(self._settings.batch_interval_s / interval))
        taken = 0
        next_at = self._mono()
        while True:
            if await self.sample_once():
                taken += 1
                if taken % per_batch == 0:
                    self._on_batch_due()  # a batch's worth: deliver right after the sample
            next_at += interval
            now = self._mono()
            if next_at < now:  # fell behind (suspend, overload): skip, do not burst
                next_at = now + interval
            await asyncio.sleep(next_at - now)

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
