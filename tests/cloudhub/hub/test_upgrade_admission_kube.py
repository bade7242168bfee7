"""Who may upgrade which nodes, enforced by the reference kube-apiserver 1.20: the
ValidatingWebhookConfiguration of deploy/admission/ sends each EdgeUpgrade and
EdgeImagePrePull write to the hub's webhook, which asks the API server's RBAC with
SubjectAccessReviews whether the requesting user (``kubectl --as``) may see the nodes
selected. The hub is reached through an ``ExternalName`` Service (``localhost``: no
kube-proxy runs); the API server checks the hub's certificate for
``<service>.<namespace>.svc`` against the caBundle the hub wrote. The rule as a pure
decision is tests/cloudhub/upgrade/test_admission.py."""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import pathlib
import time

import pytest
import yaml

from cloudhub.hub import Hub
from cloudhub.kube import ResourceType
from cloudhub.settings import load_hub_settings
from cloudhub.upgrade.admission import (
    VALIDATINGWEBHOOKS,
    WEBHOOK_PATH,
    publish_webhook_ca_bundle,
)
from cloudhub.upgrade.extension import UpgradeExtension
from cloudhub.upgrade.settings import UpgradeSettings
from protocol import pki
from protocol.transport import TLSCredentials
from tests.cloudhub.hub.conftest import KUBE_APISERVER, TEST_SETTINGS, run
from tests.cloudhub.hub.test_upgrade_kubectl import prepull, upgrade
from tests.edgeagent.hublink.fleet import free_port, unique
from tests.waiting import eventually

pytestmark = [pytest.mark.kubeapiserver, pytest.mark.slow]

SERVICES = ResourceType("", "v1", "services", "Service", True)
MANIFEST = pathlib.Path(__file__).resolve().parents[3] / "deploy" / "admission"
SERVICE = "cloudhub-admission"
HOST = "kubernetes.io/hostname"
LABEL = "edgefleet.io/admission-test"


def webhook_config(name: str, namespace: str, port: int, label: str) -> dict:
    """deploy/admission's configuration, pointed at the test's Service and port, and
    limited to the objects this test labels (the API server is shared by the session:
    other tests' EdgeUpgrades must not wait for this hub)."""
    (config,) = list(yaml.safe_load_all((MANIFEST / "node-selection-webhook.yaml").read_text()))
    config = copy.deepcopy(config)
    config["metadata"]["name"] = name
    (hook,) = config["webhooks"]
    assert hook["clientConfig"]["service"]["path"] == WEBHOOK_PATH
    assert "caBundle" not in hook["clientConfig"]  # the hub writes its CA
    hook["clientConfig"]["service"].update(name=SERVICE, namespace=namespace, port=port)
    hook["objectSelector"] = {"matchLabels": {LABEL: label}}
    return config


def rbac(suffix: str) -> dict:
    """alice may get node pi-a; bob may list nodes; carol may see none. All three may
    write EdgeUpgrades and EdgeImagePrePulls."""

    def role(name: str, rules: list[dict]) -> dict:
        return {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": f"{name}-{suffix}"},
            "rules": rules,
        }

    def binding(name: str, users: list[str]) -> dict:
        return {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"{name}-{suffix}"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": f"{name}-{suffix}",
            },
            "subjects": [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": u} for u in users
            ],
        }

    authors = [
        {
            "apiGroups": ["apps.edgefleet.io"],
            "resources": ["edgeupgrades", "edgeimageprepulls"],
            "verbs": ["get", "list", "create", "update", "patch"],
        }
    ]
    one = [{"apiGroups": [""], "resources": ["nodes"], "resourceNames": ["pi-a"], "verbs": ["get"]}]
    every = [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]}]
    items = [
        role("upgrade-authors", authors),
        binding("upgrade-authors", ["alice", "bob", "carol"]),
        role("node-pi-a", one),
        binding("node-pi-a", ["alice"]),
        role("node-viewers", every),
        binding("node-viewers", ["bob"]),
    ]
    return {"apiVersion": "v1", "kind": "List", "items": items}


async def serving_behind_a_service(kube, pki_ca, namespace: str) -> TLSCredentials:
    """The hub's serving credentials naming ``<SERVICE>.<namespace>.svc`` (what the API server
    checks), and that Service as an ``ExternalName`` for ``localhost`` (no kube-proxy)."""
    cert, key = pki.issue_server_certificate(
        pki_ca.ca, dns_names=["localhost", f"{SERVICE}.{namespace}.svc"],
        ip_addresses=["127.0.0.1"], lifetime=86400.0, now=time.time(),
    )  # fmt: skip
    await kube.create(
        SERVICES,
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": SERVICE, "namespace": namespace},
            "spec": {"type": "ExternalName", "externalName": "localhost"},
        },
    )
    return TLSCredentials(cas=(pki_ca.ca.certificate,), chain=(cert,), private_key=key)


