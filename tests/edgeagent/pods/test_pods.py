"""Pod lifecycle against both runtimes: the process runtime and podman's Docker API."""

from __future__ import annotations

import itertools
import logging
import os
import pathlib
import time

import pytest

from tests.edgeagent.conftest import Harness, container, damage_store, make_pod
from tests.waiting import eventually

pytestmark = pytest.mark.podman


async def test_env_and_volumes_from_configmap_and_secret(harness: Harness, tmp_path: pathlib.Path):
    k = harness.kind
    host_dir = tmp_path / "host"
    host_dir.mkdir()
    (host_dir / "hostfile").write_text("from-host\n")
    harness.apply_config(
        "ConfigMap",
        "app-config",
        {"greeting": "hello", "level": "debug", "app.yaml": "mode: edge\n"},
    )
    harness.apply_config("Secret", "app-secret", {"password": "s3cret", "token": "t0k"})
    pod = harness.apply(
        make_pod(
            "env-vol",
            [
                container(
                    "main",
                    "sleep 600",
                    k,
                    env=[
                        {"name": "PLAIN", "value": "plain-$(GREETING)"},
                        {
                            "name": "GREETING",
                            "valueFrom": {
                                "configMapKeyRef": {"name": "app-config", "key": "greeting"}
                            },
                        },
                        {"name": "EXPANDED", "value": "say-$(GREETING)"},
                        {
                            "name": "PASSWORD",
                            "valueFrom": {
                                "secretKeyRef": {"name": "app-secret", "key": "password"}
                            },
                        },
                        {
                            "name": "POD_NAME",
                            "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
                        },
                        {
                            "name": "POD_NS",
                            "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
                        },
                        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                        {
                            "name": "POD_IP",
                            "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}},
                        },
                        {
                            "name": "MISSING_OK",
                            "valueFrom": {
                                "configMapKeyRef": {"name": "nope", "key": "x", "optional": True}
                            },
                        },
                    ],
                    envFrom=[
                        {"configMapRef": {"name": "app-config"}, "prefix": "CFG_"},
                        {"secretRef": {"name": "app-secret"}},
                    ],
                    volumeMounts=[
                        {"name": "config", "mountPath": "/etc/app"},
                        {"name": "secret", "mountPath": "/etc/secret", "readOnly": True},
                        {"name": "scratch", "mountPath": "/scratch"},
                        {"name": "shm", "mountPath": "/dev/shm/app"},
                        {"name": "host", "mountPath": "/host"},
                        {"name": "config", "mountPath": "/etc/one.yaml", "subPath": "app.yaml"},
                    ],
                )
            ],
            volumes=[
                {"name": "config", "configMap": {"name": "app-config"}},
                {"name": "secret", "secret": {"secretName": "app-secret"}},
                {"name": "scratch", "emptyDir": {}},
                {"name": "shm", "emptyDir": {"medium": "Memory"}},
                {"name": "host", "hostPath": {"path": str(host_dir), "type": "Directory"}},
            ],
        )
    )
    await harness.wait_phase(pod, "Running")
    env = await harness.exec(pod, "main", "env")
    for line in (
        "PLAIN=plain-$(GREETING)",
        "GREETING=hello",
        "EXPANDED=say-hello",
        "PASSWORD=s3cret",
        "POD_NAME=env-vol",
        "POD_NS=default",
        "NODE=edge-test",
        "CFG_greeting=hello",
        "CFG_level=debug",
        "password=s3cret",
        "token=t0k",
    ):
        assert line in env.splitlines(), (line, env)
    pod_ip = harness.status(pod)["podIP"]
    assert f"POD_IP={pod_ip}" in env.splitlines() and pod_ip
    assert "MISSING_OK" not in env
    p = harness.path
    files = await harness.exec(
        pod,
        "main",
        f"for f in {p('/etc/app/greeting')} {p('/etc/secret/password')} {p('/host/hostfile')} "
        f"{p('/etc/one.yaml')}; do cat $f; echo; done; echo x > {p('/scratch/f')} && "
        f"echo x > {p('/dev/shm/app/f')} && echo wrote",
    )
    assert files.split() == ["hello", "s3cret", "from-host", "mode:", "edge", "wrote"]
    # Secrets never group/world readable, and kept on tmpfs when there is one.
    secret_files = list(
        (pathlib.Path("/dev/shm/edgefleet") / pod["metadata"]["uid"]).rglob("password")
    )
    real = [f for f in secret_files if not f.is_symlink()]
    assert real and all(oct(f.stat().st_mode & 0o777) == "0o600" for f in real)

    # A ConfigMap update reaches the mounted files without a restart.
    before = harness.container_status(pod, "main")
    harness.apply_config(
        "ConfigMap",
        "app-config",
        {"greeting": "bonjour", "level": "debug", "app.yaml": "mode: edge\n"},
    )

    async def updated():
        return (await harness.exec(pod, "main", f"cat {p('/etc/app/greeting')}")) == "bonjour"

    await eventually(updated, timeout=20, what="configmap update visible in the volume")
    after = harness.container_status(pod, "main")
    assert after["containerID"] == before["containerID"] and after["restartCount"] == 0
    # ... and env stays what it was at start (Kubernetes semantics).
    assert "GREETING=hello" in (await harness.exec(pod, "main", "env")).splitlines()


