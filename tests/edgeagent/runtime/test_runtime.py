"""The ContainerRuntime contract, against podman's Docker API and the process runtime."""

from __future__ import annotations

import asyncio
import pathlib
import time
import uuid

import pytest

from edgeagent.errors import ContainerNotFoundError, ContainerRuntimeError, ImagePullError
from edgeagent.runtime import (
    ContainerConfig,
    ContainerRuntime,
    ContainerState,
    Labels,
    Mount,
    PullPolicy,
    SandboxConfig,
)
from edgeagent.runtime.process import ProcessRuntime
from edgeagent.settings import ProcessSettings
from tests.edgeagent.conftest import docker_settings
from tests.waiting import eventually

pytestmark = pytest.mark.podman


@pytest.fixture(params=["process", "docker"])
async def runtime(request, tmp_path: pathlib.Path):
    if request.param == "docker":
        engine = request.getfixturevalue("podman")
        from edgeagent.runtime.docker import DockerRuntime

        rt: ContainerRuntime = DockerRuntime(docker_settings(engine), host_ip="127.0.0.1")
    else:
        rt = ProcessRuntime(tmp_path / "rt", ProcessSettings(), host_ip="127.0.0.1")
    await rt.connect()
    try:
        yield rt
    finally:
        for info in await rt.list():
            await rt.remove(info.id)
        await rt.close()


def _labels(**extra: str) -> dict[str, str]:
    return {Labels.MANAGED: "true", Labels.POD_UID: uuid.uuid4().hex, **extra}


def _config(rt: ContainerRuntime, script: str, **kw) -> ContainerConfig:
    kw.setdefault("labels", _labels())
    return ContainerConfig(
        name=f"t-{uuid.uuid4().hex[:10]}",
        image="localhost/busybox:latest",
        command=("/bin/sh", "-c"),
        args=(script,),
        host_network=True,
        **kw,
    )


async def test_run_inspect_exec_stop_remove(runtime: ContainerRuntime, tmp_path: pathlib.Path):
    vol = tmp_path / "vol"
    vol.mkdir()
    (vol / "greeting").write_text("hello\n")
    labels = _labels(**{Labels.CONTAINER_NAME: "main", Labels.RESTART_COUNT: "0"})
    # The process runtime has no file system isolation: mount paths are below its
    # working directory (see edgeagent.runtime.process).
    vol_path = "/etc/vol" if runtime.kind == "docker" else "etc/vol"
    config = _config(
        runtime,
        f"trap 'echo bye; exit 7' TERM; echo started $GREETING; cat {vol_path}/greeting; "
        "echo armed; while true; do sleep 0.1; done",
        env=(("GREETING", "hi"),),
        mounts=(Mount(str(vol), "/etc/vol", read_only=True),),
        labels=labels,
    )
    cid = await runtime.create(config)
    assert (await runtime.inspect(cid)).state is ContainerState.CREATED
    await runtime.start(cid)
    info = await runtime.inspect(cid)
    assert info.state is ContainerState.RUNNING
    assert info.started_at and abs(info.started_at - time.time()) < 60
    assert info.labels[Labels.CONTAINER_NAME] == "main"

    result = await runtime.exec(cid, ["cat", f"{vol_path}/greeting"], timeout=10)
    assert result.exit_code == 0 and result.output == b"hello\n"
    failing = await runtime.exec(cid, ["sh", "-c", "exit 3"], timeout=10)
    assert failing.exit_code == 3

    found = await runtime.list({Labels.POD_UID: labels[Labels.POD_UID]})
    assert [c.id for c in found] == [cid]
    assert await runtime.list({Labels.POD_UID: "nope"}) == []

    # the TERM trap is set before "armed" is printed: a stop before it would kill the shell
    await eventually(lambda: _logged(runtime, cid, "armed"), "the TERM trap installed", 30)
    t0 = time.monotonic()
    await runtime.stop(cid, grace=10)
    assert time.monotonic() - t0 < 8  # it honoured SIGTERM, no SIGKILL wait
    info = await runtime.inspect(cid)
    assert info.state is ContainerState.EXITED and info.exit_code == 7
    assert info.finished_at and info.finished_at >= info.started_at
    log_path = runtime.log_path(info)
    if log_path:
        text = await asyncio.to_thread(pathlib.Path(log_path).read_text)
        assert "started hi" in text and "hello" in text
    await runtime.remove(cid)
    with pytest.raises(ContainerNotFoundError):
        await runtime.inspect(cid)
    await runtime.remove(cid)  # missing is fine


