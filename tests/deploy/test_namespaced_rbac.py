"""Namespaced mode (issue 16 item 6): the hub, told ``kube.namespaces``, watches only those
namespaces and needs only the Roles of deploy/overlays/namespaced there — checked against
kube-apiserver's RBAC authorizer with the hub's own ServiceAccount token, and, for the
per-namespace informers, against both the embedded API and kube-apiserver."""

from __future__ import annotations

import asyncio
import logging

import pytest
from prometheus_client import generate_latest

from cloudhub.errors import KubeAPIError
from cloudhub.kube import NAMESPACES, PODS, KubeClient, NamespacedInformers, scoped_informers
from cloudhub.kube.informer import Informer
from cloudhub.observability.metrics import HubMetrics
from cloudhub.pods.source import BY_NODE, POD_INDEXERS
from cloudhub.settings import load_hub_settings
from cloudhub.standalone import APIServerSettings, EmbeddedAPIServer
from protocol.errors import SettingsError
from tests.deploy.test_hub_manifests import (
    _kubectl,
    run_hub_as,
    service_account_kubeconfig,
)
from tests.deploy.wheels import REPO
from tests.waiting import eventually

OVERLAY = REPO / "deploy" / "overlays" / "namespaced"
SA = "system:serviceaccount:edgefleet:cloudhub"


@pytest.mark.kubeapiserver
async def test_hub_in_namespaced_mode_needs_only_its_roles(
    kube_apiserver, kubectl: str, tmp_path, caplog
) -> None:
    admin_config = str(kube_apiserver.kubeconfig)
    applied = await _kubectl(kubectl, admin_config, "apply", "-k", str(OVERLAY))
    assert applied.returncode == 0, applied.stderr
    try:
        sa_config = await service_account_kubeconfig(kube_apiserver, tmp_path)
        for verb, resource, namespace in (
            ("list", "secrets", "kube-system"),
            ("list", "secrets", "default"),
            ("create", "pods", "kube-system"),
            ("delete", "pods", "default"),
            ("watch", "configmaps", "rbac-outside"),
        ):
            can = await _kubectl(
                kubectl, str(sa_config), "auth", "can-i", verb, resource, "-n", namespace
            )
            assert can.stdout.strip() == "no", (verb, resource, namespace)
        cluster_wide = await _kubectl(
            kubectl, str(sa_config), "auth", "can-i", "list", "pods", "--all-namespaces"
        )
        assert cluster_wide.stdout.strip() == "no"
        # nodes stay cluster-wide: the admission webhook admits the hub's own
        # EdgeImagePrePulls (from EdgePlacements' updateStrategy.prePull) for it
        nodes = await _kubectl(kubectl, str(sa_config), "auth", "can-i", "list", "nodes")
        assert nodes.stdout.strip() == "yes", nodes.stderr
        for verb, resource in (("list", "secrets"), ("create", "pods"), ("delete", "pods")):
            can = await _kubectl(
                kubectl, str(sa_config), "auth", "can-i", verb, resource, "-n", "edge-apps"
            )
            assert can.stdout.strip() == "yes", (verb, resource)

        admin = await KubeClient.from_kubeconfig(admin_config)
        caplog.set_level(logging.WARNING)
        async with admin:
            await run_hub_as(
                sa_config,
                admin,
                tmp_path,
                namespace="edge-apps",
                overrides={"kube.namespaces": "edge-apps"},
                outside="rbac-outside",
                node="rbac-namespaced-hub",
            )
        refused = [
            r.getMessage()
            for r in caplog.records
            if "403" in r.getMessage() or "forbidden" in r.getMessage().lower()
        ]
        assert refused == []  # no informer looping on a list it may not make
    finally:
        # Leave the shared kube-apiserver as the other deploy tests expect it: the base's
        # ClusterRole, no overlay Roles, no CRDs.
        for args in (
            ("delete", "--ignore-not-found", "-f", str(OVERLAY / "edge-namespace-rbac.yaml")),
            ("delete", "--ignore-not-found", "-f", str(OVERLAY / "node-events-rbac.yaml")),
            ("delete", "--ignore-not-found", "-f", str(OVERLAY / "hub-namespace-rbac.yaml")),
            ("apply", "-k", str(REPO / "deploy" / "base")),
            ("delete", "--ignore-not-found", "-k", str(REPO / "deploy" / "crds")),
        ):
            done = await _kubectl(kubectl, admin_config, *args)
            assert done.returncode == 0, done.stderr


def _pod(name: str, namespace: str, node: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
    }


