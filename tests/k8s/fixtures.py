"""Pytest fixtures for the reference kube-apiserver, importable by any conftest.py.

Use from another test directory (e.g. the contract suite)::

    from tests.k8s.fixtures import kube_apiserver  # noqa: F401  (re-exported fixture)

Each conftest.py that imports ``kube_apiserver`` defines its own session-scoped instance
(a second server, about 6 s more per session); to share one across directories, register
this module once in the top-level ``tests/conftest.py`` with
``pytest_plugins = ["tests.k8s.fixtures"]``.

When the binary or etcd is missing, tests that use the fixture are skipped with the
command that builds it, except under CI (``CI`` set in the environment), where they fail:
CI installs both through ``scripts/install-dev.sh``, so a missing binary there is a bug.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.k8s.kube_apiserver import (
    BINARY_ENV,
    RunningAPIServer,
    binary_path,
    build_script,
    etcd_path,
    kubectl_path,
    start,
)

__all__ = ["Backend", "kube_apiserver", "kubectl", "require"]


@dataclass(frozen=True)
class Backend:
    """An API server that kubectl is pointed at: its name and kubeconfig file."""

    name: str
    kubeconfig: Path


def require(what: str, how: str) -> None:
    """Skip the current test (fail it under CI) because ``what`` is missing; ``how`` fixes it."""
    message = f"{what} is not available: {how}"
    if os.environ.get("CI"):
        pytest.fail(f"{message} (CI must provide it: see scripts/install-dev.sh)")
    pytest.skip(message)


@pytest.fixture(scope="session")
def kube_apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningAPIServer]:
    """A real kube-apiserver v1.20.2 + etcd for the whole test session, stopped at its end."""
    if binary_path() is None:
        require(
            "the reference kube-apiserver v1.20.2",
            f"run {build_script()} (about 5 minutes, once) or set ${BINARY_ENV}",
        )
    if etcd_path() is None:
        require("etcd", "apt-get install etcd-server")
    server = start(tmp_path_factory.mktemp("kube-apiserver"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def kubectl() -> str:
    """Path of the kubectl to test with (Debian's v1.20.2 unless ``$EDGEFLEET_KUBECTL``)."""
    path = kubectl_path()
    if path is None:
        require("kubectl", f"run {build_script()} (it unpacks Debian's kubernetes-client)")
    return str(path)