async def test_a_configmap_used_only_through_a_projected_volume_updates_the_pod(
    runtime_kind: str, tmp_path: pathlib.Path, request
):
    """The edge wakes a pod when a ConfigMap it references only through a ``projected``
    volume changes (issue 15 item 13: the edge's own reference rule missed projected
    sources and waited for the next resync). The resync is an hour here, so only the
    wake-up can bring the new value within the wait."""
    from tests.edgeagent.conftest import agent_settings, make_runtime_for

    engine = request.getfixturevalue("podman") if runtime_kind == "docker" else None
    state = tmp_path / "state"
    settings = agent_settings(state, runtime_kind, engine, resync_period=3600.0)
    harness = Harness(state, make_runtime_for(runtime_kind, state, engine), settings)
    await harness.start()
    try:
        harness.apply_config("ConfigMap", "projected-only", {"greeting": "hello"})
        pod = harness.apply(
            make_pod(
                "projected",
                [
                    container(
                        "main",
                        "sleep 600",
                        harness.kind,
                        volumeMounts=[{"name": "bundle", "mountPath": "/etc/bundle"}],
                    )
                ],
                volumes=[
                    {
                        "name": "bundle",
                        "projected": {"sources": [{"configMap": {"name": "projected-only"}}]},
                    }
                ],
            )
        )
        await harness.wait_phase(pod, "Running")
        greeting = harness.path("/etc/bundle/greeting")
        assert await harness.exec(pod, "main", f"cat {greeting}") == "hello"
        harness.apply_config("ConfigMap", "projected-only", {"greeting": "bonjour"})

        async def updated():
            return (await harness.exec(pod, "main", f"cat {greeting}")) == "bonjour"

        await eventually(updated, timeout=20, what="projected configmap update in the volume")
    finally:
        await harness.close()


async def test_missing_configmap_waits_then_runs(harness: Harness):
    pod = harness.apply(
        make_pod(
            "waits",
            [
                container(
                    "main",
                    "sleep 600",
                    harness.kind,
                    env=[
                        {
                            "name": "X",
                            "valueFrom": {"configMapKeyRef": {"name": "late", "key": "x"}},
                        }
                    ],
                )
            ],
        )
    )

    def config_error():
        state = harness.container_status(pod, "main").get("state", {})
        return state.get("waiting", {}).get("reason") == "CreateContainerConfigError"

    await eventually(config_error, what="CreateContainerConfigError")
    assert (
        'configmap "late" not found'
        in harness.container_status(pod, "main")["state"]["waiting"]["message"]
    )
    assert harness.status(pod)["phase"] == "Pending"
    harness.apply_config("ConfigMap", "late", {"x": "1"})
    await harness.wait_phase(pod, "Running")