async def _scoped_informers_see_only_their_namespaces(client: KubeClient, tag: str) -> None:
    watched = [f"{tag}-a", f"{tag}-b"]
    outside = f"{tag}-c"
    for ns in [*watched, outside]:
        try:
            await client.create(
                NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
            )
        except KubeAPIError as exc:
            if exc.status != 409:  # there from an earlier run: fine
                raise
    view, informers = scoped_informers(client, PODS, watched, indexers=POD_INDEXERS)
    assert isinstance(view, NamespacedInformers)
    assert [i.namespace for i in informers] == watched
    events: list[tuple[str, str]] = []
    view.add_handler(lambda kind, obj, old: events.append((kind, obj["metadata"]["namespace"])))
    tasks = [asyncio.create_task(i.run()) for i in informers]
    try:
        await view.wait_synced(30)
        for ns in [*watched, outside]:
            await client.create(PODS, _pod("p", ns, f"{tag}-node"))

        # fed by the watches
        await eventually(lambda: len({ns for _, ns in events}) >= 2, "both namespaces seen", 30)
        assert sorted(o["metadata"]["namespace"] for o in view.items()) == watched
        assert view.get("p", watched[1]) is not None
        assert view.get("p", outside) is None  # not watched: no informer for it
        # The outside pod was created last; once a pod created after it is seen, its
        # events would have been too (one client, one apiserver, ordered resourceVersions).
        await client.create(PODS, _pod("q", watched[0], f"{tag}-node"))

        await eventually(lambda: view.get("q", watched[0]) is not None, "pod q seen", 30)
        assert outside not in {ns for _, ns in events}
        by_node = view.by_index(BY_NODE, f"{tag}-node")
        assert sorted(o["metadata"]["namespace"] for o in by_node) == sorted([*watched, watched[0]])
        # /metrics: one series per resource, not one per namespace's informer (a scrape
        # with two samples of one series is refused by Prometheus).
        metrics = HubMetrics()
        metrics.watch(sessions=list, informers=lambda: informers, status_pending=lambda: 0)
        lines = generate_latest(metrics.registry).decode().splitlines()
        synced = [line for line in lines if line.startswith("edgefleet_hub_informer_synced")]
        assert synced == ['edgefleet_hub_informer_synced{resource="pods"} 1.0']
        relists = [
            line for line in lines if line.startswith("edgefleet_hub_informer_relists_total")
        ]
        assert relists == ['edgefleet_hub_informer_relists_total{resource="pods"} 0.0']
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for ns in [*watched, outside]:
            for name in ("p", "q"):
                try:
                    await client.delete(PODS, name, ns, grace_period_seconds=0)
                except KubeAPIError as exc:
                    if exc.status != 404:  # gone already
                        raise


async def test_scoped_informers_on_the_embedded_api() -> None:
    async with EmbeddedAPIServer(APIServerSettings(port=0)) as api:
        client = await KubeClient.from_kubeconfig(str(api.kubeconfig_path))
        async with client:
            await _scoped_informers_see_only_their_namespaces(client, "emb")


@pytest.mark.kubeapiserver
async def test_scoped_informers_on_kube_apiserver(kube_apiserver) -> None:
    client = await KubeClient.from_kubeconfig(str(kube_apiserver.kubeconfig))
    async with client:
        await _scoped_informers_see_only_their_namespaces(client, "kas")


async def test_cluster_wide_mode_and_cluster_scoped_types_keep_one_informer() -> None:
    async with EmbeddedAPIServer(APIServerSettings(port=0)) as api:
        client = await KubeClient.from_kubeconfig(str(api.kubeconfig_path))
        async with client:
            view, informers = scoped_informers(client, PODS, ())
            assert isinstance(view, Informer) and informers == [view]
            assert view.namespace is None
            from cloudhub.kube import NODES

            view, informers = scoped_informers(client, NODES, ("edge-apps",))
            assert isinstance(view, Informer) and view.namespace is None


async def test_bad_scopes_are_refused() -> None:
    async with EmbeddedAPIServer(APIServerSettings(port=0)) as api:
        client = await KubeClient.from_kubeconfig(str(api.kubeconfig_path))
        async with client:
            with pytest.raises(ValueError, match="at least one"):
                NamespacedInformers([])
            with pytest.raises(ValueError, match="cluster-wide"):
                NamespacedInformers([Informer(client, PODS)])
            with pytest.raises(ValueError, match="twice"):
                NamespacedInformers(
                    [Informer(client, PODS, namespace="a"), Informer(client, PODS, namespace="a")]
                )
            from cloudhub.kube import SECRETS

            with pytest.raises(ValueError, match="mixed"):
                a = Informer(client, PODS, namespace="a")
                NamespacedInformers([a, Informer(client, SECRETS, namespace="b")])


@pytest.mark.parametrize(
    ("value", "problem"),
    [("Edge_Apps", "DNS labels"), ("a,a", "each namespace once"), ("-x", "DNS labels")],
)
def test_bad_namespaces_setting_is_refused(value: str, problem: str) -> None:
    with pytest.raises(SettingsError, match=problem):
        load_hub_settings(overrides={"kube.namespaces": value})


def test_namespaces_setting_parses() -> None:
    settings = load_hub_settings(overrides={"kube.namespaces": "edge-apps, plant-2"})
    assert settings.kube.namespaces == ("edge-apps", "plant-2")
    assert load_hub_settings(overrides={}).kube.namespaces == ()
