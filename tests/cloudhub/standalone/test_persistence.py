"""Durability: objects and resourceVersions survive restarts; a failed commit is
never acknowledged and leaves nothing behind."""

from __future__ import annotations

import asyncio
import json
import pathlib
import sqlite3
import subprocess

import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from tests.cloudhub.standalone.conftest import running, settings


def _entries(path: pathlib.Path) -> list[pathlib.Path] | None:
    return list(path.iterdir()) if path.exists() else None


def _write(path: pathlib.Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def cm(name: str, **data: str) -> client.V1ConfigMap:
    return client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name), data=data or None)


CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "gadgets.persist.example.com"},
    "spec": {
        "group": "persist.example.com",
        "scope": "Namespaced",
        "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                    }
                },
            }
        ],
    },
}


async def test_objects_and_revisions_survive_a_restart(data_dir: pathlib.Path) -> None:
    async with running(settings(data_dir=data_dir)) as (api, c):
        core = client.CoreV1Api(c)
        await core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="keep")))
        kept = await core.create_namespaced_config_map("keep", cm("a", v="1"))
        await core.create_namespaced_config_map("keep", cm("b"))
        await core.delete_namespaced_config_map("b", "keep")
        await client.ApiextensionsV1Api(c).create_custom_resource_definition(CRD)
        await client.CustomObjectsApi(c).create_namespaced_custom_object(
            "persist.example.com",
            "v1",
            "keep",
            "gadgets",
            {
                "apiVersion": "persist.example.com/v1",
                "kind": "Gadget",
                "metadata": {"name": "g"},
                "x": 1,
            },
        )
        before = await core.list_namespaced_config_map("keep")
        token, kubeconfig = api.token, api.kubeconfig_path.read_text()
    async with running(settings(data_dir=data_dir)) as (api, c):
        core = client.CoreV1Api(c)
        assert api.token == token
        assert json.dumps(kubeconfig) != ""  # rewritten with the new port, same credentials
        got = await core.read_namespaced_config_map("a", "keep")
        assert got.metadata.uid == kept.metadata.uid
        assert got.metadata.resource_version == kept.metadata.resource_version
        assert got.data == {"v": "1"}
        with pytest.raises(ApiException) as err:
            await core.read_namespaced_config_map("b", "keep")
        assert err.value.status == 404
        gadget = await client.CustomObjectsApi(c).get_namespaced_custom_object(
            "persist.example.com", "v1", "keep", "gadgets", "g"
        )
        assert gadget["x"] == 1
        after = await core.create_namespaced_config_map("keep", cm("c"))
        assert int(after.metadata.resource_version) > int(before.metadata.resource_version)
        listed = await core.list_namespaced_config_map("keep")
        assert int(listed.metadata.resource_version) >= int(after.metadata.resource_version)


async def test_watch_from_before_a_restart_is_410(data_dir: pathlib.Path) -> None:
    async with running(settings(data_dir=data_dir)) as (_, c):
        core = client.CoreV1Api(c)
        first = await core.create_namespaced_config_map("default", cm("w1"))
        await core.create_namespaced_config_map("default", cm("w2"))
    async with running(settings(data_dir=data_dir)) as (_, c):
        core = client.CoreV1Api(c)
        w = watch.Watch()
        with pytest.raises(ApiException) as err:
            async for _ in w.stream(
                core.list_namespaced_config_map,
                "default",
                resource_version=first.metadata.resource_version,
                timeout_seconds=5,
            ):
                pass
        await w.close()
        assert err.value.status == 410


async def test_in_memory_server_keeps_nothing(tmp_path: pathlib.Path) -> None:
    async with running(settings()) as (api, c):
        files = api.kubeconfig_path.parent
        await client.CoreV1Api(c).create_namespaced_config_map("default", cm("tmp"))
        assert _entries(tmp_path) == []
    assert _entries(files) is None
    async with running(settings()) as (_, c):
        with pytest.raises(ApiException):
            await client.CoreV1Api(c).read_namespaced_config_map("tmp", "default")


async def test_failed_commit_is_not_acknowledged_and_is_undone(data_dir: pathlib.Path) -> None:
    async with running(settings(data_dir=data_dir)) as (_, c):
        core = client.CoreV1Api(c)
        await core.create_namespaced_config_map("default", cm("before", v="1"))
        # Another process holds the database lock longer than the server waits for it.
        blocker = sqlite3.connect(data_dir / "state.db", isolation_level=None)
        blocker.execute("BEGIN EXCLUSIVE")
        try:
            with pytest.raises(ApiException) as err:
                await core.create_namespaced_config_map("default", cm("lost"))
            assert err.value.status == 500
            assert json.loads(err.value.body)["reason"] == "InternalError"
            with pytest.raises(ApiException) as err:
                await core.patch_namespaced_config_map("before", "default", {"data": {"v": "2"}})
            assert err.value.status == 500
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        with pytest.raises(ApiException) as err:
            await core.read_namespaced_config_map("lost", "default")
        assert err.value.status == 404
        assert (await core.read_namespaced_config_map("before", "default")).data == {"v": "1"}
        again = await core.create_namespaced_config_map("default", cm("lost"))
        assert again.metadata.name == "lost"
    async with running(settings(data_dir=data_dir)) as (_, c):
        core = client.CoreV1Api(c)
        assert (await core.read_namespaced_config_map("before", "default")).data == {"v": "1"}
        assert await core.read_namespaced_config_map("lost", "default")


