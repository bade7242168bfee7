"""kubectl (Debian's kubernetes-client) against the API: apply, get, describe and
delete on the real manifests of ``shared/data/manifests``.

Each manifest is used as is where it can be; a variant is derived where the
test must (namespaced objects moved into the test's namespace, cluster-scoped
objects given unique names), never edited on disk. Kinds the API does not serve
(custom resources whose CRD is not installed, ``rbac.authorization.k8s.io/v1beta1``
removed in Kubernetes 1.22 and not served here) must get kubectl's "no matches
for kind" error, and the broken upstream files their own clear errors.
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import shutil
from typing import Any

import pytest
import yaml

from tests.contract.conftest import DEADLINE_S, Kube
from tests.data import MANIFESTS
from tests.environment import not_applicable

ROOT = pathlib.Path(__file__).resolve().parents[2]
KUBECTL = shutil.which("kubectl")


def _kubectls() -> dict[str, str]:
    """The kubectl binaries to test with, by parameter name.

    ``kubectl`` is the one on PATH (/usr/bin/kubectl, 1.32 on our development machines),
    else Debian's kubernetes-client 1.20.2 that tests/k8s unpacks beside the reference
    kube-apiserver (a fresh Debian machine has only that one); ``kubectl-1.20`` is the
    latter too when both exist and differ.
    """
    found: dict[str, str] = {}
    if KUBECTL:
        found["kubectl"] = KUBECTL
    try:
        from tests.k8s.kube_apiserver import kubectl_path
    except ImportError:  # pragma: no cover - only when tests/k8s is absent
        return found
    debian = kubectl_path()
    if debian is None:
        return found
    if not KUBECTL:
        found["kubectl"] = str(debian)
    elif debian.resolve() != pathlib.Path(KUBECTL).resolve():
        found["kubectl-1.20"] = str(debian)
    return found


KUBECTLS = _kubectls()


pytestmark = [
    pytest.mark.skipif(
        not KUBECTLS,
        reason="no kubectl: neither on PATH nor beside the reference kube-apiserver "
        "(scripts/setup.sh test unpacks Debian's kubectl 1.20.2 there)",
    ),
]

#: (apiVersion, kind) of the built-in kinds served (Kubernetes 1.20 API).
SERVED = {
    ("v1", "ConfigMap"),
    ("v1", "Secret"),
    ("v1", "Service"),
    ("v1", "ServiceAccount"),
    ("v1", "Namespace"),
    ("v1", "Pod"),
    ("apps/v1", "Deployment"),
    ("apps/v1", "DaemonSet"),
    ("rbac.authorization.k8s.io/v1", "ClusterRole"),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
    ("networking.k8s.io/v1", "Ingress"),
}
CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding", "Namespace"}
#: Upstream files that are broken on purpose (see PROVENANCE.md), with what kubectl must say.
_MAPPERS = "kubeedge/mappers-go/mappers"
_KARMADA_TESTDATA = (
    "karmada-io/karmada/pkg/resourceinterpreter/default/thirdparty/resourcecustomizations/"
    "apps.kruise.io/v1alpha1/CloneSet/testdata"
)
BROKEN = {
    f"{_MAPPERS}/device-v1beta1/mqtt-mapper/resource/mqttdevice-instance.yaml": (
        "error converting YAML to JSON"
    ),
    f"{_KARMADA_TESTDATA}/interpretdependency-test.yaml": "apiVersion not set",
    f"{_MAPPERS}/kubeedge-v1.17.0/onvif-mapper/resource/secret.yaml": "illegal base64 data",
    "smarter-project/smarter-device-manager/smarter-device-manager-ds-with-configmap-rpi.yaml": (
        "is invalid"
    ),
}


def _load(path: pathlib.Path) -> list[dict[str, Any]] | None:
    try:
        return [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]
    except yaml.YAMLError:
        return None


def _files() -> list[str]:
    if MANIFESTS is None:
        return []
    return sorted(
        str(p.relative_to(MANIFESTS))
        for p in MANIFESTS.rglob("*")
        if p.suffix in (".yaml", ".yml") and p.is_file()
    )


def _served_docs(rel: str) -> list[dict[str, Any]]:
    assert MANIFESTS is not None
    docs = _load(MANIFESTS / rel) or []
    return [
        d
        for d in docs
        if (d.get("apiVersion"), d.get("kind")) in SERVED and d.get("kind") != "Namespace"
    ]


def _unserved_docs(rel: str) -> list[dict[str, Any]]:
    assert MANIFESTS is not None
    docs = _load(MANIFESTS / rel) or []
    return [
        d
        for d in docs
        if d.get("apiVersion") and d.get("kind") and (d["apiVersion"], d["kind"]) not in SERVED
    ]


APPLICABLE = [f for f in _files() if f not in BROKEN and _served_docs(f)]
UNSERVED = [f for f in _files() if f not in BROKEN and _unserved_docs(f)]


class Kubectl:
    def __init__(self, kube: Kube, binary: str, cache: pathlib.Path) -> None:
        self.kube = kube
        self.binary = binary
        self.env = {**os.environ, "KUBECONFIG": str(kube.cluster.kubeconfig)}
        self.cache = cache

    async def __call__(self, *args: str, stdin: bytes | None = None) -> tuple[int, str]:
        proc = await asyncio.create_subprocess_exec(
            self.binary,
            f"--cache-dir={self.cache}",
            *args,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=self.env,
        )
        out, _ = await asyncio.wait_for(proc.communicate(stdin), DEADLINE_S * 3)
        return proc.returncode or 0, out.decode()


@pytest.fixture(params=sorted(KUBECTLS))
def kubectl(request: pytest.FixtureRequest, kube: Kube, tmp_path: pathlib.Path) -> Kubectl:
    """kubectl against the test's backend; each available kubectl release in turn."""
    if request.param != "kubectl" and kube.cluster.name != "embedded":
        not_applicable(f"{request.param} is checked against the embedded server only")
    return Kubectl(kube, KUBECTLS[request.param], tmp_path / "kubectl-cache")