@pytest.mark.parametrize("cluster", [KUBE_APISERVER], indirect=True)
async def test_the_api_server_refuses_selections_of_nodes_the_creator_cannot_see(
    cluster, hubs, kube, namespace, kubectl_bin, crds, pki_ca, tmp_path
) -> None:
    port = free_port()
    label = unique("adm")
    name = f"edgefleet-node-selection-{label}"
    serving = await serving_behind_a_service(kube, pki_ca, namespace)
    roles = json.dumps(rbac(label))
    done = run(kubectl_bin, cluster, "apply", "-f", "-", stdin=roles)
    assert done.returncode == 0, done.stderr
    done = run(kubectl_bin, cluster, "apply", "-f", "-",
               stdin=json.dumps(webhook_config(name, namespace, port, label)))  # fmt: skip
    assert done.returncode == 0, done.stderr
    created: list[tuple[str, ...]] = []
    try:
        await _check(cluster, hubs, kube, kubectl_bin, namespace, serving, port, label, name,
                     created, tmp_path)  # fmt: skip
    finally:
        run(kubectl_bin, cluster, "delete", "validatingwebhookconfiguration", name,
            "--ignore-not-found")  # fmt: skip
        for kind_name in created:
            run(kubectl_bin, cluster, "delete", *kind_name, "--ignore-not-found")
        run(kubectl_bin, cluster, "delete", "-f", "-", "--ignore-not-found", stdin=roles)


def labelled(obj: dict, label: str) -> str:
    obj["metadata"]["labels"] = {LABEL: label}
    return json.dumps(obj)


async def _check(
    cluster, hubs, kube, kubectl_bin, namespace, serving, port, label, name, created, tmp_path
) -> None:
    extension = UpgradeExtension(
        UpgradeSettings(
            artifact_dir=str(tmp_path / "artifacts"),
            admission=True,
            admission_host="127.0.0.1",
            admission_port=port,
            admission_webhook=name,
        )
    )
    settings = load_hub_settings(
        overrides={**TEST_SETTINGS, "kube.kubeconfig": str(cluster.kubeconfig)}
    )
    hub = Hub(settings, credentials=serving, extensions=[extension])
    hubs.hubs.append(hub)
    await hub.start()
    hubs.hub = hub
    # the hub wrote its CA into the configuration (no manifest can carry it)
    found = await kube.get(VALIDATINGWEBHOOKS, name)
    bundle = found["webhooks"][0]["clientConfig"]["caBundle"]
    ca_pem = pki.dump_certificate_pem(serving.cas)
    assert base64.b64decode(bundle) == ca_pem
    assert not await publish_webhook_ca_bundle(kube, name, ca_pem)  # already there
    assert not await publish_webhook_ca_bundle(kube, f"no-such-{label}", ca_pem)

    async def as_user(user: str, *args: str, obj: str | None = None):
        # in a thread: the API server's call to the webhook needs this event loop
        return await asyncio.to_thread(run, kubectl_bin, cluster, f"--as={user}", *args, stdin=obj)

    # the premise: carol may write EdgeUpgrades but sees no node
    can = await as_user("carol", "auth", "can-i", "create", "edgeupgrades.apps.edgefleet.io")
    assert can.stdout.strip() == "yes", can.stderr
    can = await as_user("carol", "auth", "can-i", "list", "nodes")
    assert can.stdout.strip() == "no", can.stderr

    open_upgrade = labelled(upgrade(f"open-{label}"), label)
    last: list[str] = []

    async def refused_for_carol() -> bool:  # the API server's webhook informer caught up
        done = await as_user("carol", "create", "--dry-run=server", "-f", "-", obj=open_upgrade)
        last[:] = [done.stderr or done.stdout]
        return done.returncode != 0 and "denied the request" in done.stderr

    await eventually(refused_for_carol, "the webhook refuses carol", state=lambda: last)
    done = await as_user("carol", "create", "-f", "-", obj=open_upgrade)
    assert done.returncode != 0
    assert 'admission webhook "node-selection.apps.edgefleet.io" denied the request' in done.stderr
    assert "user 'carol' may not list nodes" in done.stderr and HOST in done.stderr

    # alice names pi-a, which she may get: created; pi-a and pi-b: refused, naming pi-b
    mine = upgrade(f"pi-a-{label}", nodeSelector={"matchLabels": {HOST: "pi-a"}})
    done = await as_user("alice", "create", "-f", "-", obj=labelled(mine, label))
    assert done.returncode == 0, done.stderr
    created.append(("edgeupgrade", f"pi-a-{label}"))
    named = {"matchExpressions": [{"key": HOST, "operator": "In", "values": ["pi-a", "pi-b"]}]}
    both = upgrade(f"pi-ab-{label}", nodeSelector=named)
    done = await as_user("alice", "create", "-f", "-", obj=labelled(both, label))
    assert done.returncode != 0 and "may not get node(s) pi-b," in done.stderr, done.stderr

    # bob may list nodes: any selection
    done = await as_user("bob", "create", "-f", "-", obj=open_upgrade)
    assert done.returncode == 0, done.stderr
    created.append(("edgeupgrade", f"open-{label}"))

    # alice may relabel bob's upgrade (spec unchanged), not change what it does
    done = await as_user("alice", "label", "edgeupgrade", f"open-{label}", "team=edge")
    assert done.returncode == 0, done.stderr
    done = await as_user("alice", "patch", "edgeupgrade", f"open-{label}", "--type=merge",
                   "-p", json.dumps({"spec": {"version": "0.5.1"}}))  # fmt: skip
    assert done.returncode != 0 and "user 'alice' may not list nodes" in done.stderr

    # pre-pulls (namespaced) too
    pull = prepull(f"pull-{label}", ["busybox:1.36"])
    pull["metadata"]["namespace"] = namespace
    done = await as_user("carol", "create", "-f", "-", obj=labelled(pull, label))
    assert done.returncode != 0 and "EdgeImagePrePull" in done.stderr, done.stderr
    done = await as_user("bob", "create", "-f", "-", obj=labelled(pull, label))
    assert done.returncode == 0, done.stderr
    created.append(("edgeimageprepull", f"pull-{label}", "-n", namespace))

    # what was stored is what the admitted users wrote
    listed = await asyncio.to_thread(
        run, kubectl_bin, cluster, "get", "edgeupgrades", "-l", f"{LABEL}={label}", "-o", "name"
    )
    stored = sorted(n.rpartition("/")[2] for n in listed.stdout.split())
    assert stored == [f"open-{label}", f"pi-a-{label}"], listed.stderr
    server = hub.admission_server  # type: ignore[attr-defined]
    assert server.denied >= 5

    # the hub gone: failurePolicy Fail refuses rather than admitting unchecked
    await hub.aclose()
    hubs.hubs.remove(hub)
    done = await as_user("bob", "create", "--dry-run=server", "-f", "-",
                   obj=labelled(upgrade(f"late-{label}"), label))  # fmt: skip
    assert done.returncode != 0 and "failed calling webhook" in done.stderr, done.stderr


