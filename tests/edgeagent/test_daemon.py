"""``edgeagent run`` as a process: systemd notify, SIGTERM, offline reboot recovery,
``edgeagent status``."""

from __future__ import annotations

import datetime
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time

import pytest

from edgeagent.runtime import ContainerState, Labels
from edgeagent.store import Store
from tests.edgeagent.conftest import (
    PodmanEngine,
    Ref,
    container,
    docker_settings,
    make_pod,
    make_runtime_for,
)
from tests.waiting import eventually, eventually_sync

pytestmark = pytest.mark.podman


def agent_args(state_dir: pathlib.Path, kind: str, engine: PodmanEngine | None) -> list[str]:
    args = [
        sys.executable,
        "-m",
        "edgeagent",
        "run",
        "--state-dir",
        str(state_dir),
        "--node-name",
        "edge-test",
        "--runtime",
        kind,
        "--set",
        "store.commit_delay=0.1",
        "--set",
        "node_ip=127.0.0.1",
        "--set",
        "pods.backoff_initial=0.4",
        "--set",
        "pods.backoff_max=3",
        "--config",
        str(state_dir.parent / "config.yaml"),
    ]
    if engine is not None:
        ds = docker_settings(engine)
        args += [
            "--docker-url",
            ds.url,
            "--set",
            f"runtime.docker.network={ds.network}",
            "--set",
            f"runtime.docker.sandbox_image={ds.sandbox_image}",
            "--set",
            "runtime.docker.sandbox_command=sleep,2147483647",
        ]
    return args


def all_reported_running(state: pathlib.Path, uids: set[str]) -> bool:
    store = Store.open_readonly(state / "store.db")
    try:
        return all((store.pod_status(u) or {}).get("phase") == "Running" for u in uids)
    finally:
        store.close()


def recovery_bound() -> float:
    """The 5 s goal, stretched when the machine is overloaded (this suite shares two cores
    with other builds: at a load average of 7 everything, podman included, runs ~3x
    slower). Capped at 15 s; the benchmark reports the real figure."""
    load = os.getloadavg()[0] / (os.cpu_count() or 1)
    return min(15.0, 5.0 * max(1.0, load))


def seed(state_dir: pathlib.Path, pods: list[dict]) -> None:
    """Put pods into the store as the uplink would have before the node went offline."""
    store = Store.open(state_dir / "store.db")
    try:
        for pod in pods:
            meta = pod["metadata"]
            store.apply_upsert(Ref("Pod", meta["namespace"], meta["name"], meta["uid"]), "1", pod)
    finally:
        store.close()


def start_agent(args: list[str], env: dict, **kw) -> subprocess.Popen:
    (pathlib.Path(args[args.index("--config") + 1])).write_text("log_level: INFO\n")
    return subprocess.Popen(
        args,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=kw.pop("stderr", subprocess.DEVNULL),
        cwd=pathlib.Path(__file__).parents[2],
        **kw,
    )


def stop_agent(proc: subprocess.Popen) -> int:
    proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout=30)


async def running_pods(runtime, uids: set[str]) -> set[str]:
    return {
        i.labels[Labels.POD_UID]
        for i in await runtime.list()
        if i.state is ContainerState.RUNNING
        and i.labels.get(Labels.CONTAINER_TYPE) == "app"
        and i.labels.get(Labels.POD_UID) in uids
    }


async def running_now(kind: str, state: pathlib.Path, engine, uids: set[str]) -> set[str]:
    """Pods with a running app container, seen from outside the agent (a fresh runtime
    instance: the process runtime reads its records at connect). For the engine, one list
    call, so that watching does not load podman more than the agent does."""
    if kind == "docker":
        import aiodocker

        docker = aiodocker.Docker(url=engine.url, api_version="v1.40")
        try:
            items = await docker.containers.list(
                all=True, filters={"label": [f"{Labels.CONTAINER_TYPE}=app"]}
            )
            return {
                c["Labels"][Labels.POD_UID]
                for c in items
                if c["State"] == "running" and c["Labels"].get(Labels.POD_UID) in uids
            }
        finally:
            await docker.close()
    runtime = make_runtime_for(kind, state, engine)
    await runtime.connect()
    try:
        return await running_pods(runtime, uids)
    finally:
        await runtime.close()


async def remove_everything(kind: str, state: pathlib.Path, engine) -> None:
    runtime = make_runtime_for(kind, state, engine)
    await runtime.connect()
    try:
        for info in sorted(
            await runtime.list(), key=lambda i: i.labels.get(Labels.CONTAINER_TYPE) == "sandbox"
        ):
            await runtime.remove(info.id)
    finally:
        await runtime.close()


