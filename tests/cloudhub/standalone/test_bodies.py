"""Limits of the embedded server on the shape of objects: nesting depth (its encoder's
limit, where kube-apiserver 1.20 takes 10,000 levels) and YAML aliases."""

from __future__ import annotations

import json
import ssl
from typing import Any

import aiohttp
import pytest

from cloudhub.standalone import EmbeddedAPIServer
from cloudhub.standalone.bodies import MAX_DEPTH
from tests.cloudhub.standalone.conftest import running, settings

CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "blobs.bodies.example.com"},
    "spec": {
        "group": "bodies.example.com",
        "scope": "Namespaced",
        "names": {"plural": "blobs", "singular": "blob", "kind": "Blob"},
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
BLOBS = "/apis/bodies.example.com/v1/namespaces/default/blobs"


def nest(levels: int) -> Any:
    """``levels`` maps nested in each other."""
    value: Any = 1
    for _ in range(levels):
        value = {"a": value}
    return value


def blob(name: str, spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "bodies.example.com/v1",
        "kind": "Blob",
        "metadata": {"name": name},
        "spec": spec,
    }


class Raw:
    def __init__(self, api: EmbeddedAPIServer, session: aiohttp.ClientSession) -> None:
        self.api = api
        self.session = session

    async def __call__(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> tuple[int, Any]:
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        headers = {"Authorization": f"Bearer {self.api.token}", "Content-Type": content_type}
        async with self.session.request(
            method, self.api.url + path, data=data, headers=headers
        ) as resp:
            text = await resp.read()
            return resp.status, json.loads(text)


@pytest.fixture
async def raw() -> Any:
    async with running(settings()) as (api, _):
        ctx = ssl.create_default_context(cafile=str(api.ca_cert_path))
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx)) as session:
            call = Raw(api, session)
            status, _ = await call(
                "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", CRD
            )
            assert status == 201
            yield call


async def test_the_deepest_object_allowed_is_served(raw: Raw) -> None:
    # The object is level 1, its spec level 2: MAX_DEPTH - 1 maps under it.
    status, made = await raw("POST", BLOBS, blob("deepest", nest(MAX_DEPTH - 1)))
    assert status == 201, made
    status, got = await raw("GET", f"{BLOBS}/deepest")
    assert status == 200 and got["spec"] == nest(MAX_DEPTH - 1)
    status, listed = await raw("GET", BLOBS)
    assert status == 200 and listed["items"][0]["spec"] == nest(MAX_DEPTH - 1)


@pytest.mark.parametrize("content_type", ["application/json", "application/yaml"])
async def test_one_level_deeper_is_400_not_500(raw: Raw, content_type: str) -> None:
    text = json.dumps(blob("deeper", nest(MAX_DEPTH))).encode()  # JSON is YAML too
    status, body = await raw("POST", BLOBS, text, content_type)
    assert status == 400, body
    assert f"nested more than {MAX_DEPTH} levels" in body["message"]
    status, _ = await raw("GET", f"{BLOBS}/deeper")
    assert status == 404


async def test_a_patch_that_nests_deeper_than_any_body_is_400(raw: Raw) -> None:
    """Each patch body is shallow, but it adds its depth to the path it patches."""
    status, made = await raw("POST", BLOBS, blob("grow", nest(150)))
    assert status == 201
    path = "/spec" + "/a" * 149
    patch = [{"op": "add", "path": f"{path}/more", "value": nest(100)}]
    status, body = await raw("PATCH", f"{BLOBS}/grow", patch, "application/json-patch+json")
    assert status == 400, body
    assert f"nested more than {MAX_DEPTH} levels" in body["message"]
    status, got = await raw("GET", f"{BLOBS}/grow")
    assert got["metadata"]["resourceVersion"] == made["metadata"]["resourceVersion"]


async def test_yaml_errors_say_yaml(raw: Raw) -> None:
    status, body = await raw(
        "POST", "/api/v1/namespaces/default/configmaps", b"metadata: [\n", "application/yaml"
    )
    assert status == 400
    assert "not valid YAML" in body["message"]


async def test_yaml_aliases_within_the_budget_are_expanded(raw: Raw) -> None:
    """Aliases are YAML: a few of them, as people write them, are accepted."""
    text = (
        b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: anchors\n"
        b"  labels: &common {app: web, tier: front}\n  annotations: *common\n"
    )
    status, body = await raw(
        "POST", "/api/v1/namespaces/default/configmaps", text, "application/yaml"
    )
    assert status == 201, body
    assert body["metadata"]["annotations"] == {"app": "web", "tier": "front"}


async def test_an_object_over_the_limit_is_413_and_revisions_stay_gapless() -> None:
    async with running(settings(max_object_bytes=2048)) as (api, _):
        ctx = ssl.create_default_context(cafile=str(api.ca_cert_path))
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx)) as session:
            raw = Raw(api, session)
            path = "/api/v1/namespaces/default/configmaps"
            status, small = await raw("POST", path, {"metadata": {"name": "s"}})
            assert status == 201
            status, body = await raw(
                "POST", path, {"metadata": {"name": "b"}, "data": {"x": "y" * 3000}}
            )
            assert status == 413, body
            assert body["reason"] == "RequestEntityTooLarge"
            assert "2048-byte limit" in body["message"]
            status, _ = await raw(
                "PATCH", f"{path}/s", {"data": {"x": "y" * 3000}}, "application/merge-patch+json"
            )
            assert status == 413
            status, after = await raw("POST", path, {"metadata": {"name": "t"}})
            assert status == 201
            assert int(after["metadata"]["resourceVersion"]) == (
                int(small["metadata"]["resourceVersion"]) + 1
            )
            status, got = await raw("GET", f"{path}/s")
            assert got["metadata"]["resourceVersion"] == small["metadata"]["resourceVersion"]
