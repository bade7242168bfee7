"""Hostile request bodies: each one is refused with a clear 4xx Status, costs the server
little, and leaves nothing behind."""

from __future__ import annotations

import json

import pytest

from tests.contract.conftest import Kube
from tests.contract.test_crd import crd_body, install, widget


def _bomb(levels: int) -> str:
    """A "billion laughs" YAML ConfigMap: each level is nine aliases of the one below."""
    lines = ['l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} [" + ",".join([f"*l{i - 1}"] * 9) + "]")
    body = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bomb\n  annotations:\n"
    return body + "".join(f"    {line}\n" for line in lines)


async def _absent(kube: Kube, name: str) -> bool:
    status, _, _ = await kube.raw("GET", f"/api/v1/namespaces/{kube.ns}/configmaps/{name}")
    return status == 404


@pytest.mark.parametrize("levels", [4, 9])
async def test_yaml_alias_bomb_is_400(kube: Kube, levels: int) -> None:
    """kube-apiserver's YAML decoder refuses "excessive aliasing" (CVE-2019-11253);
    nine levels expand 700 bytes into 387 million strings."""
    status, body, _ = await kube.raw(
        "POST",
        f"/api/v1/namespaces/{kube.ns}/configmaps",
        _bomb(levels).encode(),
        content_type="application/yaml",
    )
    assert status == 400, body
    assert "excessive aliasing" in body["message"]
    assert await _absent(kube, "bomb")


async def test_yaml_anchor_that_contains_itself_is_400(kube: Kube) -> None:
    text = b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: loop\n  labels: &a {x: *a}\n"
    status, body, _ = await kube.raw(
        "POST", f"/api/v1/namespaces/{kube.ns}/configmaps", text, content_type="application/yaml"
    )
    assert status == 400, body
    assert "contains itself" in body["message"]
    assert await _absent(kube, "loop")


@pytest.mark.parametrize("content_type", ["application/json", "application/yaml"])
async def test_deeply_nested_body_is_400(kube: Kube, content_type: str) -> None:
    nested = "[" * 5000 + "]" * 5000
    text = '{"metadata": {"name": "deep"}, "data": {"k": ' + nested + "}}"
    status, body, _ = await kube.raw(
        "POST",
        f"/api/v1/namespaces/{kube.ns}/configmaps",
        text.encode(),
        content_type=content_type,
    )
    assert status == 400, body
    assert body["kind"] == "Status"
    assert await _absent(kube, "deep")


async def test_an_object_grown_by_patches_is_refused_past_the_store_limit(kube: Kube) -> None:
    """Each JSON patch ``copy`` doubles the object from a tiny body; etcd refuses a value
    past its request limit (1.5 MiB by default: kube-apiserver answers 500
    "etcdserver: request is too large", the embedded server 413). Nothing is kept."""
    group = await install(kube, crd_body(kube))
    cr = widget("grow", free={"x": "y" * 100_000})
    cr["apiVersion"] = f"{group}/v1"
    path = f"/apis/{group}/v1/namespaces/{kube.ns}/widgets/grow"
    status, last, _ = await kube.raw("POST", path.rsplit("/", 1)[0], cr)
    assert status == 201, last
    for i in range(8):
        patch = [{"op": "copy", "from": "/spec/free", "path": f"/spec/free/c{i}"}]
        status, body, _ = await kube.raw(
            "PATCH", path, patch, content_type="application/json-patch+json"
        )
        if status != 200:
            break
        last = body
    assert status in (413, 500), body
    assert body["kind"] == "Status"
    assert 500_000 < len(json.dumps(last)) < 1_572_864  # grew, then stopped below 1.5 MiB
    status, now, _ = await kube.raw("GET", path)
    assert now["metadata"]["resourceVersion"] == last["metadata"]["resourceVersion"]