async def test_restart_policies(harness: Harness):
    k = harness.kind
    always = harness.apply(
        make_pod("always", [container("c", "sleep 0.2; exit 0", k)], restartPolicy="Always")
    )
    on_failure_ok = harness.apply(
        make_pod("onfailure-ok", [container("c", "exit 0", k)], restartPolicy="OnFailure")
    )
    on_failure_bad = harness.apply(
        make_pod("onfailure-bad", [container("c", "exit 3", k)], restartPolicy="OnFailure")
    )
    never_ok = harness.apply(
        make_pod("never-ok", [container("c", "exit 0", k)], restartPolicy="Never")
    )
    never_bad = harness.apply(
        make_pod("never-bad", [container("c", "exit 2", k)], restartPolicy="Never")
    )
    await harness.wait_phase(on_failure_ok, "Succeeded")
    await harness.wait_phase(never_ok, "Succeeded")
    await harness.wait_phase(never_bad, "Failed")
    term = harness.container_status(never_bad, "c")["state"]["terminated"]
    assert term["exitCode"] == 2 and term["reason"] == "Error"
    await eventually(
        lambda: harness.container_status(always, "c").get("restartCount", 0) >= 2,
        what="Always restarts a container that exits 0",
    )
    await eventually(
        lambda: harness.container_status(on_failure_bad, "c").get("restartCount", 0) >= 2,
        what="OnFailure restarts a failing container",
    )
    assert harness.status(on_failure_bad)["phase"] in ("Running", "Pending")
    for pod in (on_failure_ok, never_ok, never_bad):
        assert harness.container_status(pod, "c")["restartCount"] == 0


async def test_crash_loop_backoff_grows(harness: Harness):
    pod = harness.apply(make_pod("crasher", [container("c", "echo crash; exit 1", harness.kind)]))
    starts: list[tuple[int, float]] = []
    messages: set[str] = set()

    def observe():
        cs = harness.container_status(pod, "c")
        running = cs.get("state", {}).get("running")
        count = cs.get("restartCount", -1)
        if count >= 0 and (not starts or starts[-1][0] != count):
            starts.append((count, time.monotonic()))
        waiting = cs.get("state", {}).get("waiting", {})
        if waiting.get("reason") == "CrashLoopBackOff":
            messages.add(waiting["message"])
        return count >= 4 and running is None

    await eventually(observe, timeout=40, interval=0.02, what="four restarts")
    gaps = [b[1] - a[1] for a, b in itertools.pairwise(starts)]
    # back-off 0.4 s doubling: restarts 2, 3 and 4 wait ~0.4, ~0.8, ~1.6 s
    assert gaps[-1] > gaps[-2] * 1.3 and gaps[-1] >= 1.4, gaps
    assert any(
        "back-off 800ms restarting failed container=c pod=crasher_default" in m for m in messages
    ), messages
    assert any("back-off 1.6s" in m for m in messages), messages
    last = harness.container_status(pod, "c")["lastState"]["terminated"]
    assert last["exitCode"] == 1
    assert any(e["reason"] == "BackOff" for e in harness.events(pod))


async def test_liveness_failure_restarts_and_readiness_flips(harness: Harness):
    p = harness.path
    pod = harness.apply(
        make_pod(
            "probed",
            [
                container(
                    "c",
                    "trap 'exit 0' TERM; sleep 600 & wait",
                    harness.kind,
                    livenessProbe={
                        "exec": {  # fails once: the marker goes with the failure
                            "command": [
                                "/bin/sh",
                                "-c",
                                f"test ! -e {p('/scratch/dead')} || ! rm {p('/scratch/dead')}",
                            ]
                        },
                        "periodSeconds": 1,
                        "failureThreshold": 1,
                        "timeoutSeconds": 5,  # podman's exec is slow on a loaded machine
                    },
                    readinessProbe={
                        "exec": {"command": ["/bin/sh", "-c", f"test -e {p('/scratch/ready')}"]},
                        "periodSeconds": 1,
                        "failureThreshold": 1,
                        "timeoutSeconds": 5,  # podman's exec is slow on a loaded machine
                    },
                    volumeMounts=[{"name": "scratch", "mountPath": "/scratch"}],
                )
            ],
            volumes=[{"name": "scratch", "emptyDir": {}}],
            terminationGracePeriodSeconds=1,
        )
    )
    status = await harness.wait_phase(pod, "Running")
    ready = {c["type"]: c["status"] for c in status["conditions"]}
    assert ready["Ready"] == "False" and not harness.container_status(pod, "c")["ready"]
    await harness.exec(pod, "c", f"touch {p('/scratch/ready')}")
    await harness.wait_ready(pod)
    assert harness.container_status(pod, "c")["ready"] is True
    await harness.exec(pod, "c", f"rm {p('/scratch/ready')}")
    await eventually(
        lambda: not harness.container_status(pod, "c").get("ready"), what="readiness back to false"
    )
    # liveness: make it fail; the container is killed and restarted
    await harness.exec(pod, "c", f"touch {p('/scratch/dead')}")
    await eventually(
        lambda: harness.container_status(pod, "c").get("restartCount", 0) >= 1,
        timeout=30,
        what="liveness restart",
    )
    reasons = [e["reason"] for e in harness.events(pod)]
    assert "Unhealthy" in reasons and "Killing" in reasons


