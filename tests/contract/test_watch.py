"""Watch: events after a resourceVersion, initial state, selectors, bookmarks,
timeouts, and 410 Gone for a resourceVersion older than the kept history."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from tests.contract.conftest import DEADLINE_S, Kube


def cm(name: str, labels: dict[str, str] | None = None, **data: str) -> client.V1ConfigMap:
    return client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name=name, labels=labels), data=data or None
    )


async def take(
    func: Any, *args: Any, count: int | None = None, **kwargs: Any
) -> list[dict[str, Any]]:
    """Events of ``watch.stream(func, *args, **kwargs)``: the first ``count`` of them,
    or all until the server ends the watch; fails after the suite's deadline."""
    events: list[dict[str, Any]] = []
    w = watch.Watch()

    async def run() -> None:
        async for event in w.stream(func, *args, **kwargs):
            events.append(event)
            if count is not None and len(events) == count:
                break

    try:
        await asyncio.wait_for(run(), DEADLINE_S)
    finally:
        await w.close()
    return events


async def collect(kube: Kube, count: int, **kwargs: Any) -> list[dict[str, Any]]:
    """The first ``count`` events of a watch on the test namespace's configmaps."""
    return await take(
        kube.core.list_namespaced_config_map, kube.ns, count=count, timeout_seconds=30, **kwargs
    )


async def test_watch_from_resource_version_gets_later_changes_in_order(kube: Kube) -> None:
    made = await kube.core.create_namespaced_config_map(kube.ns, cm("w", v="1"))
    start = made.metadata.resource_version
    await kube.core.patch_namespaced_config_map("w", kube.ns, {"data": {"v": "2"}})
    await kube.core.delete_namespaced_config_map("w", kube.ns)
    events = await collect(kube, 2, resource_version=start)
    assert [e["type"] for e in events] == ["MODIFIED", "DELETED"]
    assert events[0]["raw_object"]["data"] == {"v": "2"}
    rvs = [int(e["raw_object"]["metadata"]["resourceVersion"]) for e in events]
    assert rvs[0] > int(start) and rvs[1] > rvs[0]


async def test_watch_without_resource_version_starts_with_current_state(kube: Kube) -> None:
    await kube.core.create_namespaced_config_map(kube.ns, cm("a"))
    await kube.core.create_namespaced_config_map(kube.ns, cm("b"))
    events: list[dict[str, Any]] = []
    w = watch.Watch()

    async def consume() -> None:
        async for event in w.stream(
            kube.core.list_namespaced_config_map, kube.ns, timeout_seconds=30
        ):
            events.append(event)
            if len(events) == 2:
                # The current state has arrived, so the watch runs: change it now.
                await kube.core.create_namespaced_config_map(kube.ns, cm("c"))
            elif len(events) == 3:
                break

    try:
        await asyncio.wait_for(consume(), 30)
    finally:
        await w.close()
    names = [(e["type"], e["object"].metadata.name) for e in events]
    assert sorted(names[:2]) == [("ADDED", "a"), ("ADDED", "b")]
    assert names[2] == ("ADDED", "c")


async def test_watch_resource_version_zero_also_sends_current_state(kube: Kube) -> None:
    await kube.core.create_namespaced_config_map(kube.ns, cm("zero"))
    events = await collect(kube, 1, resource_version="0")
    assert events[0]["type"] == "ADDED"
    assert events[0]["object"].metadata.name == "zero"


async def test_label_selected_watch_sees_objects_enter_and_leave(kube: Kube) -> None:
    made = await kube.core.create_namespaced_config_map(kube.ns, cm("sel", {"role": "x"}))
    start = made.metadata.resource_version
    await kube.core.patch_namespaced_config_map(
        "sel", kube.ns, {"metadata": {"labels": {"role": "y"}}}
    )
    await kube.core.patch_namespaced_config_map("sel", kube.ns, {"data": {"k": "v"}})
    await kube.core.patch_namespaced_config_map(
        "sel", kube.ns, {"metadata": {"labels": {"role": "x"}}}
    )
    events = await collect(kube, 2, resource_version=start, label_selector="role=x")
    # Leaving the selection is a DELETED event with the last state that matched,
    # coming back is an ADDED event; the change in between is not seen.
    assert [e["type"] for e in events] == ["DELETED", "ADDED"]
    assert events[0]["raw_object"]["metadata"]["labels"] == {"role": "x"}
    assert events[1]["raw_object"]["data"] == {"k": "v"}


async def test_field_selected_watch_on_one_pod(kube: Kube) -> None:
    spec = client.V1PodSpec(containers=[client.V1Container(name="c", image="busybox:1.36")])
    first = await kube.core.create_namespaced_pod(
        kube.ns, client.V1Pod(metadata=client.V1ObjectMeta(name="one"), spec=spec)
    )
    await kube.core.create_namespaced_pod(
        kube.ns, client.V1Pod(metadata=client.V1ObjectMeta(name="two"), spec=spec)
    )
    await kube.core.patch_namespaced_pod("two", kube.ns, {"metadata": {"labels": {"a": "b"}}})
    await kube.core.patch_namespaced_pod("one", kube.ns, {"metadata": {"labels": {"a": "b"}}})
    events = await take(
        kube.core.list_namespaced_pod,
        kube.ns,
        count=1,
        field_selector="metadata.name=one",
        resource_version=first.metadata.resource_version,
        timeout_seconds=30,
    )
    assert events[0]["type"] == "MODIFIED"
    assert events[0]["object"].metadata.name == "one"


