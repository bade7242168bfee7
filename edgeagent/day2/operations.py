"""One day-2 stream against the runtime: which container, then logs or a command.

Errors the caller should see end the stream with a ``stream_reset`` whose reason is what
kubelet would say (``kubectl`` prints it): an unknown pod or container is ``NOT_FOUND``,
an option the runtime cannot honour ``UNSUPPORTED``, a container not running
``INVALID_MESSAGE`` (``container "app" in pod "web" is not running``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from edgeagent.errors import ContainerRuntimeError, UsageError
from edgeagent.runtime import ContainerInfo, ContainerState, Labels
from edgeagent.runtime.day2 import LogOptions, UnsupportedLogOption, container_logs, start_exec
from protocol.errors import ErrorCode
from protocol.streams import DataReceived, Resized
from protocol.transport.streams import Stream

__all__ = ["StreamRefused", "find_container", "serve_stream"]

log = logging.getLogger(__name__)


class StreamRefused(UsageError):
    """The stream cannot be served as asked (no such container, a bad option); ``code``
    and the message go to the caller."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


async def find_container(
    runtime: Any, namespace: str, pod: str, container: str, *, previous: bool = False
) -> ContainerInfo:
    """The pod's container by name (``""``: the only one), the latest attempt or, with
    ``previous``, the one before it.

    Raises:
        StreamRefused: no such pod or container here, or no previous attempt.
    """
    found = await runtime.list({Labels.POD_NAMESPACE: namespace, Labels.POD_NAME: pod})
    found = [c for c in found if c.labels.get(Labels.CONTAINER_TYPE) != "sandbox"]
    if not found:
        raise StreamRefused(
            ErrorCode.NOT_FOUND,
            f'pod "{pod}" in namespace "{namespace}" has no containers on this node',
        )
    names = sorted({c.labels.get(Labels.CONTAINER_NAME, "") for c in found})
    if not container:
        if len(names) != 1:
            raise StreamRefused(
                ErrorCode.INVALID_MESSAGE,
                f"a container name must be specified for pod {pod}, choose one of: {names}",
            )
        container = names[0]
    attempts = sorted(
        (c for c in found if c.labels.get(Labels.CONTAINER_NAME) == container),
        key=lambda c: int(c.labels.get(Labels.RESTART_COUNT, "0") or 0),
        reverse=True,
    )
    if not attempts:
        raise StreamRefused(
            ErrorCode.NOT_FOUND, f'container "{container}" in pod "{pod}" is not found'
        )
    if previous:
        if len(attempts) < 2:
            raise StreamRefused(
                ErrorCode.NOT_FOUND,
                f'previous terminated container "{container}" in pod "{pod}" not found',
            )
        return attempts[1]
    return attempts[0]


