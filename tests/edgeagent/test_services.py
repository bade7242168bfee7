"""The agent's built-in services: settings groups, what starts when enabled, metrics of the
node and its pods sampled into the store, a device API that cannot listen."""

from __future__ import annotations

import asyncio
import logging
import pathlib

import pytest

from edgeagent.agent import Agent
from edgeagent.devices import DeviceSettings
from edgeagent.errors import ConfigError
from edgeagent.metrics import MetricsSettings
from edgeagent.runtime.process import ProcessRuntime
from edgeagent.sdnotify import Notifier
from edgeagent.services import build_builtins
from edgeagent.settings import (
    AgentSettings,
    ProcessSettings,
    RuntimeSettings,
    StoreSettings,
    env_name,
    load_settings,
)
from edgeagent.store import Store
from protocol.messages import TwinDesired
from protocol.metrics_codec import Metric, container_key, decode_sample
from tests.edgeagent.conftest import Ref
from tests.waiting import eventually


def test_settings_groups_devices_and_metrics(tmp_path: pathlib.Path) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text(
        "state_dir: /srv/edge\ndevices:\n  socket_path: /run/edgeagent/devices.sock\n"
        "  socket_group: mappers\nmetrics:\n  sample_interval_s: 30\n"
    )
    env = {env_name("metrics.enabled"): "false", env_name("devices.tcp_port"): "0"}
    s = load_settings(cfg, env=env)
    assert s.device_socket_path() == pathlib.Path("/run/edgeagent/devices.sock")
    assert (s.devices.socket_group, s.devices.tcp_port) == ("mappers", 0)
    assert (s.metrics.enabled, s.metrics.sample_interval_s) == (False, 30.0)
    defaults = load_settings(tmp_path / "absent.yaml", env={})
    assert defaults.devices.enabled and defaults.metrics.enabled  # both on by default
    assert defaults.device_socket_path() == pathlib.Path("/var/lib/edgeagent/devices.sock")
    assert defaults.metrics.sample_interval_s == 15.0
    assert defaults.store.background_commit_delay == 300.0


@pytest.mark.parametrize(
    ("text", "key", "words"),
    [
        ("devices:\n  tcp_port: 8080\n  tcp_host: 0.0.0.0\n", "devices", "loopback"),
        ("metrics:\n  budget_bytes: 100\n", "metrics", "budget_bytes"),
        ("metrics:\n  sample_interval_s: often\n", "metrics.sample_interval_s", "float"),
        ("devices:\n  socket_mode: rw\n", "devices.socket_mode", "int"),
        ("store:\n  background_commit_delay: -1\n", "store.background_commit_delay", "positive"),
    ],
)
def test_bad_device_and_metrics_settings_name_the_key(
    tmp_path: pathlib.Path, text: str, key: str, words: str
) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_settings(cfg, env={})
    assert err.value.key == key
    assert words in str(err.value)


@pytest.mark.parametrize(("devices", "metrics"), [(True, True), (True, False), (False, False)])
def test_built_in_services_follow_the_settings(
    tmp_path: pathlib.Path, devices: bool, metrics: bool
) -> None:
    settings = AgentSettings(
        node_name="edge-1",
        state_dir=tmp_path,
        devices=DeviceSettings(enabled=devices),
        metrics=MetricsSettings(enabled=metrics),
    )
    with Store.open(settings.store_path) as store:
        runtime = ProcessRuntime(tmp_path / "rt", ProcessSettings())
        builtins = build_builtins(
            settings, store, runtime, wall_clock=lambda: 0.0, monotonic=lambda: 0.0
        )
        names = [s.name for s in builtins.services]
        expected = ["device-api"] * devices + ["metrics"] * metrics
        assert names == expected
        assert (builtins.twins is not None) == devices
        assert [s.name for s in builtins.sources] == ["twins"] + ["metrics"] * metrics
        assert list(builtins.handlers) == [TwinDesired]
        builtins.close()


async def test_node_and_pod_metrics_are_sampled_into_the_store(tmp_path: pathlib.Path) -> None:
    settings = AgentSettings(
        node_name="edge-1",
        state_dir=tmp_path / "state",
        node_ip="127.0.0.1",
        runtime=RuntimeSettings(kind="process"),
        store=StoreSettings(commit_delay=0.05),
        devices=DeviceSettings(enabled=False),
        metrics=MetricsSettings(sample_interval_s=0.1, batch_interval_s=0.2),
    )
    pod = {
        "kind": "Pod",
        "metadata": {"name": "web", "namespace": "shop", "uid": "u-web"},
        "spec": {"containers": [{"name": "main", "image": "x", "command": ["sleep", "600"]}]},
    }
    with Store.open(settings.store_path) as store:
        store.apply_upsert(Ref("Pod", "shop", "web", "u-web"), "1", pod)
    agent = Agent(settings, notifier=Notifier(None))
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop))
    key = (Metric.CONTAINER_MEMORY_WORKING_SET_KIB, container_key("shop", "web", "main"))
    try:
        await eventually(lambda: agent.context is not None, what="agent ready")
        assert agent.context.twins is None and not settings.device_socket_path().exists()
        metrics = agent.context.store.metrics()

        def sampled():
            for stored in metrics.samples():
                sample = decode_sample(stored.data)
                if key in sample.values:
                    return sample
            return None

        sample = await eventually(sampled, timeout=30, what="a sample with the pod's container")
        assert sample.values[key] > 0  # KiB of `sleep`'s RSS
        assert (Metric.NODE_FS_STATE_CAPACITY_KIB, None) in sample.values  # the state dir's fs
        assert (Metric.NODE_MEMORY_CAPACITY_KIB, None) in sample.values
    finally:
        stop.set()
        await asyncio.wait_for(task, 60)
        runtime = ProcessRuntime(settings.state_dir / "runtime" / "process", ProcessSettings())
        await runtime.connect()
        for info in await runtime.list():
            await runtime.remove(info.id)
        await runtime.close()


async def test_a_device_api_that_cannot_listen_leaves_the_agent_running(
    tmp_path: pathlib.Path, caplog
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "devices.sock").write_text("not a socket")  # someone's file in the way
    settings = AgentSettings(
        node_name="edge-1",
        state_dir=state,
        node_ip="127.0.0.1",
        runtime=RuntimeSettings(kind="process"),
        metrics=MetricsSettings(sample_interval_s=0.1, batch_interval_s=0.2),
    )
    caplog.set_level(logging.ERROR)
    agent = Agent(settings, notifier=Notifier(None))
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop))
    try:
        await eventually(lambda: "service device-api failed" in caplog.text, what="the error")
        assert "devices.sock exists and is not a socket" in caplog.text
        assert (state / "devices.sock").read_text() == "not a socket"  # left alone
        metrics = agent.context.store.metrics()
        await eventually(lambda: metrics.samples(), what="metrics sampled all the same")
        assert not task.done()
    finally:
        stop.set()
        await asyncio.wait_for(task, 60)
