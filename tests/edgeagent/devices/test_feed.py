"""``TwinFeed``: the twins serve exactly the store's Device and DeviceModel objects, at
start and as they change; a recreated Device is a new device; orphaned state is dropped."""

from __future__ import annotations

import copy
import pathlib

import pytest

from edgeagent.devices import DeviceNotFound, EdgeTwins, Reading, TwinFeed
from edgeagent.store import Store
from protocol.devices import DesiredState
from tests.edgeagent.conftest import Ref

from .helpers import THERMOSTAT_MODEL, device

NOW = 1_700_000_000.0


def put(store: Store, obj: dict) -> None:
    meta = obj["metadata"]
    ref = Ref(obj["kind"], meta.get("namespace", ""), meta["name"], meta["uid"])
    rv = str(int(meta.get("resourceVersion", "0")) + 1)
    meta["resourceVersion"] = rv
    store.apply_upsert(ref, rv, obj)


def on_node(obj: dict, node: str) -> dict:
    obj = copy.deepcopy(obj)
    obj["spec"]["nodeName"] = node
    return obj


@pytest.fixture
def store(tmp_path: pathlib.Path):
    s = Store.open(tmp_path / "store.db")
    yield s
    s.close()


def test_loaded_at_start_then_followed(store: Store) -> None:
    put(store, THERMOSTAT_MODEL)
    put(store, on_node(device(), "edge-1"))
    twins = EdgeTwins(store.twins())
    feed = TwinFeed(store, twins, "edge-1")
    feed.start()
    try:
        assert [d.name for d in twins.devices()] == ["thermo-1"]
        assert twins.model_for(twins.device("default", "thermo-1")) is not None
        put(store, on_node(device("thermo-2", "u-2"), "edge-1"))
        assert [d.name for d in twins.devices()] == ["thermo-1", "thermo-2"]
        twins.report("default", "thermo-2", [Reading("temperature", 20)], now=NOW)
        store.apply_delete("u-2")
        with pytest.raises(DeviceNotFound):
            twins.device("default", "thermo-2")
        assert "u-2" not in store.twins().device_uids()  # its reports went with it
        store.apply_delete("m-1")  # the model leaves: the device stays, unchecked
        assert twins.model_for(twins.device("default", "thermo-1")) is None
        store.apply_upsert(Ref("ConfigMap", "default", "c", "c-1"), "1", {"data": {}})
    finally:
        feed.close()
    put(store, on_node(device("thermo-3", "u-3"), "edge-1"))
    assert [d.name for d in twins.devices()] == ["thermo-1"]  # closed: no longer followed


def test_recreated_device_is_a_new_device(store: Store) -> None:
    put(store, THERMOSTAT_MODEL)
    put(store, device())
    twins = EdgeTwins(store.twins())
    feed = TwinFeed(store, twins, "edge-1")
    feed.start()
    twins.apply_desired(DesiredState("default", "thermo-1", "u-1", 5, {"setpoint": 21.0}), NOW)
    twins.report("default", "thermo-1", [Reading("temperature", 19)], now=NOW)
    # deleted and created again under the same name: new uid, generation 1
    put(store, device(uid="u-new"))  # the hub may send the new one before the delete
    store.apply_delete("u-1")
    view = twins.desired("default", "thermo-1")
    assert (view.uid, view.version) == ("u-new", 0)
    assert twins.reported("default", "thermo-1") == {}
    assert store.twins().device_uids() == set()
    assert twins.pending_reports() == []  # nothing of the old uid is sent
    feed.close()


def test_devices_of_other_nodes_and_invalid_ones(store: Store, caplog) -> None:
    put(store, THERMOSTAT_MODEL)
    put(store, on_node(device(), "edge-1"))
    twins = EdgeTwins(store.twins())
    feed = TwinFeed(store, twins, "edge-1")
    feed.start()
    twins.report("default", "thermo-1", [Reading("temperature", 19)], now=NOW)
    broken = on_node(device(), "edge-1")
    broken["spec"]["deviceModelRef"] = "not-a-mapping"
    put(store, broken)
    assert "Device default/thermo-1 is not served" in caplog.text
    assert twins.device("default", "thermo-1").model_name == "thermostat"  # previous kept
    assert store.twins().device_uids() == {"u-1"}
    put(store, on_node(device(), "edge-2"))  # moved to another node
    with pytest.raises(DeviceNotFound):
        twins.device("default", "thermo-1")
    assert store.twins().device_uids() == set()
    feed.close()


def test_orphaned_twin_state_is_dropped_at_start(tmp_path: pathlib.Path) -> None:
    with Store.open(tmp_path / "store.db") as store:
        put(store, THERMOSTAT_MODEL)
        put(store, device())
        put(store, device("thermo-2", "u-2"))
        twins = EdgeTwins(store.twins())
        feed = TwinFeed(store, twins, "edge-1")
        feed.start()
        for name in ("thermo-1", "thermo-2"):
            twins.report("default", name, [Reading("temperature", 19)], now=NOW)
        feed.close()
        # u-2's object is deleted while its twin state stays (a crash between the two)
        store.apply_delete("u-2")
    with Store.open(tmp_path / "store.db") as store:
        assert store.twins().device_uids() == {"u-1", "u-2"}
        twins = EdgeTwins(store.twins())
        feed = TwinFeed(store, twins, "edge-1")
        feed.start()
        assert store.twins().device_uids() == {"u-1"}
        assert [r.uid for r in twins.pending_reports()] == ["u-1"]
        feed.close()
