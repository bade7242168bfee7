"""Liveness and readiness probes: exec, httpGet and tcpSocket, with kubelet's timing.

One :class:`Prober` task per (container, probe kind), owned by the pod worker. It waits
``initialDelaySeconds``, then probes every ``periodSeconds`` with a ``timeoutSeconds``
deadline, and reports a change only after ``successThreshold`` consecutive successes or
``failureThreshold`` consecutive failures (defaults 10 s, 1 s, 1, 3 as in Kubernetes).
Readiness starts as not ready; liveness starts as alive.

The HTTP probe is a minimal HTTP/1.1 GET over asyncio streams (status line only, 2xx and
3xx are success, as kubelet): an HTTP client library would cost the process-runtime
agent several MiB of RSS for one request line.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import ssl
from collections.abc import Callable
from typing import Any

from edgeagent.errors import ContainerRuntimeError
from edgeagent.runtime.base import ContainerRuntime

__all__ = ["ProbeResult", "ProbeSpec", "Prober", "http_probe", "tcp_probe"]

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, slots=True)
class ProbeSpec:
    """A probe's handler and timing (seconds)."""

    handler: str
    """``"exec"``, ``"httpGet"`` or ``"tcpSocket"``."""
    config: dict[str, Any]
    initial_delay: float = 0.0
    period: float = 10.0
    timeout: float = 1.0
    success_threshold: int = 1
    failure_threshold: int = 3

    @classmethod
    def from_json(cls, probe: dict[str, Any]) -> ProbeSpec:
        handler = next(h for h in ("exec", "httpGet", "tcpSocket") if h in probe)
        return cls(
            handler=handler,
            config=probe[handler] or {},
            initial_delay=float(probe.get("initialDelaySeconds", 0)),
            period=float(probe.get("periodSeconds", 10) or 10),
            timeout=float(probe.get("timeoutSeconds", 1) or 1),
            success_threshold=int(probe.get("successThreshold", 1) or 1),
            failure_threshold=int(probe.get("failureThreshold", 3) or 3),
        )


@dataclasses.dataclass(frozen=True, slots=True)
class ProbeResult:
    """One probe outcome."""

    ok: bool
    message: str = ""


def resolve_port(port: Any, container: dict[str, Any]) -> int:
    """A probe port: a number, or the name of one of the container's ports.

    Raises:
        ValueError: unknown name or out of range.
    """
    if isinstance(port, int) or (isinstance(port, str) and port.isdigit()):
        number = int(port)
    else:
        named = {p.get("name"): p.get("containerPort") for p in container.get("ports") or []}
        if port not in named:
            raise ValueError(f"port {port!r} is not a named port of the container")
        number = int(named[port])
    if not 0 < number < 65536:
        raise ValueError(f"port {number} out of range")
    return number


async def tcp_probe(host: str, port: int, timeout: float) -> ProbeResult:
    """Success when a TCP connection opens within ``timeout`` seconds."""
    try:
        _reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    except (OSError, asyncio.TimeoutError) as exc:
        return ProbeResult(False, f"dial tcp {host}:{port}: {exc or 'timeout'}")
    writer.close()
    try:
        await asyncio.wait_for(writer.wait_closed(), timeout)
    except (OSError, asyncio.TimeoutError):
        pass
    return ProbeResult(True)


