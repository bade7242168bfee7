"""The hub's manifests (deploy/hub/): they apply cleanly, and their RBAC grants exactly the
API calls the hub's code makes — derived from the source (tests/deploy/apicalls.py) and
recorded while every PKI flow runs, then enforced for real by kube-apiserver's RBAC
authorizer with the hub's own ServiceAccount token."""

from __future__ import annotations

import asyncio
import json
import pathlib
import subprocess
import time

import pytest
import yaml
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config

from cloudhub.errors import KubeAPIError
from cloudhub.kube import NAMESPACES, SECRETS, KubeClient
from cloudhub.standalone import APIServerSettings, EmbeddedAPIServer
from protocol.messages import KubeEvent, ObjectRef
from tests.deploy.apicalls import RecordingKubeClient, Request, static_calls
from tests.deploy.hubflows import exercise
from tests.waiting import eventually

REPO = pathlib.Path(__file__).resolve().parents[2]
HUB = REPO / "deploy" / "hub"
NAMESPACE = "edgefleet"
SERVICE_ACCOUNT = f"system:serviceaccount:{NAMESPACE}:cloudhub"


def manifest_files() -> list[pathlib.Path]:
    """What deploy/base applies (its kustomizations list them): CRDs, then the hub's."""
    out = []
    for directory in (REPO / "deploy" / "crds", HUB):
        listed = yaml.safe_load((directory / "kustomization.yaml").read_text())["resources"]
        out += [directory / name for name in listed]
    return out


def documents(files: list[pathlib.Path] | None = None) -> list[dict]:
    docs = []
    for path in files or manifest_files():
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def find(kind: str, docs: list[dict] | None = None) -> list[dict]:
    return [d for d in docs or documents() if d["kind"] == kind]


# -- RBAC as data ------------------------------------------------------------------------


def _bound_rules() -> list[tuple[str | None, dict]]:
    """``(namespace or None for cluster-wide, rule)`` for every rule bound to the hub's
    ServiceAccount."""
    subject = {"kind": "ServiceAccount", "name": "cloudhub", "namespace": NAMESPACE}
    out: list[tuple[str | None, dict]] = []
    for kind in ("ClusterRole", "Role"):
        for role in find(kind):
            meta = role["metadata"]
            namespace = meta.get("namespace") if kind == "Role" else None
            bound = [
                b
                for b in find(f"{kind}Binding")
                if b["roleRef"]["kind"] == kind
                and b["roleRef"]["name"] == meta["name"]
                and b["metadata"].get("namespace") == namespace
                and subject in b["subjects"]
            ]
            if bound:
                out += [(namespace, rule) for rule in role["rules"]]
    return out


def granted() -> set[tuple[str, str, str]]:
    calls = set()
    for _, rule in _bound_rules():
        assert "*" not in rule["verbs"] and "*" not in rule["resources"], rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    calls.add((group, resource, verb))
    return calls


def allowed(request: Request) -> bool:
    """RBAC's answer for the hub's ServiceAccount: a ClusterRole rule anywhere, a Role rule
    in its Role's namespace (as the authorizer computes it)."""
    for namespace, rule in _bound_rules():
        if namespace is not None and namespace != request.namespace:
            continue
        if (
            request.group in rule["apiGroups"]
            and request.resource in rule["resources"]
            and request.verb in rule["verbs"]
            and (not rule.get("resourceNames") or request.name in rule["resourceNames"])
        ):
            return True
    return False


def test_rbac_grants_exactly_what_the_code_calls() -> None:
    calls = static_calls()
    grants = granted()
    missing = {c: calls[c] for c in calls.keys() - grants}
    unused = grants - calls.keys()
    assert not missing, f"API calls the ClusterRole/Roles do not grant: {missing}"
    assert not unused, f"granted but called nowhere in cloudhub/: {sorted(unused)}"
    # Calls made only on the embedded API (the hub is its own admin there) stay ungranted.
    embedded = static_calls(embedded_only=True)
    assert set(embedded) == {
        ("", "namespaces", "create"),
        ("apiextensions.k8s.io", "customresourcedefinitions", "create"),
    }
    assert not set(embedded) & grants