async def serve_stream(stream: Stream, runtime: Any) -> None:
    """Serve one stream the hub opened, until it is complete or the hub resets it."""
    o = stream.open
    log.info(
        "%s %s/%s/%s for %s", o.operation, o.namespace, o.pod, o.container, o.user or "(unknown)"
    )
    if runtime is None:
        await stream.reset(ErrorCode.UNSUPPORTED, "the agent is starting; try again")
        return
    work = _logs(stream, runtime) if o.operation == "logs" else None
    if o.operation in ("exec", "attach"):
        work = _exec(stream, runtime)
    elif o.operation == "portforward":
        work = _portforward(stream, runtime)
    if work is None:
        await stream.reset(ErrorCode.UNSUPPORTED, f"{o.operation} is not supported by this agent")
        return
    task = asyncio.ensure_future(work)
    ended = asyncio.ensure_future(stream.wait_ended())
    try:
        await asyncio.wait({task, ended}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        ended.cancel()
        if not task.done():  # the hub reset it (the caller went away)
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(task, ended, return_exceptions=True)
    if task.cancelled():
        return
    exc = task.exception()
    if isinstance(exc, StreamRefused):
        await stream.reset(exc.code, str(exc))
    elif isinstance(exc, UnsupportedLogOption):
        await stream.reset(ErrorCode.UNSUPPORTED, str(exc))
    elif isinstance(exc, ContainerRuntimeError):
        await stream.reset(ErrorCode.INTERNAL, str(exc))
    elif isinstance(exc, ConnectionError):
        return  # the stream or the session ended under us
    elif exc is not None:
        raise exc
    else:
        code = task.result()
        if stream.ended is None:
            await stream.close(code)


def _log_options(params: dict[str, Any]) -> tuple[LogOptions, int | None]:
    def number(name: str) -> int | None:
        value = params.get(name)
        if value is None:
            return None
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise StreamRefused(ErrorCode.INVALID_MESSAGE, f"{name} must be a number >= 0")
        return value

    since = params.get("since_time")  # the hub turns sinceSeconds into a time by its clock
    if since is not None and (not isinstance(since, (int, float)) or isinstance(since, bool)):
        raise StreamRefused(ErrorCode.INVALID_MESSAGE, "since_time must be seconds since the epoch")
    options = LogOptions(
        follow=bool(params.get("follow")),
        tail_lines=number("tail_lines"),
        since=since,
        timestamps=bool(params.get("timestamps")),
    )
    return options, number("limit_bytes")


async def _logs(stream: Stream, runtime: Any) -> None:
    o = stream.open
    options, limit = _log_options(o.params)
    info = await find_container(
        runtime, o.namespace, o.pod, o.container, previous=bool(o.params.get("previous"))
    )
    sent = 0
    async for chunk in container_logs(runtime, info, options):
        if limit is not None:
            chunk = chunk[: limit - sent]
        if chunk:
            await stream.write(1, chunk)
            sent += len(chunk)
        if limit is not None and sent >= limit:
            break
    return None


async def _exec(stream: Stream, runtime: Any) -> int:
    o = stream.open
    p = o.params
    info = await find_container(runtime, o.namespace, o.pod, o.container)
    if info.state is not ContainerState.RUNNING:
        raise StreamRefused(
            ErrorCode.INVALID_MESSAGE,
            f'container "{o.container}" in pod "{o.pod}" is not running',
        )
    command = p.get("command") or []
    if o.operation == "attach":
        return await _attach(stream, runtime, info)
    if not (isinstance(command, list) and all(isinstance(a, str) for a in command) and command):
        raise StreamRefused(ErrorCode.INVALID_MESSAGE, "exec needs a command (a list of strings)")
    stdin, tty = bool(p.get("stdin")), bool(p.get("tty"))
    try:
        process = await start_exec(runtime, info, command, stdin=stdin, tty=tty)
    except ContainerRuntimeError as exc:
        raise StreamRefused(ErrorCode.NOT_FOUND, str(exc)) from exc
    feeder = asyncio.ensure_future(_feed_stdin(stream, process))
    try:
        async for channel, data in process.output():
            await stream.write(channel, data)
        return await process.wait()
    finally:
        feeder.cancel()
        await asyncio.gather(feeder, return_exceptions=True)
        await process.kill()


async def _attach(stream: Stream, runtime: Any, info: ContainerInfo) -> int:
    """The container's output from now on, until it stops (``kubectl attach``). Its stdin
    is not attached: the agent starts containers without one (``stdin: true`` pods are
    not supported), so input is refused."""
    if stream.open.params.get("stdin"):
        raise StreamRefused(
            ErrorCode.UNSUPPORTED,
            "attach: this node starts containers without stdin; attach without -i",
        )
    async for chunk in container_logs(runtime, info, LogOptions(follow=True, tail_lines=0)):
        await stream.write(1, chunk)
    return 0


async def _portforward(stream: Stream, runtime: Any) -> None:
    """One forwarded connection to the pod's port: in the pod's network, which for the
    process runtime (host network) is this host's loopback, else the pod's IP."""
    o = stream.open
    port = o.params.get("port")
    if not isinstance(port, int) or isinstance(port, bool) or not 0 < port <= 65535:
        raise StreamRefused(ErrorCode.INVALID_MESSAGE, "portforward needs a port in 1..65535")
    found = await runtime.list({Labels.POD_NAMESPACE: o.namespace, Labels.POD_NAME: o.pod})
    if not found:
        raise StreamRefused(
            ErrorCode.NOT_FOUND, f'pod "{o.pod}" in namespace "{o.namespace}" is not on this node'
        )
    host = "127.0.0.1" if runtime.kind == "process" else (found[0].ip or "127.0.0.1")
    try:
        reader, writer = await asyncio.open_connection(host, port)
    except OSError as exc:
        raise StreamRefused(
            ErrorCode.NOT_FOUND,
            f"error forwarding port {port} to pod {o.pod}: "
            f"dial {host}:{port}: {exc.strerror or exc}",
        ) from exc
    upstream = asyncio.ensure_future(_to_port(stream, writer))
    try:
        while True:
            chunk = await reader.read(64 * 1024)
            if not chunk:
                break
            await stream.write(1, chunk)
    finally:
        upstream.cancel()
        await asyncio.gather(upstream, return_exceptions=True)
        writer.close()


async def _to_port(stream: Stream, writer: asyncio.StreamWriter) -> None:
    while True:
        event = await stream.read()
        if event is None:
            return
        if isinstance(event, DataReceived):
            if event.data:
                writer.write(event.data)
                await writer.drain()
            if event.eof and writer.can_write_eof():
                writer.write_eof()


async def _feed_stdin(stream: Stream, process: Any) -> None:
    while True:
        event = await stream.read()
        if event is None:
            return
        if isinstance(event, Resized):
            await process.resize(event.width, event.height)
        elif isinstance(event, DataReceived):
            if event.data:
                await process.write(event.data)
            if event.eof:
                await process.close_stdin()
