"""EdgeUpgrade and EdgeImagePrePull as an operator uses them: kubectl 1.20 against the
reference kube-apiserver, the CRDs of deploy/crds applied as docs/upgrade.md says."""

from __future__ import annotations

import uuid

import pytest

from tests.cloudhub.hub.conftest import CRDS, KUBE_APISERVER, Cluster, apply, run

pytestmark = pytest.mark.kubeapiserver
DIGEST = "ab" * 32
WHEEL = "edgefleet-0.5.0-py3-none-any.whl"


def upgrade(name: str, **spec) -> dict:
    return {
        "apiVersion": "apps.edgefleet.io/v1alpha1",
        "kind": "EdgeUpgrade",
        "metadata": {"name": name},
        "spec": {"version": "0.5.0", "artifact": {"sha256": DIGEST, "name": WHEEL}, **spec},
    }


def prepull(name: str, images: list[str]) -> dict:
    return {
        "apiVersion": "apps.edgefleet.io/v1alpha1",
        "kind": "EdgeImagePrePull",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"images": images},
    }


@pytest.mark.parametrize("cluster", [KUBE_APISERVER], indirect=True)
@pytest.mark.parametrize(
    ("spec", "refusal"),
    [
        ({"maxUnavailable": -1}, "spec.maxUnavailable in body should be greater than or equal"),
        ({"maxUnavailable": 0}, "spec.maxUnavailable in body should be greater than or equal"),
        ({"maxUnavailable": "150%"}, "spec.maxUnavailable in body should match"),
        ({"maxUnavailable": "0%"}, "spec.maxUnavailable in body should match"),
        ({"maxUnavailable": "2"}, "spec.maxUnavailable in body should match"),
        ({"artifact": {"sha256": "zz" * 32, "name": WHEEL}}, "spec.artifact.sha256"),
        ({"artifact": {"sha256": DIGEST, "name": "../x.whl"}}, "spec.artifact.name"),
        ({"version": "v0.5"}, "spec.version"),
        ({"failurePolicy": "Ignore"}, "spec.failurePolicy"),
    ],
    ids=["negative", "zero", "150%", "0%", "string-count", "sha-not-hex", "traversal",
         "version", "policy"],
)  # fmt: skip
def test_a_bad_edgeupgrade_is_refused_at_apply_naming_the_field(
    kubectl_bin: str, cluster: Cluster, crds: None, spec: dict, refusal: str
) -> None:
    """Found by breakit5 (the count, the percentages): a negative, zero or 150% batch was
    accepted by the API and only the hub's status said Invalid."""
    name = f"bad-{uuid.uuid4().hex[:6]}"
    done = apply(kubectl_bin, cluster, upgrade(name, **spec))
    assert done.returncode == 1, done.stdout
    assert f'The EdgeUpgrade "{name}" is invalid' in done.stderr and refusal in done.stderr
    assert run(kubectl_bin, cluster, "get", "edgeupgrade", name).returncode == 1  # not stored


@pytest.mark.parametrize("cluster", [KUBE_APISERVER], indirect=True)
def test_a_bad_image_list_is_refused_at_apply(
    kubectl_bin: str, cluster: Cluster, crds: None
) -> None:
    """Found by breakit5 (the duplicate): an image named twice was stored and only the
    hub's status said Invalid; 33 images were refused already."""
    name = f"pp-{uuid.uuid4().hex[:6]}"
    many = apply(
        kubectl_bin, cluster, prepull(name, [f"registry.local:5000/a:{i}" for i in range(33)])
    )
    assert (
        many.returncode == 1 and "spec.images in body should have at most 32 items" in many.stderr
    )
    twice = apply(kubectl_bin, cluster, prepull(name, ["registry.local:5000/a:1"] * 2))
    assert twice.returncode == 1
    assert 'spec.images[1]: Duplicate value: "registry.local:5000/a:1"' in twice.stderr
    upper = apply(kubectl_bin, cluster, prepull(name, ["Registry/A:1"]))
    assert upper.returncode == 1 and "spec.images in body should match" in upper.stderr


@pytest.mark.parametrize("cluster", [KUBE_APISERVER], indirect=True)
def test_kubectl_explain_prints_the_descriptions_as_written(
    kubectl_bin: str, cluster: Cluster, crds: None
) -> None:
    """Found by breakit5: kubectl 1.20's explain treats a description as a format string:
    "Default 10%." came out as "Default 10%!.(MISSING)"."""
    for field in ("edgeupgrade.spec.maxUnavailable", "edgeupgrade.spec", "edgeimageprepull.spec"):
        done = run(kubectl_bin, cluster, "explain", field)
        assert done.returncode == 0, done.stderr
        assert "%!" not in done.stdout and "(MISSING)" not in done.stdout, done.stdout
    for path in CRDS.glob("*.yaml"):
        descriptions = [line for line in path.read_text().splitlines() if "%" in line]
        assert all("pattern:" in line or line.lstrip().startswith("#") for line in descriptions)
