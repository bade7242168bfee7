"""The process runtime: each container is a child process, for machines with no engine.

A container is a directory ``<root>/<id>/`` holding ``state.json`` (its config, labels
and the pids of its processes), ``root/`` (its own working directory: volume mounts are
symlinks at their mount paths below it, e.g. mountPath ``/etc/app`` becomes
``root/etc/app``) and the files the supervisor writes. Nothing is isolated: the process
shares the host's file system, network and users; read-only mounts and resource limits
are not enforced (the reconciler says so in an Event).

Supervision. The command does not run directly under the agent. A tiny POSIX-shell
supervisor (the "shim", one per container, about 1 MiB) starts it in the background,
writes its pid to ``wpid``, ignores SIGHUP/SIGINT/SIGTERM/SIGQUIT, waits for it and writes
its exit status to ``exit`` (128+N when killed by signal N, as engines report). The shim
leads its own session, so the processes outlive the agent: stopping the agent leaves pods
running, as with kubelet. A restarted agent adopts them from ``state.json``: a pid counts
only if ``/proc/<pid>/stat`` shows the same start time (pids are reused) and the boot id
is unchanged (after a reboot nothing survives). Exits are noticed through a pidfd (Linux
5.3+; polled on older kernels) on the shim, for children and adopted processes alike, and
the exit code is read from ``exit`` — so it is known even for a process started by a
previous agent.

Because the command runs as a background job of a non-interactive shell, it starts with
SIGINT and SIGQUIT ignored (POSIX); the agent stops containers with SIGTERM and SIGKILL
only, like engines do.

Stats (:meth:`ProcessRuntime.container_stats`, for the metrics sampler): a container whose
command runs in a cgroup of its own (one that neither the agent nor another container is
in, e.g. made by the operator's service manager) is read from that cgroup; otherwise its
process tree is summed through psutil (imported then, not at start).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import pathlib
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from edgeagent.errors import (
    ContainerNotFoundError,
    ContainerRuntimeError,
    RuntimeUnavailableError,
)
from edgeagent.runtime.base import (
    ContainerConfig,
    ContainerEventCallback,
    ContainerInfo,
    ContainerRuntime,
    ContainerState,
    ExecResult,
    Labels,
    Mount,
    PortMapping,
    PullPolicy,
)
from edgeagent.settings import ProcessSettings

if TYPE_CHECKING:
    from edgeagent.runtime.stats import CgroupReader, ContainerStats

__all__ = ["ProcessRuntime"]

log = logging.getLogger(__name__)

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
EXEC_OUTPUT_LIMIT = 10 * 1024

SHIM = r"""d=$1; shift
"$@" &
w=$!
trap '' HUP INT TERM QUIT
echo "$w" > "$d/wpid.tmp" && mv -f "$d/wpid.tmp" "$d/wpid"
wait "$w"
rc=$?
echo "$rc" > "$d/exit.tmp" && mv -f "$d/exit.tmp" "$d/exit"
exit "$rc"
"""


def boot_id() -> str:
    """This boot's id (changes at every reboot)."""
    try:
        return pathlib.Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def proc_start_time(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot, or ``None`` if it is gone or a zombie."""
    try:
        data = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rest = data[data.rfind(")") + 2 :].split()
    if not rest or rest[0] == "Z":
        return None
    return int(rest[19])  # field 22 overall; fields after "(comm)" start at 3


@dataclass
class _Record:
    id: str
    name: str
    labels: dict[str, str]
    config: dict[str, Any]
    created_at: float
    boot_id: str
    started_at: float | None = None
    shim_pid: int | None = None
    shim_start: int | None = None
    wpid: int | None = None
    wpid_start: int | None = None
    killed: bool = False
    # not persisted
    dir: pathlib.Path = field(default=pathlib.Path("/"), repr=False)
    popen: subprocess.Popen | None = field(default=None, repr=False)
    exited: asyncio.Event = field(default_factory=asyncio.Event, repr=False)
    running: bool = False
    known_exit: int | None = None

    def persist(self) -> None:
        """Write ``state.json`` atomically."""
        data = {name: getattr(self, name) for name in _PERSISTED}
        tmp = self.dir / "state.json.tmp"
        tmp.write_text(json.dumps(data))
        os.replace(tmp, self.dir / "state.json")

    @property
    def root(self) -> pathlib.Path:
        return self.dir / "root"

    def exit_code(self) -> int | None:
        try:
            return int((self.dir / "exit").read_text().strip())
        except (OSError, ValueError):
            return self.known_exit

    def finished_at(self) -> float | None:
        try:
            return (self.dir / "exit").stat().st_mtime
        except OSError:
            return None


_PERSISTED = (
    "id",
    "name",
    "labels",
    "config",
    "created_at",
    "boot_id",
    "started_at",
    "shim_pid",
    "shim_start",
    "wpid",
    "wpid_start",
    "killed",
)


class ProcessRuntime(ContainerRuntime):
    """Containers as supervised child processes (see the module docstring).

    Args:
        root: directory for container records (``<state_dir>/runtime/process``).
        settings: process runtime settings.
        host_ip: reported as every container's IP (all pods use the host network).
    """

    kind = "process"
    has_images = False
    supports_sandbox = False

    def __init__(self, root: pathlib.Path, settings: ProcessSettings, host_ip: str = "") -> None:
        self._root = pathlib.Path(root)
        self._settings = settings
        self._host_ip = host_ip
        self._records: dict[str, _Record] = {}
        self._callbacks: list[ContainerEventCallback] = []
        self._boot_id = boot_id()
        self._watchers: dict[str, asyncio.Task] = {}
        self._connected = False
        self._cgroups: CgroupReader | None = None

    # --- lifecycle ----------------------------------------------------------------------

    async def connect(self) -> str:
        """Create the record directory and adopt the containers recorded there.

        Raises:
            RuntimeUnavailableError: the directory cannot be used or the shell is missing.
        """
        if self._connected:
            return self._describe()
        if not os.access(self._settings.shell, os.X_OK):
            raise RuntimeUnavailableError(f"process runtime: no shell at {self._settings.shell}")
        try:
            self._root.mkdir(parents=True, exist_ok=True, mode=0o700)
            entries = sorted(self._root.iterdir())
        except OSError as exc:
            raise RuntimeUnavailableError(f"process runtime: {self._root}: {exc}") from exc
        for d in entries:
            if d.is_dir():
                self._adopt(d)
        self._connected = True
        return self._describe()

    def _describe(self) -> str:
        running = sum(1 for r in self._records.values() if r.running)
        return f"process runtime at {self._root} ({running} running)"

    def _adopt(self, d: pathlib.Path) -> None:
        try:
            data = json.loads((d / "state.json").read_text())
            rec = _Record(**data)
        except FileNotFoundError:
            # Created and never recorded: an agent died inside create(). Such a directory
            # is removed once it is old enough not to be a create() in progress.
            with contextlib.suppress(OSError):
                if time.time() - d.stat().st_mtime > 60:
                    shutil.rmtree(d, ignore_errors=True)
                    log.info("process runtime: removed unfinished container record %s", d)
            return
        except (OSError, ValueError, TypeError) as exc:
            log.warning("process runtime: ignoring unreadable record %s: %s", d, exc)
            return
        rec.dir = d
        rec.exited.set()
        self._records[rec.id] = rec
        if rec.boot_id != self._boot_id or rec.shim_pid is None:
            return  # rebooted since, or never started
        if self._alive(rec.wpid, rec.wpid_start) or self._alive(rec.shim_pid, rec.shim_start):
            rec.running = True
            rec.exited.clear()
            self._watch_exit(rec)

    async def close(self) -> None:
        """Stop watching processes; they keep running (and are adopted next time)."""
        for task in list(self._watchers.values()):
            task.cancel()
        await asyncio.gather(*self._watchers.values(), return_exceptions=True)
        self._watchers.clear()
        for rec in self._records.values():
            if rec.popen is not None:
                # Do not leave a zombie if it already exited; otherwise it is reparented
                # to init when the agent exits.
                rec.popen.poll()

    async def ensure_image(self, image: str, policy: PullPolicy) -> None:
        """No-op: the process runtime runs commands, not images."""

    # --- containers ---------------------------------------------------------------------

    async def create(self, config: ContainerConfig) -> str:
        if not (config.command or config.args):
            raise ContainerRuntimeError(
                "the process runtime needs a command (it runs no images)", operation="create"
            )
        cid = uuid.uuid4().hex
        d = self._root / cid
        try:
            d.mkdir(mode=0o700)
            root = d / "root"
            root.mkdir()
            for mount in config.mounts:
                _link_mount(root, mount)
            if config.working_dir:
                _inside(root, config.working_dir).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            shutil.rmtree(d, ignore_errors=True)
            raise ContainerRuntimeError(f"create {config.name}: {exc}", operation="create") from exc
        rec = _Record(
            id=cid,
            name=config.name,
            labels=dict(config.labels),
            config=_config_to_json(config),
            created_at=time.time(),
            boot_id=self._boot_id,
            dir=d,
        )
        rec.exited.set()
        rec.persist()
        self._records[cid] = rec
        return cid

    async def start(self, container_id: str) -> None:
        rec = self._get(container_id)
        if rec.shim_pid is not None:
            raise ContainerRuntimeError(f"{rec.name} was already started", operation="start")
        config = _config_from_json(rec.config)
        cwd = _inside(rec.root, config.working_dir) if config.working_dir else rec.root
        env = {"PATH": DEFAULT_PATH, "HOME": str(rec.root)}
        if config.hostname:
            env["HOSTNAME"] = config.hostname
        env.update(config.env)
        argv = [*config.command, *config.args]
        exe = _which(argv[0], env.get("PATH", DEFAULT_PATH), cwd)
        if exe is None:
            raise ContainerRuntimeError(
                f'exec: "{argv[0]}": executable file not found in $PATH', operation="start"
            )
        log_path = self.log_path_for(rec)
        try:
            pathlib.Path(log_path).parent.mkdir(parents=True, exist_ok=True)
            log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o640)
        except OSError as exc:
            raise ContainerRuntimeError(
                f"start {rec.name}: log file: {exc}", operation="start"
            ) from exc
        try:
            # A plain fork/exec, not asyncio's subprocess: that would give each container a
            # child-watcher (a thread per child on Python < 3.12) and tie the shim to this
            # event loop, while the shim must outlive the agent. Exits are watched by pidfd.
            popen = subprocess.Popen(  # noqa: ASYNC220
                [self._settings.shell, "-c", SHIM, "edgefleet-shim", str(rec.dir), exe, *argv[1:]],
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log_fd,
                stderr=log_fd,
                start_new_session=True,
                close_fds=True,
            )
        except OSError as exc:
            raise ContainerRuntimeError(f"start {rec.name}: {exc}", operation="start") from exc
        finally:
            os.close(log_fd)
        rec.popen = popen
        rec.shim_pid = popen.pid
        rec.shim_start = proc_start_time(popen.pid)
        rec.started_at = time.time()
        rec.wpid = await self._read_wpid(rec)
        rec.wpid_start = proc_start_time(rec.wpid) if rec.wpid else None
        rec.running = True
        rec.exited.clear()
        rec.persist()
        self._watch_exit(rec)
        self._emit(rec)

    async def _read_wpid(self, rec: _Record) -> int | None:
        delay = 0.001
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            try:
                return int((rec.dir / "wpid").read_text().strip())
            except (OSError, ValueError):
                pass
            if rec.popen is not None and rec.popen.poll() is not None:
                with contextlib.suppress(OSError, ValueError):
                    return int((rec.dir / "wpid").read_text().strip())
                return None
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.05)
        return None

    async def stop(self, container_id: str, grace: float) -> None:
        rec = self._get(container_id)
        if not rec.running:
            return
        if rec.wpid and self._alive(rec.wpid, rec.wpid_start):
            with contextlib.suppress(ProcessLookupError):
                os.kill(rec.wpid, signal.SIGTERM)
        try:
            await asyncio.wait_for(rec.exited.wait(), timeout=max(grace, 0.0))
            return
        except asyncio.TimeoutError:
            pass
        self._kill_hard(rec)
        try:
            await asyncio.wait_for(rec.exited.wait(), timeout=10.0)
        except asyncio.TimeoutError as exc:
            raise ContainerRuntimeError(
                f"{rec.name} did not exit after SIGKILL", operation="stop"
            ) from exc

    def _kill_hard(self, rec: _Record) -> None:
        rec.killed = True
        if not (rec.dir / "exit").exists():
            # The shim dies with its process group and cannot record it: 128 + SIGKILL.
            with contextlib.suppress(OSError):
                (rec.dir / "exit").write_text("137\n")
        _kill_group(rec.shim_pid, rec.shim_start)
        if rec.wpid and self._alive(rec.wpid, rec.wpid_start):
            with contextlib.suppress(ProcessLookupError):
                os.kill(rec.wpid, signal.SIGKILL)

    async def remove(self, container_id: str) -> None:
        rec = self._records.get(container_id)
        if rec is None:
            return
        if rec.running:
            self._kill_hard(rec)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(rec.exited.wait(), timeout=10.0)
        elif rec.shim_pid is not None:
            # A start() cancelled after the fork (the agent stopping mid-start) leaves a
            # shim that was never marked running: end its processes all the same.
            _kill_group(rec.shim_pid, rec.shim_start)
        watcher = self._watchers.pop(container_id, None)
        if watcher is not None:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)
        if rec.popen is not None:
            rec.popen.poll()
        self._records.pop(container_id, None)
        await asyncio.to_thread(shutil.rmtree, rec.dir, True)
        self._emit(rec)

    async def list(self, labels: Mapping[str, str] | None = None) -> list[ContainerInfo]:
        wanted = dict(labels or {})
        return [
            self._info(rec)
            for rec in list(self._records.values())
            if all(rec.labels.get(k) == v for k, v in wanted.items())
        ]

    async def inspect(self, container_id: str) -> ContainerInfo:
        return self._info(self._get(container_id))

    def _info(self, rec: _Record) -> ContainerInfo:
        if rec.running:
            state = ContainerState.RUNNING
            exit_code = None
        elif rec.shim_pid is None:
            state = ContainerState.CREATED
            exit_code = None
        else:
            state = ContainerState.EXITED
            exit_code = rec.exit_code()
        return ContainerInfo(
            id=rec.id,
            name=rec.name,
            labels=dict(rec.labels),
            state=state,
            exit_code=exit_code,
            started_at=rec.started_at,
            finished_at=rec.finished_at() if state is ContainerState.EXITED else None,
            image=rec.config.get("image", ""),
            ip=self._host_ip,
        )

    async def exec(self, container_id: str, argv: list[str], timeout: float) -> ExecResult:
        rec = self._get(container_id)
        if not rec.running:
            raise ContainerRuntimeError(f"{rec.name} is not running", operation="exec")
        config = _config_from_json(rec.config)
        cwd = _inside(rec.root, config.working_dir) if config.working_dir else rec.root
        env = {"PATH": DEFAULT_PATH, "HOME": str(rec.root), **dict(config.env)}
        exe = _which(argv[0], env.get("PATH", DEFAULT_PATH), cwd) if argv else None
        if exe is None:
            raise ContainerRuntimeError(
                f'exec: "{argv[0] if argv else ""}": executable file not found', operation="exec"
            )
        try:
            proc = await asyncio.create_subprocess_exec(
                exe,
                *argv[1:],
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            raise ContainerRuntimeError(f"exec in {rec.name}: {exc}", operation="exec") from exc
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), timeout=timeout)
        except asyncio.TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
            raise TimeoutError(f"exec in {rec.name} timed out after {timeout}s") from None
        return ExecResult(exit_code=proc.returncode or 0, output=out[:EXEC_OUTPUT_LIMIT])

    def log_path(self, info: ContainerInfo) -> str:
        rec = self._records.get(info.id)
        return self.log_path_for(rec) if rec else ""

    @staticmethod
    def log_path_for(rec: _Record) -> str:
        return rec.config.get("log_path") or str(rec.dir / "container.log")

    async def container_stats(self) -> list[ContainerStats]:
        """CPU and working set of every running container (see the module docstring).

        From the container's own cgroup when it has one: CPU is ``cpuacct.usage`` (v1) or
        ``usage_usec`` (v2), memory the usage minus inactive file pages, as cAdvisor
        computes it. Otherwise from its command's process tree: CPU of every process plus
        what its reaped children used, memory the sum of RSS (pages shared between the
        processes count once per process). The shim is left out of both.

        A container whose process exits during the call is left out.
        """
        from edgeagent.errors import StatsError
        from edgeagent.runtime.stats import (
            CgroupReader,
            ContainerStats,
            ResourceUsage,
            process_trees_usage,
        )

        if self._cgroups is None:
            self._cgroups = CgroupReader()
        reader = self._cgroups
        running = [
            rec
            for rec in list(self._records.values())
            if rec.running and rec.wpid and self._alive(rec.wpid, rec.wpid_start)
        ]
        try:
            agent = reader.cgroup_of("self")
        except StatsError:
            agent = None  # no cgroup hierarchy we can read: process trees only
        where: dict[str, tuple[str, str]] = {}
        if agent is not None:
            for rec in running:
                with contextlib.suppress(StatsError):
                    where[rec.id] = reader.cgroup_of(rec.wpid)  # type: ignore[arg-type]
        shared: dict[tuple[str, str], int] = {}
        for path in where.values():
            shared[path] = shared.get(path, 0) + 1
        own = {
            rec.id
            for rec in running
            if (path := where.get(rec.id)) is not None
            and agent is not None
            and path[0] != agent[0]
            and path[1] != agent[1]
            and shared[path] == 1
        }
        usages: dict[str, ResourceUsage] = {}
        for rec in running:
            if rec.id in own:
                with contextlib.suppress(StatsError):  # exited meanwhile
                    usages[rec.id] = reader.read(*where[rec.id])
        trees = [rec for rec in running if rec.id not in own]
        by_pid = process_trees_usage([rec.wpid for rec in trees]) if trees else {}  # type: ignore[misc]
        for rec in trees:
            if rec.wpid in by_pid:
                usages[rec.id] = by_pid[rec.wpid]  # type: ignore[index]
        out = []
        for rec in running:
            usage = usages.get(rec.id)
            if usage is None:
                continue
            out.append(
                ContainerStats(
                    namespace=rec.labels.get(Labels.POD_NAMESPACE, ""),
                    pod=rec.labels.get(Labels.POD_NAME, ""),
                    container=rec.labels.get(Labels.CONTAINER_NAME, ""),
                    container_id=rec.id,
                    cpu_usage_core_ns=usage.cpu_usage_core_ns,
                    memory_working_set_bytes=usage.memory_working_set_bytes,
                )
            )
        return out

    async def watch(self, callback: ContainerEventCallback) -> None:
        self._callbacks.append(callback)
        try:
            await asyncio.Event().wait()  # events come from the exit watchers
        finally:
            self._callbacks.remove(callback)

    # --- internals ----------------------------------------------------------------------

    def _get(self, container_id: str) -> _Record:
        rec = self._records.get(container_id)
        if rec is None:
            raise ContainerNotFoundError(f"no container {container_id}", operation="inspect")
        return rec

    def _emit(self, rec: _Record) -> None:
        for cb in list(self._callbacks):
            try:
                cb(rec.id, dict(rec.labels))
            except Exception:
                log.exception("container event callback failed")

    @staticmethod
    def _alive(pid: int | None, start: int | None) -> bool:
        return bool(pid) and start is not None and proc_start_time(pid) == start  # type: ignore[arg-type]

    def _watch_exit(self, rec: _Record) -> None:
        task = asyncio.get_running_loop().create_task(
            self._wait_exit(rec), name=f"process-runtime-watch:{rec.name}"
        )
        self._watchers[rec.id] = task

    async def _wait_exit(self, rec: _Record) -> None:
        try:
            # The shim first: it exits right after recording the exit code. If it was
            # killed alone, the workload may live on: then wait for that.
            for pid, start in ((rec.shim_pid, rec.shim_start), (rec.wpid, rec.wpid_start)):
                if pid and self._alive(pid, start):
                    await _wait_pid(pid, start)
            if rec.popen is not None and rec.popen.poll() is not None and rec.exit_code() is None:
                # The shim could not write the file (disk full?); as its parent we still
                # know: it exits with the command's status.
                code = rec.popen.returncode
                rec.known_exit = code if code >= 0 else 128 - code
                with contextlib.suppress(OSError):
                    (rec.dir / "exit").write_text(f"{rec.known_exit}\n")
            if rec.exit_code() is None:
                log.warning("%s ended without recording an exit code", rec.name)
            # As an engine does when a container's main process exits, end whatever it
            # left behind (children of a shell script keep running otherwise).
            _kill_group(rec.shim_pid, rec.shim_start)
        finally:
            self._watchers.pop(rec.id, None)
        rec.running = False
        rec.exited.set()
        self._emit(rec)


def _kill_group(leader: int | None, start: int | None) -> None:
    """SIGKILL the process group a shim led, if it is still ours.

    A pid number stays reserved while any process of its group lives, so if something
    else now has the leader's pid, our group is empty and the number was reused: leave it.
    """
    if not leader:
        return
    now = proc_start_time(leader)
    if now is not None and now != start:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(leader, signal.SIGKILL)


async def _wait_pid(pid: int, start: int | None) -> None:
    """Return when ``pid`` (with that start time) has exited; works for non-children."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        fd = None
    if fd is None:  # kernel before 5.3: no pidfd, poll once a second
        while proc_start_time(pid) == start:  # noqa: ASYNC110
            await asyncio.sleep(1.0)
        return
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    try:
        if proc_start_time(pid) != start:
            return  # exited (or pid reused) between the check and pidfd_open
        loop.add_reader(fd, lambda: done.done() or done.set_result(None))
        try:
            await done
        finally:
            loop.remove_reader(fd)
    finally:
        os.close(fd)


def _inside(root: pathlib.Path, path: str) -> pathlib.Path:
    """``path`` (absolute in the container) as a path below ``root``; ``..`` is refused."""
    parts = [p for p in pathlib.PurePosixPath("/" + path).parts[1:] if p not in ("", ".")]
    if ".." in parts:
        raise ContainerRuntimeError(f"path {path!r} leaves the container root", operation="create")
    return root.joinpath(*parts)


def _link_mount(root: pathlib.Path, mount: Mount) -> None:
    target = _inside(root, mount.target)
    if target == root:
        raise ContainerRuntimeError("cannot mount over the container root", operation="create")
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.is_symlink() or target.exists():
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        else:
            target.unlink()
    target.symlink_to(mount.source)


def _which(cmd: str, path: str, cwd: pathlib.Path) -> str | None:
    if "/" in cmd:
        candidate = cmd if os.path.isabs(cmd) else str(cwd / cmd)
        return candidate if os.access(candidate, os.X_OK) else None
    return shutil.which(cmd, path=path)


def _config_to_json(config: ContainerConfig) -> dict[str, Any]:
    data = asdict(config)
    data["labels"] = dict(config.labels)
    return data


def _config_from_json(data: dict[str, Any]) -> ContainerConfig:
    return ContainerConfig(
        name=data["name"],
        image=data.get("image", ""),
        command=tuple(data.get("command", ())),
        args=tuple(data.get("args", ())),
        env=tuple((k, v) for k, v in data.get("env", ())),
        working_dir=data.get("working_dir", ""),
        mounts=tuple(Mount(**m) for m in data.get("mounts", ())),
        ports=tuple(PortMapping(**p) for p in data.get("ports", ())),
        labels=dict(data.get("labels", {})),
        host_network=data.get("host_network", True),
        sandbox_id=data.get("sandbox_id"),
        hostname=data.get("hostname", ""),
        cpu_millicores=data.get("cpu_millicores"),
        memory_bytes=data.get("memory_bytes"),
        log_path=data.get("log_path", ""),
    )