async def test_stop_kills_after_grace(runtime: ContainerRuntime):
    cid = await runtime.create(
        _config(runtime, "trap '' TERM; echo armed; while true; do sleep 0.1; done")
    )
    await runtime.start(cid)
    await eventually(lambda: _logged(runtime, cid, "armed"), what="the trap installed")
    t0 = time.monotonic()
    await runtime.stop(cid, grace=1)
    elapsed = time.monotonic() - t0
    assert 0.9 <= elapsed < 15, elapsed
    info = await runtime.inspect(cid)
    assert info.state is ContainerState.EXITED and info.exit_code == 137


async def test_watch_reports_exit(runtime: ContainerRuntime):
    seen: list[str] = []
    canaries: list[str] = []
    watcher = asyncio.create_task(runtime.watch(lambda cid, labels: seen.append(cid)))
    try:
        await eventually(lambda: _stream_up(runtime, seen, canaries), "the event stream up")
        for canary in canaries:
            await runtime.remove(canary)
        cid = await runtime.create(_config(runtime, "sleep 0.5; exit 4"))
        await runtime.start(cid)

        async def exited():
            return (await runtime.inspect(cid)).state is ContainerState.EXITED

        await eventually(exited, what="container exit")
        await eventually(lambda: seen.count(cid) >= 2, what="start and exit events")
        assert (await runtime.inspect(cid)).exit_code == 4
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)


async def test_missing_command_fails_to_start(runtime: ContainerRuntime):
    config = ContainerConfig(
        name=f"t-{uuid.uuid4().hex[:10]}",
        image="localhost/busybox:latest",
        command=("/no/such/binary",),
        labels=_labels(),
        host_network=True,
    )
    with pytest.raises(ContainerRuntimeError):
        cid = await runtime.create(config)
        await runtime.start(cid)


async def test_image_policies(runtime: ContainerRuntime):
    if runtime.kind == "process":
        await runtime.ensure_image("anything:1", PullPolicy.NEVER)  # no images: no-op
        return
    await runtime.ensure_image("localhost/busybox:latest", PullPolicy.NEVER)
    await runtime.ensure_image("localhost/busybox:latest", PullPolicy.IF_NOT_PRESENT)
    with pytest.raises(ImagePullError) as never:
        await runtime.ensure_image("localhost/absent:1", PullPolicy.NEVER)
    assert never.value.reason == "ErrImageNeverPull"
    with pytest.raises(ImagePullError) as failed:
        await runtime.ensure_image("localhost:1/absent:1", PullPolicy.IF_NOT_PRESENT)
    assert failed.value.reason == "ErrImagePull"


