"""Write retries: back-off on 5xx/429, a fresh read on 409 Conflict, nothing else retried."""

from __future__ import annotations

import pytest

from cloudhub.errors import KubeAPIError, KubeNotFound
from cloudhub.kube import CONFIGMAPS, KubeClient, retrying, update_with_retry
from tests.cloudhub.kube.proxy import FaultyProxy


def cm(name: str, ns: str, **data: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns},
        "data": data,
    }


async def test_retrying_backs_off_through_server_errors(
    proxy: FaultyProxy, proxied: KubeClient, namespace: str
) -> None:
    proxy.fail("POST", "/configmaps", 503, times=2)
    proxy.fail("POST", "/configmaps", 429, times=1)
    created = await retrying(
        lambda: proxied.create(CONFIGMAPS, cm("r", namespace)), base=0.01, cap=0.05
    )
    assert created["metadata"]["name"] == "r"
    assert proxy.count("POST", "/configmaps") == 4


async def test_retrying_gives_up_after_its_attempts(
    proxy: FaultyProxy, proxied: KubeClient, namespace: str
) -> None:
    proxy.fail("GET", "/configmaps/x", 500, times=10)
    with pytest.raises(KubeAPIError) as info:
        await retrying(
            lambda: proxied.get(CONFIGMAPS, "x", namespace), attempts=3, base=0.01, cap=0.02
        )
    assert info.value.status == 500
    assert proxy.count("GET", "/configmaps/x") == 3


async def test_retrying_does_not_retry_what_a_retry_cannot_cure(
    proxy: FaultyProxy, proxied: KubeClient, namespace: str
) -> None:
    with pytest.raises(KubeNotFound):
        await retrying(lambda: proxied.get(CONFIGMAPS, "missing", namespace), base=0.01)
    assert proxy.count("GET", "/configmaps/missing") == 1


async def test_update_with_retry_rereads_on_conflict(
    proxy: FaultyProxy, proxied: KubeClient, kube: KubeClient, namespace: str
) -> None:
    await kube.create(CONFIGMAPS, cm("u", namespace, mine="0"))
    calls = []

    def mutate(current: dict) -> dict:
        calls.append(dict(current.get("data") or {}))
        return {**current, "data": {**(current.get("data") or {}), "mine": str(len(calls))}}

    # Someone else writes between our first read and our write.
    proxy.after_once(
        "GET",
        "/configmaps/u",
        lambda: kube.patch(CONFIGMAPS, "u", {"data": {"theirs": "1"}}, namespace),
    )
    written = await update_with_retry(proxied, CONFIGMAPS, "u", namespace, mutate)
    assert len(calls) == 2  # the first write hit a 409; the second read saw their change
    assert calls[1]["theirs"] == "1"
    assert written["data"] == {"mine": "2", "theirs": "1"}
    assert proxy.count("PUT", "/configmaps/u") == 2


async def test_update_with_retry_writes_nothing_when_nothing_changes(
    proxy: FaultyProxy, proxied: KubeClient, kube: KubeClient, namespace: str
) -> None:
    await kube.create(CONFIGMAPS, cm("n", namespace))
    assert await update_with_retry(proxied, CONFIGMAPS, "n", namespace, lambda c: None) is None
    assert proxy.count("PUT", "/configmaps/n") == 0


async def test_update_with_retry_survives_server_errors_on_read_and_write(
    proxy: FaultyProxy, proxied: KubeClient, kube: KubeClient, namespace: str
) -> None:
    await kube.create(CONFIGMAPS, cm("s", namespace))
    proxy.fail("GET", "/configmaps/s", 503)
    proxy.fail("PUT", "/configmaps/s", 502)

    def mutate(current: dict) -> dict:
        return {**current, "data": {"ok": "yes"}}

    written = await update_with_retry(proxied, CONFIGMAPS, "s", namespace, mutate)
    assert written["data"] == {"ok": "yes"}
    assert proxy.count("PUT", "/configmaps/s") == 2