async def test_http_and_tcp_probes(harness: Harness):
    port = 18000 + os.getpid() % 1000 + (0 if harness.kind == "process" else 500)
    p = harness.path
    pod = harness.apply(
        make_pod(
            "web",
            [
                container(
                    "c",
                    f"mkdir -p {p('/www')} && echo ok > {p('/www/healthz')} && "
                    f"exec busybox httpd -f -p {port} -h {p('/www')}",
                    harness.kind,
                    ports=[{"containerPort": port, "name": "http"}],
                    readinessProbe={
                        "httpGet": {"path": "/healthz", "port": "http"},
                        "periodSeconds": 1,
                    },
                    livenessProbe={"tcpSocket": {"port": port}, "periodSeconds": 1},
                )
            ],
            hostNetwork=True,
        )
    )
    await harness.wait_ready(pod)
    assert harness.container_status(pod, "c")["restartCount"] == 0


async def test_graceful_termination_then_kill(harness: Harness):
    k = harness.kind
    polite = harness.apply(
        make_pod(
            "polite",
            [
                container(
                    "c",
                    "trap 'echo got TERM; exit 0' TERM; echo armed; while true; do sleep 0.1; done",
                    k,
                )
            ],
            terminationGracePeriodSeconds=10,
        )
    )
    stubborn = harness.apply(
        make_pod(
            "stubborn",
            [container("c", "trap '' TERM; echo armed; while true; do sleep 0.1; done", k)],
            terminationGracePeriodSeconds=2,
        )
    )
    await harness.wait_phase(polite, "Running")
    await harness.wait_phase(stubborn, "Running")
    for pod in (polite, stubborn):  # each shell has installed its trap
        await eventually(lambda pod=pod: _has(harness.logs(pod, "c"), "armed"), what="trap")
    t0 = time.monotonic()
    for pod in (polite, stubborn):
        pod["metadata"]["deletionTimestamp"] = "2030-01-01T00:00:00Z"
        harness.apply(pod)

    def deleted(pod):
        return any(
            e.kind == "pod_deleted" and e.body["ref"]["uid"] == pod["metadata"]["uid"]
            for e in harness.store.outbox_pending()
        )

    await eventually(lambda: deleted(polite), timeout=20, what="polite pod deleted")
    polite_s = time.monotonic() - t0
    await eventually(lambda: deleted(stubborn), timeout=20, what="stubborn pod deleted")
    stubborn_s = time.monotonic() - t0
    assert polite_s < 1.9, polite_s  # SIGTERM honoured: no wait for the grace
    assert 1.9 <= stubborn_s < 12, stubborn_s  # SIGKILL after its 2 s grace
    from edgeagent.runtime import Labels

    for pod in (polite, stubborn):
        assert await harness.runtime.list({Labels.POD_UID: pod["metadata"]["uid"]}) == []
        harness.store.apply_delete(pod["metadata"]["uid"])