async def test_docker_sandbox_shares_network(podman):
    from edgeagent.runtime.docker import DockerRuntime

    rt = DockerRuntime(docker_settings(podman))
    await rt.connect()
    try:
        labels = _labels(**{Labels.CONTAINER_TYPE: "sandbox"})
        sandbox = await rt.create_sandbox(
            SandboxConfig(name=f"sb-{uuid.uuid4().hex[:8]}", hostname="mypod", labels=labels)
        )
        sb_info = await rt.inspect(sandbox)
        assert sb_info.state is ContainerState.RUNNING and sb_info.ip.startswith("10.")
        server = await rt.create(
            ContainerConfig(
                name=f"srv-{uuid.uuid4().hex[:8]}",
                image="localhost/busybox:latest",
                command=("httpd", "-f", "-p", "8080", "-h", "/etc"),
                labels=labels,
                sandbox_id=sandbox,
                cpu_millicores=200,
                memory_bytes=64 << 20,
            )
        )
        await rt.start(server)
        client = await rt.create(
            ContainerConfig(
                name=f"cli-{uuid.uuid4().hex[:8]}",
                image="localhost/busybox:latest",
                command=("sleep", "100"),
                labels=labels,
                sandbox_id=sandbox,
            )
        )
        await rt.start(client)

        async def served():
            r = await rt.exec(client, ["wget", "-q", "-O", "-", "http://127.0.0.1:8080/passwd"], 5)
            return r.exit_code == 0 and b"root:" in r.output

        await eventually(served, timeout=20, interval=0.2, what="localhost shared in the pod")
        assert (await rt.inspect(server)).ip == sb_info.ip
    finally:
        for info in await rt.list():
            await rt.remove(info.id)
        await rt.close()


async def test_process_runtime_adopts_after_restart(tmp_path: pathlib.Path):
    rt = ProcessRuntime(tmp_path / "rt", ProcessSettings())
    await rt.connect()
    labels = _labels(**{Labels.RESTART_COUNT: "3"})
    cid = await rt.create(_config(rt, "sleep 0.8; exit 5", labels=labels))
    await rt.start(cid)
    await rt.close()  # the agent goes away; the process does not

    again = ProcessRuntime(tmp_path / "rt", ProcessSettings())
    await again.connect()
    try:
        info = await again.inspect(cid)
        assert info.state is ContainerState.RUNNING
        assert info.labels[Labels.RESTART_COUNT] == "3"

        async def exited():
            return (await again.inspect(cid)).state is ContainerState.EXITED

        await eventually(exited, what="adopted process to exit")
        # The exit code of a process this agent life did not spawn is still known.
        assert (await again.inspect(cid)).exit_code == 5
    finally:
        for info in await again.list():
            await again.remove(info.id)
        await again.close()


async def test_process_runtime_ignores_reused_pid(tmp_path: pathlib.Path):
    rt = ProcessRuntime(tmp_path / "rt", ProcessSettings())
    await rt.connect()
    cid = await rt.create(_config(rt, "sleep 100"))
    await rt.start(cid)
    await rt.close()
    # Pretend the recorded processes died and their pids went to someone else.
    state = tmp_path / "rt" / cid / "state.json"
    import json

    data = json.loads(state.read_text())
    data["shim_start"] = data["wpid_start"] = 1
    state.write_text(json.dumps(data))
    again = ProcessRuntime(tmp_path / "rt", ProcessSettings())
    await again.connect()
    try:
        info = await again.inspect(cid)
        assert info.state is ContainerState.EXITED and info.exit_code is None
    finally:
        import os
        import signal

        os.killpg(data["shim_pid"], signal.SIGKILL)
        for info in await again.list():
            await again.remove(info.id)
        await again.close()


async def _logged(runtime: ContainerRuntime, cid: str, text: str) -> bool:
    """Whether the container's log has ``text`` (podman's k8s-file lines end with it)."""
    path = runtime.log_path(await runtime.inspect(cid))
    try:
        return text in await asyncio.to_thread(pathlib.Path(path).read_text)
    except FileNotFoundError:
        return False


async def _stream_up(runtime: ContainerRuntime, seen: list[str], canaries: list[str]) -> bool:
    """True once the watcher reported one of ``canaries`` (the event stream is up); else
    run one more short container (one that ran before the stream was up is never seen)."""
    if any(c in seen for c in canaries):
        return True
    canaries.append(await runtime.create(_config(runtime, "exit 0")))
    await runtime.start(canaries[-1])
    return False
