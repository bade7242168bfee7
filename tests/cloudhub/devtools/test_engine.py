"""The demo's private podman engine on what Debian ships: either network backend, and a clear
one-line reason (never a traceback) when podman is there but cannot run a container.

Debian 12's podman 4.3 uses netavark where it is installed and CNI otherwise (round 1's engine
wrote only netavark's format, so a stock machine failed with "network not found").
``scripts/setup.sh`` installs both, and each is tested here.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import stat

import pytest

from cloudhub.devtools.engine import (
    NETWORK_BACKENDS,
    EngineUnavailable,
    start_engine,
    stop_engine,
    unavailable_reason,
)
from tests.environment import missing


def _backend_installed(backend: str) -> bool:
    if backend == "netavark":
        return any(
            pathlib.Path(d, "netavark").exists()
            for d in ("/usr/lib/podman", "/usr/libexec/podman", "/usr/local/libexec/podman")
        )
    return (
        pathlib.Path("/usr/lib/cni/bridge").exists() or pathlib.Path("/opt/cni/bin/bridge").exists()
    )


@pytest.mark.podman
@pytest.mark.parametrize("backend", NETWORK_BACKENDS)
def test_engine_runs_a_container_on_each_network_backend(
    backend: str, tmp_path: pathlib.Path
) -> None:
    if reason := unavailable_reason():
        missing(reason, "scripts/setup.sh test installs podman")
    if not _backend_installed(backend):
        missing(f"podman's {backend} backend is not installed", "scripts/setup.sh test")
    engine = start_engine(tmp_path, network_backend=backend)
    try:
        assert engine.network_backend == backend
        # The engine's network is declared in the backend's own format, and a container on it
        # gets an address from its subnet.
        out = engine.podman(
            "run", "--rm", "--network", engine.network, engine.image, "ip", "-4", "addr"
        )
        subnet = engine.podman(
            "network", "inspect", engine.network, "--format", "{{range .Subnets}}{{.Subnet}}{{end}}"
        ).strip()
        prefix = subnet.rsplit(".", 1)[0] + "."
        assert prefix in out, (subnet, out)
        assert pathlib.Path(engine.url.removeprefix("unix://")).exists()
    finally:
        stop_engine(engine)
    assert engine.service is not None and engine.service.poll() is not None


def _fake_podman(directory: pathlib.Path, failing: str, message: str) -> None:
    """A podman whose ``failing`` subcommand fails the way podman does (stderr, exit 125)."""
    real = shutil.which("podman") or "/usr/bin/podman"
    script = directory / "podman"
    script.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = "{failing}" ]; then\n'
        '  echo \'time="2026-01-01T00:00:00Z" level=error msg="detail"\' >&2\n'
        f"  echo 'Error: {message}' >&2\n"
        "  exit 125\n"
        "fi\n"
        f'exec {real} "$@"\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


@pytest.mark.podman
def test_a_podman_that_cannot_run_containers_is_one_clear_line(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if reason := unavailable_reason():
        missing(reason, "scripts/setup.sh test installs podman")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    _fake_podman(bindir, "run", "crun: creating cgroup directory: Permission denied: OCI error")
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(EngineUnavailable) as caught:
        start_engine(tmp_path / "engine")
    text = str(caught.value)
    assert "\n" not in text
    assert text.startswith("podman cannot run a container here: podman run")
    assert "creating cgroup directory: Permission denied" in text
    assert "level=error" not in text
    # The engine's network was removed again: nothing is left for the next try.
    networks = tmp_path / "engine" / "networks"
    assert not [p for p in networks.iterdir() if p.suffix in (".json", ".conflist")]


def test_no_podman_is_named(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(EngineUnavailable, match="podman is not installed"):
        start_engine(tmp_path / "engine")