async def test_flows_make_the_calls_found_in_the_source(tmp_path) -> None:
    # The recorded calls validate the scanner (it misses nothing the flows do; the PKI flows
    # reach every PKI call it found) and the rules' scoping (namespaced writes happen where
    # a Role allows them).
    async with EmbeddedAPIServer(APIServerSettings(port=0)) as api:
        admin = await KubeClient.from_kubeconfig(str(api.kubeconfig_path))
        async with admin:
            await admin.create(
                NAMESPACES,
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
            )
            configuration = k8s_client.Configuration()
            await k8s_config.load_kube_config(
                config_file=str(api.kubeconfig_path), client_configuration=configuration
            )
            recording = RecordingKubeClient(k8s_client.ApiClient(configuration))
            async with recording as hub_client:
                await exercise(hub_client, admin, tmp_path, "embedded")
    recorded = {r.call for r in recording.requests}
    found = static_calls()
    assert recorded - set(found) == set(), "calls the source scan did not find"
    pki_calls = {c for c, where in found.items() if any("cloudhub/pki/" in w for w in where)}
    assert pki_calls - recorded == set(), "PKI calls in the source the flows never made"
    refused = [r for r in recording.requests if not allowed(r)]
    assert not refused, f"requests the RBAC rules would refuse: {refused}"


def test_manifest_shape() -> None:
    (deployment,) = find("Deployment")
    spec = deployment["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert spec["serviceAccountName"] == "cloudhub"
    ports = {(p["name"], p["containerPort"], p.get("protocol", "TCP")) for p in container["ports"]}
    assert ports == {
        ("quic", 7443, "UDP"),
        ("websocket", 7443, "TCP"),
        ("join", 7444, "TCP"),
        ("http", 9095, "TCP"),
        ("admission", 8443, "TCP"),
    }
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["port"] in {p[0] for p in ports}
    assert container["resources"]["requests"]["cpu"] and container["resources"]["limits"]["memory"]
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    (service,) = find("Service")
    service_ports = {(p["port"], p["protocol"], p["targetPort"]) for p in service["spec"]["ports"]}
    assert service_ports == {
        (7443, "UDP", "quic"),
        (7443, "TCP", "websocket"),
        (7444, "TCP", "join"),
        (9095, "TCP", "http"),
        (8443, "TCP", "admission"),
    }
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert service["spec"]["selector"] == selector
    template_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= template_labels.items()
    # One hub per fleet until the HA issue lands: never two at once, not even in a rollout.
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert find("PodDisruptionBudget") == []  # one replica: a PDB would only block drains
    assert container["image"] == "ghcr.io/edgefleet/cloudhub:0.1.0"  # deploy/build-image.sh


async def _kubectl(binary: str, kubeconfig: str, *args: str) -> subprocess.CompletedProcess:
    proc = await asyncio.create_subprocess_exec(
        binary,
        "--kubeconfig",
        kubeconfig,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    return subprocess.CompletedProcess(args, proc.returncode or 0, out.decode(), err.decode())


def _apply_args(kustomization: str = "base") -> list[str]:
    return ["apply", "-k", str(REPO / "deploy" / kustomization)]


async def test_manifests_apply_cleanly_to_the_embedded_api(kubectl: str) -> None:
    async with EmbeddedAPIServer(APIServerSettings(port=0)) as api:
        config = str(api.kubeconfig_path)
        applied = await _kubectl(kubectl, config, *_apply_args())
        assert applied.returncode == 0, applied.stderr
        assert applied.stderr.strip() == "", applied.stderr  # no warnings either
        again = await _kubectl(kubectl, config, *_apply_args())
        assert again.returncode == 0 and "unchanged" in again.stdout
        assert "configured" not in again.stdout and "created" not in again.stdout
        listed = await _kubectl(
            kubectl,
            config,
            "get",
            "-o",
            "json",
            *[a for p in manifest_files() for a in ("-f", str(p))],
        )
        assert listed.returncode == 0, listed.stderr
        kinds = sorted(item["kind"] for item in json.loads(listed.stdout)["items"])
        assert kinds == sorted(d["kind"] for d in documents(manifest_files()))


@pytest.mark.kubeapiserver
async def test_hub_runs_under_its_service_account_on_kube_apiserver(
    kube_apiserver,
    kubectl: str,
    tmp_path,
) -> None:
    admin_config = str(kube_apiserver.kubeconfig)
    applied = await _kubectl(kubectl, admin_config, *_apply_args())
    assert applied.returncode == 0, applied.stderr
    try:
        await _hub_runs_under_its_service_account(kube_apiserver, kubectl, tmp_path)
    finally:
        # The kube-apiserver is shared by the session: take the CRDs away again so that
        # later tests see no devices.kubeedge.io (the namespace stays: with no
        # controller-manager, nothing would ever finish deleting it).
        delete = ["delete", "--ignore-not-found", "-k", str(REPO / "deploy" / "crds")]
        deleted = await _kubectl(kubectl, admin_config, *delete)
        assert deleted.returncode == 0, deleted.stderr


async def service_account_kubeconfig(kube_apiserver, tmp_path: pathlib.Path) -> pathlib.Path:
    """A kubeconfig with a token of the hub's ServiceAccount (as the Deployment mounts it)."""
    admin_config = str(kube_apiserver.kubeconfig)
    configuration = k8s_client.Configuration()
    await k8s_config.load_kube_config(config_file=admin_config, client_configuration=configuration)
    async with k8s_client.ApiClient(configuration) as api:
        request = k8s_client.AuthenticationV1TokenRequest(
            spec=k8s_client.V1TokenRequestSpec(
                audiences=["https://kubernetes.default.svc"], expiration_seconds=3600
            )
        )
        answer = await k8s_client.CoreV1Api(api).create_namespaced_service_account_token(
            "cloudhub", NAMESPACE, request
        )
    token = answer.status.token
    sa_config = tmp_path / "cloudhub.kubeconfig"
    sa_config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "c",
                        "cluster": {
                            "server": kube_apiserver.url,
                            "certificate-authority": str(kube_apiserver.ca_file),
                        },
                    }
                ],
                "users": [{"name": "cloudhub", "user": {"token": token}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "cloudhub"}}],
                "current-context": "c",
            }
        )
    )
    return sa_config


