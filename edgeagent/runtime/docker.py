"""The Docker Engine API runtime, through aiodocker.

Works with Docker, Moby, balena-engine and podman's Docker-compatible service (tested
against podman). Pods that do not use the host network get a sandbox container holding
their network namespace (kubelet's "pause" container); their containers join it with
``NetworkMode: container:<sandbox>``, share ``localhost`` and the sandbox's IP, and the
pod's host ports are published on the sandbox.

Not shared with the sandbox: the IPC and UTS namespaces (Docker only shares IPC with a
"shareable" container and cannot share UTS), so ``hostname`` applies to the sandbox.

Inspections are cached per container and dropped on every engine event for it, so an idle
agent costs the engine one list call per pod per resync period.

Container stats (:meth:`DockerRuntime.container_stats`, for the metrics sampler) come from
the engine's one-shot stats endpoint, one call per running container, a few at a time.
What engines answer differs: Docker waits for a second reading before it answers
``stream=false`` (about 1 s; API 1.41 adds ``one-shot``, which v1.40 ignores) and gives
``memory_stats.stats`` with the inactive file pages to subtract; podman 4 answers at once,
has no ``memory_stats.stats`` and already reports the working set as ``usage``, and leaves
``precpu_stats`` empty. Only cumulative CPU and the working set are used, so both work.

This module is imported only when ``runtime.kind`` is ``docker`` (aiodocker and aiohttp
cost about 14 MiB).
"""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import math
import re
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import aiodocker
import aiohttp

from edgeagent.errors import (
    ContainerNotFoundError,
    ContainerRuntimeError,
    ImagePullError,
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
    PortMapping,
    PullPolicy,
    SandboxConfig,
)
from edgeagent.settings import DockerSettings

if TYPE_CHECKING:
    from edgeagent.runtime.stats import ContainerStats

__all__ = ["DockerRuntime"]

log = logging.getLogger(__name__)

EXEC_OUTPUT_LIMIT = 10 * 1024
IMAGE_PRESENT_TTL = 60.0
"""Seconds an image seen present is not inspected again before a container start."""
_STATES = {
    "created": ContainerState.CREATED,
    "configured": ContainerState.CREATED,  # podman
    "initialized": ContainerState.CREATED,  # podman
    "running": ContainerState.RUNNING,
    "paused": ContainerState.RUNNING,
    "restarting": ContainerState.RUNNING,
    "exited": ContainerState.EXITED,
    "stopped": ContainerState.EXITED,  # podman
    "dead": ContainerState.EXITED,
    "removing": ContainerState.EXITED,
}
_EVENT_ACTIONS = {"start", "die", "destroy", "remove", "oom", "kill", "stop", "create"}
STATS_CONCURRENCY = 4
"""Stats calls in flight at once: Docker takes about a second per call, so 40 containers
take ~10 s, inside the 15 s sampling interval, without a burst of 40 requests."""


def parse_time(text: str | None) -> float | None:
    """RFC 3339 with up to nanoseconds (``2024-05-01T10:00:00.123456789Z``) → epoch seconds;
    ``None`` for Go's zero time or garbage."""
    if not text or text.startswith("0001-01-01"):
        return None
    m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)?$", text)
    if not m:
        return None
    base, frac, tz = m.groups()
    dt = datetime.datetime.fromisoformat(base)
    offset = datetime.timezone.utc
    if tz and tz != "Z":
        sign = 1 if tz[0] == "+" else -1
        hours, minutes = int(tz[1:3]), int(tz[4:6])
        offset = datetime.timezone(sign * datetime.timedelta(hours=hours, minutes=minutes))
    ts = dt.replace(tzinfo=offset).timestamp()
    if frac:
        ts += float("0." + frac)
    return ts


def _port_key(p: PortMapping) -> str:
    return f"{p.container_port}/{p.protocol.lower()}"