def variant(kube: Kube, docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The served documents moved into the test namespace, cluster-scoped ones renamed."""
    out = json.loads(json.dumps(docs))
    renamed: dict[str, str] = {}
    for doc in out:
        meta = doc.setdefault("metadata", {})
        if doc["kind"] in CLUSTER_SCOPED:
            renamed[meta["name"]] = kube.unique(meta["name"])
            meta["name"] = renamed[meta["name"]]
            meta.pop("namespace", None)
        else:
            meta["namespace"] = kube.ns
    for doc in out:
        for subject in doc.get("subjects") or []:
            if "namespace" in subject:
                subject["namespace"] = kube.ns
        ref = doc.get("roleRef")
        if isinstance(ref, dict) and ref.get("name") in renamed:
            ref["name"] = renamed[ref["name"]]
    return out


async def _resource_versions(kubectl: Kubectl, path: pathlib.Path) -> dict[str, str]:
    rc, out = await kubectl("get", "-f", str(path), "-o", "json")
    assert rc == 0, out
    got = json.loads(out)
    items = got["items"] if got.get("kind") == "List" else [got]
    return {f"{i['kind']}/{i['metadata']['name']}": i["metadata"]["resourceVersion"] for i in items}


def _ref(doc: dict[str, Any]) -> str:
    group = doc["apiVersion"].split("/")[0] if "/" in doc["apiVersion"] else ""
    kind = doc["kind"].lower()
    return (
        f"{kind}.{group}/{doc['metadata']['name']}"
        if group
        else f"{kind}/{doc['metadata']['name']}"
    )


async def test_apply_get_describe_delete(
    kube: Kube, kubectl: Kubectl, tmp_path: pathlib.Path
) -> None:
    """Every served object of every applicable manifest, in one kubectl run per step
    (the objects' names do not collide across files)."""
    assert len(APPLICABLE) >= 15, APPLICABLE
    docs = variant(kube, [d for rel in APPLICABLE for d in _served_docs(rel)])
    cluster_docs = [d for d in docs if d["kind"] in CLUSTER_SCOPED]
    for doc in cluster_docs:
        kube.cluster_scoped(
            lambda doc=doc: kubectl(
                "delete", "--ignore-not-found", f"{doc['kind']}/{doc['metadata']['name']}"
            )
        )
    path = tmp_path / "manifest.yaml"
    path.write_text(yaml.safe_dump_all(docs))

    rc, out = await kubectl("apply", "-f", str(path))
    assert rc == 0, out
    for doc in docs:
        assert f"{_ref(doc)} created" in out, out
    before = await _resource_versions(kubectl, path)
    rc, out = await kubectl("apply", "-f", str(path))
    assert rc == 0, out
    for doc in docs:
        # "configured" where the manifest sets a value the server drops as Go's JSON
        # does (an empty optional list, `readOnly: false`): kubectl sees it missing and
        # sends it again, and the object does not change.
        assert f"{_ref(doc)} unchanged" in out or f"{_ref(doc)} configured" in out, out
    assert await _resource_versions(kubectl, path) == before

    rc, out = await kubectl("get", "-f", str(path), "-o", "json")
    assert rc == 0, out
    got = json.loads(out)
    items = got["items"] if got.get("kind") == "List" else [got]
    assert sorted(i["metadata"]["name"] for i in items) == sorted(
        d["metadata"]["name"] for d in docs
    )
    for item in items:
        assert "kubectl.kubernetes.io/last-applied-configuration" in item["metadata"]["annotations"]
    rc, out = await kubectl("get", "-f", str(path))
    assert rc == 0, out
    assert "NAME" in out
    rc, out = await kubectl("describe", "-f", str(path))
    assert rc == 0, out
    for doc in docs:
        assert doc["metadata"]["name"] in out

    # Change the manifest as a user would: a label everywhere, a new image and env var
    # in workloads. kubectl computes a three-way strategic merge patch.
    for doc in docs:
        doc["metadata"].setdefault("labels", {})["edgefleet-test"] = "changed"
        pod_spec = (doc.get("spec") or {}).get("template", {}).get("spec")
        if pod_spec:
            container = pod_spec["containers"][0]
            container["image"] = "busybox:1.36"
            container.setdefault("env", []).append({"name": "EDGEFLEET_TEST", "value": "1"})
    path.write_text(yaml.safe_dump_all(docs))
    rc, out = await kubectl("apply", "-f", str(path))
    assert rc == 0, out
    for doc in docs:
        assert f"{_ref(doc)} configured" in out, out
    rc, out = await kubectl("get", "-f", str(path), "-o", "json")
    got = json.loads(out)
    items = got["items"] if got.get("kind") == "List" else [got]
    for item in items:
        assert item["metadata"]["labels"]["edgefleet-test"] == "changed"
        pod_spec = (item.get("spec") or {}).get("template", {}).get("spec")
        if pod_spec:
            container = pod_spec["containers"][0]
            assert container["image"] == "busybox:1.36"
            assert {"name": "EDGEFLEET_TEST", "value": "1"} in container["env"]
            # Fields the manifest never set keep their server defaults.
            assert container["terminationMessagePath"] == "/dev/termination-log"

    rc, out = await kubectl(
        "delete", "-f", str(path), "--wait=true", f"--timeout={int(DEADLINE_S)}s"
    )
    assert rc == 0, out
    rc, out = await kubectl("get", "-f", str(path), "--ignore-not-found", "-o", "name")
    assert rc == 0, out
    assert out.strip() == ""


async def test_unserved_kinds_get_no_matches(
    kube: Kube, kubectl: Kubectl, tmp_path: pathlib.Path
) -> None:
    docs = []
    for rel in UNSERVED:
        for doc in _unserved_docs(rel):
            group_version = doc["apiVersion"]
            prefix = "/api/" if "/" not in group_version else "/apis/"
            status, listing, _ = await kube.raw("GET", prefix + group_version)
            # A real cluster may have some of these CRDs installed: leave those out.
            if status != 200 or doc["kind"] not in {r["kind"] for r in listing["resources"]}:
                docs.append(doc)
    assert docs
    path = tmp_path / "unserved.yaml"
    path.write_text(yaml.safe_dump_all(variant(kube, docs)))
    rc, out = await kubectl("apply", "-f", str(path))
    assert rc != 0
    for doc in docs:
        assert f'no matches for kind "{doc["kind"]}" in version "{doc["apiVersion"]}"' in out, out


@pytest.mark.parametrize("rel", sorted(BROKEN))
async def test_broken_manifests_get_clear_errors(kube: Kube, kubectl: Kubectl, rel: str) -> None:
    assert MANIFESTS is not None
    rc, out = await kubectl("apply", "-n", kube.ns, "-f", str(MANIFESTS / rel))
    assert rc != 0
    assert BROKEN[rel] in out, out


async def test_get_prints_server_side_columns(kube: Kube, kubectl: Kubectl) -> None:
    manifest = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "cols", "namespace": kube.ns},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}], "nodeName": "edge-9"},
    }
    rc, out = await kubectl("apply", "-f", "-", stdin=json.dumps(manifest).encode())
    assert rc == 0, out
    rc, out = await kubectl("get", "pods", "-n", kube.ns, "-o", "wide")
    assert rc == 0, out
    header = out.splitlines()[0].split()
    assert header[:5] == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert "NODE" in header
    row = out.splitlines()[1].split()
    assert row[:3] == ["cols", "0/1", "Pending"]
    assert "edge-9" in row
    rc, out = await kubectl("get", "ns", kube.ns)
    assert rc == 0, out
    assert out.split()[:3] == ["NAME", "STATUS", "AGE"]
    assert "Active" in out