async def _hub_runs_under_its_service_account(kube_apiserver, kubectl: str, tmp_path) -> None:
    admin_config = str(kube_apiserver.kubeconfig)
    sa_config = await service_account_kubeconfig(kube_apiserver, tmp_path)
    for verb, resource, where in (
        ("get", "secrets", ["-n", "kube-system"]),  # read only through the shared informer
        ("create", "secrets", ["-n", "default"]),  # writes only in the hub's namespace
        ("delete", "nodes", []),
        ("create", "namespaces", []),
    ):
        can = await _kubectl(kubectl, str(sa_config), "auth", "can-i", verb, resource, *where)
        assert can.stdout.strip() == "no", (verb, resource, where)

    sa_configuration = k8s_client.Configuration()
    await k8s_config.load_kube_config(
        config_file=str(sa_config), client_configuration=sa_configuration
    )
    recording = RecordingKubeClient(k8s_client.ApiClient(sa_configuration))
    admin = await KubeClient.from_kubeconfig(admin_config)
    async with admin, recording as hub_client:
        # Every call of the PKI flows, authorized by kube-apiserver's RBAC: a missing rule
        # fails here with 403 Forbidden.
        await exercise(hub_client, admin, tmp_path, "kube-apiserver")
        with pytest.raises(KubeAPIError) as forbidden:
            await hub_client.get(SECRETS, "anything", "kube-system")
        assert forbidden.value.status == 403
        # The only request refused is that deliberate one.
        assert [(r.verb, r.resource, r.namespace) for r in recording.forbidden] == [
            ("get", "secrets", "kube-system")
        ]
        # The whole hub under its ServiceAccount: registration, Lease, Events, a pod sent
        # down, its status written back, its deletion finished.
        await run_hub_as(sa_config, admin, tmp_path)
    assert {r.call for r in recording.requests} <= set(static_calls())


