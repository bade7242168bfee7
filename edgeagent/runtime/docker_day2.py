"""Docker API logs and exec for ``edgeagent.runtime.day2`` (imported only with the docker
runtime: it needs aiodocker)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import aiodocker
import aiohttp

from edgeagent.errors import ContainerRuntimeError
from edgeagent.runtime.base import ContainerInfo
from edgeagent.runtime.day2base import ExecProcess, LogOptions

if TYPE_CHECKING:
    from edgeagent.runtime.docker import DockerRuntime

__all__ = ["DockerExec", "docker_logs"]


async def docker_logs(
    runtime: DockerRuntime, info: ContainerInfo, options: LogOptions
) -> AsyncIterator[bytes]:
    """``GET /containers/{id}/logs`` (stdout and stderr, in the engine's order)."""
    params: dict[str, Any] = {"timestamps": options.timestamps}
    if options.tail_lines is not None:
        params["tail"] = str(max(0, options.tail_lines))
    if options.since is not None:
        params["since"] = f"{options.since:.9f}"
    container = runtime.container_handle(info.id)
    try:
        if options.follow:
            async for line in container.log(stdout=True, stderr=True, follow=True, **params):
                yield line.encode() if isinstance(line, str) else line
            return
        lines = await container.log(stdout=True, stderr=True, follow=False, **params)
    except (aiodocker.DockerError, aiohttp.ClientError, OSError) as exc:
        raise runtime.engine_error(exc, "logs") from exc
    for line in lines:
        yield line.encode() if isinstance(line, str) else line


class DockerExec(ExecProcess):
    """An exec instance and its hijacked stream."""

    def __init__(self, execution: Any, stream: Any, tty: bool) -> None:
        self._exec = execution
        self._stream = stream
        self._tty = tty

    @classmethod
    async def start(
        cls, runtime: DockerRuntime, info: ContainerInfo, argv: list[str], *, stdin: bool, tty: bool
    ) -> DockerExec:
        try:
            container = runtime.container_handle(info.id)
            execution = await container.exec(argv, stdout=True, stderr=True, stdin=stdin, tty=tty)
            stream = execution.start(detach=False)
            # entering the stream (its public async context manager) makes the upgrade
            # request now, so that a refusal is an error of start(); close() leaves it
            await stream.__aenter__()
        except (aiodocker.DockerError, aiohttp.ClientError, OSError) as exc:
            raise runtime.engine_error(exc, "exec") from exc
        return cls(execution, stream, tty)

    async def write(self, data: bytes) -> None:
        try:
            await self._stream.write_in(data)
        except (RuntimeError, OSError, aiohttp.ClientError):
            pass  # the command's end tells the caller

    async def close_stdin(self) -> None:
        # Half-close: the engine reads EOF on the command's stdin while its output still
        # flows back. aiodocker (0.27) has no public call for it: Stream.close() writes the
        # EOF but closes the response too, ending the output. So this one reach into the
        # stream's response stays, guarded: without a connection there is nothing to close.
        response = getattr(self._stream, "_resp", None)
        connection = response.connection if response is not None else None
        transport = connection.transport if connection is not None else None
        if transport is not None and transport.can_write_eof():
            transport.write_eof()

    async def output(self) -> AsyncIterator[tuple[int, bytes]]:  # type: ignore[override]
        while True:
            try:
                message = await self._stream.read_out()
            except (aiohttp.ClientError, OSError) as exc:
                raise ContainerRuntimeError(f"exec output: {exc}", operation="exec") from exc
            if message is None:
                return
            yield (1 if self._tty else message.stream), message.data

    async def resize(self, width: int, height: int) -> None:
        if self._tty:
            try:
                await self._exec.resize(h=height, w=width)
            except aiodocker.DockerError:
                pass  # not running yet / any more

    async def wait(self) -> int:
        details: dict[str, Any] = {}
        for _ in range(100):  # the engine records the exit a moment after the stream ends
            details = await self._exec.inspect()
            if not details.get("Running"):
                break
            await asyncio.sleep(0.02)
        code = details.get("ExitCode")
        await self._stream.close()
        return int(code if code is not None else 126)

    async def kill(self) -> None:
        await self._stream.close()
