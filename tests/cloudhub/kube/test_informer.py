"""The shared informer against a real API: events, indexers, bookmarks, re-watch, relist."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest

from cloudhub.kube import CONFIGMAPS, Informer, KubeClient
from tests.cloudhub.kube.conftest import EMBEDDED, EMBEDDED_HISTORY
from tests.cloudhub.kube.proxy import FaultyProxy

DEADLINE = 30.0


def cm(name: str, ns: str, team: str = "a", **data: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns, "labels": {"team": team}},
        "data": data,
    }


def by_team(obj: dict) -> list[str]:
    return [(obj["metadata"].get("labels") or {}).get("team", "")]


class Running:
    """An informer run in a task for one test, with a record of its handler calls."""

    def __init__(self, informer: Informer) -> None:
        self.informer = informer
        self.events: list[tuple[str, str]] = []
        self.changed = asyncio.Event()
        informer.add_handler(self._on)
        self.task = asyncio.ensure_future(informer.run())

    def _on(self, kind: str, obj: dict, old: dict | None) -> None:
        self.events.append((kind, obj["metadata"]["name"]))
        self.changed.set()

    async def wait(self, predicate: Callable[[], bool], timeout: float = DEADLINE) -> None:
        """Wait until ``predicate()``: woken by every handler call, and every 0.1 s for
        what handlers do not see (relists, bookmarks, watch counts)."""

        async def until() -> None:
            while not predicate():
                self.changed.clear()
                try:
                    await asyncio.wait_for(self.changed.wait(), 0.1)
                except asyncio.TimeoutError:
                    pass

        await asyncio.wait_for(until(), timeout)

    async def stop(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


@pytest.fixture
async def start() -> AsyncIterator[Callable[..., Running]]:
    running: list[Running] = []

    def make(client: KubeClient, namespace: str, **kwargs) -> Running:
        r = Running(Informer(client, CONFIGMAPS, namespace=namespace, **kwargs))
        running.append(r)
        return r

    yield make
    for r in running:
        await r.stop()


async def test_list_then_watch_keeps_the_cache_and_indexes_current(
    kube: KubeClient, namespace: str, start
) -> None:
    await kube.create(CONFIGMAPS, cm("before", namespace, team="a"))
    r = start(kube, namespace, indexers={"team": by_team})
    informer = r.informer
    await informer.wait_synced(DEADLINE)
    assert r.events == [("ADDED", "before")]
    created = await kube.create(CONFIGMAPS, cm("x", namespace, team="a"))
    await r.wait(lambda: ("ADDED", "x") in r.events)
    assert sorted(o["metadata"]["name"] for o in informer.by_index("team", "a")) == ["before", "x"]
    created["metadata"]["labels"] = {"team": "b"}
    await kube.replace(CONFIGMAPS, created)
    await r.wait(lambda: ("MODIFIED", "x") in r.events)
    assert [o["metadata"]["name"] for o in informer.by_index("team", "b")] == ["x"]
    assert [o["metadata"]["name"] for o in informer.by_index("team", "a")] == ["before"]
    await kube.delete(CONFIGMAPS, "x", namespace)
    await r.wait(lambda: ("DELETED", "x") in r.events)
    assert informer.get("x", namespace) is None
    assert informer.by_index("team", "b") == []
    assert r.events == [("ADDED", "before"), ("ADDED", "x"), ("MODIFIED", "x"), ("DELETED", "x")]
    with pytest.raises(KeyError):
        informer.by_index("nope", "a")
    # a late handler is replayed what is cached
    late = []
    informer.add_handler(lambda kind, obj, old: late.append((kind, obj["metadata"]["name"])))
    assert late == [("ADDED", "before")]


async def test_transform_shapes_what_is_cached(kube: KubeClient, namespace: str, start) -> None:
    def slim(obj: dict) -> dict:
        return {"metadata": obj["metadata"], "kind": obj["kind"]}

    await kube.create(CONFIGMAPS, cm("big", namespace, payload="x" * 1000))
    r = start(kube, namespace, transform=slim)
    await r.informer.wait_synced(DEADLINE)
    await kube.create(CONFIGMAPS, cm("big2", namespace, payload="y" * 1000))
    await r.wait(lambda: ("ADDED", "big2") in r.events)
    assert "data" not in r.informer.get("big", namespace)
    assert "data" not in r.informer.get("big2", namespace)


async def test_bookmarks_advance_the_resource_version_without_events(
    kube: KubeClient, namespace: str, start
) -> None:
    # Nothing matches the selector; other writes move the API's resourceVersion on.
    r = start(kube, namespace, label_selector="team=nobody", watch_timeout=3)
    await r.informer.wait_synced(DEADLINE)
    listed = r.informer.resource_version
    for i in range(3):
        await kube.create(CONFIGMAPS, cm(f"other{i}", namespace, team="a"))
    await r.wait(lambda: int(r.informer.resource_version) > int(listed))
    assert r.events == []
    assert r.informer.relists == 0


async def test_a_watch_that_ends_is_resumed_without_relisting(
    kube: KubeClient, namespace: str, start
) -> None:
    r = start(kube, namespace, watch_timeout=1)
    await r.informer.wait_synced(DEADLINE)
    await r.wait(lambda: r.informer.watches >= 3)
    await kube.create(CONFIGMAPS, cm("late", namespace))
    await r.wait(lambda: ("ADDED", "late") in r.events)
    assert r.informer.relists == 0


async def test_a_watch_outage_longer_than_the_history_relists_on_410(
    cluster, kube: KubeClient, proxy: FaultyProxy, proxied: KubeClient, namespace: str, start
) -> None:
    for name in ("stays", "changes", "goes"):
        await kube.create(CONFIGMAPS, cm(name, namespace))
    r = start(proxied, namespace, backoff_base=0.05, backoff_cap=0.2)
    await r.informer.wait_synced(DEADLINE)
    await r.wait(lambda: r.informer.watches >= 1)
    proxy.cut_watches()
    # while the informer cannot watch: one object changes, one goes, one arrives
    await kube.patch(CONFIGMAPS, "changes", {"data": {"v": "2"}}, namespace)
    await kube.delete(CONFIGMAPS, "goes", namespace)
    await kube.create(CONFIGMAPS, cm("arrives", namespace))
    if cluster[0] == EMBEDDED:
        # enough other changes that the informer's resourceVersion falls out of history
        for i in range(EMBEDDED_HISTORY + 10):
            await kube.create(CONFIGMAPS, cm(f"filler{i}", namespace, team="filler"))
    else:
        # kube-apiserver keeps the last minutes of changes in its watch cache: a watch
        # that resumes after a short outage is not 410. Answer its next watch with the
        # 410 Gone an expired resourceVersion gets.
        proxy.fail("GET", "/configmaps", 410)
    proxy.restore_watches()
    await r.wait(lambda: r.informer.relists >= 1)
    await r.wait(lambda: r.informer.get("arrives", namespace) is not None)
    # the relist brought the cache in line and told the handlers what changed meanwhile
    assert r.informer.get("goes", namespace) is None
    assert r.informer.get("changes", namespace)["data"] == {"v": "2"}
    assert ("DELETED", "goes") in r.events and ("ADDED", "arrives") in r.events
    assert ("MODIFIED", "changes") in r.events
    # and it watches again afterwards
    await kube.create(CONFIGMAPS, cm("after", namespace))
    await r.wait(lambda: ("ADDED", "after") in r.events)


async def test_a_failing_list_is_retried_with_backoff(
    proxy: FaultyProxy, proxied: KubeClient, kube: KubeClient, namespace: str, start
) -> None:
    await kube.create(CONFIGMAPS, cm("one", namespace))
    proxy.fail("GET", f"/namespaces/{namespace}/configmaps", 503, times=2)
    r = start(proxied, namespace, backoff_base=0.05, backoff_cap=0.2)
    await r.informer.wait_synced(DEADLINE)
    assert r.events == [("ADDED", "one")]
    lists = [p for m, p in proxy.requests if m == "GET" and "watch" not in p]
    assert len(lists) == 3  # two injected failures, then the list that worked
