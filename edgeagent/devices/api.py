"""The local device API: HTTP/1.1 + JSON for mappers, over a Unix socket (and loopback TCP).

HTTP is parsed by h11 (sans-I/O, ~100 KiB, no C extension) over asyncio streams, so the
agent does not load an HTTP framework (aiohttp alone adds ~15 MB RSS; the agent budget is
45 MB). One short loop per connection: feed bytes to h11, route the request, write the
response; keep-alive connections are closed after ``idle_timeout_seconds``.

Routes (all JSON; see docs/devices.md for the shapes):

- ``GET /v1/devices``: this node's devices;
- ``GET /v1/devices/{namespace}/{name}``: one device, with desired and reported values;
- ``GET /v1/devices/{namespace}/{name}/desired``: its desired state; a long-poll with
  ``?uid=UID&after=VERSION&wait=SECONDS`` answers as soon as the version is above
  ``after`` or the uid differs (the Device was recreated), or when ``wait`` runs out;
- ``POST /v1/devices/{namespace}/{name}/reported``: report one or many values.

Errors are ``{"error": {"status", "reason", "message", "property"?}}`` with status 400
(malformed request), 404 (no such device or route), 405, 413 (body over
``max_body_bytes``), 422 (a value breaks the model: nothing stored), 503 (the
DeviceModel has not reached the node yet, or the agent store failed) or 507 (the disk is
full: the report was not kept).

A report is answered once it is durable: the server awaits its ``durable`` callable (the
agent passes ``Store.wait_committed``, a group commit within ``store.commit_delay``), so
a report the mapper saw accepted survives a crash of the agent.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import socket
import stat
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import parse_qs, unquote, urlsplit

from edgeagent.devices.errors import (
    APIStartError,
    BadRequest,
    DeviceNotFound,
    ModelUnavailable,
)
from edgeagent.devices.settings import DeviceSettings
from edgeagent.devices.twins import (
    DesiredView,
    EdgeTwins,
    EventKind,
    Reading,
    TwinEvent,
)
from edgeagent.errors import StoreError, StoreFullError
from protocol.devices import Device, InvalidValue, ReportedValue, to_json

if TYPE_CHECKING:
    import h11  # imported by the first connection: a node without mappers never pays it

log = logging.getLogger(__name__)

_READ_CHUNK = 64 * 1024
T = TypeVar("T")
_MAX_HEADER_BYTES = 16 * 1024


class _HTTPError(Exception):
    def __init__(self, status: int, reason: str, message: str, prop: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message
        self.prop = prop

    def body(self) -> dict[str, Any]:
        error: dict[str, Any] = {"status": self.status, "reason": self.reason}
        error["message"] = self.message
        if self.prop is not None:
            error["property"] = self.prop
        return {"error": error}


class _Waiters:
    """Futures waiting for a change of one device, keyed by (namespace, name)."""

    def __init__(self) -> None:
        self._waiting: dict[tuple[str, str], set[asyncio.Future[None]]] = {}

    def add(self, key: tuple[str, str]) -> asyncio.Future[None]:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(key, set()).add(future)
        return future

    def discard(self, key: tuple[str, str], future: asyncio.Future[None]) -> None:
        futures = self._waiting.get(key)
        if futures is not None:
            futures.discard(future)
            if not futures:
                del self._waiting[key]

    def wake(self, key: tuple[str, str]) -> None:
        for future in self._waiting.pop(key, ()):
            if not future.done():
                future.set_result(None)


class DeviceAPIServer:
    """Serves ``EdgeTwins`` to mappers. Use ``async with`` or ``start()``/``close()``.

    Args:
        twins: the node's twins.
        settings: socket path and mode, optional loopback TCP port, limits.
        durable: awaited after reports are stored and before the mapper is answered; it
            returns once they are committed, or raises ``StoreError`` (the mapper gets
            507/503 and the report was not kept). ``None``: answer at once (a store that
            needs no commit, such as ``MemoryTwinStore``).
    """

    def __init__(
        self,
        twins: EdgeTwins,
        settings: DeviceSettings,
        *,
        durable: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._twins = twins
        self._settings = settings
        self._durable = durable
        self._servers: list[asyncio.AbstractServer] = []
        self._connections: set[asyncio.Task[None]] = set()
        self._waiters = _Waiters()
        self._remove_listener = twins.add_listener(self._on_event)
        self.tcp_port: int | None = None
        """The bound TCP port (useful with ``tcp_port=0``), ``None`` without TCP."""

    async def __aenter__(self) -> DeviceAPIServer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @property
    def socket_path(self) -> str:
        """The Unix socket path."""
        return self._settings.socket_path

    async def start(self) -> None:
        """Listen on the Unix socket (mode ``socket_mode``) and, if configured, loopback TCP.

        A stale socket file left by a killed agent is replaced; a socket some live process
        still serves is not.

        Raises:
            APIStartError: the path is taken by a live server or by a non-socket file, or
                binding failed.
        """
        path = self._settings.socket_path
        if not path:
            raise APIStartError("device API: no socket path configured")
        try:
            _clear_stale_socket(path)
            server = await asyncio.start_unix_server(
                self._serve, path=path, limit=_MAX_HEADER_BYTES
            )
            self._servers.append(server)
            # Between bind and chmod the socket has the umask's mode; the directory
            # (0750, see DeviceSettings.socket_path) closes that window for others.
            os.chmod(path, self._settings.socket_mode)
            if self._settings.socket_group is not None:
                shutil.chown(path, group=self._settings.socket_group)
            if self._settings.tcp_port is not None:
                tcp = await asyncio.start_server(
                    self._serve, self._settings.tcp_host, self._settings.tcp_port
                )
                self._servers.append(tcp)
                self.tcp_port = tcp.sockets[0].getsockname()[1]
        except (OSError, LookupError) as exc:
            await self.close()
            raise APIStartError(f"device API cannot listen on {path}: {exc}") from exc

    async def close(self) -> None:
        """Stop listening, end open connections (including long-polls), remove the socket."""
        self._remove_listener()
        for server in self._servers:
            server.close()
        tasks = set(self._connections)
        while tasks:
            for task in tasks:
                task.cancel()  # again if one was lost in asyncio.wait_for (gh-86296)
            _, tasks = await asyncio.wait(tasks, timeout=1.0)
        for server in self._servers:
            await server.wait_closed()
        if self._servers:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._settings.socket_path)
        self._servers.clear()

    def _on_event(self, event: TwinEvent) -> None:
        if event.kind in (EventKind.DESIRED, EventKind.REMOVED, EventKind.DEVICE):
            self._waiters.wake((event.namespace, event.name))

    # -- connection loop --------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One connection (the streams server's callback task)."""
        try:
            await self._serve_connection(reader, writer)
        except asyncio.CancelledError:
            # close() ends connections (a mapper's long-poll, an idle keep-alive) by
            # cancelling their tasks. Python 3.11's streams server then calls
            # task.exception() on the finished task, which raises for a cancelled one and
            # is logged with a traceback on every SIGTERM (3.12 checks cancelled() first);
            # so the task ends normally: nothing awaits or runs after it.
            pass

    async def _serve_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        import h11  # here, not at the top: about 0.4 MiB that a node with no mapper never needs

        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=_MAX_HEADER_BYTES)
        try:
            while True:
                try:
                    request = await self._read_request(conn, reader)
                except _HTTPError as exc:
                    if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                        await _respond(conn, writer, exc.status, exc.body(), close=True)
                    break
                if request is None:
                    break
                method, target, body = request
                try:
                    status, payload = await self._route(method, target, body)
                except _HTTPError as exc:
                    status, payload = exc.status, exc.body()
                await _respond(conn, writer, status, payload)
                if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                    break
                conn.start_next_cycle()
        except (ConnectionError, asyncio.IncompleteReadError, h11.LocalProtocolError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()
            self._connections.discard(task)

    async def _read_request(
        self, conn: h11.Connection, reader: asyncio.StreamReader
    ) -> tuple[str, str, bytes] | None:
        """The next request (method, target, body), or None when the client is gone/idle."""
        import h11

        request: h11.Request | None = None
        body = bytearray()
        limit = self._settings.max_body_bytes
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as exc:
                raise _HTTPError(400, "BadRequest", f"malformed HTTP: {exc}") from exc
            if event is h11.NEED_DATA:
                try:
                    data = await _within(
                        self._settings.idle_timeout_seconds, reader.read(_READ_CHUNK)
                    )
                except asyncio.TimeoutError:
                    return None
                conn.receive_data(data)
            elif isinstance(event, h11.Request):
                request = event
                length = _content_length(event.headers)
                if length is not None and length > limit:
                    raise _HTTPError(
                        413, "TooLarge", f"body of {length} bytes is over the {limit}-byte limit"
                    )
            elif isinstance(event, h11.Data):
                body += event.data
                if len(body) > limit:
                    raise _HTTPError(413, "TooLarge", f"body is over the {limit}-byte limit")
            elif isinstance(event, h11.EndOfMessage):
                assert request is not None
                return request.method.decode("ascii"), request.target.decode("ascii"), bytes(body)
            else:  # ConnectionClosed, or PAUSED after a response we could not follow
                return None

    # -- routes -------------------------------------------------------------------------

    async def _route(self, method: str, target: str, body: bytes) -> tuple[int, Any]:
        url = urlsplit(target)
        parts = [unquote(p) for p in url.path.strip("/").split("/")]
        query = parse_qs(url.query)
        if parts[:2] != ["v1", "devices"] or len(parts) not in (2, 4, 5):
            raise _HTTPError(404, "NotFound", f"no route for {url.path}")
        if len(parts) == 2:
            _allow(method, "GET")
            return 200, {"devices": [self._device_json(d) for d in self._twins.devices()]}
        namespace, name = parts[2], parts[3]
        try:
            if len(parts) == 4:
                _allow(method, "GET")
                return 200, self._device_json(self._twins.device(namespace, name), full=True)
            if parts[4] == "desired":
                _allow(method, "GET")
                return 200, await self._desired(namespace, name, query)
            if parts[4] == "reported":
                _allow(method, "POST")
                return 200, await self._report(namespace, name, body)
        except DeviceNotFound as exc:
            raise _HTTPError(404, "NotFound", str(exc)) from exc
        except ModelUnavailable as exc:
            raise _HTTPError(503, "ModelUnavailable", str(exc)) from exc
        except InvalidValue as exc:
            raise _HTTPError(422, exc.reason, exc.message, exc.property) from exc
        except BadRequest as exc:
            raise _HTTPError(400, "BadRequest", str(exc)) from exc
        except StoreFullError as exc:
            raise _HTTPError(507, "StoreFull", str(exc)) from exc
        except StoreError as exc:
            raise _HTTPError(503, "StoreUnavailable", str(exc)) from exc
        raise _HTTPError(404, "NotFound", f"no route for {url.path}")

    async def _desired(self, namespace: str, name: str, query: dict[str, list[str]]) -> Any:
        wait = _query_number(query, "wait", float, 0.0)
        after = _query_number(query, "after", int, -1)
        known_uid = query.get("uid", [""])[-1]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(wait, self._settings.max_wait_seconds)
        key = (namespace or "default", name)
        while True:
            view = self._twins.desired(namespace, name)
            remaining = deadline - loop.time()
            if (known_uid and view.uid != known_uid) or view.version > after or remaining <= 0:
                break
            future = self._waiters.add(key)
            try:
                await _within(remaining, future)
            except asyncio.TimeoutError:
                pass
            finally:
                self._waiters.discard(key, future)
        return _desired_json(view)

    async def _report(self, namespace: str, name: str, body: bytes) -> Any:
        try:
            payload = json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise BadRequest(f"body is not JSON: {exc}") from exc
        readings, history = _parse_report(payload)
        reports = self._twins.report(namespace, name, readings, now=time.time(), history=history)
        if self._durable is not None:
            await self._durable()
        return {"accepted": [_report_json(r) for r in reports]}

    def _device_json(self, device: Device, *, full: bool = False) -> dict[str, Any]:
        model = self._twins.model_for(device)
        props: list[dict[str, Any]] = []
        names = [p.name for p in model.properties] if model else []
        names += [p.name for p in device.properties if p.name not in names]
        for prop_name in names:
            entry: dict[str, Any] = {"name": prop_name}
            mprop = model.property(prop_name) if model else None
            if mprop is not None:
                entry.update(
                    type=mprop.type.value,
                    accessMode=mprop.access_mode.value,
                    unit=mprop.unit,
                    minimum=mprop.minimum,
                    maximum=mprop.maximum,
                    description=mprop.description,
                )
            dprop = device.property(prop_name)
            if dprop is not None:
                entry.update(
                    visitors=dict(dprop.visitors),
                    collectCycle=dprop.collect_cycle,
                    reportCycle=dprop.report_cycle,
                    reportToCloud=dprop.report_to_cloud,
                    pushMethod=dprop.push_method,
                )
            props.append(entry)
        out: dict[str, Any] = {
            "namespace": device.namespace or "default",
            "name": device.name,
            "uid": device.uid,
            "model": device.model_name,
            "modelAvailable": model is not None,
            "protocol": {
                "protocolName": device.protocol_name,
                "configData": device.protocol_config,
            },
            "properties": props,
        }
        if full:
            out["desired"] = _desired_json(self._twins.desired(device.namespace, device.name))
            reported = self._twins.reported(device.namespace, device.name)
            out["reported"] = {p: _report_json(r) for p, r in sorted(reported.items())}
        return out


# -- helpers ----------------------------------------------------------------------------


async def _within(seconds: float, awaitable: Awaitable[T]) -> T:
    """Await with a deadline (``asyncio.TimeoutError``), cancellation-safe on 3.11+.

    ``asyncio.wait_for`` before 3.12 can swallow a cancellation racing with completion
    (CPython gh-86296); ``asyncio.timeout`` does not.
    """
    if hasattr(asyncio, "timeout"):
        async with asyncio.timeout(seconds):
            return await awaitable
    return await asyncio.wait_for(awaitable, seconds)


async def _respond(
    conn: h11.Connection,
    writer: asyncio.StreamWriter,
    status: int,
    payload: Any,
    *,
    close: bool = False,
) -> None:
    import h11

    body = json.dumps(payload, separators=(",", ":")).encode()
    headers = [("content-type", "application/json"), ("content-length", str(len(body)))]
    if close:
        headers.append(("connection", "close"))
    writer.write(conn.send(h11.Response(status_code=status, headers=headers)))
    writer.write(conn.send(h11.Data(data=body)))
    writer.write(conn.send(h11.EndOfMessage()))
    await writer.drain()


def _allow(method: str, allowed: str) -> None:
    if method != allowed:
        raise _HTTPError(405, "MethodNotAllowed", f"{method} is not allowed here; use {allowed}")


def _content_length(headers: list[tuple[bytes, bytes]]) -> int | None:
    for key, value in headers:
        if key == b"content-length":
            return int(value)
    return None


def _query_number(query: dict[str, list[str]], key: str, kind: type, default: Any) -> Any:
    if key not in query:
        return default
    text = query[key][-1]
    try:
        value = kind(text)
    except ValueError:
        raise BadRequest(f"query parameter {key} must be a number, got {text!r}") from None
    if value < 0 or value != value:
        raise BadRequest(f"query parameter {key} must not be negative, got {text!r}")
    return value


def _parse_report(payload: Any) -> tuple[list[Reading], bool]:
    """Read ``{"property", "value", "timestamp"?}`` or ``{"values": [...]|{...}, "history"?}``."""
    if not isinstance(payload, Mapping):
        raise BadRequest("body must be a JSON object")
    history = payload.get("history", False)
    if not isinstance(history, bool):
        raise BadRequest("history must be true or false")
    if "values" in payload:
        values = payload["values"]
        if isinstance(values, Mapping):
            items: list[Any] = [{"property": k, "value": v} for k, v in values.items()]
        elif isinstance(values, list):
            items = values
        else:
            raise BadRequest("values must be a list of {property, value} or an object")
    elif "property" in payload:
        items = [payload]
    else:
        raise BadRequest('body needs "values", or "property" and "value"')
    readings = []
    for i, item in enumerate(items):
        if not isinstance(item, Mapping) or not isinstance(item.get("property"), str):
            raise BadRequest(f"values[{i}] must be an object with a string property")
        if "value" not in item or item["value"] is None:
            raise BadRequest(f"values[{i}] ({item['property']}) has no value")
        timestamp = item.get("timestamp")
        if timestamp is not None and (
            isinstance(timestamp, bool) or not isinstance(timestamp, (int, float))
        ):
            raise BadRequest(f"values[{i}].timestamp must be seconds since the epoch")
        readings.append(Reading(item["property"], item["value"], timestamp))
    return readings, history


def _desired_json(view: DesiredView) -> dict[str, Any]:
    return {
        "uid": view.uid,
        "version": view.version,
        "properties": {k: to_json(v) for k, v in view.properties.items()},
        "masked": dict(view.masked),
    }


def _report_json(report: ReportedValue) -> dict[str, Any]:
    return {
        "property": report.property,
        "value": to_json(report.value),
        "version": report.version,
        "timestamp": report.timestamp,
    }


def _clear_stale_socket(path: str) -> None:
    """Remove a socket file nobody serves; refuse to touch a live socket or another file."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        directory = os.path.dirname(path)
        if directory:
            os.makedirs(directory, mode=0o750, exist_ok=True)
        return
    if not stat.S_ISSOCK(mode):
        raise APIStartError(f"{path} exists and is not a socket; not removing it")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(1.0)
        probe.connect(path)
    except OSError:
        os.unlink(path)  # stale: left by an agent that was killed
        return
    finally:
        probe.close()
    raise APIStartError(f"{path} is served by another process (another agent running?)")
