"""The local device API over a real Unix socket (and loopback TCP), driven by the SDK."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import stat
import tempfile

import pytest

from edgeagent.devices import APIStartError, DeviceAPIServer, DeviceSettings
from edgeagent.mappers import APIUnavailable, DeviceAPIError, DeviceClient, Value

from .helpers import THERMOSTAT_MODEL, desired, device, new_twins, running_api, wait_for

NOW = 1_700_000_000.0


def ready_twins():
    twins = new_twins()
    twins.upsert_model(THERMOSTAT_MODEL)
    twins.upsert_device(device(config={"rate": 2}))
    twins.upsert_device(device("thermo-2", "u-2"))
    return twins


def exists(path: str) -> bool:
    return os.path.exists(path)


def write_file(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


async def raw_request(path: str, data: bytes) -> tuple[int, dict]:
    """Send raw bytes on the socket; return the status and JSON body (for malformed input)."""
    reader, writer = await asyncio.open_unix_connection(path)
    writer.write(data)
    await writer.drain()
    response = await reader.read()
    writer.close()
    await writer.wait_closed()
    head, _, body = response.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


async def test_socket_is_created_with_mode_0660_and_removed_on_close() -> None:
    twins = ready_twins()
    async with running_api(twins) as server:
        mode = os.stat(server.socket_path).st_mode
        assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o660
        path = server.socket_path
    assert not exists(path)


async def test_list_and_get_devices() -> None:
    twins = ready_twins()
    twins.apply_desired(desired("u-1", 3, setpoint=21.5), NOW)
    async with running_api(twins) as server:
        client = DeviceClient(server.socket_path)
        devices = await client.list_devices()
        assert [d.name for d in devices] == ["thermo-1", "thermo-2"]
        first = devices[0]
        assert (first.uid, first.model, first.protocol_name) == ("u-1", "thermostat", "simulated")
        assert first.model_available and first.config_data == {"rate": 2}
        setpoint = first.properties["setpoint"]
        assert (setpoint.type, setpoint.access_mode, setpoint.maximum) == (
            "double",
            "ReadWrite",
            35.0,
        )
        assert "label" in first.properties  # model properties the Device does not list
        got = await client.get_desired("default", "thermo-1")
        assert (got.uid, got.version, dict(got.properties)) == ("u-1", 3, {"setpoint": 21.5})
        with pytest.raises(DeviceAPIError) as exc:
            await client.get_device("default", "nope")
        assert exc.value.status == 404 and exc.value.reason == "NotFound"


async def test_long_poll_wakes_up_on_a_desired_change() -> None:
    twins = ready_twins()
    twins.apply_desired(desired("u-1", 1, setpoint=20.0), NOW)
    async with running_api(twins) as server:
        client = DeviceClient(server.socket_path)
        current = await client.get_desired("default", "thermo-1")
        # nothing changes: the poll answers after its wait with the same version
        loop = asyncio.get_running_loop()
        started = loop.time()
        same = await client.wait_desired("default", "thermo-1", after=current, wait=0.3)
        assert same.version == 1 and loop.time() - started >= 0.25
        waiting = asyncio.create_task(
            client.wait_desired("default", "thermo-1", after=current, wait=60)
        )
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(waiting), 0.3)  # it is waiting, not answered
        twins.apply_desired(desired("u-1", 2, setpoint=25.0), NOW)
        woke = await asyncio.wait_for(waiting, 10)
        assert (woke.version, dict(woke.properties)) == (2, {"setpoint": 25.0})


async def test_long_poll_answers_at_once_for_a_recreated_device_and_404_when_removed() -> None:
    twins = ready_twins()
    twins.apply_desired(desired("u-1", 7, setpoint=20.0), NOW)
    async with running_api(twins) as server:
        client = DeviceClient(server.socket_path)
        old = await client.get_desired("default", "thermo-1")
        twins.upsert_device(device(uid="u-9"))
        twins.apply_desired(desired("u-9", 1, setpoint=10.0), NOW)
        new = await asyncio.wait_for(
            client.wait_desired("default", "thermo-1", after=old, wait=60), 10
        )
        assert (new.uid, new.version) == ("u-9", 1)  # version 1 < 7, but a new device
        waiting = asyncio.create_task(
            client.wait_desired("default", "thermo-1", after=new, wait=60)
        )
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(waiting), 0.3)
        twins.remove_device("u-9")
        with pytest.raises(DeviceAPIError) as exc:
            await asyncio.wait_for(waiting, 10)
        assert exc.value.status == 404


async def test_watch_desired_yields_each_newer_state() -> None:
    twins = ready_twins()
    async with running_api(twins) as server:
        client = DeviceClient(server.socket_path)
        seen: list[int] = []

        async def watch() -> None:
            async for d in client.watch_desired("default", "thermo-1", wait=30):
                seen.append(d.version)
                if d.version == 0:
                    twins.apply_desired(desired("u-1", 1, setpoint=11.0), NOW)
                elif d.version == 1:
                    twins.apply_desired(desired("u-1", 2, setpoint=12.0), NOW)
                else:
                    return

        await asyncio.wait_for(watch(), 15)
        assert seen == [0, 1, 2]


async def test_report_valid_values_one_or_many() -> None:
    twins = ready_twins()
    async with running_api(twins) as server:
        client = DeviceClient(server.socket_path)
        (one,) = await client.report("default", "thermo-1", {"temperature": 21.25})
        assert one.property == "temperature" and one.value == 21.25 and one.version > 0
        many = await client.report(
            "default",
            "thermo-1",
            [Value("temperature", 21.5, NOW), Value("temperature", "21.75", NOW + 1)],
            history=True,
        )
        assert [a.value for a in many] == [21.5, 21.75]
        assert many[0].version > one.version and many[1].version > many[0].version
        assert many[0].timestamp == NOW
        info = await client.get_device("default", "thermo-1")
        assert info.uid == "u-1"
    assert twins.reported("default", "thermo-1")["temperature"].value == 21.75
    assert [r.value for r in twins.pending_history()] == [21.5, 21.75]


@pytest.mark.parametrize(
    ("values", "status", "reason", "prop"),
    [
        ({"setpoint": 99}, 422, "OutOfRange", "setpoint"),
        ({"temperature": "warm"}, 422, "TypeMismatch", "temperature"),
        ({"temperature": True}, 422, "TypeMismatch", "temperature"),
        ({"humidity": 50}, 422, "UnknownProperty", "humidity"),
        ({"temperature": None}, 400, "BadRequest", None),
    ],
)
async def test_report_invalid_values_get_a_clear_4xx(
    values: dict, status: int, reason: str, prop: str | None
) -> None:
    twins = ready_twins()
    async with running_api(twins) as server:
        client = DeviceClient(server.socket_path)
        with pytest.raises(DeviceAPIError) as exc:
            await client.report("default", "thermo-1", {"temperature": 20.0, **values})
        assert (exc.value.status, exc.value.reason, exc.value.property) == (status, reason, prop)
        assert exc.value.message
    assert twins.pending_reports() == []  # all or nothing


async def test_model_not_on_the_node_yet_is_503() -> None:
    twins = new_twins()
    twins.upsert_device(device())
    async with running_api(twins) as server:
        client = DeviceClient(server.socket_path)
        with pytest.raises(DeviceAPIError) as exc:
            await client.report("default", "thermo-1", {"temperature": 20.0})
        assert exc.value.status == 503 and exc.value.reason == "ModelUnavailable"
        (info,) = await client.list_devices()
        assert not info.model_available


async def test_malformed_requests() -> None:
    twins = ready_twins()
    async with running_api(twins, max_body_bytes=2048) as server:
        path = server.socket_path
        url = "/v1/devices/default/thermo-1/reported"

        def post(body: bytes, target: str = url, method: str = "POST") -> bytes:
            return (
                f"{method} {target} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n"
                f"content-length: {len(body)}\r\n\r\n"
            ).encode() + body

        status, body = await raw_request(path, post(b"{not json"))
        assert status == 400 and "not JSON" in body["error"]["message"]
        status, body = await raw_request(path, post(b'{"values": 5}'))
        assert status == 400
        status, body = await raw_request(path, post(b"[]"))
        assert status == 400
        status, body = await raw_request(
            path, post(b'{"property": "temperature", "value": 1, "timestamp": "x"}')
        )
        assert status == 400 and "timestamp" in body["error"]["message"]
        status, body = await raw_request(path, post(b"x" * 4096))
        assert status == 413 and body["error"]["reason"] == "TooLarge"
        status, body = await raw_request(path, post(b"", method="DELETE"))
        assert status == 405
        status, body = await raw_request(path, post(b"", target="/v2/things", method="GET"))
        assert status == 404
        status, body = await raw_request(
            path, post(b"", target="/v1/devices/default/thermo-1/desired?wait=soon", method="GET")
        )
        assert status == 400 and "wait" in body["error"]["message"]
        status, body = await raw_request(path, b"NOT HTTP AT ALL\r\n\r\n")
        assert status == 400


async def test_keep_alive_connection_serves_several_requests() -> None:
    twins = ready_twins()
    async with running_api(twins) as server:
        reader, writer = await asyncio.open_unix_connection(server.socket_path)
        request = b"GET /v1/devices HTTP/1.1\r\nhost: x\r\n\r\n"
        writer.write(request + request)
        await writer.drain()
        seen = b""
        while seen.count(b'"devices"') < 2:
            chunk = await asyncio.wait_for(reader.read(65536), 10)
            assert chunk, "server closed a keep-alive connection"
            seen += chunk
        writer.close()
        await writer.wait_closed()


async def test_loopback_tcp_when_configured() -> None:
    twins = ready_twins()
    async with running_api(twins, tcp_port=0) as server:
        assert server.tcp_port
        client = DeviceClient(host="127.0.0.1", port=server.tcp_port)
        assert len(await client.list_devices()) == 2
    with pytest.raises(ValueError, match="loopback"):
        DeviceSettings(tcp_port=8080, tcp_host="0.0.0.0")


async def test_stale_socket_is_replaced_live_one_refused() -> None:
    twins = ready_twins()
    directory = tempfile.mkdtemp(prefix="ef-dev-", dir="/tmp")
    path = f"{directory}/devices.sock"
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(path)
    stale.close()  # a socket file nobody listens on, as after kill -9
    async with DeviceAPIServer(twins, DeviceSettings(socket_path=path)):
        with pytest.raises(APIStartError, match="another process"):
            await DeviceAPIServer(twins, DeviceSettings(socket_path=path)).start()
        assert len(await DeviceClient(path).list_devices()) == 2
    write_file(path, "not a socket")
    with pytest.raises(APIStartError, match="not a socket"):
        await DeviceAPIServer(twins, DeviceSettings(socket_path=path)).start()
    os.unlink(path)
    os.rmdir(directory)


async def test_client_reports_an_absent_agent() -> None:
    with pytest.raises(APIUnavailable):
        await DeviceClient("/tmp/ef-no-such-dir/devices.sock").list_devices()


async def test_close_ends_pending_long_polls() -> None:
    twins = ready_twins()
    async with running_api(twins) as server:
        client = DeviceClient(server.socket_path)
        current = await client.get_desired("default", "thermo-1")
        waiting = asyncio.create_task(
            client.wait_desired("default", "thermo-1", after=current, wait=60)
        )
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(waiting), 0.3)
    with pytest.raises(APIUnavailable):
        await asyncio.wait_for(waiting, 10)


async def test_reports_wake_listeners_for_the_uplink() -> None:
    twins = ready_twins()
    async with running_api(twins) as server:
        client = DeviceClient(server.socket_path)
        task = asyncio.create_task(wait_for(twins, lambda: bool(twins.pending_reports())))
        await client.report("default", "thermo-2", {"temperature": 1.0})
        await asyncio.wait_for(task, 10)
