"""Fixtures for the deploy tests: the reference kube-apiserver and kubectl (shared with
the rest of the session, see tests/k8s/fixtures.py), and a started hub PKI on the
embedded API (tests/cloudhub/pki/conftest.py)."""

import json
import shutil
import subprocess

import pytest

from tests.cloudhub.pki.conftest import cluster, start_hub  # noqa: F401  (re-exported)
from tests.deploy.wheels import REPO
from tests.environment import missing
from tests.k8s.fixtures import kube_apiserver, kubectl  # noqa: F401  (re-exported fixtures)

#: The tag the tests build the hub's image under (removed at the session's end).
IMAGE_TAG = "localhost/edgefleet/cloudhub:test"


def node_pod(name: str, node: str, command: list[str]) -> dict:
    """A pod in ``default`` bound to ``node``: one container ``c``, image ``busybox``, running
    ``command`` (what a test applies once its joined agent is Ready)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "c", "image": "busybox", "command": command}],
        },
    }


@pytest.fixture(scope="session")
def hub_image(tmp_path_factory: pytest.TempPathFactory):
    """deploy/build-image.sh run once for the session: ``(report, inspect, archive)``."""
    if shutil.which("podman") is None:
        missing("podman is needed to build the hub's image", "scripts/setup.sh test installs it")
    if shutil.which("debootstrap") is None:
        missing("debootstrap is needed for the image's base", "scripts/setup.sh test installs it")
    out = tmp_path_factory.mktemp("image") / "cloudhub.oci.tar"
    script = REPO / "deploy" / "build-image.sh"
    proc = subprocess.run(
        [str(script), "--tag", IMAGE_TAG, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    inspect = subprocess.run(
        ["podman", "image", "inspect", IMAGE_TAG], capture_output=True, text=True, check=True
    )
    yield report, json.loads(inspect.stdout)[0], out
    out.unlink(missing_ok=True)
    subprocess.run(["podman", "rmi", "-f", IMAGE_TAG], capture_output=True, timeout=120)
