"""What every runtime's day-2 operations share: the log options a caller asks for and the
running-command interface (``edgeagent.runtime.day2`` for the process runtime and the
dispatch, ``edgeagent.runtime.docker_day2`` for the Docker API both build on it)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

__all__ = ["ExecProcess", "LogOptions"]


@dataclass(frozen=True, slots=True)
class LogOptions:
    """What ``GET /containerLogs`` asks for.

    Attributes:
        follow: keep streaming while the container runs.
        tail_lines: only the last N lines (``None``: all).
        since: only lines written at or after this time, seconds since the epoch.
        timestamps: prefix each line with its RFC 3339 time.
    """

    follow: bool = False
    tail_lines: int | None = None
    since: float | None = None
    timestamps: bool = False


class ExecProcess:
    """A command running in a container: stdin in, output out, its exit code at the end.

    Subclasses implement the runtime's way; every method may raise
    ``ContainerRuntimeError``.
    """

    async def write(self, data: bytes) -> None:
        """Bytes to the command's stdin."""
        raise NotImplementedError

    async def close_stdin(self) -> None:
        """The caller's stdin ended."""
        raise NotImplementedError

    def output(self) -> AsyncIterator[tuple[int, bytes]]:
        """``(channel, bytes)``: 1 stdout, 2 stderr (a tty's output is all on 1), until the
        command closed them."""
        raise NotImplementedError

    async def resize(self, width: int, height: int) -> None:
        """The caller's terminal size (columns, rows); ignored without a tty."""

    async def wait(self) -> int:
        """The exit code (128 + N for a signal N, as a shell reports it)."""
        raise NotImplementedError

    async def kill(self) -> None:
        """Stop the command now (the caller went away)."""
        raise NotImplementedError
