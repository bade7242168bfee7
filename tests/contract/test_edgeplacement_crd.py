"""The EdgePlacement CRD of deploy/crds on every API: what the docs and the controller write.

Typed string fields must take ``""``: docs/placement.md's own example selects nodes by
``node-role.kubernetes.io/edge: ""``, and the placement controller writes an ungrouped
placement's status with ``groups: [{name: ""}]``. A kube-apiserver 1.20 compiled with Go
>= 1.16 without the kube-openapi fix for kubernetes#99804 refuses both (``must be of type
string: "null"``); released 1.20 binaries (Go 1.15) and our reference build (recipe 2 of
tests/k8s/build-kube-apiserver.sh) accept them.
"""

from __future__ import annotations

import contextlib
import pathlib
import re
from typing import Any

import pytest
import yaml
from kubernetes_asyncio.client.exceptions import ApiException

from tests.contract.conftest import Kube

REPO = pathlib.Path(__file__).resolve().parents[2]
CRD = REPO / "deploy/crds/edgeplacements.apps.edgefleet.io.yaml"
GROUP, VERSION, PLURAL = "apps.edgefleet.io", "v1alpha1", "edgeplacements"


def docs_example() -> dict[str, Any]:
    """The EdgePlacement of docs/placement.md's first YAML block, as a reader copies it."""
    text = (REPO / "docs/placement.md").read_text()
    for block in re.findall(r"```yaml\n(.*?)```", text, flags=re.S):
        doc = yaml.safe_load(block)
        if isinstance(doc, dict) and doc.get("kind") == "EdgePlacement":
            return doc
    raise AssertionError("docs/placement.md has no EdgePlacement example")


@pytest.fixture
async def edgeplacements(kube: Kube) -> None:
    """The real CRD installed (or already there from another test of the session)."""
    body = yaml.safe_load(CRD.read_text())
    try:
        await kube.apiext.create_custom_resource_definition(body)
    except ApiException as exc:
        if exc.status != 409:
            raise
    else:
        name = body["metadata"]["name"]
        kube.cluster_scoped(lambda: kube.apiext.delete_custom_resource_definition(name))

    async def served() -> bool:
        path = f"/apis/{GROUP}/{VERSION}/namespaces/{kube.ns}/{PLURAL}"
        status, _, _ = await kube.raw("GET", path)
        return status == 200

    await kube.eventually(served, "the EdgePlacement CRD to be served")


async def test_the_docs_example_with_empty_label_values_is_accepted(
    kube: Kube, edgeplacements: None
) -> None:
    example = docs_example()
    assert example["spec"]["nodeSelector"]["matchLabels"] == {"node-role.kubernetes.io/edge": ""}
    example["metadata"]["namespace"] = kube.ns
    made = await kube.custom.create_namespaced_custom_object(
        GROUP, VERSION, kube.ns, PLURAL, example
    )
    assert made["spec"]["nodeSelector"]["matchLabels"] == {"node-role.kubernetes.io/edge": ""}
    assert made["spec"]["template"]["spec"]["nodeSelector"] == {"kubernetes.io/arch": "arm64"}


async def test_an_ungrouped_status_with_an_empty_group_name_is_written(
    kube: Kube, edgeplacements: None
) -> None:
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "EdgePlacement",
        "metadata": {"name": "ungrouped"},
        "spec": {
            "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}},
            "replicas": 1,
        },
    }
    await kube.custom.create_namespaced_custom_object(GROUP, VERSION, kube.ns, PLURAL, body)
    status = {
        "observedGeneration": 1,
        "desired": 1,
        "placed": 1,
        "ready": 0,
        "updated": 1,
        # What the controller writes for a placement without groups (plan.py: "" group).
        "groups": [{"name": "", "desired": 1, "placed": 1, "ready": 0, "updated": 1}],
        "conditions": [{"type": "Placed", "status": "True", "reason": "", "message": ""}],
    }
    after = await kube.custom.patch_namespaced_custom_object_status(
        GROUP,
        VERSION,
        kube.ns,
        PLURAL,
        "ungrouped",
        {"status": status},
        _content_type="application/merge-patch+json",
    )
    assert after["status"]["groups"] == status["groups"]
    assert after["status"]["conditions"][0]["reason"] == ""


async def test_a_wrong_type_is_still_refused(kube: Kube, edgeplacements: None) -> None:
    # The fix lets "" through as a string; it must not let a number through as one.
    body = docs_example()
    body["metadata"] = {"name": "wrong"}
    body["spec"]["groups"]["byLabel"] = 7
    with contextlib.suppress(KeyError):
        del body["metadata"]["namespace"]
    status, answer, _ = await kube.raw(
        "POST", f"/apis/{GROUP}/{VERSION}/namespaces/{kube.ns}/{PLURAL}", body
    )
    assert status == 422, answer
    assert "spec.groups.byLabel" in {c["field"] for c in answer["details"]["causes"]}, answer
