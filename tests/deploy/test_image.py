"""The hub's container image (issue 16 item 1): deploy/build-image.sh builds it on this
machine from the Debian base it makes (no registry), and the image is what the Deployment
expects: non-root, read-only root filesystem friendly, ``cloudhub serve`` as its entry
point, OCI labels with the version and the source revision, at most 200 MB; the
``podman save`` archive is an OCI layout an operator can load anywhere."""

from __future__ import annotations

import json
import re
import subprocess
import tarfile

import pytest

from tests.deploy.conftest import IMAGE_TAG as TAG
from tests.deploy.wheels import REPO

# The engine's limits the host allows (as cloudhub.devtools.engine configures them).
ULIMITS = ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"]

pytestmark = [pytest.mark.slow, pytest.mark.podman]


@pytest.fixture
def built(hub_image):
    return hub_image


def test_image_is_small_non_root_and_labelled(built) -> None:
    report, image, _ = built
    version = re.search(r'(?m)^version = "(.+)"$', (REPO / "pyproject.toml").read_text())[1]
    head = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert report["image"] == TAG and report["version"] == version
    assert report["size_bytes"] == image["Size"] <= 200_000_000
    labels = image["Config"]["Labels"]
    assert labels["org.opencontainers.image.version"] == version
    assert labels["org.opencontainers.image.revision"] in (head, f"{head}-dirty")
    assert image["Config"]["User"] == "65532:65532"  # the Deployment's runAsUser
    assert image["Config"]["Entrypoint"] == ["/opt/cloudhub/bin/cloudhub"]
    assert image["Config"]["Cmd"] == ["serve"]
    assert "PYTHONDONTWRITEBYTECODE=1" in image["Config"]["Env"]


def test_image_runs_on_a_read_only_root(built) -> None:
    proc = subprocess.run(
        ["podman", "run", "--rm", *ULIMITS, "--read-only", "--tmpfs", "/tmp", TAG, "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "serve" in proc.stdout and "token" in proc.stdout
    # Without a cluster and without a volume for its store, the hub says where it writes.
    serve = subprocess.run(
        ["podman", "run", "--rm", *ULIMITS, "--read-only", "--tmpfs", "/tmp", TAG],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert serve.returncode != 0
    assert "/var/lib/cloudhub" in serve.stdout + serve.stderr


def test_saved_archive_is_an_oci_layout(built) -> None:
    report, _, out = built
    assert report["archive"] == str(out) and out.stat().st_size == report["archive_bytes"]
    with tarfile.open(out) as archive:
        names = set(archive.getnames())
        index = json.load(archive.extractfile("index.json"))
    assert {"oci-layout", "index.json"} <= names
    assert index["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"]