async def test_systemd_notify_and_sigterm_leaves_pods_running(
    tmp_path: pathlib.Path, python_env: dict
):
    state = tmp_path / "state"
    pod = make_pod("web", [container("c", "sleep 600", "process")])
    seed(state, [pod])
    sock_path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(sock_path))
    sock.settimeout(0.2)
    env = {**python_env, "NOTIFY_SOCKET": str(sock_path), "WATCHDOG_USEC": "600000"}
    proc = start_agent(agent_args(state, "process", None), env)
    messages: list[str] = []
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and sum("WATCHDOG=1" in m for m in messages) < 3:
            try:
                messages.append(sock.recv(4096).decode())
            except TimeoutError:
                assert proc.poll() is None, "agent exited early"
        ready = [m for m in messages if "READY=1" in m]
        assert len(ready) == 1, messages
        status = [line for line in ready[0].splitlines() if line.startswith("STATUS=")]
        assert len(status) == 1 and "pod" in status[0] and "\n" not in status[0]
        assert sum("WATCHDOG=1" in m for m in messages) >= 3  # pinged from the main loop
        assert (
            messages.index(ready[0]) < [i for i, m in enumerate(messages) if "WATCHDOG=1" in m][-1]
        )
        # the pod runs; SIGTERM stops the agent, not the pod
        uid = pod["metadata"]["uid"]
        await eventually(lambda: running_now("process", state, None, {uid}), what="pod running")
        assert stop_agent(proc) == 0
        while True:
            try:
                messages.append(sock.recv(4096).decode())
            except TimeoutError:
                break
        assert any("STOPPING=1" in m for m in messages)
        assert await running_now("process", state, None, {uid}) == {uid}
        await remove_everything("process", state, None)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        sock.close()


@pytest.mark.parametrize("kind", ["process", "docker"])
async def test_offline_reboot_recovery_within_5s(
    kind: str, tmp_path: pathlib.Path, python_env: dict, request
):
    engine = request.getfixturevalue("podman") if kind == "docker" else None
    state = tmp_path / "state"
    # On podman the pods use the host network: a bridge-network sandbox costs podman
    # ~0.5 s of netavark set-up each, which would make this test slow rather than the
    # agent (the benchmark reports the mixed-network figure).
    pods = [
        make_pod(f"app-{i}", [container("c", "sleep 600", kind)], hostNetwork=kind == "docker")
        for i in range(10)
    ]
    uids = {p["metadata"]["uid"] for p in pods}
    seed(state, pods)
    args = agent_args(state, kind, engine)
    proc = start_agent(args, python_env)
    try:

        async def first_run() -> bool:
            return proc.poll() is not None or await running_now(kind, state, engine, uids) == uids

        await eventually(first_run, timeout=60, what="10 pods running the first time")
        assert proc.poll() is None
        await eventually(
            lambda: all_reported_running(state, uids),
            timeout=20,
            what="the agent reported them Running",
        )
        assert stop_agent(proc) == 0
        # "Reboot": every container and process of the agent is gone.
        await remove_everything(kind, state, engine)
        assert await running_now(kind, state, engine, set(uids)) == set()

        t0 = time.monotonic()
        proc = start_agent(args, python_env)  # no hub configured: offline

        async def all_running() -> bool:
            return await running_now(kind, state, engine, uids) == uids

        await eventually(all_running, timeout=30, interval=0.1, what="all 10 pods running again")
        elapsed = time.monotonic() - t0
        bound = recovery_bound()
        print(f"offline recovery of 10 pods ({kind}): {elapsed:.2f}s (bound {bound:.1f}s)")
        assert elapsed <= bound, (elapsed, os.getloadavg())
        # restart counts carried on from the stored status
        store = Store.open_readonly(state / "store.db")
        try:
            await eventually(
                lambda: all(
                    (store.pod_status(u) or {}).get("phase") == "Running"
                    and store.pod_status(u)["containerStatuses"][0]["restartCount"] == 1
                    for u in uids
                ),
                timeout=10,
                what="statuses Running with restartCount 1: "
                + str(
                    [
                        (
                            (store.pod_status(u) or {}).get("phase"),
                            [
                                (c["restartCount"], c["state"])
                                for c in (store.pod_status(u) or {}).get("containerStatuses") or []
                            ],
                        )
                        for u in uids
                    ]
                ),
            )
        finally:
            store.close()
    finally:
        if proc.poll() is None:
            stop_agent(proc)
        await remove_everything(kind, state, engine)


