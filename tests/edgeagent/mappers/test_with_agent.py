"""The two shipped mappers, as real processes, against a real agent's device API.

The agent runs in this event loop with the process runtime and no hub. Devices, models and
desired values reach it the way the uplink hands them over (``Store.apply_upsert`` for
objects, ``TwinSource.on_desired`` for ``twin_desired``); the mappers list the devices, follow
the desired state and report; the agent holds the reports for delivery to the hub, and
``edgeagent status`` shows them.
"""

from __future__ import annotations

import asyncio
import copy
import pathlib
import signal
import subprocess
import sys

import pytest

from edgeagent.agent import Agent
from edgeagent.metrics import MetricsSettings
from edgeagent.sdnotify import Notifier
from edgeagent.settings import AgentSettings, RuntimeSettings, StoreSettings
from edgeagent.store import Store
from protocol.messages import ObjectRef, TwinDesired
from tests.edgeagent.conftest import Ref
from tests.waiting import eventually

from ..devices.helpers import THERMOSTAT_MODEL, device, wait_for
from .test_thermal import THERMAL_MODEL, make_sysfs, set_temp

REPO = pathlib.Path(__file__).resolve().parents[3]


def put(store: Store, obj: dict) -> None:
    """An object as the uplink stores an ``object_upsert``."""
    meta = obj["metadata"]
    meta.setdefault("uid", f"uid-{obj['kind']}-{meta['name']}")
    ref = Ref(obj["kind"], meta.get("namespace", ""), meta["name"], meta["uid"])
    meta["resourceVersion"] = str(int(meta.get("resourceVersion", "0")) + 1)
    store.apply_upsert(ref, meta["resourceVersion"], obj)


def desired(version: int, **props: float) -> TwinDesired:
    ref = ObjectRef("Device", "default", "thermo-1", "u-1")
    return TwinDesired(ref=ref, version=version, properties=props)


def thermal_device(name: str, uid: str, zone: str) -> dict:
    obj = device(
        name, uid, model="linux-thermal-zone", protocol="linux-thermal", config={"zone": zone}
    )
    obj["spec"]["properties"] = [{"name": "temperature"}, {"name": "zone-type"}]
    return obj


def mapper(module: str, socket: pathlib.Path, env: dict, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            f"edgeagent.mappers.{module}",
            "--socket",
            str(socket),
            "--resync",
            "0.3",
            *args,
        ],
        env=env,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


async def test_shipped_mappers_against_a_running_agent(tmp_path: pathlib.Path, python_env):
    sysfs = make_sysfs(
        tmp_path / "sys",
        {"thermal_zone0": ("cpu-thermal", "45000"), "thermal_zone1": ("gpu", "51500")},
    )
    settings = AgentSettings(
        node_name="edge-1",
        state_dir=tmp_path / "state",
        node_ip="127.0.0.1",
        runtime=RuntimeSettings(kind="process"),
        store=StoreSettings(commit_delay=0.05),
        metrics=MetricsSettings(sample_interval_s=0.5, batch_interval_s=1.0),
    )
    agent = Agent(settings, notifier=Notifier(None))
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop))
    mappers: list[subprocess.Popen] = []
    try:
        await eventually(lambda: agent.context is not None, what="agent ready")
        ctx = agent.context
        assert ctx.twins is not None and TwinDesired in ctx.handlers
        on_desired = ctx.handlers[TwinDesired]
        twins, store = ctx.twins, ctx.store
        thermostat = copy.deepcopy(device(config={"initial": 18, "rate": 40}))
        for obj in (
            THERMOSTAT_MODEL,
            THERMAL_MODEL,
            thermostat,
            thermal_device("cpu", "u-cpu", "thermal_zone0"),
        ):
            put(store, copy.deepcopy(obj))
        on_desired(desired(2, setpoint=23.5))
        socket = settings.device_socket_path()
        await eventually(socket.exists, what="the device API socket")
        mappers.append(mapper("simulated", socket, python_env, "--tick", "0.05"))
        mappers.append(
            mapper(
                "thermal",
                socket,
                python_env,
                "--sysfs-root",
                str(sysfs),
                "--interval",
                "0.1",
                "--history",
            )
        )

        def value(name: str, prop: str):
            report = twins.reported("default", name).get(prop)
            return None if report is None else report.value

        await wait_for(twins, lambda: value("thermo-1", "temperature") == 23.5, timeout=60)
        assert value("thermo-1", "setpoint") == 23.5
        await wait_for(twins, lambda: value("cpu", "temperature") == 45.0, timeout=60)
        assert value("cpu", "zone-type") == "cpu-thermal"
        # the cloud changes the setpoint; the mapper follows it
        on_desired(desired(3, setpoint=30.0))
        await wait_for(twins, lambda: value("thermo-1", "temperature") == 30.0, timeout=60)
        # a device added while the mappers run is picked up; a zone warms up
        put(store, thermal_device("gpu", "u-gpu", "thermal_zone1"))
        set_temp(sysfs, "thermal_zone0", "47250")
        await wait_for(
            twins,
            lambda: value("gpu", "temperature") == 51.5 and value("cpu", "temperature") == 47.25,
            timeout=60,
        )
        # no hub: everything is held for delivery (latest per property, and history)
        pending = {(r.name, r.property) for r in twins.pending_reports(1000)}
        assert {
            ("thermo-1", "temperature"),
            ("thermo-1", "setpoint"),
            ("cpu", "temperature"),
            ("gpu", "temperature"),
        } <= pending
        assert {r.name for r in twins.pending_history(1000)} == {"cpu", "gpu"}
        for source in ctx.sources:  # and nothing leaves without a session
            assert source.messages_to_send(100) == []
        done = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "edgeagent", "status", "--state-dir", str(settings.state_dir)],
            capture_output=True,
            text=True,
            env=python_env,
            cwd=REPO,
            timeout=60,
            check=True,
        )
        status = done.stdout
        assert "devices:     3 device(s), 2 model(s), desired 1, reported " in status
        assert "waiting for the hub" in status.split("metrics:")[1]
    finally:
        for proc in mappers:
            proc.send_signal(signal.SIGTERM)
        for proc in mappers:
            try:
                _, err = await asyncio.to_thread(proc.communicate, timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                pytest.fail(f"mapper {proc.args[2]} ignored SIGTERM")
            assert proc.returncode == 0, err
        stop.set()
        await asyncio.wait_for(task, 60)
    with Store.open(settings.store_path) as again:  # what was answered is on disk
        latest = again.twins().latest_reported("u-1")
        assert latest["temperature"].value == 30.0
        assert again.metrics().backlog().samples > 0