async def test_init_containers_run_in_order(harness: Harness):
    p = harness.path
    pod = harness.apply(
        make_pod(
            "init",
            [
                container(
                    "main",
                    f"cat {p('/work/log')}; sleep 600",
                    harness.kind,
                    volumeMounts=[{"name": "work", "mountPath": "/work"}],
                )
            ],
            initContainers=[
                container(
                    "first",
                    f"sleep 0.3; echo first >> {p('/work/log')}",
                    harness.kind,
                    volumeMounts=[{"name": "work", "mountPath": "/work"}],
                ),
                container(
                    "second",
                    f"echo second >> {p('/work/log')}",
                    harness.kind,
                    volumeMounts=[{"name": "work", "mountPath": "/work"}],
                ),
            ],
            volumes=[{"name": "work", "emptyDir": {}}],
        )
    )
    status = await harness.wait_phase(pod, "Running")
    assert [s["state"]["terminated"]["reason"] for s in status["initContainerStatuses"]] == [
        "Completed",
        "Completed",
    ]
    conds = {c["type"]: c["status"] for c in status["conditions"]}
    assert conds["Initialized"] == "True"
    out = await harness.exec(pod, "main", f"cat {p('/work/log')}")
    assert out.split() == ["first", "second"]


async def test_failing_init_container_never_fails_pod(harness: Harness):
    pod = harness.apply(
        make_pod(
            "init-fails",
            [container("main", "sleep 600", harness.kind)],
            initContainers=[container("setup", "exit 9", harness.kind)],
            restartPolicy="Never",
        )
    )
    status = await harness.wait_phase(pod, "Failed")
    assert status["initContainerStatuses"][0]["state"]["terminated"]["exitCode"] == 9
    assert status["containerStatuses"][0]["state"]["waiting"]["reason"] in (
        "ContainerCreating",
        "PodInitializing",
    )


async def test_unsupported_fields_are_reported_not_half_run(harness: Harness):
    pod = harness.apply(
        make_pod(
            "privileged",
            [
                container(
                    "c",
                    "sleep 600",
                    harness.kind,
                    securityContext={"privileged": True},
                    startupProbe={"exec": {"command": ["true"]}},
                )
            ],
            hostPID=True,
            volumes=[{"name": "pvc", "persistentVolumeClaim": {"claimName": "x"}}],
        )
    )
    status = await harness.wait_phase(pod, "Failed")
    assert status["reason"] == "UnsupportedPodSpec"
    for field in (
        "spec.hostPID",
        "spec.containers[0].securityContext",
        "spec.containers[0].startupProbe",
        "spec.volumes[0].persistentVolumeClaim",
    ):
        assert field in status["message"], (field, status["message"])
    events = [e for e in harness.events(pod) if e["reason"] == "UnsupportedPodSpec"]
    assert len(events) == 1 and "spec.hostPID" in events[0]["message"]
    from edgeagent.runtime import Labels

    assert await harness.runtime.list({Labels.POD_UID: pod["metadata"]["uid"]}) == []


async def test_status_is_reported_as_soon_as_it_changes(harness: Harness):
    pod = harness.apply(
        make_pod(
            "quick", [container("c", "sleep 0.5; exit 1", harness.kind)], restartPolicy="Never"
        )
    )
    t0 = time.monotonic()
    await harness.wait_phase(pod, "Running", timeout=20)
    await harness.wait_phase(pod, "Failed", timeout=20)
    # Exit noticed through runtime events, not a resync timer (2 s in these tests).
    assert time.monotonic() - t0 < 0.5 + 1.9 + (2.0 if harness.kind == "docker" else 0.0)
    pending = [
        e
        for e in harness.store.outbox_pending()
        if e.kind == "pod_status" and e.body["ref"]["uid"] == pod["metadata"]["uid"]
    ]
    assert len(pending) == 1 and pending[0].body["status"]["phase"] == "Failed"  # latest wins


async def test_adopts_running_containers_after_agent_restart(harness: Harness):
    pod = harness.apply(make_pod("adopted", [container("c", "sleep 600", harness.kind)]))
    await harness.wait_phase(pod, "Running")
    before = harness.container_status(pod, "c")
    await harness.stop()  # the agent exits: SIGTERM stops the agent, not the pods
    await harness.start()  # ... and comes back
    await harness.wait_phase(pod, "Running")
    after = harness.container_status(pod, "c")
    assert after["containerID"] == before["containerID"]
    assert after["restartCount"] == 0
    assert after["state"]["running"]["startedAt"] == before["state"]["running"]["startedAt"]