def _self_signed(path: pathlib.Path, days: int) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "system:node:edge-test")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=days))
        .sign(key, hashes.SHA256())
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def test_status_command_works_offline(tmp_path: pathlib.Path, python_env: dict):
    state = tmp_path / "state"
    running = make_pod("web", [container("c", "sleep 600", "process")])
    crashing = make_pod("worker", [container("c", "exit 1", "process")])
    seed(state, [running, crashing])
    store = Store.open(state / "store.db")
    store.set_state("node.name", "edge-test")
    store.record_pod_status(
        Ref("Pod", "default", "web", running["metadata"]["uid"]),
        {
            "phase": "Running",
            "containerStatuses": [
                {"name": "c", "ready": True, "restartCount": 0, "state": {"running": {}}}
            ],
        },
        1.0,
    )
    store.record_pod_status(
        Ref("Pod", "default", "worker", crashing["metadata"]["uid"]),
        {
            "phase": "Running",
            "containerStatuses": [
                {
                    "name": "c",
                    "ready": False,
                    "restartCount": 4,
                    "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                }
            ],
        },
        1.0,
    )
    store.set_state("hub.session", {"state": "disconnected", "transport": "quic"})
    store.close()
    _self_signed(state / "pki" / "node.crt", days=30)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "edgeagent",
            "status",
            "--state-dir",
            str(state),
            "--config",
            str(tmp_path / "none.yaml"),
        ],
        capture_output=True,
        text=True,
        env=python_env,
        cwd=pathlib.Path(__file__).parents[2],
    )
    assert out.returncode == 2 and "expected a readable YAML file" in out.stderr  # given, missing
    out = subprocess.run(
        [sys.executable, "-m", "edgeagent", "status", "--state-dir", str(state)],
        capture_output=True,
        text=True,
        env=python_env,
        cwd=pathlib.Path(__file__).parents[2],
        check=True,
    ).stdout
    assert "node:        edge-test" in out
    assert "hub:         disconnected over quic" in out
    assert "days left" in out and ("29." in out or "30.0" in out)
    assert "outbox:      2 message(s)" in out
    lines = {
        line.split()[1]: line.split() for line in out.splitlines() if line.startswith("  default")
    }
    assert lines["web"][2:] == ["1/1", "Running", "0"]
    assert lines["worker"][2:] == ["0/1", "CrashLoopBackOff", "4"]


def test_bad_settings_exit_2(tmp_path: pathlib.Path, python_env: dict):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("store:\n  commit_delay: soon\n")
    out = subprocess.run(
        [sys.executable, "-m", "edgeagent", "run", "--config", str(cfg)],
        capture_output=True,
        text=True,
        env=python_env,
        cwd=pathlib.Path(__file__).parents[2],
    )
    assert out.returncode == 2 and "store.commit_delay" in out.stderr


def test_second_agent_on_the_same_state_dir_exits_1(tmp_path: pathlib.Path, python_env: dict):
    state = tmp_path / "state"
    first = start_agent(agent_args(state, "process", None), python_env)
    try:
        lock = state / "store.db.lock"
        wait = eventually_sync(lambda: _locked(lock, first.pid), "the agent holding its flock", 20)
        second = subprocess.run(
            agent_args(state, "process", None),
            capture_output=True,
            text=True,
            env=python_env,
            timeout=30,
            cwd=pathlib.Path(__file__).parents[2],
        )
        assert second.returncode == 1 and "another agent" in second.stderr, (wait, second.stderr)
    finally:
        stop_agent(first)


def _locked(path: pathlib.Path, pid: int) -> bool:
    """Whether process ``pid`` holds the flock on ``path``, as /proc/locks shows it
    (looking does not touch the lock, so the agent's own attempt is never disturbed)."""
    try:
        inode = path.stat().st_ino
    except FileNotFoundError:
        return False
    for line in pathlib.Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 00:2a:5678 0 EOF"
        if "FLOCK" in fields and str(pid) in fields:
            if fields[fields.index(str(pid)) + 1].endswith(f":{inode}"):
                return True
    return False


def test_waits_for_an_engine_that_is_not_up_without_ready(tmp_path: pathlib.Path, python_env: dict):
    """At boot the engine may come up after the agent: no READY=1 until it answers."""
    sock_path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(sock_path))
    sock.settimeout(0.2)
    (tmp_path / "c.yaml").write_text("runtime:\n  connect_retry: 0.2\n")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "edgeagent",
            "run",
            "--state-dir",
            str(tmp_path / "state"),
            "--runtime",
            "docker",
            "--docker-url",
            f"unix://{tmp_path}/no-engine.sock",
            "--config",
            str(tmp_path / "c.yaml"),
        ],
        env={**python_env, "NOTIFY_SOCKET": str(sock_path)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=pathlib.Path(__file__).parents[2],
    )
    messages: list[str] = []
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and sum("waiting" in m for m in messages) < 2:
            try:
                messages.append(sock.recv(4096).decode())
            except TimeoutError:
                assert proc.poll() is None, proc.stderr.read()
        assert sum("STATUS=waiting for the container runtime" in m for m in messages) >= 2
        assert not any("READY=1" in m for m in messages)
        assert stop_agent(proc) == 0
        assert "unreachable" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        sock.close()
