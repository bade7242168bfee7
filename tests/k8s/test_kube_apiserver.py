"""The reference kube-apiserver v1.20.2 serves what the hub needs, through kubernetes_asyncio.

These tests prove that the features the hub relies on exist on Kubernetes 1.20 (the
oldest API it supports): core objects, optimistic concurrency, CRDs with a status
subresource, watches with bookmarks and 410 Gone, Lease in coordination.k8s.io/v1, and
Node and Pod status subresources with field selectors. They also check the harness
itself: bad input gives a clear error, and no process outlives its test process.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import re
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import psutil
import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from tests.k8s.kube_apiserver import (
    BINARY_ENV,
    KUBE_VERSION,
    RECIPE,
    KubeAPIServerError,
    RunningAPIServer,
    binary_path,
    build_script,
    start,
)
from tests.waiting import eventually, eventually_sync

pytestmark = pytest.mark.kubeapiserver

REPO = Path(__file__).resolve().parents[2]
SMP = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


async def _raw(coro: Any) -> dict[str, Any]:
    """Await a kubernetes_asyncio call made with ``_preload_content=False``; return its JSON."""
    response = await coro
    try:
        return json.loads(await response.read())
    finally:
        response.release()


async def test_serves_version_1_20(kube_client: client.ApiClient) -> None:
    info = await client.VersionApi(kube_client).get_code()
    assert info.git_version == KUBE_VERSION
    assert (info.major, info.minor) == ("1", "20")


async def test_lists_the_system_namespaces(kube_client: client.ApiClient) -> None:
    namespaces = await client.CoreV1Api(kube_client).list_namespace()
    names = {ns.metadata.name for ns in namespaces.items}
    assert {"default", "kube-system", "kube-public", "kube-node-lease"} <= names


def test_only_the_admin_token_is_let_in(kube_apiserver: RunningAPIServer) -> None:
    context = kube_apiserver.ssl_context()
    url = kube_apiserver.url + "/api/v1/namespaces"
    # No token: anonymous (as on kubeadm clusters), which RBAC forbids; a wrong token: 401.
    for headers, code in (({}, 403), ({"Authorization": "Bearer not-the-token"}, 401)):
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(urllib.request.Request(url, headers=headers), context=context)
        assert caught.value.code == code
    good = {"Authorization": f"Bearer {kube_apiserver.token}"}
    with urllib.request.urlopen(urllib.request.Request(url, headers=good), context=context) as r:
        assert r.status == 200


async def test_configmap_create_read_update_conflict_delete(
    kube_client: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(kube_client)
    body = client.V1ConfigMap(
        metadata=client.V1ObjectMeta(generate_name="cfg-", labels={"app": "edgefleet"}),
        data={"mode": "edge"},
    )
    created = await core.create_namespaced_config_map(namespace, body)
    name = created.metadata.name
    assert name.startswith("cfg-") and len(name) > len("cfg-")
    assert created.metadata.uid and created.metadata.creation_timestamp

    read = await core.read_namespaced_config_map(name, namespace)
    assert read.data == {"mode": "edge"}

    read.data["mode"] = "cloud"
    updated = await core.replace_namespaced_config_map(name, namespace, read)
    assert int(updated.metadata.resource_version) > int(created.metadata.resource_version)

    # A write based on the first resourceVersion is stale now: 409 Conflict.
    created.data["mode"] = "stale"
    with pytest.raises(ApiException) as caught:
        await core.replace_namespaced_config_map(name, namespace, created)
    assert caught.value.status == 409
    assert json.loads(caught.value.body)["reason"] == "Conflict"

    selected = await core.list_namespaced_config_map(namespace, label_selector="app=edgefleet")
    assert [cm.metadata.name for cm in selected.items] == [name]

    await core.delete_namespaced_config_map(name, namespace)
    with pytest.raises(ApiException) as caught:
        await core.read_namespaced_config_map(name, namespace)
    assert caught.value.status == 404


async def test_crd_serves_custom_resources_with_a_status_subresource(
    kube_client: client.ApiClient, namespace: str
) -> None:
    ext = client.ApiextensionsV1Api(kube_client)
    custom = client.CustomObjectsApi(kube_client)
    suffix = uuid.uuid4().hex[:6]
    group, plural, kind = "test.edgefleet.io", f"widgets{suffix}", f"Widget{suffix}"
    crd_name = f"{plural}.{group}"
    schema = {
        "type": "object",
        "properties": {
            "spec": {"type": "object", "properties": {"size": {"type": "integer"}}},
            "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}},
        },
    }
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": crd_name},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": f"widget{suffix}", "kind": kind},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                    "subresources": {"status": {}},
                }
            ],
        },
    }
    await _raw(ext.create_custom_resource_definition(crd, _preload_content=False))
    try:

        async def established() -> bool:
            got = await _raw(ext.read_custom_resource_definition(crd_name, _preload_content=False))
            conditions = got.get("status", {}).get("conditions") or []
            return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

        await eventually(established, f"CRD {crd_name} Established", 30)

        args = (group, "v1", namespace, plural)
        obj = {
            "apiVersion": f"{group}/v1",
            "kind": kind,
            "metadata": {"name": "w1"},
            "spec": {"size": 3},
            "status": {"ready": True},  # ignored: status is written only through /status
        }
        created = await custom.create_namespaced_custom_object(*args, obj)
        assert created["metadata"]["generation"] == 1
        assert "status" not in created

        patched = await custom.patch_namespaced_custom_object_status(
            *args, "w1", {"status": {"ready": True}}, _content_type=MERGE
        )
        assert patched["status"] == {"ready": True}
        assert patched["metadata"]["generation"] == 1  # status changes leave generation alone

        # Through the main resource, spec changes bump generation and status changes are dropped.
        spec_patched = await custom.patch_namespaced_custom_object(
            *args, "w1", {"spec": {"size": 5}, "status": {"ready": False}}, _content_type=MERGE
        )
        assert spec_patched["spec"] == {"size": 5}
        assert spec_patched["metadata"]["generation"] == 2
        assert spec_patched["status"] == {"ready": True}

        listed = await custom.list_namespaced_custom_object(*args)
        assert [item["metadata"]["name"] for item in listed["items"]] == ["w1"]

        # The schema is enforced (structural schema, CRD v1).
        with pytest.raises(ApiException) as caught:
            await custom.create_namespaced_custom_object(
                *args, {**obj, "metadata": {"name": "w2"}, "spec": {"size": "big"}}
            )
        assert caught.value.status == 422
    finally:
        await ext.delete_custom_resource_definition(crd_name)


async def test_watch_replays_changes_then_sends_a_bookmark(
    kube_client: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(kube_client)
    selector = "watched=yes"

    def cm(name: str, labels: dict[str, str] | None = None) -> client.V1ConfigMap:
        return client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name=name, labels=labels), data={"v": "1"}
        )

    await core.create_namespaced_config_map(namespace, cm("before", {"watched": "yes"}))
    listed = await core.list_namespaced_config_map(namespace, label_selector=selector)
    assert [item.metadata.name for item in listed.items] == ["before"]
    await core.create_namespaced_config_map(namespace, cm("b", {"watched": "yes"}))
    await core.create_namespaced_config_map(namespace, cm("c", {"watched": "yes"}))
    await core.patch_namespaced_config_map("b", namespace, {"data": {"v": "2"}})
    await core.delete_namespaced_config_map("c", namespace)

    seen: list[tuple[str, str]] = []
    unwatched_rv = 0
    bookmark_rv = 0
    async with watch.Watch() as w:
        # The server sends a bookmark 2 s before the watch's deadline (timeoutSeconds), and
        # only when it advances the watcher past the last event it delivered.
        stream = w.stream(
            core.list_namespaced_config_map,
            namespace,
            label_selector=selector,
            resource_version=listed.metadata.resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=5,
        )

        async def collect() -> None:
            nonlocal bookmark_rv, unwatched_rv
            async for event in stream:
                if event["type"] == "BOOKMARK":
                    assert event["raw_object"]["kind"] == "ConfigMap"
                    bookmark_rv = int(event["raw_object"]["metadata"]["resourceVersion"])
                    return
                seen.append((event["type"], event["raw_object"]["metadata"]["name"]))
                if len(seen) == 4:
                    # A change this watch filters out: only a bookmark can tell it about it.
                    other = await core.create_namespaced_config_map(namespace, cm("unwatched"))
                    unwatched_rv = int(other.metadata.resource_version)

        await asyncio.wait_for(collect(), timeout=60)
    assert seen == [("ADDED", "b"), ("ADDED", "c"), ("MODIFIED", "b"), ("DELETED", "c")]
    assert unwatched_rv, "the watch ended before replaying the four changes"
    assert bookmark_rv >= unwatched_rv


async def test_watch_and_exact_list_at_a_compacted_resource_version_are_410_gone(
    kube_client: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(kube_client)
    async with watch.Watch() as w:
        stream = w.stream(
            core.list_namespaced_config_map, namespace, resource_version="1", timeout_seconds=10
        )
        with pytest.raises(ApiException) as caught:
            await asyncio.wait_for(stream.__anext__(), timeout=60)
    assert caught.value.status == 410
    assert caught.value.reason.startswith("Expired")

    with pytest.raises(ApiException) as caught:
        await core.list_namespaced_config_map(
            namespace, resource_version="1", resource_version_match="Exact"
        )
    assert caught.value.status == 410
    assert json.loads(caught.value.body)["reason"] == "Expired"


async def test_lease_v1_renewal_uses_optimistic_concurrency(
    kube_client: client.ApiClient, namespace: str
) -> None:
    coordination = client.CoordinationV1Api(kube_client)
    lease = client.V1Lease(
        metadata=client.V1ObjectMeta(name="edge-node-1"),
        spec=client.V1LeaseSpec(
            holder_identity="edge-node-1",
            lease_duration_seconds=40,
            acquire_time=_now(),
            renew_time=_now(),
        ),
    )
    created = await coordination.create_namespaced_lease(namespace, lease)
    assert created.spec.holder_identity == "edge-node-1"
    assert created.spec.lease_duration_seconds == 40

    created.spec.renew_time = _now() + datetime.timedelta(seconds=10)
    renewed = await coordination.replace_namespaced_lease("edge-node-1", namespace, created)
    assert renewed.spec.renew_time > created.spec.acquire_time

    # A second hub replica renewing from the old copy loses: 409 Conflict.
    created.spec.holder_identity = "other-replica"
    with pytest.raises(ApiException) as caught:
        await coordination.replace_namespaced_lease("edge-node-1", namespace, created)
    assert caught.value.status == 409


async def test_node_and_pod_status_subresources_and_field_selectors(
    kube_client: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(kube_client)
    node_name = f"edgefleet-test-node-{uuid.uuid4().hex[:6]}"
    node = client.V1Node(
        metadata=client.V1ObjectMeta(name=node_name, labels={"node-role.edgefleet.io/edge": ""}),
        spec=client.V1NodeSpec(
            taints=[client.V1Taint(key="node.edgefleet.io/edge", value="true", effect="NoSchedule")]
        ),
    )
    await core.create_node(node)
    try:
        status = {
            "status": {
                "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                "allocatable": {"cpu": "3800m", "memory": "7Gi", "pods": "110"},
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "EdgeAgentReady",
                        "lastHeartbeatTime": _now().strftime("%Y-%m-%dT%H:%M:%SZ"),
                        "lastTransitionTime": _now().strftime("%Y-%m-%dT%H:%M:%SZ"),
                    }
                ],
                "nodeInfo": {"architecture": "arm64", "kubeletVersion": "edgefleet-0.1.0"},
            }
        }
        patched = await _raw(
            core.patch_node_status(node_name, status, _content_type=SMP, _preload_content=False)
        )
        assert patched["status"]["capacity"]["cpu"] == "4"
        assert patched["status"]["conditions"][0]["reason"] == "EdgeAgentReady"
        assert patched["status"]["nodeInfo"]["architecture"] == "arm64"

        pod = client.V1Pod(
            metadata=client.V1ObjectMeta(name="app"),
            spec=client.V1PodSpec(
                node_name=node_name,
                containers=[client.V1Container(name="app", image="busybox")],
                tolerations=[client.V1Toleration(key="node.edgefleet.io/edge", operator="Exists")],
            ),
        )
        created = await core.create_namespaced_pod(namespace, pod)
        assert created.status.phase == "Pending"
        running = await core.patch_namespaced_pod_status(
            "app",
            namespace,
            {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}},
            _content_type=SMP,
        )
        assert running.status.phase == "Running"
        on_node = await core.list_namespaced_pod(
            namespace, field_selector=f"spec.nodeName={node_name}"
        )
        assert [p.metadata.name for p in on_node.items] == ["app"]
        elsewhere = await core.list_namespaced_pod(namespace, field_selector="spec.nodeName=other")
        assert elsewhere.items == []
        by_phase = await core.list_pod_for_all_namespaces(
            field_selector=f"status.phase=Running,spec.nodeName={node_name}"
        )
        assert [p.metadata.name for p in by_phase.items] == ["app"]
    finally:
        await core.delete_node(node_name)


def test_the_build_script_and_the_harness_agree_on_the_recipe() -> None:
    # The recipe is the cache key: the script rebuilds a binary whose stamp differs, and
    # the harness takes only a binary stamped with its RECIPE.
    script = build_script().read_text()
    version = re.search(r"^KUBE_VERSION=(\S+)$", script, re.M)
    recipe = re.search(r'^RECIPE="(\S+)"$', script, re.M)
    assert version is not None and recipe is not None
    assert f"v{version.group(1)}" == KUBE_VERSION
    assert recipe.group(1).replace("$KUBE_VERSION", version.group(1)) == RECIPE


def test_a_binary_of_an_older_recipe_counts_as_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    binary = tmp_path / "kube-apiserver"
    binary.write_text("#!/bin/sh\necho 'Kubernetes v1.20.2'\n")
    binary.chmod(0o755)
    monkeypatch.setenv(BINARY_ENV, str(binary))
    assert binary_path() is None  # built before recipe stamps: no stamp at all
    stamp = tmp_path / "kube-apiserver.recipe"
    stamp.write_text("v1.20.2+edgefleet.1\n")
    assert binary_path() is None
    stamp.write_text(RECIPE + "\n")
    assert binary_path() == binary


def test_start_reports_a_missing_binary(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"build-kube-apiserver\.sh"):
        start(tmp_path, binary=tmp_path / "no-such-kube-apiserver")


@pytest.mark.usefixtures("kube_apiserver_binaries")
def test_start_reports_an_apiserver_that_exits_and_leaves_nothing_running(
    tmp_path: Path,
) -> None:
    fake = tmp_path / "fake-apiserver"
    fake.write_text("#!/bin/sh\necho 'Error: unknown flag --nonsense' >&2\nexit 3\n")
    fake.chmod(0o755)
    with pytest.raises(KubeAPIServerError) as caught:
        start(tmp_path / "work", binary=fake, ready_timeout=60)
    assert caught.value.component == "kube-apiserver"
    assert "exited with status 3" in str(caught.value)
    assert "unknown flag --nonsense" in caught.value.log_tail
    assert _processes_using(tmp_path) == []


@pytest.mark.slow
@pytest.mark.usefixtures("kube_apiserver_binaries")
def test_stop_ends_both_processes_and_can_be_repeated(tmp_path: Path) -> None:
    with start(tmp_path / "work") as server:
        assert server.running()
        assert sorted(server.pids) == ["etcd", "kube-apiserver"]
        assert {p.pid for p in _processes_using(tmp_path)} >= set(server.pids.values())
    assert not server.running()
    assert _processes_using(tmp_path) == []
    server.stop()  # a second stop is harmless
    assert "kube-apiserver" in (tmp_path / "work" / "kube-apiserver.log").read_text()
    assert not (tmp_path / "work" / "etcd-data").exists()


def _processes_using(path: Path) -> list[psutil.Process]:
    """Live (non-zombie) processes whose command line mentions ``path``."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        if proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        if any(str(path) in arg for arg in proc.info["cmdline"] or ()):
            found.append(proc)
    return found


