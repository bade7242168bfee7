"""KubeClient against a real API: verbs, paging, watch, and the error translation."""

from __future__ import annotations

import asyncio
import pathlib

import pytest

from cloudhub.errors import (
    ConfigError,
    KubeAPIError,
    KubeConflict,
    KubeGone,
    KubeNotFound,
    KubeUnavailable,
)
from cloudhub.kube import CONFIGMAPS, PODS, KubeClient
from tests.cloudhub.kube.conftest import expired_version
from tests.cloudhub.kube.proxy import FaultyProxy


def cm(name: str, ns: str, **data: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns},
        "data": data,
    }


async def test_verbs_round_trip(kube: KubeClient, namespace: str) -> None:
    created = await kube.create(CONFIGMAPS, cm("a", namespace, k="1"))
    assert created["metadata"]["uid"] and created["data"] == {"k": "1"}
    got = await kube.get(CONFIGMAPS, "a", namespace)
    assert got["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    got["data"] = {"k": "2"}
    replaced = await kube.replace(CONFIGMAPS, got)
    assert replaced["data"] == {"k": "2"}
    patched = await kube.patch(CONFIGMAPS, "a", {"data": {"j": "3"}}, namespace)
    assert patched["data"] == {"k": "2", "j": "3"}
    patched = await kube.patch(
        CONFIGMAPS, "a", [{"op": "remove", "path": "/data/k"}], namespace, patch_type="json"
    )
    assert patched["data"] == {"j": "3"}
    await kube.delete(CONFIGMAPS, "a", namespace)
    with pytest.raises(KubeNotFound):
        await kube.get(CONFIGMAPS, "a", namespace)
    version = await kube.version()
    assert version["major"] == "1"


async def test_list_follows_continue_tokens(kube: KubeClient, namespace: str) -> None:
    for i in range(7):
        await kube.create(CONFIGMAPS, cm(f"c{i}", namespace))
    items, rv = await kube.list(CONFIGMAPS, namespace, limit=3)
    assert sorted(i["metadata"]["name"] for i in items) == [f"c{i}" for i in range(7)]
    assert all(i["kind"] == "ConfigMap" and i["apiVersion"] == "v1" for i in items)
    assert rv
    selected, _ = await kube.list(CONFIGMAPS, namespace, field_selector="metadata.name=c3")
    assert [i["metadata"]["name"] for i in selected] == ["c3"]


async def test_errors_are_translated_with_their_status(kube: KubeClient, namespace: str) -> None:
    with pytest.raises(KubeNotFound) as missing:
        await kube.get(CONFIGMAPS, "nope", namespace)
    assert missing.value.status == 404 and missing.value.reason == "NotFound"
    assert not missing.value.retryable
    first = await kube.create(CONFIGMAPS, cm("dup", namespace))
    with pytest.raises(KubeConflict) as exists:
        await kube.create(CONFIGMAPS, cm("dup", namespace))
    assert exists.value.reason == "AlreadyExists"
    await kube.patch(CONFIGMAPS, "dup", {"data": {"x": "1"}}, namespace)
    with pytest.raises(KubeConflict):  # stale resourceVersion
        await kube.replace(CONFIGMAPS, first)
    with pytest.raises(KubeAPIError) as invalid:
        await kube.create(CONFIGMAPS, cm("Not_A_Name", namespace))
    assert invalid.value.status == 422 and not invalid.value.retryable
    assert isinstance(invalid.value.body, dict)


async def test_watch_yields_events_and_an_expired_version_is_gone(
    kube: KubeClient, namespace: str, cluster
) -> None:
    _, rv = await kube.list(CONFIGMAPS, namespace)
    await kube.create(CONFIGMAPS, cm("w", namespace))
    await kube.patch(CONFIGMAPS, "w", {"data": {"a": "b"}}, namespace)
    await kube.delete(CONFIGMAPS, "w", namespace)
    seen = []
    async for kind, obj in kube.watch(
        CONFIGMAPS, namespace, resource_version=rv, timeout_seconds=2
    ):
        if kind != "BOOKMARK":
            seen.append((kind, obj["metadata"]["name"]))
        if len(seen) == 3:
            break
    assert seen == [("ADDED", "w"), ("MODIFIED", "w"), ("DELETED", "w")]
    old = await expired_version(kube, namespace, cluster[0], rv)
    with pytest.raises(KubeGone):
        async for _ in kube.watch(CONFIGMAPS, namespace, resource_version=old, timeout_seconds=5):
            pass


async def test_no_answer_is_unavailable_and_retryable(tmp_path: pathlib.Path) -> None:
    config = tmp_path / "kubeconfig"
    config.write_text(
        "apiVersion: v1\nkind: Config\n"
        "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:9'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
    )
    client = await KubeClient.from_kubeconfig(str(config), request_timeout=2.0)
    try:
        with pytest.raises(KubeUnavailable) as info:
            await client.get(PODS, "p", "default")
        assert info.value.retryable and info.value.status == 0
    finally:
        await client.close()


async def test_a_request_timed_out_says_so_and_for_how_long(tmp_path: pathlib.Path) -> None:
    """A server that accepts and never answers: the error names the wait (a timeout's own
    text is empty, and "0: PATCH ...: " told an operator nothing)."""
    held: list[asyncio.StreamWriter] = []

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)  # read nothing, answer nothing

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    config = tmp_path / "kubeconfig"
    config.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters: [{{name: c, cluster: {{server: 'http://127.0.0.1:{port}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
    )
    client = await KubeClient.from_kubeconfig(str(config), request_timeout=0.3)
    try:
        with pytest.raises(KubeUnavailable, match=r"GET /api/v1/.*: no answer within 0\.3 s$"):
            await client.get(PODS, "p", "default")
    finally:
        await client.close()
        for writer in held:
            writer.close()
        server.close()
        await server.wait_closed()


async def test_an_unusable_kubeconfig_is_a_config_error(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ConfigError, match=r"kubeconfig '.*missing' does not exist"):
        await KubeClient.from_kubeconfig(str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match="is not a file"):
        await KubeClient.from_kubeconfig(str(tmp_path))
    (tmp_path / "bad").write_text("not: [a kubeconfig")
    with pytest.raises(ConfigError):
        await KubeClient.from_kubeconfig(str(tmp_path / "bad"))


async def test_injected_server_errors_keep_their_status(
    proxy: FaultyProxy, proxied: KubeClient, namespace: str
) -> None:
    proxy.fail("GET", "/configmaps/x", 503)
    with pytest.raises(KubeAPIError) as info:
        await proxied.get(CONFIGMAPS, "x", namespace)
    assert info.value.status == 503 and info.value.retryable
    proxy.fail("GET", "/configmaps/x", 429)
    with pytest.raises(KubeAPIError) as info:
        await proxied.get(CONFIGMAPS, "x", namespace)
    assert info.value.status == 429 and info.value.retryable


async def test_the_request_observer_sees_verb_resource_status_and_time(
    cluster, namespace: str, kube: KubeClient
) -> None:
    seen = []
    client = await KubeClient.from_kubeconfig(
        str(cluster[1]), observer=lambda *args: seen.append(args)
    )
    try:
        await client.create(CONFIGMAPS, cm("o", namespace))
        with pytest.raises(KubeNotFound):
            await client.get(CONFIGMAPS, "none", namespace)
    finally:
        await client.close()
    assert [(v, r, s) for v, r, s, _ in seen] == [
        ("create", "configmaps", 201),
        ("get", "configmaps", 404),
    ]
    assert all(0 <= t < 30 for *_, t in seen)