async def run_hub_as(
    kubeconfig: pathlib.Path,
    admin: KubeClient,
    tmp: pathlib.Path,
    *,
    namespace: str = "rbac-apps",
    overrides: dict | None = None,
    outside: str | None = None,
    node: str = "rbac-hub",
) -> None:
    """Run the hub under ``kubeconfig``; an edge node joins, and a pod in ``namespace``
    bound to it is sent down, reported Running, deleted. With ``outside`` (a namespace the
    hub must not watch), a pod there bound to the same node is created first and never
    sent. No API request of the hub is refused (403)."""
    from cloudhub.hub import Hub
    from cloudhub.kube import NODES, PODS
    from cloudhub.pki.extension import pki_extension
    from cloudhub.settings import load_hub_settings
    from protocol.events import MessageReceived
    from protocol.messages import PodDeleted, PodStatus
    from tests.cloudhub.hub.conftest import TEST_SETTINGS
    from tests.cloudhub.pki.test_hub_extension import EdgeNode

    settings = load_hub_settings(
        overrides={
            **TEST_SETTINGS,
            "kube.kubeconfig": str(kubeconfig),
            "pki.namespace": NAMESPACE,
            "pki.join_host": "127.0.0.1",
            "pki.join_port": 0,
            "pki.server_names": "localhost",
            **(overrides or {}),
        }
    )
    extension = pki_extension(settings.pki)
    async with Hub(settings, extensions=[extension]) as hub:
        edge = await EdgeNode.join(tmp, hub, extension, node)
        edge.link = await edge.dial("websocket")
        pods: list = []

        async def read() -> None:
            async for event in edge.link:
                if isinstance(event, MessageReceived) and event.message.kind == "object_upsert":
                    pods.append(event.message)

        reader = asyncio.create_task(read())
        try:
            for ns in {namespace, outside or namespace}:
                await _ensure_namespace(admin, ns)
            if outside is not None:
                await admin.create(PODS, _pod("outside", outside, node))
            pod = await admin.create(PODS, _pod("app", namespace, node))
            ref = ObjectRef("Pod", namespace, "app", pod["metadata"]["uid"])
            await eventually(lambda: any(p.ref.uid == ref.uid for p in pods), "the pod sent", 30)
            await edge.link.send(
                PodStatus(ref, {"phase": "Running", "podIP": "10.0.0.9"}, time.time())
            )
            await edge.link.send(
                KubeEvent(ref, "Normal", "Started", "started container c", time.time())
            )

            async def written() -> bool:
                current = await admin.get(PODS, "app", namespace)
                return (current.get("status") or {}).get("phase") == "Running"

            await eventually(written, "the status written", 30)
            await admin.delete(PODS, "app", namespace, grace_period_seconds=30)

            def terminating() -> bool:  # the hub sends the pod again, marked for deletion
                return any(
                    p.ref.uid == ref.uid
                    and (p.object.get("metadata") or {}).get("deletionTimestamp")
                    for p in pods
                )

            await eventually(terminating, "the pod sent again, terminating", 30)
            await edge.link.send(PodDeleted(ref))

            async def gone() -> bool:
                try:
                    await admin.get(PODS, "app", namespace)
                except KubeAPIError as exc:
                    return exc.status == 404
                return False

            await eventually(gone, "the pod gone", 30)
            node = await admin.get(NODES, node)
            assert node["status"]["conditions"]  # registered with its status
            if outside is not None:
                assert {p.ref.namespace for p in pods if p.ref.kind == "Pod"} == {namespace}
                assert hub.pods.get("outside", outside) is None
                await admin.delete(PODS, "outside", outside, grace_period_seconds=0)
        finally:
            await edge.link.close()
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
        errors = {
            (sample.labels["verb"], sample.labels["resource"], sample.labels["code"])
            for metric in hub.metrics.registry.collect()
            for sample in metric.samples
            if sample.name.endswith("api_request_errors_total")
        }
        assert not {e for e in errors if e[2] == "403"}, errors
        # One sample per name and labels (namespaced mode runs an informer per namespace
        # of a resource; /metrics still shows one series per resource).
        samples = [
            (sample.name, tuple(sorted(sample.labels.items())))
            for metric in hub.metrics.registry.collect()
            for sample in metric.samples
        ]
        assert len(samples) == len(set(samples)), sorted(
            {s for s in samples if samples.count(s) > 1}
        )
        synced = [s for s in samples if s[0].endswith("informer_synced")]
        assert ("pods",) in {tuple(v for _, v in labels) for _, labels in synced}


def _pod(name: str, namespace: str, node: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
    }


async def _ensure_namespace(admin: KubeClient, name: str) -> None:
    try:
        await admin.create(
            NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        )
    except KubeAPIError as exc:
        if exc.status != 409:  # there already (an overlay made it, or an earlier test)
            raise
