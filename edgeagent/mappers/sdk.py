"""A small async client for the agent's local device API, for writing mappers in Python.

It speaks HTTP/1.1 with h11 over a Unix socket (or loopback TCP), one connection per
request, and needs nothing else from EdgeFleet: a mapper is a separate process.

Example::

    client = DeviceClient(DEFAULT_SOCKET)
    for device in await client.list_devices():
        ...
    async for desired in client.watch_desired("default", "thermostat-1"):
        apply(desired.properties)
    await client.report("default", "thermostat-1", {"temperature": 21.5})
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import quote, urlencode

import h11

DEFAULT_SOCKET = "/var/lib/edgeagent/devices.sock"
"""Where an agent with default settings serves the device API (``<state_dir>/devices.sock``;
the agent's ``devices.socket_path`` moves it)."""
_READ_CHUNK = 64 * 1024
T = TypeVar("T")


class MapperError(Exception):
    """Root of the SDK's errors."""


class DeviceAPIError(MapperError):
    """The device API refused a request.

    Attributes:
        status: HTTP status (400 malformed, 404 unknown device, 413 too large, 422 a value
            breaks the model, 503 the model has not reached the node yet).
        reason: machine-readable reason (``OutOfRange``, ``ReadOnly``, ``NotFound``…).
        message: for people.
        property: the property at fault, when one is.
    """

    def __init__(self, status: int, reason: str, message: str, prop: str | None = None) -> None:
        self.status = status
        self.reason = reason
        self.message = message
        self.property = prop
        super().__init__(f"{status} {reason}: {message}")


class APIUnavailable(MapperError):
    """The device API cannot be reached (agent not running, socket missing, timeout)."""


@dataclass(frozen=True, slots=True)
class PropertyInfo:
    """A device property as the API describes it (model definition + device config).

    ``type`` is ``""`` and ``access_mode`` ``""`` when the model has not reached the node.
    ``collect_cycle``/``report_cycle`` are as written in the Device (KubeEdge ≥ 1.15
    mappers read them as nanoseconds; 0 when unset).
    """

    name: str
    type: str = ""
    access_mode: str = ""
    unit: str = ""
    minimum: float | None = None
    maximum: float | None = None
    description: str = ""
    visitors: Mapping[str, Any] = field(default_factory=dict)
    collect_cycle: int = 0
    report_cycle: int = 0


@dataclass(frozen=True, slots=True)
class Desired:
    """A device's desired state.

    Attributes:
        uid: the Device uid; it changes when the Device is deleted and recreated.
        version: the desired version (0: none yet); higher is newer.
        properties: property -> value (JSON form; BYTES are base64 strings).
        masked: property -> reason for desired values held back by the agent.
    """

    uid: str
    version: int
    properties: Mapping[str, Any] = field(default_factory=dict)
    masked: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    """A device assigned to this node.

    Attributes:
        namespace: Device namespace.
        name: Device name.
        uid: Device uid.
        model: DeviceModel name.
        model_available: whether the model has reached the node (reports need it).
        protocol_name: ``spec.protocol.protocolName``: which mapper serves the device.
        config_data: ``spec.protocol.configData`` (opaque to EdgeFleet), ``{}`` if none.
        properties: by name.
    """

    namespace: str
    name: str
    uid: str
    model: str
    model_available: bool
    protocol_name: str
    config_data: Mapping[str, Any]
    properties: Mapping[str, PropertyInfo]


@dataclass(frozen=True, slots=True)
class Accepted:
    """A reported value the agent stored (it will reach the cloud, now or after reconnect)."""

    property: str
    value: Any
    version: int
    timestamp: float


@dataclass(frozen=True, slots=True)
class Value:
    """One value to report with its own read time (for ``report`` with a list)."""

    property: str
    value: Any
    timestamp: float | None = None


class DeviceClient:
    """Client of the local device API.

    Args:
        socket_path: the agent's Unix socket (:data:`DEFAULT_SOCKET` on a node with
            default settings); give ``host``/``port`` instead for loopback TCP.
        host: TCP host (loopback only on the agent side).
        port: TCP port.
        timeout: seconds allowed for one request, on top of a long-poll's ``wait``.
    """

    def __init__(
        self,
        socket_path: str | None = None,
        *,
        host: str | None = None,
        port: int | None = None,
        timeout: float = 10.0,
    ) -> None:
        if (socket_path is None) == (port is None):
            raise ValueError("give either socket_path or port")
        self._socket_path = socket_path
        self._host = host or "127.0.0.1"
        self._port = port
        self._timeout = timeout

    async def list_devices(self) -> list[DeviceInfo]:
        """This node's devices.

        Raises:
            APIUnavailable: the agent cannot be reached.
            DeviceAPIError: the agent refused the request.
        """
        body = await self._request("GET", "/v1/devices")
        return [_device(d) for d in body["devices"]]

    async def get_device(self, namespace: str, name: str) -> DeviceInfo:
        """One device. Raises ``DeviceAPIError`` (404) if it is not on this node."""
        return _device(await self._request("GET", _path(namespace, name)))

    async def get_desired(self, namespace: str, name: str) -> Desired:
        """The device's desired state now. Raises ``DeviceAPIError`` (404) if unknown."""
        return _desired(await self._request("GET", _path(namespace, name, "desired")))

    async def wait_desired(
        self, namespace: str, name: str, *, after: Desired | None, wait: float = 60.0
    ) -> Desired:
        """Long-poll: the desired state once it is newer than ``after``, or after ``wait`` s.

        Returns as soon as the version is higher than ``after.version`` or the uid
        differs from ``after.uid`` (the Device was recreated), else the unchanged state
        when ``wait`` seconds have passed (the agent caps ``wait``).
        """
        query: dict[str, Any] = {"wait": wait}
        if after is not None:
            query.update(after=after.version, uid=after.uid)
        path = _path(namespace, name, "desired") + "?" + urlencode(query)
        return _desired(await self._request("GET", path, extra_time=wait))

    async def watch_desired(
        self, namespace: str, name: str, *, wait: float = 60.0
    ) -> AsyncIterator[Desired]:
        """Yield the current desired state, then each newer one, until cancelled.

        Raises:
            DeviceAPIError: the device left the node (404) or another refusal.
            APIUnavailable: the agent cannot be reached.
        """
        current = await self.get_desired(namespace, name)
        yield current
        while True:
            nxt = await self.wait_desired(namespace, name, after=current, wait=wait)
            if nxt.uid != current.uid or nxt.version > current.version:
                current = nxt
                yield current

    async def report(
        self,
        namespace: str,
        name: str,
        values: Mapping[str, Any] | Sequence[Value],
        *,
        history: bool = False,
    ) -> list[Accepted]:
        """Report property values; all are checked by the agent before any is stored.

        Args:
            namespace: Device namespace.
            name: Device name.
            values: ``{property: value}`` (read now), or a sequence of ``Value`` with
                their own timestamps, in the order read.
            history: ask the agent to keep every value (bounded), not only the latest,
                while the cloud is unreachable.

        Returns:
            What the agent stored, with versions.

        Raises:
            DeviceAPIError: 422 when a value breaks the model (nothing stored), 404 for an
                unknown device, 503 while the model has not reached the node.
            APIUnavailable: the agent cannot be reached.
        """
        if isinstance(values, Mapping):
            items = [{"property": k, "value": v} for k, v in values.items()]
        else:
            items = []
            for v in values:
                item: dict[str, Any] = {"property": v.property, "value": v.value}
                if v.timestamp is not None:
                    item["timestamp"] = v.timestamp
                items.append(item)
        payload = {"values": items, "history": history}
        body = await self._request("POST", _path(namespace, name, "reported"), payload)
        return [
            Accepted(a["property"], a["value"], a["version"], a["timestamp"])
            for a in body["accepted"]
        ]

    # -- HTTP ---------------------------------------------------------------------------

    async def _request(
        self, method: str, target: str, payload: Any = None, *, extra_time: float = 0.0
    ) -> Any:
        try:
            return await within(self._timeout + extra_time, self._exchange(method, target, payload))
        except asyncio.TimeoutError as exc:
            raise APIUnavailable(f"{method} {target}: no answer in time") from exc
        except (OSError, h11.ProtocolError) as exc:
            raise APIUnavailable(f"{method} {target}: {exc}") from exc

    async def _exchange(self, method: str, target: str, payload: Any) -> Any:
        if self._socket_path is not None:
            reader, writer = await asyncio.open_unix_connection(self._socket_path)
        else:
            reader, writer = await asyncio.open_connection(self._host, self._port)
        try:
            conn = h11.Connection(h11.CLIENT)
            data = b"" if payload is None else json.dumps(payload).encode()
            headers = [("host", "localhost"), ("connection", "close")]
            if payload is not None:
                headers += [("content-type", "application/json")]
            headers += [("content-length", str(len(data)))]
            writer.write(conn.send(h11.Request(method=method, target=target, headers=headers)))
            if data:
                writer.write(conn.send(h11.Data(data=data)))
            writer.write(conn.send(h11.EndOfMessage()))
            await writer.drain()
            status = 0
            body = bytearray()
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    conn.receive_data(await reader.read(_READ_CHUNK))
                elif isinstance(event, h11.Response):
                    status = event.status_code
                elif isinstance(event, h11.Data):
                    body += event.data
                elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
                    break
        finally:
            writer.close()
            try:
                await writer.wait_closed()
            except OSError:
                pass
        try:
            decoded = json.loads(body)
        except ValueError as exc:
            raise APIUnavailable(
                f"{method} {target}: answer is not JSON (status {status})"
            ) from exc
        if status >= 400:
            err = decoded.get("error", {}) if isinstance(decoded, dict) else {}
            raise DeviceAPIError(
                status,
                err.get("reason", "Error"),
                err.get("message", f"status {status}"),
                err.get("property"),
            )
        return decoded


async def within(seconds: float, awaitable: Awaitable[T]) -> T:
    """Await with a deadline; raises ``asyncio.TimeoutError``.

    Uses ``asyncio.timeout`` where it exists (3.11+): ``asyncio.wait_for`` before 3.12 can
    swallow a cancellation that races with the inner task finishing (CPython gh-86296),
    which would leave a cancelled mapper task running.
    """
    if hasattr(asyncio, "timeout"):
        async with asyncio.timeout(seconds):
            return await awaitable
    return await asyncio.wait_for(awaitable, seconds)


def _path(namespace: str, name: str, *rest: str) -> str:
    parts = ["v1", "devices", quote(namespace, safe=""), quote(name, safe=""), *rest]
    return "/" + "/".join(parts)


def _desired(body: Mapping[str, Any]) -> Desired:
    return Desired(body["uid"], body["version"], body["properties"], body.get("masked", {}))


def _device(body: Mapping[str, Any]) -> DeviceInfo:
    props = {}
    for p in body["properties"]:
        props[p["name"]] = PropertyInfo(
            name=p["name"],
            type=p.get("type", ""),
            access_mode=p.get("accessMode", ""),
            unit=p.get("unit", ""),
            minimum=p.get("minimum"),
            maximum=p.get("maximum"),
            description=p.get("description", ""),
            visitors=p.get("visitors") or {},
            collect_cycle=p.get("collectCycle", 0),
            report_cycle=p.get("reportCycle", 0),
        )
    protocol = body.get("protocol") or {}
    return DeviceInfo(
        namespace=body["namespace"],
        name=body["name"],
        uid=body["uid"],
        model=body["model"],
        model_available=body["modelAvailable"],
        protocol_name=protocol.get("protocolName", ""),
        config_data=protocol.get("configData") or {},
        properties=props,
    )
