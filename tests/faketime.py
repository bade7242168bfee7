"""A process on a wrong clock: libfaketime (Debian's ``faketime`` package) preloaded into a
real agent or join process, its offset read from a file the test rewrites (an NTP step
while the process runs). The monotonic clock is left real, as a stepped wall clock leaves
it."""

from __future__ import annotations

import glob
import pathlib

from tests.environment import missing

__all__ = ["FakeClock"]


def _library() -> str:
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))
    if not found:
        missing("libfaketime", "scripts/setup.sh test installs the faketime package")
    return found[0]


class FakeClock:
    """The wall clock of the processes started with :meth:`env`: ``offset`` seconds from
    the real one (negative: behind), changed with :meth:`set` while they run.

    Args:
        directory: where the offset file goes.
        offset: seconds, initially.
    """

    def __init__(self, directory: pathlib.Path, offset: float) -> None:
        self.library = _library()
        self.path = directory / "faketime.rc"
        self.set(offset)

    def set(self, offset: float) -> None:
        """Step the clock to ``offset`` seconds from the real one (read within a second)."""
        self.path.write_text(f"{offset:+.0f}\n")

    def env(self) -> dict[str, str]:
        """The environment that puts a process on this clock."""
        return {
            "LD_PRELOAD": self.library,
            "FAKETIME_TIMESTAMP_FILE": str(self.path),
            "FAKETIME_CACHE_DURATION": "1",
            "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        }
