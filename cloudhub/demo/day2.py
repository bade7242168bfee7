"""The demo's day-2 phase, a part of :class:`cloudhub.demo.run.Demo`: at the end, one
``kubectl logs`` and one ``kubectl exec`` (the real kubectl, as an operator types them,
with the demo's kubeconfig) against a Running edge pod, through the embedded API and the
hub to the node's agent and back. Checks ``logs`` (the command succeeds) and ``exec`` (the
command's output comes back); ``--keep`` prints both commands to run by hand.
"""

from __future__ import annotations

import asyncio
import pathlib
import shutil
from typing import Any

from cloudhub.demo.phases import Stuck
from cloudhub.kube import PODS

__all__ = ["EXEC_MARKER", "Day2", "find_kubectl"]

EXEC_MARKER = "hello from the edge"
"""What the demo's ``kubectl exec`` echoes (and must read back)."""

_CACHED_KUBECTL = pathlib.Path("~/.cache/edgefleet/kube-apiserver-v1.20.2/kubectl")
"""Where ``scripts/setup.sh test`` unpacks Debian's kubectl 1.20 (tests/k8s)."""

_COMMAND_TIMEOUT = 30.0
"""Seconds one kubectl command may take."""


def find_kubectl(given: str | None) -> str | None:
    """The kubectl to run: ``given`` (``--kubectl``), else ``kubectl`` on ``PATH``, else the
    one ``scripts/setup.sh test`` caches; ``None`` when there is none."""
    if given:
        return given if shutil.which(given) else None
    found = shutil.which("kubectl")
    if found:
        return found
    cached = _CACHED_KUBECTL.expanduser()
    return str(cached) if cached.is_file() else None


async def _kubectl(binary: str, kubeconfig: str, *args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        binary,
        "--kubeconfig",
        kubeconfig,
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), _COMMAND_TIMEOUT)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return -1, "", f"kubectl {' '.join(args)}: no answer in {_COMMAND_TIMEOUT:.0f} s"
    return proc.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace")


class Day2:
    """``kubectl logs`` and ``kubectl exec`` on an edge pod (uses the demo's state, client,
    options and probes: ``self.state``, ``self.client``, ``self._wait_checks``...)."""

    state: Any
    client: Any
    options: Any

    def day2_commands(self) -> list[str]:
        """The two commands, as an operator runs them (for ``--keep``); empty before the
        phase picked a pod."""
        target = self.state.day2_pod
        if not target:
            return []
        namespace, pod, container = target
        base = f"kubectl -n {namespace}"
        return [
            f"{base} logs {pod} -c {container} --tail=5",
            f"{base} exec {pod} -c {container} -- sh -c 'echo {EXEC_MARKER}'",
        ]

    async def _pick_pod(self) -> tuple[str, str, str] | None:
        # rbac: operator's credentials (the embedded API's admin kubeconfig)
        pods, _ = await self.client.list(PODS, "default")
        cut = self.state.cut_node
        running = [
            p
            for p in pods
            if (p.get("status") or {}).get("phase") == "Running"
            and (p.get("spec") or {}).get("nodeName")
        ]
        # a pod away from the node whose link was cut, when there is one
        running.sort(key=lambda p: (p["spec"]["nodeName"] == cut, p["metadata"]["name"]))
        for p in running:
            containers = (p.get("spec") or {}).get("containers") or []
            if containers:
                return ("default", p["metadata"]["name"], containers[0]["name"])
        return None

    async def _day2(self) -> None:
        s = self.state
        s.check("logs", "kubectl logs on an edge pod, through the hub")
        s.check("exec", "kubectl exec on an edge pod, through the hub")
        kubectl = find_kubectl(self.options.kubectl)
        kubeconfig = s.kubeconfig
        last: dict[str, str] = {}

        async def target() -> tuple[str, str, str]:
            if kubectl is None:
                raise Stuck("no kubectl found (on PATH, or give --kubectl PATH)")
            if not s.day2_pod:
                s.day2_pod = await self._pick_pod()
            if not s.day2_pod:
                raise Stuck("no Running edge pod to run kubectl logs/exec against")
            return s.day2_pod

        async def logs() -> str | None:
            namespace, pod, container = await target()
            assert kubectl is not None
            code, out, err = await _kubectl(
                kubectl, kubeconfig, "-n", namespace, "logs", pod, "-c", container, "--tail=5"
            )
            if code != 0:
                last["logs"] = err.strip()
                return None
            lines = len(out.splitlines())
            return f"{pod}/{container}: {lines} line(s)"

        logs.why = lambda: last.get("logs", "kubectl logs did not succeed")  # type: ignore[attr-defined]

        async def exec_() -> str | None:
            namespace, pod, container = await target()
            assert kubectl is not None
            code, out, err = await _kubectl(
                kubectl,
                kubeconfig,
                "-n",
                namespace,
                "exec",
                pod,
                "-c",
                container,
                "--",
                "sh",
                "-c",
                f"echo {EXEC_MARKER}",
            )
            if code != 0 or out.strip() != EXEC_MARKER:
                last["exec"] = (err or out).strip() or f"exit code {code}"
                return None
            return f"{pod}/{container}: {out.strip()!r} back"

        exec_.why = lambda: last.get("exec", "kubectl exec did not succeed")  # type: ignore[attr-defined]

        await self._wait_checks({"logs": logs, "exec": exec_})  # type: ignore[attr-defined]
