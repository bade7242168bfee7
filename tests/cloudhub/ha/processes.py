"""Processes for multi-replica tests: ``cloudhub serve`` replicas on one API through a
kubeconfig, and a TCP balancer in front of them standing in for the Service (kube-proxy
sends each new connection to a ready endpoint; so does this, round robin, skipping
backends that refuse)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import pathlib
import signal
import subprocess
import sys
from typing import Any

from tests.bench.apiproc import popen
from tests.bench.bench_e2e import HubProcess

_CHUNK = 64 * 1024


class ReplicaProcess(HubProcess):
    """``python -m cloudhub serve`` with ``ha.enabled`` on the API of ``kubeconfig``.

    Args:
        root: its directory (TLS files, log).
        pki_ca: the test CA (the serving certificate comes from it).
        kubeconfig: the API's kubeconfig.
        identity: the replica's name (``ha.identity``), as a pod name would be.
        namespace: where the replica Leases and the node Leases live.
        flags: more ``cloudhub serve`` flags.
    """

    def __init__(
        self,
        root: pathlib.Path,
        pki_ca: Any,
        kubeconfig: str,
        identity: str,
        namespace: str,
        flags: tuple[str, ...] = (),
    ) -> None:
        super().__init__(root, pki_ca)
        self.identity = identity
        args = self.args
        i = args.index("--kube-embedded-data-dir")
        del args[i : i + 4]  # the embedded API's data dir and port
        args += ["--kube-kubeconfig", kubeconfig, "--observability-log-level", "info"]
        args += ["--ha-enabled", "true", "--ha-identity", identity, "--ha-namespace", namespace]
        args += ["--nodes-lease-namespace", namespace, *flags]

    def kill(self) -> None:
        """SIGKILL, as a crashed pod or a lost machine."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def log(self) -> str:
        return (self.root / "hub.log").read_text(errors="replace")


class Balancer:
    """Round-robin TCP forwarding from one loopback port to the backends' ports."""

    def __init__(self, backends: list[int], port: int = 0, reuse_port: bool = False) -> None:
        self.backends = backends
        self.port = port
        self.reuse_port = reuse_port
        self._next = itertools.count()
        self._server: asyncio.AbstractServer | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def __aenter__(self) -> Balancer:
        self._server = await asyncio.start_server(
            self._accept, "127.0.0.1", self.port, reuse_port=self.reuse_port, backlog=4096
        )
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):  # ends both copies of every connection
            writer.close()
        await self._server.wait_closed()

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        start = next(self._next)
        for i in range(len(self.backends)):
            port = self.backends[(start + i) % len(self.backends)]
            try:
                return await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                continue  # not ready (killed, restarting): the next endpoint
        return None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            upstream = await self._connect()
            if upstream is None:
                return
            up_reader, up_writer = upstream
            self._writers.add(up_writer)
            try:
                await asyncio.gather(_copy(reader, up_writer), _copy(up_reader, writer))
            finally:
                up_writer.close()
                self._writers.discard(up_writer)
        finally:
            writer.close()
            self._writers.discard(writer)


class BalancerProcesses:
    """:class:`Balancer` in ``count`` processes sharing one port (``SO_REUSEPORT``: the
    kernel spreads new connections over them), for fleets whose two sockets per connection
    exceed one process's open-file limit, and whose copying should not share this process's
    core.

    Args:
        backends: the backends' ports.
        count: processes (each holds two sockets per connection it carries).
    """

    def __init__(self, backends: list[int], count: int) -> None:
        self.backends = backends
        self.count = count
        self.port = 0
        self._procs: list[subprocess.Popen] = []

    def _spawn(self, port: int) -> int:
        args = [sys.executable, "-m", "tests.cloudhub.ha.processes", str(port)]
        proc = popen([*args, *map(str, self.backends)], stdout=subprocess.PIPE)
        self._procs.append(proc)
        assert proc.stdout is not None
        line = proc.stdout.readline()  # "<port>\n" once it listens
        if not line:
            raise RuntimeError(f"a balancer process exited with {proc.wait()}")
        return int(line)

    async def __aenter__(self) -> BalancerProcesses:
        try:
            self.port = await asyncio.to_thread(self._spawn, 0)
            for _ in range(self.count - 1):
                await asyncio.to_thread(self._spawn, self.port)
        except BaseException:
            await self.__aexit__()  # the ones already started
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        for proc in self._procs:  # its sockets close with it: both ends of every connection
            proc.kill()
        await asyncio.gather(*(asyncio.to_thread(p.wait) for p in self._procs))


async def _serve_balancer(port: int, backends: list[int]) -> None:
    async with Balancer(backends, port, reuse_port=True) as balancer:
        print(balancer.port, flush=True)
        await asyncio.Event().wait()  # until killed


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError, asyncio.IncompleteReadError):
        while data := await reader.read(_CHUNK):
            writer.write(data)
            await writer.drain()
    with contextlib.suppress(OSError):
        writer.close()


if __name__ == "__main__":  # python -m tests.cloudhub.ha.processes PORT BACKEND...
    from tests.bench.fds import ensure_open_files

    ensure_open_files(0)  # the soft limit up to the hard one
    asyncio.run(_serve_balancer(int(sys.argv[1]), [int(a) for a in sys.argv[2:]]))