async def test_concurrent_writes_are_all_durable(data_dir: pathlib.Path) -> None:
    async with running(settings(data_dir=data_dir)) as (_, c):
        core = client.CoreV1Api(c)
        made = await asyncio.gather(
            *(
                core.create_namespaced_config_map("default", cm(f"n{i}", i=str(i)))
                for i in range(50)
            )
        )
        rvs = sorted(int(m.metadata.resource_version) for m in made)
        assert len(set(rvs)) == 50
    db = sqlite3.connect(data_dir / "state.db")
    try:
        rows = db.execute(
            "SELECT name, rv FROM objects WHERE resource='configmaps' AND name LIKE 'n%'"
        ).fetchall()
    finally:
        db.close()
    assert sorted(rv for _, rv in rows) == rvs


async def test_corrupt_database_is_a_clear_error(data_dir: pathlib.Path) -> None:
    from cloudhub.standalone import EmbeddedAPIServer, StorageError

    _write(data_dir / "state.db", b"this is not a database" * 100)
    with pytest.raises(StorageError) as err:
        async with EmbeddedAPIServer(settings(data_dir=data_dir)):
            pass
    assert "state.db" in str(err.value)


@pytest.mark.parametrize("small_fs", ["2m"], indirect=True)
async def test_full_disk_is_a_clear_500_and_loses_nothing_acknowledged(
    small_fs: pathlib.Path,
) -> None:
    data_dir = small_fs / "apiserver"
    acked: dict[str, str] = {}
    async with running(settings(data_dir=data_dir)) as (_, c):
        core = client.CoreV1Api(c)
        for i in range(100):
            try:
                made = await core.create_namespaced_config_map(
                    "default", cm(f"fill{i}", v="x" * 60_000)
                )
            except ApiException as exc:
                failure = exc
                break
            acked[made.metadata.name] = made.metadata.resource_version
        else:
            pytest.fail("a 2 MB filesystem took 6 MB of ConfigMaps")
        assert failure.status == 500
        message = json.loads(failure.body)["message"]
        assert "database or disk is full" in message, message
        # Reads still work and show exactly what was acknowledged.
        listed = await core.list_namespaced_config_map("default")
        assert {i.metadata.name for i in listed.items} == set(acked)
        # Space comes back: writes work again.
        remount = ["mount", "-o", "remount,size=16m", str(small_fs)]
        await asyncio.to_thread(subprocess.run, remount, check=True)
        again = await core.create_namespaced_config_map("default", cm("after", v="1"))
        acked[again.metadata.name] = again.metadata.resource_version
    async with running(settings(data_dir=data_dir)) as (_, c):
        listed = await client.CoreV1Api(c).list_namespaced_config_map("default")
        assert {i.metadata.name: i.metadata.resource_version for i in listed.items} == acked


async def test_failed_commit_of_a_crd_or_namespace_deletion_leaves_no_trace(
    data_dir: pathlib.Path,
) -> None:
    """What the server derives from a write (a CRD's served type, a terminating
    namespace) is undone with it when the commit fails."""
    async with running(settings(data_dir=data_dir)) as (_, c):
        core = client.CoreV1Api(c)
        apiext = client.ApiextensionsV1Api(c)
        custom = client.CustomObjectsApi(c)
        await core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="stay")))
        blocker = sqlite3.connect(data_dir / "state.db", isolation_level=None)
        blocker.execute("BEGIN EXCLUSIVE")
        try:
            with pytest.raises(ApiException) as err:
                await apiext.create_custom_resource_definition(CRD)
            assert err.value.status == 500
            with pytest.raises(ApiException) as err:
                await core.delete_namespace("stay")
            assert err.value.status == 500
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        # The CRD was never stored: its resources are not served.
        with pytest.raises(ApiException) as err:
            await custom.list_namespaced_custom_object(
                "persist.example.com", "v1", "stay", "gadgets"
            )
        assert err.value.status == 404
        groups = await client.ApisApi(c).get_api_versions()
        assert "persist.example.com" not in {g.name for g in groups.groups}
        # The namespace was never deleted: it takes new objects.
        assert (await core.read_namespace("stay")).status.phase == "Active"
        await core.create_namespaced_config_map("stay", cm("new"))
        # Both writes work once the database does.
        await apiext.create_custom_resource_definition(CRD)
        await custom.create_namespaced_custom_object(
            "persist.example.com",
            "v1",
            "stay",
            "gadgets",
            {"apiVersion": "persist.example.com/v1", "kind": "Gadget", "metadata": {"name": "g"}},
        )
