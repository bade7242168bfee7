"""The embedded control loops: namespace lifecycle, CRD cleanup, garbage collection."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from tests.cloudhub.standalone.conftest import running, settings
from tests.waiting import eventually


async def missing(read: Callable[[], Awaitable[object]]) -> bool:
    try:
        await read()
    except ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return False


def owner_ref(obj: client.V1ConfigMap) -> client.V1OwnerReference:
    return client.V1OwnerReference(
        api_version="v1", kind="ConfigMap", name=obj.metadata.name, uid=obj.metadata.uid
    )


async def test_deleting_a_namespace_deletes_its_content_then_itself() -> None:
    async with running(settings()) as (_, c):
        core = client.CoreV1Api(c)
        await core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="doomed")))
        await core.create_namespaced_config_map(
            "doomed", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="x"))
        )
        held = await core.create_namespaced_config_map(
            "doomed",
            client.V1ConfigMap(
                metadata=client.V1ObjectMeta(name="held", finalizers=["example.com/f"])
            ),
        )
        await core.delete_namespace("doomed")
        assert (await core.read_namespace("doomed")).status.phase == "Terminating"
        with pytest.raises(ApiException) as err:
            await core.create_namespaced_config_map(
                "doomed", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="late"))
            )
        assert err.value.status == 403
        await eventually(
            lambda: missing(lambda: core.read_namespaced_config_map("x", "doomed")),
            "content deleted",
        )
        # The finalizer holds the namespace until its owner removes it.
        still = await core.read_namespace("doomed")
        assert still.status.phase == "Terminating"
        assert (await core.read_namespaced_config_map("held", "doomed")).metadata.deletion_timestamp
        await core.patch_namespaced_config_map("held", "doomed", {"metadata": {"finalizers": None}})
        await eventually(lambda: missing(lambda: core.read_namespace("doomed")), "namespace gone")
        assert held.metadata.uid


async def test_garbage_collection_follows_owner_references() -> None:
    async with running(settings()) as (_, c):
        core = client.CoreV1Api(c)
        owner = await core.create_namespaced_config_map(
            "default", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="owner"))
        )
        other = await core.create_namespaced_config_map(
            "default", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="other"))
        )
        await core.create_namespaced_config_map(
            "default",
            client.V1ConfigMap(
                metadata=client.V1ObjectMeta(name="child", owner_references=[owner_ref(owner)])
            ),
        )
        await core.create_namespaced_config_map(
            "default",
            client.V1ConfigMap(
                metadata=client.V1ObjectMeta(
                    name="shared", owner_references=[owner_ref(owner), owner_ref(other)]
                )
            ),
        )
        await core.delete_namespaced_config_map("owner", "default")
        await eventually(
            lambda: missing(lambda: core.read_namespaced_config_map("child", "default")),
            "the dependent to be collected",
        )

        async def dangling_dropped() -> bool:
            shared = await core.read_namespaced_config_map("shared", "default")
            return [r.name for r in shared.metadata.owner_references or []] == ["other"]

        await eventually(dangling_dropped, "the reference to the deleted owner to be dropped")


async def test_orphan_propagation_keeps_dependents() -> None:
    async with running(settings()) as (_, c):
        core = client.CoreV1Api(c)
        owner = await core.create_namespaced_config_map(
            "default", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="o"))
        )
        await core.create_namespaced_config_map(
            "default",
            client.V1ConfigMap(
                metadata=client.V1ObjectMeta(name="kept", owner_references=[owner_ref(owner)])
            ),
        )
        await core.delete_namespaced_config_map("o", "default", propagation_policy="Orphan")
        await eventually(
            lambda: missing(lambda: core.read_namespaced_config_map("o", "default")), "owner gone"
        )
        kept = await core.read_namespaced_config_map("kept", "default")
        assert not kept.metadata.owner_references


async def test_foreground_deletion_waits_for_dependents() -> None:
    async with running(settings()) as (_, c):
        core = client.CoreV1Api(c)
        owner = await core.create_namespaced_config_map(
            "default", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="fg"))
        )
        await core.create_namespaced_config_map(
            "default",
            client.V1ConfigMap(
                metadata=client.V1ObjectMeta(
                    name="dep", owner_references=[owner_ref(owner)], finalizers=["example.com/slow"]
                )
            ),
        )
        first = await core.delete_namespaced_config_map(
            "fg", "default", propagation_policy="Foreground"
        )
        assert first is not None
        await eventually(lambda: _terminating(core, "dep"), "the dependent to be deleted first")
        assert (await core.read_namespaced_config_map("fg", "default")).metadata.deletion_timestamp
        await core.patch_namespaced_config_map("dep", "default", {"metadata": {"finalizers": None}})
        await eventually(
            lambda: missing(lambda: core.read_namespaced_config_map("fg", "default")),
            "the owner to go once its dependent is gone",
        )


async def _terminating(core: client.CoreV1Api, name: str) -> bool:
    found = await core.read_namespaced_config_map(name, "default")
    return found.metadata.deletion_timestamp is not None


async def test_deleting_a_crd_deletes_its_custom_resources_first() -> None:
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "things.gc.example.com"},
        "spec": {
            "group": "gc.example.com",
            "scope": "Namespaced",
            "names": {"plural": "things", "singular": "thing", "kind": "Thing"},
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
    async with running(settings()) as (_, c):
        ext = client.ApiextensionsV1Api(c)
        custom = client.CustomObjectsApi(c)
        made = await ext.create_custom_resource_definition(crd)
        assert "customresourcecleanup.apiextensions.k8s.io" in made.metadata.finalizers
        await custom.create_namespaced_custom_object(
            "gc.example.com",
            "v1",
            "default",
            "things",
            {"apiVersion": "gc.example.com/v1", "kind": "Thing", "metadata": {"name": "t"}},
        )
        await ext.delete_custom_resource_definition("things.gc.example.com")
        await eventually(
            lambda: missing(lambda: ext.read_custom_resource_definition("things.gc.example.com")),
            "the CRD to be gone",
        )
        with pytest.raises(ApiException) as err:
            await custom.list_namespaced_custom_object("gc.example.com", "v1", "default", "things")
        assert err.value.status == 404
        # Created again, the CRD starts empty: its old objects were deleted, not hidden.
        await ext.create_custom_resource_definition(crd)
        listed = await custom.list_namespaced_custom_object(
            "gc.example.com", "v1", "default", "things"
        )
        assert listed["items"] == []