class DockerRuntime(ContainerRuntime):
    """Containers through the Docker Engine API.

    Args:
        settings: engine URL, sandbox image, timeouts.
        host_ip: reported as the IP of host-network containers.
    """

    kind = "docker"
    supports_sandbox = True

    def __init__(self, settings: DockerSettings, host_ip: str = "") -> None:
        self._settings = settings
        self._host_ip = host_ip
        self._docker: aiodocker.Docker | None = None
        self._cache: dict[str, ContainerInfo] = {}
        self._log_paths: dict[str, str] = {}
        self._events_live = False
        self._first_sandbox = asyncio.Lock()
        self._network_ready = False
        self._present: dict[str, float] = {}

    # --- lifecycle ----------------------------------------------------------------------

    async def connect(self) -> str:
        if self._docker is None:
            try:
                self._docker = aiodocker.Docker(
                    url=self._settings.url,
                    timeout=aiohttp.ClientTimeout(total=self._settings.api_timeout),
                    api_version=self._settings.api_version,
                )
            except (ValueError, OSError, aiodocker.DockerError) as exc:
                raise RuntimeUnavailableError(
                    f"docker runtime: bad engine URL {self._settings.url}: {exc}",
                    operation="connect",
                ) from exc
        try:
            # A cheap call proves the engine answers (``/version`` is slow on podman).
            await self._docker.containers.list(limit=1)
        except (aiodocker.DockerError, aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
            raise RuntimeUnavailableError(
                f"container engine at {self._settings.url} is unreachable: {exc}",
                operation="connect",
            ) from exc
        return f"Docker Engine API {self._settings.api_version} at {self._settings.url}"

    async def close(self) -> None:
        if self._docker is not None:
            docker, self._docker = self._docker, None
            await docker.close()

    @property
    def _api(self) -> aiodocker.Docker:
        if self._docker is None:
            raise RuntimeUnavailableError("docker runtime is not connected", operation="connect")
        return self._docker

    def container_handle(self, container_id: str) -> Any:
        """aiodocker's handle on one container (no request is made), for the day-2
        operations in ``edgeagent.runtime.docker_day2`` (logs, exec).

        Raises:
            RuntimeUnavailableError: not connected.
        """
        return self._api.containers.container(container_id)

    # --- images -------------------------------------------------------------------------

    async def _image_present(self, image: str) -> bool:
        try:
            await self._api.images.inspect(image)
            return True
        except aiodocker.DockerError as exc:
            if exc.status == 404:
                return False
            raise self.engine_error(exc, "inspect image") from exc
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
            raise self.engine_error(exc, "inspect image") from exc

    async def ensure_image(self, image: str, policy: PullPolicy) -> None:
        policy = PullPolicy(policy)
        if policy is not PullPolicy.ALWAYS:
            # Seen present recently: skip the engine round trip (start-up with many pods).
            # An image removed meanwhile makes create fail, and the next start checks again.
            seen = self._present.get(image)
            if seen is not None and time.monotonic() - seen < IMAGE_PRESENT_TTL:
                return
            if await self._image_present(image):
                self._present[image] = time.monotonic()
                return
        if policy is PullPolicy.NEVER:
            raise ImagePullError(
                f'Container image "{image}" is not present with pull policy of Never',
                image=image,
                reason="ErrImageNeverPull",
            )
        try:
            await self._api.images.pull(image, timeout=float(self._settings.pull_timeout))
        except (aiodocker.DockerError, aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
            text = getattr(exc, "message", "") or str(exc) or type(exc).__name__
            raise ImagePullError(
                f'failed to pull image "{image}": {text}', image=image, reason="ErrImagePull"
            ) from exc

    # --- containers ---------------------------------------------------------------------

    async def create_sandbox(self, config: SandboxConfig) -> str:
        await self.ensure_image(self._settings.sandbox_image, PullPolicy.IF_NOT_PRESENT)
        body: dict[str, Any] = {
            "Image": self._settings.sandbox_image,
            "Hostname": config.hostname[:63],
            "Labels": dict(config.labels),
            "HostConfig": {
                "NetworkMode": self._settings.network,
                "RestartPolicy": {"Name": "no"},
            },
        }
        if self._settings.sandbox_command:
            body["Entrypoint"] = list(self._settings.sandbox_command)
            body["Cmd"] = []
        published = [p for p in config.ports if p.host_port]
        if config.ports:
            body["ExposedPorts"] = {_port_key(p): {} for p in config.ports}
        if published:
            bindings: dict[str, list[dict[str, str]]] = {}
            for p in published:
                bindings.setdefault(_port_key(p), []).append(
                    {"HostIp": p.host_ip, "HostPort": str(p.host_port)}
                )
            body["HostConfig"]["PortBindings"] = bindings
        # The first sandbox on an idle engine sets up the bridge network; podman's netavark
        # then serialises concurrent set-ups badly (10 at once took 8-10 s here, 1 then 9
        # took 2.2 s). So the first one goes alone.
        if not self._network_ready:
            async with self._first_sandbox:
                if not self._network_ready:
                    cid = await self._create_and_start(config.name, body)
                    self._network_ready = True
                    return cid
        return await self._create_and_start(config.name, body)

    async def _create_and_start(self, name: str, body: dict[str, Any]) -> str:
        cid = await self._create(name, body)
        try:
            await self.start(cid)
        except ContainerRuntimeError:
            await self.remove(cid)
            raise
        return cid

    async def create(self, config: ContainerConfig) -> str:
        host: dict[str, Any] = {"RestartPolicy": {"Name": "no"}}
        body: dict[str, Any] = {
            "Image": config.image,
            "Labels": dict(config.labels),
            "Env": [f"{k}={v}" for k, v in config.env],
            "HostConfig": host,
        }
        if config.command:
            body["Entrypoint"] = list(config.command)
            body["Cmd"] = list(config.args)  # Kubernetes: command without args drops CMD
        elif config.args:
            body["Cmd"] = list(config.args)
        if config.working_dir:
            body["WorkingDir"] = config.working_dir
        if config.host_network:
            host["NetworkMode"] = "host"
        elif config.sandbox_id:
            host["NetworkMode"] = f"container:{config.sandbox_id}"
        else:
            host["NetworkMode"] = self._settings.network
            if config.hostname:
                body["Hostname"] = config.hostname[:63]
        if config.mounts:
            host["Mounts"] = [
                {"Type": "bind", "Source": m.source, "Target": m.target, "ReadOnly": m.read_only}
                for m in config.mounts
            ]
        if config.cpu_millicores:
            host["NanoCpus"] = config.cpu_millicores * 1_000_000
        if config.memory_bytes:
            host["Memory"] = config.memory_bytes
            host["MemorySwap"] = config.memory_bytes  # no swap beyond the limit, as kubelet
        return await self._create(config.name, body)

    async def _create(self, name: str, body: dict[str, Any]) -> str:
        try:
            container = await self._api.containers.create(config=body, name=name)
        except (aiodocker.DockerError, aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
            self._present.pop(body.get("Image", ""), None)
            raise self.engine_error(exc, "create") from exc
        return container.id

    async def start(self, container_id: str) -> None:
        self._cache.pop(container_id, None)
        try:
            await self._api.containers.container(container_id).start()
        except (aiodocker.DockerError, aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
            raise self.engine_error(exc, "start") from exc
        finally:
            self._cache.pop(container_id, None)

    async def stop(self, container_id: str, grace: float) -> None:
        self._cache.pop(container_id, None)
        seconds = max(0, math.ceil(grace))  # the API takes whole seconds
        try:
            await self._api.containers.container(container_id).stop(
                t=seconds, timeout=seconds + self._settings.api_timeout
            )
        except aiodocker.DockerError as exc:
            if exc.status == 304:  # already stopped
                return
            raise self.engine_error(exc, "stop") from exc
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
            raise self.engine_error(exc, "stop") from exc
        finally:
            self._cache.pop(container_id, None)

    async def remove(self, container_id: str) -> None:
        self._cache.pop(container_id, None)
        self._log_paths.pop(container_id, None)
        try:
            await self._api.containers.container(container_id).delete(force=True, v=True)
        except aiodocker.DockerError as exc:
            text = str(exc.message).lower()
            if exc.status == 404 or "no such container" in text or "in progress" in text:
                return  # gone, or someone else is removing it
            if "dependent containers" in exc.message:
                # podman refuses to remove a sandbox while containers use its network
                # namespace (Docker does not): remove the pod's other containers first.
                await self._remove_dependents(container_id)
                return await self.remove(container_id)
            raise self.engine_error(exc, "remove") from exc
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
            raise self.engine_error(exc, "remove") from exc

    async def _remove_dependents(self, sandbox_id: str) -> None:
        sandbox = await self.inspect(sandbox_id)
        uid = sandbox.labels.get(Labels.POD_UID)
        if not uid:
            raise ContainerRuntimeError(
                f"remove: {sandbox_id[:12]} has dependents and no pod label", operation="remove"
            )
        for info in await self.list({Labels.POD_UID: uid}):
            if info.id != sandbox_id:
                await self.remove(info.id)

    async def list(self, labels: Mapping[str, str] | None = None) -> list[ContainerInfo]:
        filters = [f"{Labels.MANAGED}=true"] + [f"{k}={v}" for k, v in (labels or {}).items()]
        try:
            items = await self._api.containers.list(all=True, filters={"label": filters})
        except (aiodocker.DockerError, aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
            raise self.engine_error(exc, "list") from exc
        out = []
        for item in items:
            try:
                out.append(await self.inspect(item.id))
            except ContainerNotFoundError:
                continue  # removed between list and inspect
        return out

    async def inspect(self, container_id: str) -> ContainerInfo:
        if self._events_live:
            cached = self._cache.get(container_id)
            if cached is not None:
                return cached
        try:
            data = await self._api.containers.container(container_id).show()
        except (aiodocker.DockerError, aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
            raise self.engine_error(exc, "inspect") from exc
        info = self._parse(data)
        if self._events_live:
            self._cache[info.id] = info
        return info

    def _parse(self, data: dict[str, Any]) -> ContainerInfo:
        state = data.get("State") or {}
        config = data.get("Config") or {}
        host = data.get("HostConfig") or {}
        net = data.get("NetworkSettings") or {}
        status = str(state.get("Status", "")).lower()
        cstate = _STATES.get(status, ContainerState.UNKNOWN)
        ip = net.get("IPAddress") or ""
        if not ip:
            for network in (net.get("Networks") or {}).values():
                if network and network.get("IPAddress"):
                    ip = network["IPAddress"]
                    break
        if str(host.get("NetworkMode", "")) == "host":
            ip = self._host_ip
        cid = data.get("Id", "")
        if data.get("LogPath"):
            self._log_paths[cid] = data["LogPath"]
        started = parse_time(state.get("StartedAt"))
        return ContainerInfo(
            id=cid,
            name=str(data.get("Name", "")).lstrip("/"),
            labels=dict(config.get("Labels") or {}),
            state=cstate,
            exit_code=int(state["ExitCode"])
            if cstate is ContainerState.EXITED and state.get("ExitCode") is not None
            else None,
            started_at=started,
            finished_at=parse_time(state.get("FinishedAt"))
            if cstate is ContainerState.EXITED
            else None,
            image=str(config.get("Image", "")),
            image_id=str(data.get("Image", "")),
            ip=ip,
            oom_killed=bool(state.get("OOMKilled")),
            error=str(state.get("Error") or ""),
        )

    async def exec(self, container_id: str, argv: list[str], timeout: float) -> ExecResult:
        try:
            return await asyncio.wait_for(self._exec(container_id, argv), timeout=timeout)
        except asyncio.TimeoutError:
            raise TimeoutError(f"exec in {container_id[:12]} timed out after {timeout}s") from None

    async def _exec(self, container_id: str, argv: list[str]) -> ExecResult:
        try:
            container = self._api.containers.container(container_id)
            execution = await container.exec(argv, stdout=True, stderr=True, tty=False)
            chunks: list[bytes] = []
            size = 0
            async with execution.start(detach=False) as stream:
                while True:
                    msg = await stream.read_out()
                    if msg is None:
                        break
                    if size < EXEC_OUTPUT_LIMIT:
                        chunks.append(msg.data)
                        size += len(msg.data)
            for _ in range(50):
                details = await execution.inspect()
                if not details.get("Running"):
                    break
                await asyncio.sleep(0.02)
            code = details.get("ExitCode")
        except (aiodocker.DockerError, aiohttp.ClientError, OSError) as exc:
            raise self.engine_error(exc, "exec") from exc
        return ExecResult(
            exit_code=int(code if code is not None else 126),
            output=b"".join(chunks)[:EXEC_OUTPUT_LIMIT],
        )

    def log_path(self, info: ContainerInfo) -> str:
        return self._log_paths.get(info.id, "")

    async def container_stats(self) -> list[ContainerStats]:
        """CPU and working set of every running pod container (sandboxes left out), from
        ``GET /containers/{id}/stats?stream=false`` (see the module docstring).

        A container that stops between the list and its stats call is left out, and so is
        one whose answer lacks the CPU figure (logged at debug level).

        Raises:
            RuntimeUnavailableError: the engine is unreachable.
            ContainerRuntimeError: the engine failed the list or a stats call.
        """
        from edgeagent.errors import StatsError
        from edgeagent.runtime.stats import ContainerStats, usage_from_docker_stats

        infos = [
            i
            for i in await self.list()
            if i.state is ContainerState.RUNNING
            and i.labels.get(Labels.CONTAINER_TYPE) != "sandbox"
        ]
        gate = asyncio.Semaphore(STATS_CONCURRENCY)

        async def one(info: ContainerInfo) -> ContainerStats | None:
            async with gate:
                try:
                    answer = await self._api.containers.container(info.id).stats(stream=False)
                except aiodocker.DockerError as exc:
                    if exc.status in (404, 409):  # gone, or stopped meanwhile
                        return None
                    raise self.engine_error(exc, "stats") from exc
                except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
                    raise self.engine_error(exc, "stats") from exc
            # aiodocker reads the body as a JSON stream: a list of one object.
            data = answer[-1] if isinstance(answer, list) and answer else answer
            try:
                usage = usage_from_docker_stats(data if isinstance(data, dict) else {})
            except StatsError as exc:
                log.debug("stats of %s: %s", info.name, exc)
                return None
            return ContainerStats(
                namespace=info.labels.get(Labels.POD_NAMESPACE, ""),
                pod=info.labels.get(Labels.POD_NAME, ""),
                container=info.labels.get(Labels.CONTAINER_NAME, ""),
                container_id=info.id,
                cpu_usage_core_ns=usage.cpu_usage_core_ns,
                memory_working_set_bytes=usage.memory_working_set_bytes,
            )

        results = await asyncio.gather(*(one(i) for i in infos))
        return [r for r in results if r is not None]

    async def watch(self, callback: ContainerEventCallback) -> None:
        docker = self._api
        subscriber = docker.events.subscribe(create_task=False)
        filters = json.dumps({"type": ["container"], "label": [f"{Labels.MANAGED}=true"]})
        runner = asyncio.ensure_future(docker.events.run(filters=filters))
        self._events_live = True
        try:
            while True:
                event = await subscriber.get()
                if event is None:
                    if runner.done() and not runner.cancelled() and runner.exception():
                        exc = runner.exception()
                        raise RuntimeUnavailableError(
                            f"engine event stream broke: {exc}", operation="events"
                        ) from exc
                    raise RuntimeUnavailableError("engine event stream ended", operation="events")
                action = str(event.get("Action") or event.get("status") or "").split(":")[0]
                actor = event.get("Actor") or {}
                cid = actor.get("ID") or event.get("id") or ""
                if not cid:
                    continue
                self._cache.pop(cid, None)
                if action in _EVENT_ACTIONS:
                    callback(cid, dict(actor.get("Attributes") or {}))
        finally:
            self._events_live = False
            self._cache.clear()
            runner.cancel()
            await asyncio.gather(runner, return_exceptions=True)
            docker.events.json_stream = None

    # --- errors -------------------------------------------------------------------------

    def engine_error(self, exc: BaseException, operation: str) -> ContainerRuntimeError:
        """The runtime's error for an engine failure during ``operation`` (raise it
        ``from exc``): 404 -> ContainerNotFoundError (except create/pull), unreachable ->
        RuntimeUnavailableError, else ContainerRuntimeError naming the operation."""
        if isinstance(exc, aiodocker.DockerError):
            missing = exc.status == 404 or "no such container" in str(exc.message).lower()
            if missing and operation not in ("create", "pull"):
                return ContainerNotFoundError(exc.message, operation=operation)
            return ContainerRuntimeError(f"{operation}: {exc.message}", operation=operation)
        if isinstance(exc, (aiohttp.ClientConnectionError, OSError)):
            return RuntimeUnavailableError(
                f"{operation}: container engine unreachable: {exc}", operation=operation
            )
        if isinstance(exc, asyncio.TimeoutError):
            return ContainerRuntimeError(f"{operation}: engine timed out", operation=operation)
        return ContainerRuntimeError(f"{operation}: {exc}", operation=operation)
