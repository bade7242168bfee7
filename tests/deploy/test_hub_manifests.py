"""The hub's manifests (deploy/hub/): they apply cleanly, and their RBAC grants exactly the
API calls the hub's code makes — derived from the source (tests/deploy/apicalls.py) and
recorded while every PKI flow runs, then enforced for real by kube-apiserver's RBAC
authorizer with the hub's own ServiceAccount token."""

from __future__ import annotations

import asyncio
import json
import pathlib
import subprocess

import pytest
import yaml
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config

from cloudhub.errors import KubeAPIError
from cloudhub.kube import NAMESPACES, SECRETS, KubeClient
from cloudhub.standalone import APIServerSettings, EmbeddedAPIServer
from tests.deploy.apicalls import RecordingApiClient, Request, static_calls
from tests.deploy.hubflows import exercise

REPO = pathlib.Path(__file__).resolve().parents[2]
HUB = REPO / "deploy" / "hub"
NAMESPACE = "edgefleet"
SERVICE_ACCOUNT = f"system:serviceaccount:{NAMESPACE}:cloudhub"


def manifest_files(*, kubernetes_1_20: bool) -> list[pathlib.Path]:
    """What to apply, in order: CRDs first, then the hub's files (the policy/v1beta1
    PodDisruptionBudget on Kubernetes 1.20 and the embedded API)."""
    crds = sorted((REPO / "deploy" / "crds").glob("*.yaml"))
    files = sorted(HUB.glob("*.yaml"))
    if kubernetes_1_20:
        files = [HUB / "compat-1.20" / f.name if f.name == "40-pdb.yaml" else f for f in files]
    return crds + files


def documents(files: list[pathlib.Path] | None = None) -> list[dict]:
    docs = []
    for path in files or manifest_files(kubernetes_1_20=False):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def find(kind: str, docs: list[dict] | None = None) -> list[dict]:
    return [d for d in docs or documents() if d["kind"] == kind]


# -- RBAC as data ------------------------------------------------------------------------


def _rules(kind: str) -> list[dict]:
    out = []
    for role in find(kind):
        bindings = [
            b
            for b in find(f"{kind}Binding")
            if b["roleRef"]["name"] == role["metadata"]["name"]
            and {"kind": "ServiceAccount", "name": "cloudhub", "namespace": NAMESPACE}
            in b["subjects"]
        ]
        if bindings:
            out += role["rules"]
    return out


def granted() -> set[tuple[str, str, str]]:
    calls = set()
    for rule in _rules("ClusterRole") + _rules("Role"):
        assert "*" not in rule["verbs"] and "*" not in rule["resources"], rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    calls.add((group, resource, verb))
    return calls


def allowed(request: Request) -> bool:
    """RBAC's answer for the hub's ServiceAccount (ClusterRole anywhere, Role in its
    namespace), as the authorizer computes it."""

    def matches(rule: dict) -> bool:
        return (
            request.group in rule["apiGroups"]
            and request.resource in rule["resources"]
            and request.verb in rule["verbs"]
            and (not rule.get("resourceNames") or request.name in rule["resourceNames"])
        )

    if any(matches(r) for r in _rules("ClusterRole")):
        return True
    return request.namespace == NAMESPACE and any(matches(r) for r in _rules("Role"))


def test_rbac_grants_exactly_what_the_code_calls() -> None:
    calls = static_calls()
    grants = granted()
    missing = {c: calls[c] for c in calls.keys() - grants}
    unused = grants - calls.keys()
    assert not missing, f"API calls the ClusterRole/Role do not grant: {missing}"
    assert not unused, f"granted but called nowhere in cloudhub/: {sorted(unused)}"


async def test_flows_make_exactly_the_calls_found_in_the_source(tmp_path) -> None:
    # The recorded calls validate the scanner (it misses nothing the flows do, and the
    # flows reach every call it found) and the rules' scoping (namespaced writes happen
    # in the hub's namespace only).
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
            recording = RecordingApiClient(configuration)
            async with KubeClient(recording) as hub_client:
                await exercise(hub_client, admin, tmp_path, "embedded")
    recorded = {r.call for r in recording.requests}
    found = set(static_calls())
    assert recorded - found == set(), "calls the source scan did not find"
    assert found - recorded == set(), "calls in the source the flows never made"
    refused = [r for r in recording.requests if not allowed(r)]
    assert not refused, f"requests the RBAC rules would refuse: {refused}"


def test_manifest_shape() -> None:
    (deployment,) = find("Deployment")
    spec = deployment["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert spec["serviceAccountName"] == "cloudhub"
    ports = {(p["name"], p["containerPort"], p.get("protocol", "TCP")) for p in container["ports"]}
    assert ports == {("quic", 7443, "UDP"), ("websocket", 7443, "TCP"), ("join", 7444, "TCP")}
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
    }
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert service["spec"]["selector"] == selector
    template_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= template_labels.items()
    (pdb,) = find("PodDisruptionBudget")
    (legacy,) = find("PodDisruptionBudget", documents([HUB / "compat-1.20" / "40-pdb.yaml"]))
    assert (pdb["apiVersion"], legacy["apiVersion"]) == ("policy/v1", "policy/v1beta1")
    assert pdb["spec"] == legacy["spec"] and pdb["metadata"] == legacy["metadata"]
    assert pdb["spec"]["selector"]["matchLabels"] == selector
    assert deployment["spec"]["replicas"] > pdb["spec"]["minAvailable"]


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


def _apply_args() -> list[str]:
    args = ["apply"]
    for path in manifest_files(kubernetes_1_20=True):
        args += ["-f", str(path)]
    return args


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
            *[a for p in manifest_files(kubernetes_1_20=True) for a in ("-f", str(p))],
        )
        assert listed.returncode == 0, listed.stderr
        kinds = sorted(item["kind"] for item in json.loads(listed.stdout)["items"])
        assert kinds == sorted(d["kind"] for d in documents(manifest_files(kubernetes_1_20=True)))


@pytest.mark.kubeapiserver
async def test_hub_runs_under_its_service_account_on_kube_apiserver(
    kube_apiserver,
    kubectl: str,
    tmp_path,
) -> None:
    admin_config = str(kube_apiserver.kubeconfig)
    applied = await _kubectl(kubectl, admin_config, *_apply_args())
    assert applied.returncode == 0, applied.stderr

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
    whoami = await _kubectl(
        kubectl, str(sa_config), "auth", "can-i", "list", "secrets", "-n", "kube-system"
    )
    assert whoami.stdout.strip() == "no"  # least privilege bites: no Secrets elsewhere

    sa_configuration = k8s_client.Configuration()
    await k8s_config.load_kube_config(
        config_file=str(sa_config), client_configuration=sa_configuration
    )
    recording = RecordingApiClient(sa_configuration)
    admin = await KubeClient.from_kubeconfig(admin_config)
    async with admin, KubeClient(recording) as hub_client:
        # Every call of every flow, authorized by kube-apiserver's RBAC: a missing rule
        # fails here with 403 Forbidden.
        await exercise(hub_client, admin, tmp_path, "kube-apiserver")
        with pytest.raises(KubeAPIError) as forbidden:
            await hub_client.list(SECRETS, "kube-system")
        assert forbidden.value.status == 403
    assert {r.call for r in recording.requests} <= set(static_calls())
