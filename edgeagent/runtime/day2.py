"""Day-2 access to a running container: its logs and a command run inside it (for
``kubectl logs``, ``exec`` and ``attach`` through the hub; the streams are ``edgeagent.day2``).

- **Docker API** (Docker, Moby, balena, podman): ``GET /containers/{id}/logs`` with
  ``follow``, ``tail``, ``since`` and ``timestamps``, as kubelet's CRI does; exec through
  ``POST /containers/{id}/exec`` and its hijacked stream (stdin, stdout, stderr, tty,
  resize).
- **process runtime**: the container's log file (stdout and stderr as written, so
  ``timestamps`` and ``since`` are refused: the file has no times); exec starts the
  command in the container's environment (working directory, env, ``PATH``) as the
  runtime's own exec does, with pipes, or a pseudo-terminal for ``tty``.

Everything here is an async iterator or an :class:`ExecProcess`; bytes are passed through
unchanged. Errors are ``ContainerRuntimeError`` (``UnsupportedLogOption`` for an option a
runtime cannot honour).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import pathlib
import signal
import struct
import subprocess
import termios
from collections.abc import AsyncIterator
from typing import Any

from edgeagent.errors import ContainerRuntimeError
from edgeagent.runtime.base import ContainerInfo, ContainerRuntime
from edgeagent.runtime.day2base import ExecProcess, LogOptions

__all__ = ["ExecProcess", "LogOptions", "UnsupportedLogOption", "container_logs", "start_exec"]

#: Bytes read from a log file or a process pipe at a time.
READ_SIZE = 64 * 1024
#: Seconds between looks at a followed log file for new bytes (no inotify in the stdlib).
FOLLOW_POLL_S = 0.05


class UnsupportedLogOption(ContainerRuntimeError):
    """The runtime cannot honour a log option (e.g. ``timestamps`` from a plain file)."""


async def container_logs(
    runtime: ContainerRuntime, info: ContainerInfo, options: LogOptions
) -> AsyncIterator[bytes]:
    """The container's stdout and stderr as they were written, then (``follow``) as they
    are written until the container stops.

    Raises:
        UnsupportedLogOption: an option the runtime cannot honour.
        ContainerRuntimeError: the engine failed.
    """
    if runtime.kind == "docker":
        from edgeagent.runtime.docker_day2 import docker_logs

        async for chunk in docker_logs(runtime, info, options):
            yield chunk
        return
    if options.timestamps or options.since is not None:
        raise UnsupportedLogOption(
            "the process runtime keeps logs as plain files without times: "
            "--timestamps, --since and --since-time are not available",
            operation="logs",
        )
    path = runtime.log_path(info)
    if not path:
        raise ContainerRuntimeError(f"no log file for {info.name}", operation="logs")
    async for chunk in _file_logs(runtime, info, pathlib.Path(path), options):
        yield chunk


def _tail_offset(f: Any, size: int, lines: int) -> int:
    """The file offset where the last ``lines`` lines start."""
    if lines <= 0:
        return size
    pos, found = size, 0
    if size and _byte_at(f, size - 1) == b"\n":
        pos -= 1  # a final newline ends the last line, it does not start one
    while pos > 0:
        start = max(0, pos - READ_SIZE)
        f.seek(start)
        block = f.read(pos - start)
        index = len(block)
        while True:
            index = block.rfind(b"\n", 0, index)
            if index < 0:
                break
            found += 1
            if found == lines:
                return start + index + 1
        pos = start
    return 0


def _byte_at(f: Any, offset: int) -> bytes:
    f.seek(offset)
    return f.read(1)


async def _file_logs(
    runtime: ContainerRuntime, info: ContainerInfo, path: pathlib.Path, options: LogOptions
) -> AsyncIterator[bytes]:
    try:
        f = path.open("rb")
    except FileNotFoundError:
        return
    except OSError as exc:
        raise ContainerRuntimeError(f"log file {path}: {exc}", operation="logs") from exc
    with f:
        size = os.fstat(f.fileno()).st_size
        offset = 0
        if options.tail_lines is not None:
            offset = _tail_offset(f, size, options.tail_lines)
        f.seek(offset)
        while True:
            chunk = f.read(READ_SIZE)
            if chunk:
                yield chunk
                continue
            if not options.follow or not await _still_running(runtime, info):
                # one last look: what it wrote just before it stopped
                rest = f.read()
                if rest:
                    yield rest
                return
            await asyncio.sleep(FOLLOW_POLL_S)


async def _still_running(runtime: ContainerRuntime, info: ContainerInfo) -> bool:
    try:
        current = await runtime.inspect(info.id)
    except ContainerRuntimeError:
        return False
    return current.state.value == "running"


async def start_exec(
    runtime: ContainerRuntime,
    info: ContainerInfo,
    argv: list[str],
    *,
    stdin: bool,
    tty: bool,
) -> ExecProcess:
    """Start ``argv`` in the running container ``info``.

    Raises:
        ContainerRuntimeError: it could not be started (not running, no such executable:
            the message says so as ``kubectl`` users know it, e.g. ``exec: "x": executable
            file not found``).
    """
    if not argv:
        raise ContainerRuntimeError("exec: no command given", operation="exec")
    if runtime.kind == "docker":
        from edgeagent.runtime.docker_day2 import DockerExec

        return await DockerExec.start(runtime, info, argv, stdin=stdin, tty=tty)
    return await _ProcessExec.start(runtime, info, argv, stdin=stdin, tty=tty)


class _ProcessExec(ExecProcess):
    def __init__(self, proc: asyncio.subprocess.Process, master: int | None) -> None:
        self._proc = proc
        self._master = master

    @classmethod
    async def start(
        cls, runtime: Any, info: ContainerInfo, argv: list[str], *, stdin: bool, tty: bool
    ) -> _ProcessExec:
        from edgeagent.runtime.process import DEFAULT_PATH, _config_from_json, _inside, _which

        rec = runtime._get(info.id)
        if not rec.running:
            raise ContainerRuntimeError(f"container {info.name} is not running", operation="exec")
        config = _config_from_json(rec.config)
        cwd = _inside(rec.root, config.working_dir) if config.working_dir else rec.root
        env = {"PATH": DEFAULT_PATH, "HOME": str(rec.root), **dict(config.env)}
        if tty:
            env.setdefault("TERM", "xterm")
        exe = _which(argv[0], env.get("PATH", DEFAULT_PATH), cwd)
        if exe is None:
            raise ContainerRuntimeError(
                f'exec: "{argv[0]}": executable file not found in $PATH', operation="exec"
            )
        master: int | None = None
        try:
            if tty:
                master, slave = os.openpty()
                os.set_blocking(master, False)
                try:
                    proc = await asyncio.create_subprocess_exec(
                        exe,
                        *argv[1:],
                        cwd=cwd,
                        env=env,
                        stdin=slave,
                        stdout=slave,
                        stderr=slave,
                        start_new_session=True,
                        preexec_fn=_controlling_tty,
                    )
                finally:
                    os.close(slave)
            else:
                proc = await asyncio.create_subprocess_exec(
                    exe,
                    *argv[1:],
                    cwd=cwd,
                    env=env,
                    stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    start_new_session=True,
                )
        except OSError as exc:
            if master is not None:
                os.close(master)
            raise ContainerRuntimeError(f"exec in {info.name}: {exc}", operation="exec") from exc
        return cls(proc, master)

    async def write(self, data: bytes) -> None:
        if self._master is not None:
            await _write_fd(self._master, data)
            return
        pipe = self._proc.stdin
        if pipe is None:
            return
        try:
            pipe.write(data)
            await pipe.drain()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the command stopped reading; its exit tells the caller

    async def close_stdin(self) -> None:
        if self._master is not None:
            await _write_fd(self._master, b"\x04")  # a terminal's end of input: ^D
            return
        pipe = self._proc.stdin
        if pipe is not None and not pipe.is_closing():
            pipe.close()

    async def output(self) -> AsyncIterator[tuple[int, bytes]]:  # type: ignore[override]
        if self._master is not None:
            try:
                async for chunk in _read_pty(self._master):
                    yield 1, chunk
            finally:
                master, self._master = self._master, None
                if master is not None:
                    os.close(master)
            return
        queue: asyncio.Queue[tuple[int, bytes] | None] = asyncio.Queue(maxsize=4)
        readers = [
            asyncio.create_task(_pump(channel, pipe, queue))
            for channel, pipe in ((1, self._proc.stdout), (2, self._proc.stderr))
            if pipe is not None
        ]
        try:
            left = len(readers)
            while left:
                item = await queue.get()
                if item is None:
                    left -= 1
                    continue
                yield item
        finally:
            for reader in readers:
                reader.cancel()
            await asyncio.gather(*readers, return_exceptions=True)

    async def resize(self, width: int, height: int) -> None:
        if self._master is not None:
            fcntl.ioctl(self._master, termios.TIOCSWINSZ, struct.pack("HHHH", height, width, 0, 0))

    async def wait(self) -> int:
        code = await self._proc.wait()
        return code if code >= 0 else 128 - code

    async def kill(self) -> None:
        if self._proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, signal.SIGKILL)
        await self.wait()


def _controlling_tty() -> None:  # pragma: no cover - runs in the child
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


async def _pump(
    channel: int, pipe: asyncio.StreamReader, queue: asyncio.Queue[tuple[int, bytes] | None]
) -> None:
    try:
        while True:
            chunk = await pipe.read(READ_SIZE)
            if not chunk:
                return
            await queue.put((channel, chunk))
    finally:
        await queue.put(None)


async def _write_fd(fd: int, data: bytes) -> None:
    loop = asyncio.get_running_loop()
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except BlockingIOError:
            ready = loop.create_future()
            loop.add_writer(fd, ready.set_result, None)
            try:
                await ready
            finally:
                loop.remove_writer(fd)
            continue
        except OSError:
            return  # the terminal closed
        view = view[written:]


async def _read_pty(fd: int) -> AsyncIterator[bytes]:
    loop = asyncio.get_running_loop()
    while True:
        try:
            chunk = os.read(fd, READ_SIZE)
        except BlockingIOError:
            ready = loop.create_future()
            loop.add_reader(fd, ready.set_result, None)
            try:
                await ready
            finally:
                loop.remove_reader(fd)
            continue
        except OSError:  # EIO: every process holding the terminal is gone
            return
        if not chunk:
            return
        yield chunk
