"""One pod's worker: drives its containers to the spec and reports its status.

Like kubelet's pod workers, each pod has one task that loops: look at the desired pod
(from the store) and the actual containers (from the runtime), act, report the status if
it changed, then sleep until woken (a store change, a container event, a probe verdict)
or until the next deadline (a back-off expiring, the resync period). Everything for one
pod happens in order in this task; pods proceed in parallel.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from edgeagent.errors import (
    ContainerNotFoundError,
    ContainerRuntimeError,
    ImagePullError,
    PodConfigError,
    StoreError,
    UnsupportedFieldsError,
)
from edgeagent.pods.backoff import Backoff, go_duration
from edgeagent.pods.containers import (
    attempt_of,
    container_config,
    default_pull_policy,
    sandbox_config,
)
from edgeagent.pods.context import PodRef
from edgeagent.pods.env import resolve_command, resolve_env
from edgeagent.pods.objects import Lookup
from edgeagent.pods.probes import Prober, ProbeSpec
from edgeagent.pods.spec import (
    check_pod,
    container_hash,
    qos_class,
)
from edgeagent.pods.status import (
    ContainerView,
    build_conditions,
    container_status,
    pod_phase,
    rfc3339,
)
from edgeagent.pods.volumes import PreparedVolume
from edgeagent.runtime.base import (
    ContainerInfo,
    ContainerState,
    Labels,
    PullPolicy,
)
from edgeagent.store import pod_coalesce_key, ref_dict
from edgeagent.tasks import TaskSet, wait_event
from protocol.podrefs import pod_references

if TYPE_CHECKING:
    from edgeagent.pods.context import PodContext

__all__ = ["PodRef", "PodWorker"]

log = logging.getLogger(__name__)


class PodWorker:
    """Keeps one pod's containers matching its spec. Created and owned by the reconciler."""

    def __init__(self, reconciler: PodContext, uid: str) -> None:
        self.r = reconciler
        self.uid = uid
        self.wake = asyncio.Event()
        s = reconciler.settings.pods
        self._crash = Backoff(s.backoff_initial, s.backoff_max)
        self._pulls = Backoff(s.backoff_initial, s.backoff_max)
        self._tasks = TaskSet(f"pod-{uid[:8]}")
        self._probers: dict[tuple[str, str], asyncio.Task[Any]] = {}
        self._ready: dict[str, bool] = {}
        self._liveness_failed: dict[str, str] = {}
        self._waiting: dict[str, tuple[str, str]] = {}
        self._volumes: dict[str, PreparedVolume] | None = None
        self._volumes_stale = True
        self._checked: tuple[str, list[str]] | None = None
        # The status reported before this agent started (restart counts, what ran before a
        # reboot); never overwritten, unlike _last_status.
        self._history = reconciler.store.pod_status(uid)
        self._last_status: dict[str, Any] | None = self._history
        self._next_floor: dict[str, int] = {}
        for group in ("containerStatuses", "initContainerStatuses"):
            for st in (self._history or {}).get(group) or []:
                ran = 1 if st.get("containerID") else 0
                self._next_floor[st.get("name", "")] = int(st.get("restartCount", 0)) + ran
        self._last_pod: dict[str, Any] | None = None
        self._pod_ip = ""
        self._events_sent: set[tuple[str, str]] = set()
        self._deleted_reported = False
        self._limits_warned = False
        self.ref: PodRef | None = None
        self._lookup: Lookup = _nothing

    # --- loop ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Sync until the pod is gone from the store and torn down."""
        resync = self.r.settings.pods.resync_period
        try:
            while True:
                self.wake.clear()
                try:
                    delay = await self.sync()
                except asyncio.CancelledError:
                    raise
                except StoreError as exc:
                    log.error("pod %s: %s", self.uid, exc)
                    delay = resync
                except ContainerRuntimeError as exc:
                    log.warning("pod %s: container runtime: %s", self.uid, exc)
                    delay = min(resync, 2.0)
                except Exception:
                    log.exception("pod %s: sync failed", self.uid)
                    delay = resync
                if delay is None:
                    return
                await wait_event(self.wake, max(delay, 0.01))
        finally:
            await self._tasks.close()

    def lost_writes(self) -> None:
        """The store rolled back a batch: report the status again at the next sync."""
        self._last_status = None

    def references(self, kind: str, namespace: str, name: str) -> bool:
        """Whether the pod uses that ConfigMap or Secret: the hub's rule,
        :func:`protocol.podrefs.pod_references` (volumes including projected sources, env,
        envFrom, imagePullSecrets), so both halves agree on what a pod depends on."""
        pod = self._last_pod
        if pod is None or pod["metadata"].get("namespace") != namespace:
            return False
        return (kind, name) in pod_references(pod)

    def spec_changed(self) -> None:
        """The pod object changed (or was deleted): look again now."""
        self._volumes_stale = True
        self.wake.set()

    @property
    def phase(self) -> str:
        """The last reported phase (``Pending`` before the first report)."""
        return (self._last_status or {}).get("phase", "Pending")

    def config_changed(self) -> None:
        """A referenced ConfigMap/Secret changed: rewrite volume files at the next sync."""
        self._volumes_stale = True
        self.wake.set()

    # --- one sync -----------------------------------------------------------------------

    def _read_references(self, pod: dict[str, Any], namespace: str) -> Lookup:
        """The ConfigMaps and Secrets the pod uses (:func:`protocol.podrefs.pod_references`,
        the rule the hub sends them by), read from the store once per sync, together with
        the pod: volumes and env resolve from this snapshot (a later change wakes the
        worker again, :meth:`config_changed`)."""
        found: dict[tuple[str, str], dict[str, Any]] = {}
        for kind, name in pod_references(pod):
            obj = self.r.store.find_object(kind, namespace, name)
            if obj is not None:
                found[(kind, name)] = obj.body

        def lookup(kind: str, ns: str, name: str) -> dict[str, Any] | None:
            return found.get((kind, name)) if ns == namespace else None

        return lookup

    async def sync(self) -> float | None:
        """Do what the pod needs now.

        Returns:
            Seconds until the next look is needed, or ``None`` when the pod is gone and
            everything of it was removed.
        """
        obj = self.r.store.get_object(self.uid)
        if obj is None:
            await self._teardown()
            return None
        pod = obj.body
        self._last_pod = pod
        self._lookup = self._read_references(pod, obj.namespace)
        meta, spec = pod["metadata"], pod.get("spec") or {}
        self.ref = PodRef("Pod", obj.namespace, obj.name, obj.uid)
        resync = self.r.settings.pods.resync_period
        if meta.get("deletionTimestamp"):
            await self._terminate(pod)
            return resync
        problems = self._check(obj.resource_version, pod)
        if problems:
            await self._refuse(pod, problems)
            return 3600.0
        containers = await self.r.runtime.list({Labels.POD_UID: self.uid})
        now = self.r.wall()
        deadlines: list[float] = [self.r.settings.pods.pod_resync_period]

        if self._volumes is None or self._volumes_stale:
            try:
                self._volumes = self.r.volumes.prepare(pod, self._lookup)
                self._volumes_stale = False
                self._waiting.pop("*", None)
            except PodConfigError as exc:
                self._volumes = None
                self._waiting["*"] = ("ContainerCreating", str(exc))
                self._event("Warning", "FailedMount", f"MountVolume.SetUp failed: {exc}", once=True)
                await self._report(pod, containers, now)
                return resync

        sandbox_id, containers = await self._ensure_sandbox(pod, containers)
        policy = spec.get("restartPolicy", "Always")

        # init containers, in order
        initialized = True
        for c in spec.get("initContainers") or []:
            latest = self._latest(containers, c["name"])
            if (
                latest is not None
                and latest.state is ContainerState.EXITED
                and latest.exit_code == 0
            ):
                continue
            initialized = False
            if latest is None or latest.state is ContainerState.CREATED:
                delay = await self._start(pod, c, "init", containers, sandbox_id, latest)
                if delay:
                    deadlines.append(delay)
            elif latest.state is ContainerState.EXITED and policy != "Never":
                delay = await self._maybe_restart(pod, c, "init", containers, sandbox_id, latest)
                if delay:
                    deadlines.append(delay)
            break

        if initialized:
            for c in spec.get("containers") or []:
                delay = await self._sync_app(pod, c, policy, containers, sandbox_id)
                if delay:
                    deadlines.append(delay)
        containers = await self.r.runtime.list({Labels.POD_UID: self.uid})
        self._sync_probers(pod, containers)
        await self._report(pod, containers, now)
        return min(deadlines)

    # --- spec checks --------------------------------------------------------------------

    def _check(self, rv: str, pod: dict[str, Any]) -> list[str]:
        if self._checked is None or self._checked[0] != rv:
            self._checked = (rv, check_pod(pod, self.r.runtime.kind))
        return self._checked[1]

    async def _refuse(self, pod: dict[str, Any], problems: list[str]) -> None:
        error = UnsupportedFieldsError(problems)
        self._event("Warning", error.reason, str(error), once=True)
        for info in await self.r.runtime.list({Labels.POD_UID: self.uid}):
            await self._kill(info, self._grace(pod))
        status = {
            "phase": "Failed",
            "reason": error.reason,
            "message": f"Pod was not run by the edge agent: {error}",
            "hostIP": self.r.host_ip,
            "conditions": build_conditions(
                (self._last_status or {}).get("conditions"),
                initialized=False,
                containers_ready=False,
                now=self.r.wall(),
            ),
            "startTime": (self._last_status or {}).get("startTime") or rfc3339(self.r.wall()),
            "qosClass": qos_class(pod.get("spec") or {}),
        }
        self._record(status)

    # --- sandbox ------------------------------------------------------------------------

    async def _ensure_sandbox(
        self, pod: dict[str, Any], containers: list[ContainerInfo]
    ) -> tuple[str | None, list[ContainerInfo]]:
        spec = pod.get("spec") or {}
        runtime = self.r.runtime
        if not runtime.supports_sandbox or spec.get("hostNetwork"):
            self._pod_ip = self.r.host_ip
            return None, containers
        sandboxes = [c for c in containers if c.labels.get(Labels.CONTAINER_TYPE) == "sandbox"]
        sandboxes.sort(key=attempt_of)
        current = sandboxes[-1] if sandboxes else None
        if current is not None and current.state is ContainerState.RUNNING:
            self._pod_ip = current.ip
            return current.id, containers
        # No live sandbox (first start, engine restart, reboot): kubelet kills the pod's
        # containers and starts over in a new sandbox; restart counts carry on.
        attempt = attempt_of(current) + 1 if current is not None else 0
        others = [c for c in containers if c not in sandboxes]
        if others:
            self._carry_attempts(others)
            await asyncio.gather(*(self._kill(c, 0) for c in others))
        for c in [*others, *sandboxes]:
            await runtime.remove(c.id)
        sandbox_id = await runtime.create_sandbox(sandbox_config(pod, attempt))
        info = await runtime.inspect(sandbox_id)
        self._pod_ip = info.ip
        return sandbox_id, [info]

    def _carry_attempts(self, removed: list[ContainerInfo]) -> None:
        """Remember restart counts of containers about to be removed (sandbox restart)."""
        for info in removed:
            name = info.labels.get(Labels.CONTAINER_NAME, "")
            self._next_floor[name] = max(self._next_floor.get(name, 0), attempt_of(info) + 1)

    # --- containers ---------------------------------------------------------------------

    @staticmethod
    def _attempts(containers: list[ContainerInfo], name: str) -> list[ContainerInfo]:
        return sorted(
            (
                c
                for c in containers
                if c.labels.get(Labels.CONTAINER_NAME) == name
                and c.labels.get(Labels.CONTAINER_TYPE) != "sandbox"
            ),
            key=attempt_of,
        )

    def _latest(self, containers: list[ContainerInfo], name: str) -> ContainerInfo | None:
        attempts = self._attempts(containers, name)
        return attempts[-1] if attempts else None

    def _stored_container(self, name: str) -> dict[str, Any] | None:
        for group in ("containerStatuses", "initContainerStatuses"):
            for st in (self._history or {}).get(group) or []:
                if st.get("name") == name:
                    return st
        return None

    def _nextattempt_of(self, containers: list[ContainerInfo], name: str) -> int:
        """The restart count of the next run: one more than the latest container, and
        never below what ran before its record went (reboot, sandbox restart)."""
        latest = self._latest(containers, name)
        floor = self._next_floor.get(name, 0)
        return max(attempt_of(latest) + 1, floor) if latest is not None else floor

    async def _sync_app(
        self,
        pod: dict[str, Any],
        c: dict[str, Any],
        policy: str,
        containers: list[ContainerInfo],
        sandbox_id: str | None,
    ) -> float | None:
        latest = self._latest(containers, c["name"])
        if latest is None:
            stored = self._stored_container(c["name"])
            ran = stored is not None and stored.get("containerID")
            if ran and not self._should_restart(policy, _stored_exit(stored)):
                return None  # it ran before the reboot and is not to run again
            return await self._start(pod, c, "app", containers, sandbox_id, None)
        if latest.state is ContainerState.CREATED:
            return await self._start(pod, c, "app", containers, sandbox_id, latest)
        if latest.state is ContainerState.RUNNING:
            wanted = container_hash(c, pod.get("spec") or {})
            if latest.labels.get(Labels.SPEC_HASH) not in (None, wanted):
                self._event(
                    "Normal",
                    "Killing",
                    f"Container {c['name']} definition changed, will be restarted",
                )
                await self._kill(latest, self._grace(pod))
                self.wake.set()
                return None
            why = self._liveness_failed.pop(latest.id, None)
            if why is not None:
                self._event(
                    "Normal",
                    "Killing",
                    f"Container {c['name']} failed liveness probe, will be restarted",
                )
                await self._kill(latest, self._grace(pod))
                self.wake.set()
            return None
        if latest.state is ContainerState.EXITED:
            if not self._should_restart(policy, latest.exit_code):
                return None
            return await self._maybe_restart(pod, c, "app", containers, sandbox_id, latest)
        return None

    @staticmethod
    def _should_restart(policy: str, exit_code: int | None) -> bool:
        if policy == "Always":
            return True
        if policy == "OnFailure":
            return exit_code != 0
        return False

    async def _maybe_restart(
        self,
        pod: dict[str, Any],
        c: dict[str, Any],
        ctype: str,
        containers: list[ContainerInfo],
        sandbox_id: str | None,
        latest: ContainerInfo,
    ) -> float | None:
        """Restart an exited container, or wait out its crash-loop back-off."""
        now = self.r.wall()
        finished = latest.finished_at or now
        key = c["name"]
        remaining = self._crash.remaining(key, finished, now)
        if remaining > 0:
            meta = pod["metadata"]
            delay = self._crash.current(key)
            message = (
                f"back-off {go_duration(delay)} restarting failed container={c['name']} "
                f"pod={meta['name']}_{meta['namespace']}({self.uid})"
            )
            if self._waiting.get(c["name"], ("",))[0] != "CrashLoopBackOff":
                self._event(
                    "Warning", "BackOff", f"Back-off restarting failed container {c['name']}"
                )
            self._waiting[c["name"]] = ("CrashLoopBackOff", message)
            return remaining
        self._crash.step(key, finished)
        return await self._start(pod, c, ctype, containers, sandbox_id, None)

    async def _start(
        self,
        pod: dict[str, Any],
        c: dict[str, Any],
        ctype: str,
        containers: list[ContainerInfo],
        sandbox_id: str | None,
        created: ContainerInfo | None,
    ) -> float | None:
        """Pull (per policy), create and start the next attempt of a container.

        Returns:
            Seconds until it is worth trying again if it could not start, else ``None``.
        """
        name = c["name"]
        now = self.r.wall()
        if created is not None:  # created by an agent that died before starting it
            try:
                await self.r.runtime.start(created.id)
                self._waiting.pop(name, None)
                return None
            except ContainerRuntimeError:
                await self.r.runtime.remove(created.id)
        image = c["image"]
        policy = PullPolicy(c.get("imagePullPolicy") or default_pull_policy(image))
        pull_key = f"{name}:{image}"
        wait = self._pulls.remaining_since_update(pull_key, now)
        if wait > 0:
            if self._waiting.get(name, ("",))[0] != "ImagePullBackOff":
                self._event("Normal", "BackOff", f'Back-off pulling image "{image}"')
            self._waiting[name] = ("ImagePullBackOff", f'Back-off pulling image "{image}"')
            return wait
        try:
            if policy is not PullPolicy.NEVER and self.r.runtime.has_images:
                self._event("Normal", "Pulling", f'Pulling image "{image}"', once=True)
            await self.r.runtime.ensure_image(image, policy)
            self._pulls.reset(pull_key)
        except ImagePullError as exc:
            delay = self._pulls.step(pull_key, self.r.wall())  # from the failure, not the try
            self._waiting[name] = (exc.reason, str(exc))
            self._event("Warning", "Failed", f"Failed to pull image: {exc}")
            self._event("Warning", "Failed", f"Error: {exc.reason}")
            # Look again before the back-off expires: the status then says ImagePullBackOff.
            return min(1.0, delay / 2)
        try:
            env = resolve_env(c, pod, self._lookup, pod_ip=self._pod_ip, host_ip=self.r.host_ip)
            command, args = resolve_command(c, env)
            mounts = self.r.volumes.mounts(c, self._volumes or {})
        except PodConfigError as exc:
            self._waiting[name] = (exc.reason, str(exc))
            self._event("Warning", "Failed", f"Error: {exc}", once=True)
            return self.r.settings.pods.resync_period
        attempt = self._nextattempt_of(containers, name)
        config = container_config(
            pod,
            c,
            ctype=ctype,
            attempt=attempt,
            sandbox_id=sandbox_id,
            env=env,
            command=command,
            args=args,
            mounts=mounts,
            host_network=bool((pod.get("spec") or {}).get("hostNetwork"))
            or not self.r.runtime.supports_sandbox,
            logs_dir=self.r.logs_dir,
        )
        try:
            cid = await self.r.runtime.create(config)
        except ContainerRuntimeError as exc:
            self._waiting[name] = ("CreateContainerError", str(exc))
            self._event("Warning", "Failed", f"Error: {exc}")
            return self._crash.step(name, now)
        self._next_floor[name] = attempt + 1
        self._event("Normal", "Created", f"Created container {name}")
        try:
            await self.r.runtime.start(cid)
        except ContainerRuntimeError as exc:
            self._waiting[name] = ("RunContainerError", str(exc))
            self._event("Warning", "Failed", f"Error: failed to start container {name}: {exc}")
            await self.r.runtime.remove(cid)
            return self._crash.step(name, now)
        self.r.note_started(self.uid, name)
        self._event("Normal", "Started", f"Started container {name}")
        self._waiting.pop(name, None)
        if (c.get("resources") or {}).get("limits") and not self.r.runtime.has_images:
            if not self._limits_warned:
                self._limits_warned = True
                self._event(
                    "Warning",
                    "LimitsNotEnforced",
                    "the process runtime does not enforce resources.limits",
                )
        # Keep the latest exited attempt for lastState; remove older ones.
        for old in self._attempts(containers, name)[:-1]:
            await self.r.runtime.remove(old.id)
        return None

    def _grace(self, pod: dict[str, Any]) -> float:
        grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
        return float(self.r.settings.pods.default_grace_period if grace is None else grace)

    async def _kill(self, info: ContainerInfo, grace: float) -> None:
        if info.state is not ContainerState.RUNNING:
            return
        try:
            await self.r.runtime.stop(info.id, grace)
        except ContainerNotFoundError:
            pass

    # --- probes -------------------------------------------------------------------------

    def _sync_probers(self, pod: dict[str, Any], containers: list[ContainerInfo]) -> None:
        spec = pod.get("spec") or {}
        by_name = {c["name"]: c for c in spec.get("containers") or []}
        wanted: set[tuple[str, str]] = set()
        for info in containers:
            c = by_name.get(info.labels.get(Labels.CONTAINER_NAME, ""))
            if c is None or info.state is not ContainerState.RUNNING:
                continue
            if info.labels.get(Labels.CONTAINER_TYPE) != "app":
                continue
            for kind in ("liveness", "readiness"):
                probe = c.get(f"{kind}Probe")
                if not probe:
                    continue
                key = (info.id, kind)
                wanted.add(key)
                if key not in self._probers:
                    prober = Prober(
                        kind,
                        ProbeSpec.from_json(probe),
                        c,
                        info.id,
                        self.r.runtime,
                        lambda: self._pod_ip,
                        self._probe_changed,
                    )
                    self._probers[key] = self._tasks.spawn(prober.run(), f"{kind}:{c['name']}")
        for key in list(self._probers):
            if key not in wanted:
                self._probers.pop(key).cancel()
                self._ready.pop(key[0], None)

    def _probe_changed(self, cid: str, kind: str, ok: bool, message: str) -> None:
        if kind == "readiness":
            self._ready[cid] = ok
            if not ok:
                self._event("Warning", "Unhealthy", f"Readiness probe failed: {message}")
        elif not ok:
            self._liveness_failed[cid] = message
            self._event("Warning", "Unhealthy", f"Liveness probe failed: {message}")
        log.info(
            "pod %s container %s: %s probe %s", self.uid, cid[:12], kind, "ok" if ok else "failed"
        )
        self.wake.set()

    def _is_ready(self, c: dict[str, Any], info: ContainerInfo | None) -> bool:
        if info is None or info.state is not ContainerState.RUNNING:
            return False
        if c.get("readinessProbe"):
            return self._ready.get(info.id, False)
        return True

    # --- status -------------------------------------------------------------------------

    async def _report(
        self, pod: dict[str, Any], containers: list[ContainerInfo], now: float
    ) -> None:
        spec = pod.get("spec") or {}
        kind = self.r.runtime.kind

        def views(group: list[dict[str, Any]]) -> list[dict[str, Any]]:
            out = []
            for c in group:
                attempts = self._attempts(containers, c["name"])
                latest = attempts[-1] if attempts else None
                previous = attempts[-2] if len(attempts) > 1 else None
                waiting = self._waiting.get(c["name"]) or self._waiting.get("*")
                if latest is not None and latest.state is ContainerState.RUNNING:
                    waiting = None
                stored = self._stored_container(c["name"])
                restarts = (
                    attempt_of(latest)
                    if latest is not None
                    else int((stored or {}).get("restartCount", 0))
                )
                out.append(
                    container_status(
                        ContainerView(
                            name=c["name"],
                            image=c["image"],
                            runtime_kind=kind,
                            latest=latest,
                            previous=previous,
                            stored=stored if latest is None else None,
                            waiting=waiting,
                            ready=self._is_ready(c, latest),
                            restart_count=restarts,
                        )
                    )
                )
            return out

        init_statuses = views(spec.get("initContainers") or [])
        statuses = views(spec.get("containers") or [])
        policy = spec.get("restartPolicy", "Always")
        phase = pod_phase(policy, init_statuses, statuses)
        initialized = all(
            (s["state"].get("terminated") or {}).get("exitCode") == 0 for s in init_statuses
        )
        ready = bool(statuses) and all(s["ready"] for s in statuses)
        if phase == "Succeeded":
            ready = False
        previous = self._last_status or {}
        reasons = {}
        if not initialized:
            reasons["Initialized"] = "ContainersNotInitialized"
        if not ready:
            reasons["Ready"] = reasons["ContainersReady"] = "ContainersNotReady"
        status: dict[str, Any] = {
            "phase": phase,
            "conditions": build_conditions(
                previous.get("conditions"),
                initialized=initialized,
                containers_ready=ready,
                now=now,
                reasons=reasons,
            ),
            "hostIP": self.r.host_ip,
            "hostIPs": [{"ip": self.r.host_ip}] if self.r.host_ip else [],
            "podIP": self._pod_ip,
            "podIPs": [{"ip": self._pod_ip}] if self._pod_ip else [],
            "startTime": previous.get("startTime") or rfc3339(now),
            "containerStatuses": statuses,
            "qosClass": qos_class(spec),
        }
        if init_statuses:
            status["initContainerStatuses"] = init_statuses
        self._record(status)

    def _record(self, status: dict[str, Any]) -> None:
        if status == self._last_status:
            return
        try:
            self.r.store.record_pod_status(self.ref, status, self.r.wall())
        except StoreError as exc:
            self.r.store_failed(exc)
            return
        self._last_status = status

    def _event(self, etype: str, reason: str, message: str, *, once: bool = False) -> None:
        if self.ref is None:
            return
        if once:
            if (reason, message) in self._events_sent:
                return
            self._events_sent.add((reason, message))
        self.r.event(self.ref, etype, reason, message)

    # --- termination --------------------------------------------------------------------

    async def _stop_all(self, pod: dict[str, Any] | None, grace: float) -> None:
        containers = await self.r.runtime.list({Labels.POD_UID: self.uid})
        apps = [c for c in containers if c.labels.get(Labels.CONTAINER_TYPE) != "sandbox"]
        if pod is not None and apps:
            self._event("Normal", "Killing", "Stopping pod containers", once=True)
        await asyncio.gather(*(self._kill(c, grace) for c in apps))
        await self._tasks.close()
        self._probers.clear()
        for c in apps:
            await self.r.runtime.remove(c.id)
        for c in containers:
            if c not in apps:
                await self.r.runtime.remove(c.id)

    async def _terminate(self, pod: dict[str, Any]) -> None:
        """The pod has a deletionTimestamp: stop it gracefully, then tell the hub."""
        if self._deleted_reported:
            return
        meta = pod["metadata"]
        grace = meta.get("deletionGracePeriodSeconds")
        grace = self._grace(pod) if grace is None else float(grace)
        await self._stop_all(pod, grace)
        self.r.volumes.cleanup(self.uid)
        try:
            self.r.store.outbox_append(
                "pod_deleted", {"ref": ref_dict(self.ref)}, coalesce_key=pod_coalesce_key(self.uid)
            )
        except StoreError as exc:
            self.r.store_failed(exc)
            return
        self._deleted_reported = True
        log.info("pod %s/%s terminated", meta["namespace"], meta["name"])

    async def _teardown(self) -> None:
        """The pod is gone from the store: remove whatever is left of it."""
        pod = self._last_pod
        grace = self._grace(pod) if pod is not None else self.r.settings.pods.default_grace_period
        await self._stop_all(None, grace)
        self.r.volumes.cleanup(self.uid)


def _stored_exit(stored: dict[str, Any] | None) -> int | None:
    term = ((stored or {}).get("state") or {}).get("terminated")
    if term is None:
        return None
    return term.get("exitCode")


def _nothing(kind: str, namespace: str, name: str) -> None:
    """The lookup before the first sync: nothing is known yet."""
    return None