async def test_generators_scale_and_label(kube: Kube, kubectl: Kubectl) -> None:
    """kubectl's typed commands send protobuf bodies (create namespace/configmap/secret)
    and use the scale subresource (scale)."""
    ns = kube.unique("kubectl-ns")
    kube.cluster_scoped(lambda: kubectl("delete", "namespace", ns, "--wait=false"))
    rc, out = await kubectl("create", "namespace", ns)
    assert rc == 0, out
    rc, out = await kubectl(
        "create",
        "configmap",
        "settings",
        "-n",
        kube.ns,
        "--from-literal=mode=edge",
        "--from-literal=interval=30s",
    )
    assert rc == 0, out
    rc, out = await kubectl(
        "create", "secret", "generic", "creds", "-n", kube.ns, "--from-literal=password=hunter2"
    )
    assert rc == 0, out
    cm = await kube.core.read_namespaced_config_map("settings", kube.ns)
    assert cm.data == {"mode": "edge", "interval": "30s"}
    secret = await kube.core.read_namespaced_secret("creds", kube.ns)
    assert secret.type == "Opaque"
    assert secret.data == {"password": "aHVudGVyMg=="}
    assert (await kube.core.read_namespace(ns)).status.phase == "Active"
    rc, out = await kubectl("label", "configmap", "settings", "-n", kube.ns, "tier=edge")
    assert rc == 0, out
    assert (await kube.core.read_namespaced_config_map("settings", kube.ns)).metadata.labels == {
        "tier": "edge"
    }
    manifest = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": kube.ns},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
            },
        },
    }
    rc, out = await kubectl("apply", "-f", "-", stdin=json.dumps(manifest).encode())
    assert rc == 0, out
    rc, out = await kubectl("scale", "deployment", "web", "-n", kube.ns, "--replicas=3")
    assert rc == 0, out
    assert (await kube.apps.read_namespaced_deployment("web", kube.ns)).spec.replicas == 3