async def http_probe(
    host: str,
    port: int,
    path: str,
    timeout: float,
    *,
    scheme: str = "HTTP",
    headers: list[dict[str, str]] | None = None,
) -> ProbeResult:
    """GET ``path``; success on a 2xx/3xx status within ``timeout`` seconds. HTTPS
    certificates are not verified (kubelet does not either)."""

    async def go() -> ProbeResult:
        ctx = None
        if scheme == "HTTPS":
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        reader, writer = await asyncio.open_connection(host, port, ssl=ctx)
        try:
            lines = [
                f"GET {path or '/'} HTTP/1.1",
                f"Host: {host}:{port}",
                "User-Agent: edgeagent-probe/1",
                "Accept: */*",
                "Connection: close",
            ]
            for h in headers or []:
                lines.append(f"{h.get('name', '')}: {h.get('value', '')}")
            writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
            await writer.drain()
            status_line = (await reader.readline()).decode("latin-1").strip()
        finally:
            writer.close()
        parts = status_line.split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
            return ProbeResult(False, f"malformed HTTP response {status_line[:80]!r}")
        code = int(parts[1])
        if 200 <= code < 400:
            return ProbeResult(True)
        return ProbeResult(False, f"HTTP probe failed with statuscode: {code}")

    try:
        return await asyncio.wait_for(go(), timeout)
    except asyncio.TimeoutError:
        return ProbeResult(False, f"Get {scheme.lower()}://{host}:{port}{path}: timeout")
    except (OSError, ValueError) as exc:
        return ProbeResult(False, f"Get {scheme.lower()}://{host}:{port}{path}: {exc}")


class Prober:
    """Runs one probe of one container until cancelled.

    Args:
        kind: ``"liveness"`` or ``"readiness"``.
        spec: the probe.
        container: the container JSON (named ports).
        container_id: runtime id (exec probes).
        runtime: the runtime (exec probes).
        target_ip: returns the address to probe (the pod IP).
        on_change: called with (container_id, kind, ok, message) when the probe's
            verdict flips after the thresholds.
    """

    def __init__(
        self,
        kind: str,
        spec: ProbeSpec,
        container: dict[str, Any],
        container_id: str,
        runtime: ContainerRuntime,
        target_ip: Callable[[], str],
        on_change: Callable[[str, str, bool, str], None],
    ) -> None:
        self.kind = kind
        self.spec = spec
        self._container = container
        self._cid = container_id
        self._runtime = runtime
        self._target_ip = target_ip
        self._on_change = on_change

    async def probe_once(self) -> ProbeResult:
        """Run the handler once, within the probe's timeout."""
        spec = self.spec
        host = spec.config.get("host") or self._target_ip() or "127.0.0.1"
        try:
            if spec.handler == "exec":
                command = [str(a) for a in spec.config.get("command") or []]
                try:
                    result = await self._runtime.exec(self._cid, command, spec.timeout)
                except TimeoutError:
                    return ProbeResult(False, f"command timed out after {spec.timeout:g}s")
                except ContainerRuntimeError as exc:
                    return ProbeResult(False, str(exc))
                out = result.output.decode(errors="replace").strip()
                if result.exit_code == 0:
                    return ProbeResult(True, out)
                return ProbeResult(False, out or f"exit code {result.exit_code}")
            port = resolve_port(spec.config.get("port"), self._container)
            if spec.handler == "tcpSocket":
                return await tcp_probe(host, port, spec.timeout)
            return await http_probe(
                host,
                port,
                spec.config.get("path", "/"),
                spec.timeout,
                scheme=spec.config.get("scheme", "HTTP"),
                headers=spec.config.get("httpHeaders"),
            )
        except ValueError as exc:
            return ProbeResult(False, str(exc))

    async def run(self) -> None:
        """Probe forever (until cancelled), reporting flips through ``on_change``."""
        state = self.kind == "liveness"
        successes = failures = 0
        await asyncio.sleep(self.spec.initial_delay)
        while True:
            result = await self.probe_once()
            if result.ok:
                successes, failures = successes + 1, 0
                if not state and successes >= self.spec.success_threshold:
                    state = True
                    self._on_change(self._cid, self.kind, True, result.message)
            else:
                successes, failures = 0, failures + 1
                if state and failures >= self.spec.failure_threshold:
                    state = False
                    self._on_change(self._cid, self.kind, False, result.message)
                elif not state and self.kind == "readiness" and failures == 1:
                    log.debug("readiness probe of %s failing: %s", self._cid[:12], result.message)
            await asyncio.sleep(self.spec.period)
