"""Pytest fixtures for the reference kube-apiserver, importable by any conftest.py.

Use from another test directory (e.g. the contract suite)::

    from tests.k8s.fixtures import kube_apiserver  # noqa: F401  (re-exported fixture)

Every conftest.py that imports ``kube_apiserver`` gets the same server: pytest makes one
session-scoped fixture per conftest, and they share one process-wide server, started by
the first and stopped when the last one is torn down.

When the binary or etcd is missing, tests that use the fixture are skipped with the
command that builds it, except under CI (``CI`` set in the environment), where they fail:
CI installs both through ``scripts/setup.sh test``, so a missing binary there is a bug.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.environment import missing
from tests.k8s.kube_apiserver import (
    BINARY_ENV,
    RECIPE,
    RunningAPIServer,
    binary_path,
    build_script,
    etcd_path,
    kubectl_path,
    start,
)

__all__ = ["Backend", "kube_apiserver", "kube_apiserver_binaries", "kubectl", "require"]


@dataclass(frozen=True)
class Backend:
    """An API server that kubectl is pointed at: its name and kubeconfig file."""

    name: str
    kubeconfig: Path


def require(what: str, how: str) -> None:
    """Skip the current test (fail it under CI) because ``what`` is missing; ``how`` fixes it."""
    missing(f"{what} is not available: {how}", "scripts/setup.sh test builds and installs it")


def _require_binaries() -> None:
    if binary_path() is None:
        require(
            f"the reference kube-apiserver {RECIPE}",
            f"run {build_script()} (about 5 minutes, once; it also rebuilds a cached binary "
            f"of an older recipe) or set ${BINARY_ENV}",
        )
    if etcd_path() is None:
        require("etcd", "apt-get install etcd-server")


@pytest.fixture(scope="session")
def kube_apiserver_binaries() -> None:
    """Skip (fail under CI) unless the kube-apiserver binary and etcd are both there."""
    _require_binaries()


class _SharedServer:
    """The one server of a test session, shared by every conftest that imports the fixture."""

    server: RunningAPIServer | None = None
    users = 0


@pytest.fixture(scope="session")
def kube_apiserver(tmp_path_factory: pytest.TempPathFactory, pki_ca) -> Iterator[RunningAPIServer]:
    """A real kube-apiserver v1.20.2 + etcd for the whole test session, stopped at its end;
    it trusts the session's hub CA (``pki_ca``) for kubelet serving certificates (the hub's
    kubelet API)."""
    _require_binaries()
    if _SharedServer.server is None:
        from protocol import pki

        _SharedServer.server = start(
            tmp_path_factory.mktemp("kube-apiserver"),
            kubelet_ca=pki.dump_certificate_pem(pki_ca.ca.certificate),
        )
    _SharedServer.users += 1
    try:
        yield _SharedServer.server
    finally:
        _SharedServer.users -= 1
        if _SharedServer.users == 0:
            _SharedServer.server.stop()
            _SharedServer.server = None


@pytest.fixture(scope="session")
def kubectl() -> str:
    """Path of the kubectl to test with (Debian's v1.20.2 unless ``$EDGEFLEET_KUBECTL``)."""
    path = kubectl_path()
    if path is None:
        require("kubectl", f"run {build_script()} (it unpacks Debian's kubernetes-client)")
    return str(path)