async def test_watch_ends_after_timeout_seconds(kube: Kube) -> None:
    listed = await kube.core.list_namespaced_config_map(kube.ns)
    loop = asyncio.get_running_loop()
    started = loop.time()
    events = await take(
        kube.core.list_namespaced_config_map,
        kube.ns,
        timeout_seconds=1,
        resource_version=listed.metadata.resource_version,
    )
    elapsed = loop.time() - started
    assert events == []
    assert 0.9 <= elapsed < DEADLINE_S


async def test_bookmark_arrives_before_the_watch_times_out(kube: Kube) -> None:
    listed = await kube.core.list_namespaced_config_map(kube.ns)
    # kube-apiserver 1.20 sends a bookmark about 2 s before a watch's timeout, and only
    # once it has seen a change of the resource newer than where the watch started:
    # the change is made while the watch runs. A first change, made before, comes back as
    # the watch's first event: that is when the watch is known to run.
    await kube.core.create_namespaced_config_map(kube.ns, cm("bm0"))
    events: list[dict[str, Any]] = []
    w = watch.Watch()

    async def until_bookmark() -> None:
        async for event in w.stream(
            kube.core.list_namespaced_config_map,
            kube.ns,
            resource_version=listed.metadata.resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=5,
        ):
            events.append(event)
            if len(events) == 1:
                await kube.core.create_namespaced_config_map(kube.ns, cm("bm"))
            if event["type"] == "BOOKMARK":
                break

    try:
        await asyncio.wait_for(until_bookmark(), DEADLINE_S)
    finally:
        await w.close()
    types = [e["type"] for e in events]
    assert types[0] == "ADDED"
    assert "BOOKMARK" in types
    bookmark = events[types.index("BOOKMARK")]["raw_object"]
    assert bookmark["kind"] == "ConfigMap"
    assert int(bookmark["metadata"]["resourceVersion"]) >= int(
        events[0]["raw_object"]["metadata"]["resourceVersion"]
    )


async def test_watch_from_expired_resource_version_is_410_gone(kube: Kube) -> None:
    if kube.cluster.history_events is not None:
        await kube.core.create_namespaced_config_map(kube.ns, cm("churn", n="0"))
        for i in range(kube.cluster.history_events + 1):
            await kube.core.patch_namespaced_config_map("churn", kube.ns, {"data": {"n": str(i)}})
    resp = await kube.core.list_namespaced_config_map(
        kube.ns, watch=True, resource_version="1", timeout_seconds=5, _preload_content=False
    )
    try:
        line = await asyncio.wait_for(resp.content.readline(), DEADLINE_S)
    finally:
        resp.release()
    event = json.loads(line)
    assert event["type"] == "ERROR"
    status = event["object"]
    assert status["kind"] == "Status"
    assert status["code"] == 410
    assert status["reason"] in ("Expired", "Gone")
    assert "too old resource version" in status["message"]
    with pytest.raises(ApiException) as err:
        await take(
            kube.core.list_namespaced_config_map, kube.ns, resource_version="1", timeout_seconds=5
        )
    assert err.value.status == 410


async def test_relist_after_410_recovers(kube: Kube) -> None:
    listed = await kube.core.list_namespaced_config_map(kube.ns)
    await kube.core.create_namespaced_config_map(kube.ns, cm("after"))
    events = await collect(kube, 1, resource_version=listed.metadata.resource_version)
    assert events[0]["type"] == "ADDED"


async def test_deleted_event_carries_the_deletion_resource_version(kube: Kube) -> None:
    made = await kube.core.create_namespaced_config_map(kube.ns, cm("del"))
    await kube.core.delete_namespaced_config_map("del", kube.ns)
    events = await collect(kube, 1, resource_version=made.metadata.resource_version)
    assert events[0]["type"] == "DELETED"
    assert int(events[0]["raw_object"]["metadata"]["resourceVersion"]) > int(
        made.metadata.resource_version
    )
    listed = await kube.core.list_namespaced_config_map(kube.ns)
    assert int(listed.metadata.resource_version) >= int(
        events[0]["raw_object"]["metadata"]["resourceVersion"]
    )


async def test_watch_all_namespaces_raw_stream(kube: Kube) -> None:
    listed = await kube.core.list_config_map_for_all_namespaces(limit=1)
    await kube.core.create_namespaced_config_map(kube.ns, cm("x", {"mark": kube.suffix}))
    resp = await kube.core.list_config_map_for_all_namespaces(
        watch=True,
        resource_version=listed.metadata.resource_version,
        label_selector=f"mark={kube.suffix}",
        timeout_seconds=10,
        _preload_content=False,
    )
    try:
        line = await asyncio.wait_for(resp.content.readline(), DEADLINE_S)
    finally:
        resp.release()
    event = json.loads(line)
    assert event["type"] == "ADDED"
    assert event["object"]["metadata"]["namespace"] == kube.ns
    assert event["object"]["kind"] == "ConfigMap"
