"""cloudhub.kube against the embedded API: raw requests, errors, the informer, backoff."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator

import pytest

from cloudhub.kube import (
    NODES,
    PODS,
    AlreadyExists,
    Conflict,
    Informer,
    KubeClient,
    KubeError,
    NotFound,
    backoff_delays,
)
from cloudhub.standalone import APIServerSettings, EmbeddedAPIServer


@pytest.fixture
async def kube() -> AsyncIterator[KubeClient]:
    async with EmbeddedAPIServer(APIServerSettings(data_dir=None, port=0)) as server:
        client = await KubeClient.from_kubeconfig(str(server.kubeconfig_path))
        try:
            yield client
        finally:
            await client.close()


def pod(name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }


async def test_requests_and_translated_errors(kube: KubeClient) -> None:
    created = await kube.create(PODS, pod("p1"), "default")
    assert created["metadata"]["uid"]
    with pytest.raises(AlreadyExists) as info:
        await kube.create(PODS, pod("p1"), "default")
    assert info.value.status == 409 and not info.value.retryable
    with pytest.raises(NotFound):
        await kube.get(PODS, "nope", "default")
    with pytest.raises(Conflict):
        await kube.delete(PODS, "p1", "default", uid="not-its-uid")
    items, rv = await kube.list(PODS, "default", page_size=1)
    assert [i["metadata"]["name"] for i in items] == ["p1"] and rv
    assert items[0]["kind"] == "Pod"
    await kube.delete(PODS, "p1", "default", uid=created["metadata"]["uid"])
    with pytest.raises(NotFound):
        await kube.get(PODS, "p1", "default")
    with pytest.raises(KubeError):
        await KubeClient.from_kubeconfig("/nonexistent/kubeconfig")


async def test_list_pages_through_everything(kube: KubeClient) -> None:
    for i in range(7):
        await kube.create(PODS, pod(f"p{i}"), "default")
    items, _ = await kube.list(PODS, None, page_size=3)
    assert sorted(i["metadata"]["name"] for i in items) == [f"p{i}" for i in range(7)]


async def test_informer_reports_every_change(kube: KubeClient) -> None:
    await kube.create(NODES, {"metadata": {"name": "before"}})
    seen: list[tuple[str, str]] = []
    informer = Informer(
        kube,
        NODES,
        lambda kind, obj: seen.append((kind, obj["metadata"]["name"])),
        watch_timeout_s=2,
    )
    task = asyncio.create_task(informer.run())
    try:
        await asyncio.wait_for(informer.synced.wait(), 20)
        assert seen == [("ADDED", "before")]
        await kube.create(NODES, {"metadata": {"name": "after"}})
        await kube.patch_status(NODES, "after", None, {"allocatable": {"cpu": "1"}})
        await kube.delete(NODES, "before")
        deadline = time.monotonic() + 20
        while ("DELETED", "before") not in seen or ("MODIFIED", "after") not in seen:
            assert time.monotonic() < deadline, seen
            await asyncio.sleep(0.05)
        assert ("ADDED", "after") in seen
        assert set(informer.cache) == {("", "after")}
        # The watch times out after 2 s and is renewed from its resourceVersion.
        await asyncio.sleep(2.5)
        await kube.create(NODES, {"metadata": {"name": "later"}})
        while ("ADDED", "later") not in seen:
            assert time.monotonic() < deadline + 10, seen
            await asyncio.sleep(0.05)
        assert seen.count(("ADDED", "after")) == 1  # no duplicate after the renewal
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def test_backoff_is_full_jitter_and_capped() -> None:
    delays = backoff_delays(base_s=1.0, cap_s=8.0, rng=random.Random(1))
    values = [next(delays) for _ in range(50)]
    assert all(0 <= v <= 8.0 for v in values)
    assert values[0] <= 1.0 and values[1] <= 2.0 and values[2] <= 4.0
    assert max(values[10:]) > 4.0  # the ceiling grew to the cap
