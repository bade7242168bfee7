"""A local image registry for the tests: Debian's ``docker-registry`` (distribution 2.8)
on a free loopback port with its storage in a temporary directory (no registry is
reachable from the test machines). ``scripts/setup.sh test`` installs the package and
disables its own service on :5000."""

from __future__ import annotations

import pathlib
import shutil
import socket
import subprocess
import urllib.error
import urllib.request

from tests.waiting import eventually_sync

__all__ = ["LocalRegistry", "free_tcp_port"]

BINARY = "/usr/bin/docker-registry"


def free_tcp_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class LocalRegistry:
    """``docker-registry serve`` on ``127.0.0.1:<port>`` until :meth:`stop`.

    Args:
        root: an empty directory (config, storage, log).
        port: the TCP port (a free one when 0).

    Raises:
        FileNotFoundError: the package is not installed (``missing()`` in the fixture).
        RuntimeError: it did not answer ``GET /v2/`` within 30 s (its log is in the text).
    """

    def __init__(self, root: pathlib.Path, port: int = 0) -> None:
        if shutil.which(BINARY) is None:
            raise FileNotFoundError(BINARY)
        self.root = root
        self.port = port or free_tcp_port()
        self.address = f"127.0.0.1:{self.port}"
        config = root / "config.yml"
        config.write_text(
            "version: 0.1\n"
            "log: {level: warn}\n"
            f"storage: {{filesystem: {{rootdirectory: {root / 'data'}}}}}\n"
            f"http: {{addr: '{self.address}'}}\n"
        )
        self._log = open(root / "registry.log", "w")  # closed in stop()
        self.process = subprocess.Popen(
            [BINARY, "serve", str(config)], stdout=self._log, stderr=subprocess.STDOUT
        )
        started = eventually_sync(
            lambda: self._answers() or self.process.poll() is not None,
            "docker-registry answering GET /v2/",
            30,
            otherwise=lambda: False,
        )
        if not started or self.process.poll() is not None:  # timed out, or it exited
            self.stop()
            text = (root / "registry.log").read_text()[-2000:]
            raise RuntimeError(f"docker-registry did not start: {text}")

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.address}/v2/", timeout=1) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def stop(self) -> None:
        """Stop the registry process (the one this object started)."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self._log.close()
