"""Discovery documents and the version endpoint, as clients read them."""

from __future__ import annotations

from kubernetes_asyncio import client

from tests.contract.conftest import Kube


async def test_version_is_kubernetes_1_20_or_later(kube: Kube) -> None:
    info = await client.VersionApi(kube.api).get_code()
    assert info.major == "1"
    assert int(info.minor.rstrip("+")) >= 20
    assert info.git_version.startswith("v1.")


async def test_core_group_lists_the_resources_the_hub_uses(kube: Kube) -> None:
    versions = await client.CoreApi(kube.api).get_api_versions()
    assert "v1" in versions.versions
    listing = await kube.core.get_api_resources()
    resources = {r.name: r for r in listing.resources}
    for name in (
        "namespaces",
        "nodes",
        "pods",
        "configmaps",
        "secrets",
        "events",
        "services",
        "serviceaccounts",
    ):
        assert name in resources, name
    pods = resources["pods"]
    assert pods.namespaced is True and pods.kind == "Pod"
    assert {
        "create",
        "delete",
        "deletecollection",
        "get",
        "list",
        "patch",
        "update",
        "watch",
    } <= set(pods.verbs)
    assert "po" in pods.short_names
    assert {"get", "patch", "update"} <= set(resources["pods/status"].verbs)
    assert resources["nodes"].namespaced is False
    assert "nodes/status" in resources


async def test_named_groups(kube: Kube) -> None:
    groups = await client.ApisApi(kube.api).get_api_versions()
    by_name = {g.name: g for g in groups.groups}
    for group, version in (
        ("apps", "apps/v1"),
        ("coordination.k8s.io", "coordination.k8s.io/v1"),
        ("apiextensions.k8s.io", "apiextensions.k8s.io/v1"),
    ):
        assert group in by_name, group
        assert version in {v.group_version for v in by_name[group].versions}
    apps = await client.AppsApi(kube.api).get_api_group()
    assert apps.preferred_version.group_version == "apps/v1"
    resources = {r.name for r in (await kube.apps.get_api_resources()).resources}
    assert {"deployments", "deployments/status", "daemonsets", "daemonsets/status"} <= resources
    leases = {r.name for r in (await kube.coordination.get_api_resources()).resources}
    assert "leases" in leases


async def test_unknown_paths_are_404(kube: Kube) -> None:
    # A resource a served group version does not have: a NotFound Status.
    for path in ("/api/v1/frobs", "/apis/apps/v1/namespaces/x/things"):
        status, body, _ = await kube.raw("GET", path)
        assert status == 404, path
        assert body["kind"] == "Status" and body["reason"] == "NotFound"
    # A group the server does not serve: kube-apiserver's plain-text 404.
    for path in ("/apis/nothing.example.com/v1", "/apis/nothing.example.com"):
        status, body, _ = await kube.raw("GET", path)
        assert status == 404, path
        assert body == "404 page not found\n"
