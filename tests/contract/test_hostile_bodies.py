"""Hostile request bodies: each one is refused with a clear 4xx Status, costs the server
little, and leaves nothing behind."""

from __future__ import annotations

import pytest

from tests.contract.conftest import Kube


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
