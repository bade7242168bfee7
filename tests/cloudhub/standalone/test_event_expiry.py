"""Events expire one TTL after their last write, as with kube-apiserver's ``--event-ttl``.

A short TTL (seconds) on the real embedded server; the tests wait for what a client sees
(the Event gone from a GET, a DELETED on a watch), never for a fixed time.
"""

from __future__ import annotations

import asyncio
import pathlib
import time

import pytest

from cloudhub.errors import KubeNotFound
from cloudhub.kube import EVENTS, KubeClient
from cloudhub.kube.times import rfc3339
from cloudhub.standalone import APIServerSettings, EmbeddedAPIServer, StandaloneError
from tests.waiting import eventually

DEADLINE = 30.0


def event(name: str, *, at: float | None = None) -> dict:
    stamp = rfc3339(time.time() if at is None else at)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": "default"},
        "involvedObject": {"kind": "Node", "name": "pi-1", "uid": "pi-1"},
        "type": "Normal",
        "reason": "EdgeConnected",
        "message": "Edge agent connected over quic",
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


async def gone(kube: KubeClient, name: str) -> None:
    """Wait until GET of the Event says 404 (fails after the deadline)."""

    async def not_found() -> bool:
        try:
            await kube.get(EVENTS, name, "default")
        except KubeNotFound:
            return True
        return False

    await eventually(not_found, f"Event {name} to expire", DEADLINE)


async def test_an_event_expires_a_ttl_after_its_last_write() -> None:
    ttl = 1.5
    settings = APIServerSettings(data_dir=None, port=0, event_ttl_s=ttl)
    async with EmbeddedAPIServer(settings) as api:
        kube = await KubeClient.from_kubeconfig(str(api.kubeconfig_path))
        async with kube:
            created = time.monotonic()
            await kube.create(EVENTS, event("once"), "default")
            await kube.create(EVENTS, event("repeated"), "default")
            _, rv = await kube.list(EVENTS, "default")
            deleted: list[str] = []

            async def watch() -> None:
                async for kind, obj in kube.watch(EVENTS, "default", resource_version=rv):
                    if kind == "DELETED":
                        deleted.append(obj["metadata"]["name"])

            watcher = asyncio.create_task(watch())
            try:
                # Repeats (a correlator's count updates) keep an Event alive.
                for count in (2, 3, 4):
                    await asyncio.sleep(ttl / 3)
                    await kube.patch(EVENTS, "repeated", {"count": count}, "default")
                last_write = time.monotonic()
                await gone(kube, "once")
                assert time.monotonic() - created >= ttl
                assert (await kube.get(EVENTS, "repeated", "default"))["count"] == 4
                await gone(kube, "repeated")
                assert time.monotonic() - last_write >= ttl
                await eventually(  # watchers see them go
                    lambda: deleted == ["once", "repeated"],
                    "both deletions watched",
                    DEADLINE,
                    state=lambda: deleted,
                )
            finally:
                watcher.cancel()
                await asyncio.gather(watcher, return_exceptions=True)
            assert api.expired_events == 2


async def test_events_kept_across_a_restart_still_expire(tmp_path: pathlib.Path) -> None:
    # Their write time is not stored: a loaded Event expires one TTL after the newest of its
    # own timestamps (here its creationTimestamp, set by the first server).
    data = tmp_path / "api"
    async with EmbeddedAPIServer(APIServerSettings(data_dir=data, port=0)) as api:
        kube = await KubeClient.from_kubeconfig(str(api.kubeconfig_path))
        async with kube:
            await kube.create(EVENTS, event("before"), "default")
            created = time.monotonic()
    ttl = 2.0
    async with EmbeddedAPIServer(APIServerSettings(data_dir=data, port=0, event_ttl_s=ttl)) as api:
        kube = await KubeClient.from_kubeconfig(str(api.kubeconfig_path))
        async with kube:
            await kube.create(EVENTS, event("after"), "default")
            written = time.monotonic()
            await gone(kube, "before")
            # Whole seconds in creationTimestamp: up to 1 s early.
            assert time.monotonic() - created >= ttl - 1.0
            await gone(kube, "after")
            assert time.monotonic() - written >= ttl


def test_the_ttl_must_be_positive() -> None:
    with pytest.raises(StandaloneError, match="event_ttl_s must be positive"):
        APIServerSettings(event_ttl_s=0)