_KILLED_PARENT = textwrap.dedent(
    """
    import json, os, signal, sys, threading
    from pathlib import Path
    from tests.k8s.kube_apiserver import start

    servers = []
    # From a worker thread, so that only the watchdog (not PR_SET_PDEATHSIG) can clean up.
    worker = threading.Thread(target=lambda: servers.append(start(Path(sys.argv[1]))))
    worker.start()
    worker.join()
    print(json.dumps(servers[0].pids), flush=True)
    sys.stdin.readline()
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


@pytest.mark.slow
@pytest.mark.usefixtures("kube_apiserver_binaries")
def test_servers_die_with_a_test_process_killed_by_sigkill(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    parent = subprocess.Popen(
        [sys.executable, "-c", _KILLED_PARENT, str(tmp_path / "work")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        cwd=REPO,
    )
    try:
        assert parent.stdout is not None and parent.stdin is not None
        line = parent.stdout.readline()
        assert line, "the child process exited before starting the servers"
        pids = json.loads(line)
        assert set(pids) == {"etcd", "kube-apiserver"}
        # The worker thread that started them has exited: both are still running.
        assert all(psutil.pid_exists(pid) for pid in pids.values())
        parent.stdin.write(b"go\n")
        parent.stdin.flush()
        assert parent.wait(60) == -9
        eventually_sync(lambda: _processes_using(tmp_path) == [], "the servers gone", 60)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        for proc in _processes_using(tmp_path):
            proc.kill()
