"""CustomResourceDefinitions: custom resources served generically once a CRD exists."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from tests.contract.conftest import Kube

#: kubernetes_asyncio sends a dict patch to custom objects as a JSON patch unless told.
MERGE = "application/merge-patch+json"


def crd_body(kube: Kube, *, scope: str = "Namespaced", status: bool = True) -> dict[str, Any]:
    group = f"{kube.suffix}.contract.edgefleet.io"
    version: dict[str, Any] = {
        "name": "v1",
        "served": True,
        "storage": True,
        "schema": {
            "openAPIV3Schema": {
                "type": "object",
                "properties": {
                    "spec": {
                        "type": "object",
                        "required": ["size"],
                        "properties": {
                            "size": {"type": "integer", "minimum": 1, "maximum": 10},
                            "mode": {"type": "string", "enum": ["fast", "slow"], "default": "slow"},
                            "free": {
                                "type": "object",
                                "x-kubernetes-preserve-unknown-fields": True,
                            },
                        },
                    },
                    "status": {
                        "type": "object",
                        "properties": {"ready": {"type": "boolean"}},
                    },
                },
            }
        },
        "additionalPrinterColumns": [{"name": "Size", "type": "integer", "jsonPath": ".spec.size"}],
    }
    if status:
        version["subresources"] = {"status": {}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"widgets.{group}"},
        "spec": {
            "group": group,
            "scope": scope,
            "names": {
                "plural": "widgets",
                "singular": "widget",
                "kind": "Widget",
                "listKind": "WidgetList",
            },
            "versions": [version],
        },
    }


async def install(kube: Kube, body: dict[str, Any]) -> str:
    name = body["metadata"]["name"]
    await kube.apiext.create_custom_resource_definition(body)
    kube.cluster_scoped(lambda: kube.apiext.delete_custom_resource_definition(name))
    group = body["spec"]["group"]

    async def served() -> bool:
        status, _, _ = await kube.raw("GET", f"/apis/{group}/v1/widgets")
        crd = await kube.apiext.read_custom_resource_definition(name)
        established = any(
            c.type == "Established" and c.status == "True" for c in crd.status.conditions or []
        )
        return status == 200 and established

    await kube.eventually(served, f"CRD {name} to be established and served")
    return group


@pytest.fixture
async def widgets(kube: Kube) -> AsyncIterator[str]:
    yield await install(kube, crd_body(kube))


def widget(name: str, size: Any = 3, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "x/v1",
        "kind": "Widget",
        "metadata": {"name": name},
        "spec": {"size": size, **spec},
    }


async def test_crd_status_and_discovery(kube: Kube, widgets: str) -> None:
    crd = await kube.apiext.read_custom_resource_definition(f"widgets.{widgets}")
    assert crd.status.accepted_names.kind == "Widget"
    assert crd.status.stored_versions == ["v1"]
    status, group, _ = await kube.raw("GET", f"/apis/{widgets}")
    assert status == 200
    assert group["preferredVersion"]["groupVersion"] == f"{widgets}/v1"
    status, listing, _ = await kube.raw("GET", f"/apis/{widgets}/v1")
    names = {r["name"]: r for r in listing["resources"]}
    assert names["widgets"]["namespaced"] is True
    assert names["widgets"]["kind"] == "Widget"
    assert "watch" in names["widgets"]["verbs"]
    assert "widgets/status" in names
    status, groups, _ = await kube.raw("GET", "/apis")
    assert widgets in {g["name"] for g in groups["groups"]}


async def test_custom_resource_crud_with_defaults_and_pruning(kube: Kube, widgets: str) -> None:
    body = widget("w1", unknown="dropped", free={"anything": [1, 2]})
    body["apiVersion"] = f"{widgets}/v1"
    made = await kube.custom.create_namespaced_custom_object(
        widgets, "v1", kube.ns, "widgets", body
    )
    assert made["spec"]["mode"] == "slow"
    assert "unknown" not in made["spec"]
    assert made["spec"]["free"] == {"anything": [1, 2]}
    assert made["metadata"]["generation"] == 1
    got = await kube.custom.get_namespaced_custom_object(widgets, "v1", kube.ns, "widgets", "w1")
    assert got["metadata"]["uid"] == made["metadata"]["uid"]
    assert got["kind"] == "Widget" and got["apiVersion"] == f"{widgets}/v1"
    listed = await kube.custom.list_namespaced_custom_object(widgets, "v1", kube.ns, "widgets")
    assert listed["kind"] == "WidgetList"
    assert [i["metadata"]["name"] for i in listed["items"]] == ["w1"]
    patched = await kube.custom.patch_namespaced_custom_object(
        widgets,
        "v1",
        kube.ns,
        "widgets",
        "w1",
        {"spec": {"size": 4}},
        _content_type=MERGE,
    )
    assert patched["spec"]["size"] == 4
    assert patched["metadata"]["generation"] == 2
    await kube.custom.delete_namespaced_custom_object(widgets, "v1", kube.ns, "widgets", "w1")
    with pytest.raises(ApiException) as err:
        await kube.custom.get_namespaced_custom_object(widgets, "v1", kube.ns, "widgets", "w1")
    assert err.value.status == 404


async def test_schema_violations_are_422_with_causes(kube: Kube, widgets: str) -> None:
    path = f"/apis/{widgets}/v1/namespaces/{kube.ns}/widgets"
    for spec, field in (
        ({"size": "big"}, "spec.size"),
        ({"size": 11}, "spec.size"),
        ({"size": 2, "mode": "warp"}, "spec.mode"),
        ({}, "spec.size"),
    ):
        body = {
            "apiVersion": f"{widgets}/v1",
            "kind": "Widget",
            "metadata": {"name": "bad"},
            "spec": spec,
        }
        status, answer, _ = await kube.raw("POST", path, body)
        assert status == 422, (spec, answer)
        assert answer["reason"] == "Invalid"
        assert answer["details"]["group"] == widgets
        assert answer["details"]["kind"] == "Widget"
        assert field in {c["field"] for c in answer["details"]["causes"]}, answer


async def test_status_subresource_of_a_custom_resource(kube: Kube, widgets: str) -> None:
    body = widget("s1")
    body["apiVersion"] = f"{widgets}/v1"
    body["status"] = {"ready": True}
    made = await kube.custom.create_namespaced_custom_object(
        widgets, "v1", kube.ns, "widgets", body
    )
    assert "status" not in made
    after = await kube.custom.patch_namespaced_custom_object_status(
        widgets,
        "v1",
        kube.ns,
        "widgets",
        "s1",
        {"status": {"ready": True}, "spec": {"size": 9}},
        _content_type=MERGE,
    )
    assert after["status"] == {"ready": True}
    assert after["spec"]["size"] == 3
    assert after["metadata"]["generation"] == 1
    main = await kube.custom.patch_namespaced_custom_object(
        widgets,
        "v1",
        kube.ns,
        "widgets",
        "s1",
        {"status": {"ready": False}, "metadata": {"labels": {"l": "v"}}},
        _content_type=MERGE,
    )
    assert main["status"] == {"ready": True}
    assert main["metadata"]["generation"] == 1
    assert main["metadata"]["labels"] == {"l": "v"}


async def test_strategic_merge_patch_is_refused_for_custom_resources(
    kube: Kube, widgets: str
) -> None:
    body = widget("smp")
    body["apiVersion"] = f"{widgets}/v1"
    await kube.custom.create_namespaced_custom_object(widgets, "v1", kube.ns, "widgets", body)
    status, answer, _ = await kube.raw(
        "PATCH",
        f"/apis/{widgets}/v1/namespaces/{kube.ns}/widgets/smp",
        {"spec": {"size": 2}},
        content_type="application/strategic-merge-patch+json",
    )
    assert status == 415
    assert answer["reason"] == "UnsupportedMediaType"


async def test_cluster_scoped_custom_resources_without_status(kube: Kube) -> None:
    group = await install(kube, crd_body(kube, scope="Cluster", status=False))
    name = kube.unique("cw")
    body = widget(name)
    body["apiVersion"] = f"{group}/v1"
    body["status"] = {"ready": True}
    made = await kube.custom.create_cluster_custom_object(group, "v1", "widgets", body)
    kube.cluster_scoped(
        lambda: kube.custom.delete_cluster_custom_object(group, "v1", "widgets", name)
    )
    assert "namespace" not in made["metadata"]
    assert made["status"] == {"ready": True}
    # Without a status subresource, status is an ordinary field and counts for generation.
    changed = await kube.custom.patch_cluster_custom_object(
        group, "v1", "widgets", name, {"status": {"ready": False}}, _content_type=MERGE
    )
    assert changed["status"] == {"ready": False}
    assert changed["metadata"]["generation"] == 2
    status, _, _ = await kube.raw("GET", f"/apis/{group}/v1/namespaces/{kube.ns}/widgets")
    assert status == 404


async def test_deleting_the_crd_stops_serving_its_resources(kube: Kube) -> None:
    body = crd_body(kube)
    group = await install(kube, body)
    cr = widget("doomed")
    cr["apiVersion"] = f"{group}/v1"
    await kube.custom.create_namespaced_custom_object(group, "v1", kube.ns, "widgets", cr)
    await kube.apiext.delete_custom_resource_definition(body["metadata"]["name"])

    async def gone() -> bool:
        status, _, _ = await kube.raw("GET", f"/apis/{group}/v1/namespaces/{kube.ns}/widgets")
        try:
            await kube.apiext.read_custom_resource_definition(body["metadata"]["name"])
        except ApiException as exc:
            return exc.status == 404 and status == 404
        return False

    await kube.eventually(gone, "the CRD and its resources to be gone")


async def test_invalid_crd_is_422(kube: Kube) -> None:
    body = crd_body(kube)
    body["metadata"]["name"] = f"wrong.{body['spec']['group']}"
    status, answer, _ = await kube.raw(
        "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", body
    )
    assert status == 422
    assert "metadata.name" in {c["field"] for c in answer["details"]["causes"]}


async def test_crd_deletion_completes_when_the_last_finalizer_goes(kube: Kube) -> None:
    """A custom resource holding a finalizer keeps its CRD (deletionTimestamp, cleanup
    finalizer) until the finalizer is removed; then both go, with nothing else to
    prompt it."""
    body = crd_body(kube)
    group = await install(kube, body)
    cr = widget("held")
    cr["apiVersion"] = f"{group}/v1"
    cr["metadata"]["finalizers"] = ["contract.edgefleet.io/hold"]
    await kube.custom.create_namespaced_custom_object(group, "v1", kube.ns, "widgets", cr)
    await kube.apiext.delete_custom_resource_definition(body["metadata"]["name"])

    async def held_terminating() -> bool:
        got = await kube.custom.get_namespaced_custom_object(
            group, "v1", kube.ns, "widgets", "held"
        )
        return bool(got["metadata"].get("deletionTimestamp"))

    await kube.eventually(held_terminating, "the custom resource to be terminating")
    crd = await kube.apiext.read_custom_resource_definition(body["metadata"]["name"])
    assert crd.metadata.deletion_timestamp is not None
    await kube.custom.patch_namespaced_custom_object(
        group,
        "v1",
        kube.ns,
        "widgets",
        "held",
        {"metadata": {"finalizers": None}},
        _content_type=MERGE,
    )

    async def gone() -> bool:
        try:
            await kube.apiext.read_custom_resource_definition(body["metadata"]["name"])
        except ApiException as exc:
            return exc.status == 404
        return False

    await kube.eventually(gone, "the CRD to be deleted after its last finalizer")


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ([{"op": "replace", "path": "/spec/scope", "value": "Cluster"}], "spec.scope"),
        ([{"op": "replace", "path": "/spec/names/kind", "value": "Gizmo"}], "spec.names.kind"),
        # v1 is where the objects are stored: it cannot leave spec.versions.
        (
            [{"op": "replace", "path": "/spec/versions/0/name", "value": "v2"}],
            "status.storedVersions[0]",
        ),
    ],
)
async def test_crd_changes_that_would_strand_its_objects_are_422(
    kube: Kube, widgets: str, patch: list, field: str
) -> None:
    cr = widget("kept")
    cr["apiVersion"] = f"{widgets}/v1"
    await kube.custom.create_namespaced_custom_object(widgets, "v1", kube.ns, "widgets", cr)
    status, body, _ = await kube.raw(
        "PATCH",
        f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.{widgets}",
        patch,
        content_type="application/json-patch+json",
    )
    assert status == 422, body
    assert field in {c["field"] for c in body["details"]["causes"]}
    got = await kube.custom.get_namespaced_custom_object(widgets, "v1", kube.ns, "widgets", "kept")
    assert got["spec"]["size"] == 3
