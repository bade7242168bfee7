"""Give the heap freed by a burst of failed handshakes back to the operating system.

Each TLS handshake in progress holds an OpenSSL object and its buffers (~57 KiB measured on
the hub). When a burst of them ends (half-open connections dropped at the hello deadline,
a fleet that could not finish its handshakes), the memory is free but glibc's allocator
keeps it: the process's RSS stays at the burst's high-water mark (measured: 1,000 half-open
handshakes took a bare hub listener from 41 to 99 MiB; after they were dropped it stayed at
~100 MiB, and ``malloc_trim(0)`` brought it to 57 MiB). :class:`HeapTrimmer` calls
``malloc_trim(0)`` once at least ``threshold`` connections ended unfinished since the last
trim, at most every ``interval_s``; elsewhere than glibc (musl has no ``malloc_trim``) it
does nothing.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
import time
from collections.abc import Callable

__all__ = ["HeapTrimmer"]

log = logging.getLogger(__name__)


def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        return getattr(ctypes.CDLL(name), "malloc_trim", None)
    except OSError:
        return None


class HeapTrimmer:
    """Trims the heap after bursts of unfinished connections.

    Args:
        unfinished: the number of connections that ended unfinished so far (grows).
        threshold: unfinished connections since the last trim that make one worth it.
        interval_s: seconds between looks (and so between trims).
    """

    def __init__(
        self, unfinished: Callable[[], int], *, threshold: int = 256, interval_s: float = 10.0
    ) -> None:
        self.unfinished = unfinished
        self.threshold = threshold
        self.interval_s = interval_s
        self.trims = 0
        """Times the heap was trimmed."""
        self._trim = _malloc_trim()
        self._seen = 0

    @property
    def available(self) -> bool:
        """Whether the C library has ``malloc_trim`` (glibc)."""
        return self._trim is not None

    def check(self) -> bool:
        """Trim if enough connections ended unfinished since the last trim."""
        count = self.unfinished()
        if self._trim is None or count - self._seen < self.threshold:
            return False
        self._seen = count
        started = time.perf_counter()
        self._trim(0)
        self.trims += 1
        log.debug("heap trimmed in %.1f ms", (time.perf_counter() - started) * 1000)
        return True

    async def run(self) -> None:
        """Look every ``interval_s`` until cancelled."""
        while True:
            await asyncio.sleep(self.interval_s)
            self.check()