async def test_recreated_empty_store_keeps_containers_until_resynced(harness: Harness, caplog):
    # A damaged store is moved aside and recreated empty: the node's running containers
    # must not be taken for orphans before the hub has resent its pods (an offline node
    # would lose them all; an online one restarted every pod).
    from edgeagent.runtime import Labels
    from edgeagent.store import Store

    kept = harness.apply(make_pod("kept", [container("c", "sleep 600", harness.kind)]))
    gone = harness.apply(
        make_pod(
            "gone", [container("c", "sleep 600", harness.kind)], terminationGracePeriodSeconds=1
        )
    )
    await harness.wait_phase(kept, "Running")
    await harness.wait_phase(gone, "Running")
    before = harness.container_status(kept, "c")
    await harness.stop()
    harness.store.close()
    damage_store(harness.settings.store_path)
    harness.store = Store.open(harness.settings.store_path, harness.settings.store)
    assert harness.store.recovered_from is not None and not harness.store.synced_before()

    async def containers(pod: dict) -> list:
        return await harness.runtime.list({Labels.POD_UID: pod["metadata"]["uid"]})

    with caplog.at_level(logging.WARNING, logger="edgeagent.pods.reconciler"):
        await harness.start()
        await eventually(
            lambda: "until the hub's first full sync" in caplog.text,
            timeout=20,
            what="orphan removal deferred",
        )
    assert await containers(gone) != [] and await containers(kept) != []
    harness.apply(kept)  # the hub's resync: 'kept' is resent, 'gone' is not; then sync_done
    harness.store.note_full_sync(1)
    assert harness.store.synced_before()
    await harness.wait_phase(kept, "Running")

    async def gone_removed() -> bool:
        return await containers(gone) == []

    await eventually(gone_removed, timeout=20, what="containers of the unassigned pod removed")
    after = harness.container_status(kept, "c")
    assert after["containerID"] == before["containerID"]
    assert after["restartCount"] == 0


async def test_pod_removed_from_store_is_torn_down(harness: Harness):
    pod = harness.apply(
        make_pod(
            "gone", [container("c", "sleep 600", harness.kind)], terminationGracePeriodSeconds=1
        )
    )
    await harness.wait_phase(pod, "Running")
    harness.store.apply_delete(pod["metadata"]["uid"])
    from edgeagent.runtime import Labels

    async def removed():
        return await harness.runtime.list({Labels.POD_UID: pod["metadata"]["uid"]}) == []

    await eventually(removed, timeout=20, what="containers removed")


async def test_image_pull_errors_show_in_status(podman, tmp_path: pathlib.Path):
    from tests.edgeagent.conftest import agent_settings, make_runtime_for

    settings = agent_settings(tmp_path / "state", "docker", podman)
    h = Harness(
        tmp_path / "state", make_runtime_for("docker", tmp_path / "state", podman), settings
    )
    await h.start()
    try:
        missing = {
            "name": "c",
            "image": "localhost:1/absent:1.0",
            "imagePullPolicy": "IfNotPresent",
            "command": ["sleep", "1"],
        }
        never = {**missing, "image": "localhost/absent:1.0", "imagePullPolicy": "Never"}
        pulled = h.apply(make_pod("pull", [missing], hostNetwork=True))
        not_pulled = h.apply(make_pod("never", [never], hostNetwork=True))
        seen: set[str] = set()

        def reasons():
            state = h.container_status(pulled, "c").get("state", {})
            seen.add(state.get("waiting", {}).get("reason", ""))
            return {"ErrImagePull", "ImagePullBackOff"} <= seen

        await eventually(
            reasons, timeout=30, interval=0.02, what="ErrImagePull then ImagePullBackOff"
        )
        print(seen)
        waiting = h.container_status(not_pulled, "c").get("state", {}).get("waiting", {})
        assert waiting.get("reason") == "ErrImageNeverPull", waiting
        assert "not present with pull policy of Never" in waiting["message"]
        for pod in (pulled, not_pulled):
            assert h.status(pod)["phase"] == "Pending"
            assert h.container_status(pod, "c")["restartCount"] == 0  # never a crash
        assert any(
            e["reason"] == "Failed" and "ErrImagePull" in e["message"] for e in h.events(pulled)
        )
    finally:
        await h.close()


async def _has(logs, text: str) -> bool:
    return text in await logs
