"""In-process API groups on the embedded API (``EmbeddedAPIServer.add_api``), through
kubernetes_asyncio as metrics clients read metrics-server: discovery, get, list with a
label selector, 404, and the verbs an aggregated read-only group refuses."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException

from cloudhub.aggregation import AggregatedRequest, AggregatedResource
from cloudhub.standalone import ConfigurationError
from tests.cloudhub.standalone.conftest import running, settings


class Echo:
    """A read-only group answering with what it was asked."""

    group = "echo.example.io"
    version = "v1alpha1"
    resources = (
        AggregatedResource("widgets", "widget", "Widget", namespaced=True),
        AggregatedResource("gadgets", "gadget", "Gadget", namespaced=False),
    )

    def __init__(self) -> None:
        self.asked: list[AggregatedRequest] = []

    async def handle(self, request: AggregatedRequest) -> dict[str, Any] | None:
        self.asked.append(request)
        if request.name == "missing":
            return None
        items = [
            {"metadata": {"name": n, "labels": {"tier": t}}}
            for n, t in (("a", "front"), ("b", "back"))
            if request.label_selector.matches({"tier": t})
        ]
        if request.name is not None:
            return {"kind": request.resource.kind, "metadata": {"name": request.name}}
        return {"kind": request.resource.kind + "List", "items": items}


async def test_an_in_process_group_is_discovered_and_served() -> None:
    echo = Echo()
    async with running(settings()) as (api, api_client):
        api.add_api(echo)
        groups = await client.ApisApi(api_client).get_api_versions()
        names = [g.name for g in groups.groups]
        assert "echo.example.io" in names and "apps" in names
        custom = client.CustomObjectsApi(api_client)
        resources = await custom.get_api_resources("echo.example.io", "v1alpha1")
        assert {r.name: r.namespaced for r in resources.resources} == {
            "widgets": True,
            "gadgets": False,
        }

        got = await custom.get_namespaced_custom_object(
            "echo.example.io", "v1alpha1", "ns1", "widgets", "w1"
        )
        assert got == {"kind": "Widget", "metadata": {"name": "w1"}}
        assert (echo.asked[-1].namespace, echo.asked[-1].name) == ("ns1", "w1")
        listed = await custom.list_cluster_custom_object(
            "echo.example.io", "v1alpha1", "gadgets", label_selector="tier in (front)"
        )
        assert [i["metadata"]["name"] for i in listed["items"]] == ["a"]
        assert echo.asked[-1].namespace is None and echo.asked[-1].name is None
        everywhere = await custom.list_cluster_custom_object(
            "echo.example.io", "v1alpha1", "widgets"
        )
        assert len(everywhere["items"]) == 2

        with pytest.raises(ApiException) as missing:
            await custom.get_cluster_custom_object(
                "echo.example.io", "v1alpha1", "gadgets", "missing"
            )
        assert missing.value.status == 404
        status = json.loads(missing.value.body)
        assert status["reason"] == "NotFound"
        assert status["message"] == 'gadgets.echo.example.io "missing" not found'
        with pytest.raises(ApiException) as refused:
            await custom.create_cluster_custom_object(
                "echo.example.io", "v1alpha1", "gadgets", {"metadata": {"name": "x"}}
            )
        assert refused.value.status == 405
        with pytest.raises(ApiException) as bad:
            await custom.list_cluster_custom_object(
                "echo.example.io", "v1alpha1", "gadgets", label_selector="tier in (("
            )
        assert bad.value.status == 400
        with pytest.raises(ApiException) as unknown:
            await custom.list_cluster_custom_object("echo.example.io", "v1alpha1", "sprockets")
        assert unknown.value.status == 404
        with pytest.raises(ApiException) as cluster_scoped_in_ns:
            await custom.list_namespaced_custom_object(
                "echo.example.io", "v1alpha1", "ns1", "gadgets"
            )
        assert cluster_scoped_in_ns.value.status == 404

        with pytest.raises(ConfigurationError):
            api.add_api(Echo())  # the group is taken
        with pytest.raises(ConfigurationError):
            bad_group = Echo()
            bad_group.group = "apps"  # a stored group
            api.add_api(bad_group)
        api.remove_api("echo.example.io")
        groups = await client.ApisApi(api_client).get_api_versions()
        assert "echo.example.io" not in [g.name for g in groups.groups]