@pytest.mark.parametrize("cluster", [KUBE_APISERVER], indirect=True)
async def test_a_configuration_applied_after_the_hub_gets_its_ca_bundle(
    cluster, hubs, kube, namespace, kubectl_bin, crds, pki_ca, tmp_path
) -> None:
    # docs/hub.md's order: the hub runs, then `kubectl apply -k deploy/admission`. The hub
    # published its CA only at start: the configuration applied later never got it, and
    # the API server, unable to verify the hub, refused every EdgeUpgrade (failurePolicy
    # Fail) until the hub restarted. A replace without the bundle did the same.
    port = free_port()
    label = unique("late")
    name = f"edgefleet-node-selection-{label}"
    serving = await serving_behind_a_service(kube, pki_ca, namespace)
    extension = UpgradeExtension(
        UpgradeSettings(
            artifact_dir=str(tmp_path / "artifacts"),
            admission=True,
            admission_host="127.0.0.1",
            admission_port=port,
            admission_webhook=name,
            admission_ca_interval=0.2,
        )
    )
    settings = load_hub_settings(
        overrides={**TEST_SETTINGS, "kube.kubeconfig": str(cluster.kubeconfig)}
    )
    hub = Hub(settings, credentials=serving, extensions=[extension])
    hubs.hubs.append(hub)
    await hub.start()
    hubs.hub = hub
    ca_pem = pki.dump_certificate_pem(serving.cas)
    config = webhook_config(name, namespace, port, label)
    roles = json.dumps(rbac(label))
    done = run(kubectl_bin, cluster, "apply", "-f", "-", stdin=roles)
    assert done.returncode == 0, done.stderr
    try:
        await kube.create(VALIDATINGWEBHOOKS, config)  # after the hub: no bundle in it

        async def bundle() -> bytes:
            found = await kube.get(VALIDATINGWEBHOOKS, name)
            value = found["webhooks"][0]["clientConfig"].get("caBundle")
            return base64.b64decode(value) if value else b""

        async def published() -> bool:
            return await bundle() == ca_pem

        await eventually(published, "the hub wrote its CA into the late configuration")
        # written back without it (kubectl replace, a GitOps sync): written again
        found = await kube.get(VALIDATINGWEBHOOKS, name)
        del found["webhooks"][0]["clientConfig"]["caBundle"]
        await kube.replace(VALIDATINGWEBHOOKS, found)
        assert await bundle() == b""
        await eventually(published, "the hub wrote its CA again")
        # and the API server calls the hub with it: carol's open selection is refused by
        # the webhook, not by a TLS failure
        open_upgrade = labelled(upgrade(f"open-{label}"), label)
        last: list[str] = []

        async def refused_by_the_hub() -> bool:
            done = await asyncio.to_thread(
                run, kubectl_bin, cluster, "--as=carol", "create", "--dry-run=server", "-f", "-",
                stdin=open_upgrade,
            )  # fmt: skip
            last[:] = [done.stderr or done.stdout]
            return done.returncode != 0 and "user 'carol' may not list nodes" in done.stderr

        await eventually(refused_by_the_hub, "the webhook answers carol", state=lambda: last)
    finally:
        run(kubectl_bin, cluster, "delete", "validatingwebhookconfiguration", name,
            "--ignore-not-found")  # fmt: skip
        run(kubectl_bin, cluster, "delete", "-f", "-", "--ignore-not-found", stdin=roles)
