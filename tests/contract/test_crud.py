"""Create, get, update, patch and delete, with the Status bodies of failures."""

from __future__ import annotations

import base64

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from tests.contract.conftest import Kube


def cm(name: str, **data: str) -> client.V1ConfigMap:
    return client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name), data=data or None)


def pod(name: str, **spec: object) -> dict:
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "demo"}},
        "spec": {"containers": [{"name": "main", "image": "busybox:1.36"}], **spec},
    }
    return body


async def test_create_sets_system_metadata_and_get_returns_it(kube: Kube) -> None:
    created = await kube.core.create_namespaced_config_map(kube.ns, cm("one", a="1"))
    meta = created.metadata
    assert meta.uid and meta.creation_timestamp is not None
    assert meta.namespace == kube.ns
    assert int(meta.resource_version) > 0
    got = await kube.core.read_namespaced_config_map("one", kube.ns)
    assert got.metadata.uid == meta.uid
    assert got.metadata.resource_version == meta.resource_version
    assert got.data == {"a": "1"}


async def test_generate_name_appends_five_random_characters(kube: Kube) -> None:
    body = client.V1ConfigMap(metadata=client.V1ObjectMeta(generate_name="gen-"))
    first = await kube.core.create_namespaced_config_map(kube.ns, body)
    second = await kube.core.create_namespaced_config_map(kube.ns, body)
    for made in (first, second):
        assert made.metadata.name.startswith("gen-")
        assert len(made.metadata.name) == len("gen-") + 5
        assert made.metadata.generate_name == "gen-"
    assert first.metadata.name != second.metadata.name


async def test_create_twice_is_409_already_exists(kube: Kube) -> None:
    await kube.core.create_namespaced_config_map(kube.ns, cm("dup"))
    status, body, _ = await kube.raw(
        "POST", f"/api/v1/namespaces/{kube.ns}/configmaps", {"metadata": {"name": "dup"}}
    )
    assert status == 409
    assert body["kind"] == "Status" and body["status"] == "Failure"
    assert body["reason"] == "AlreadyExists"
    assert body["code"] == 409
    assert body["details"] == {"name": "dup", "kind": "configmaps"}
    assert body["message"] == 'configmaps "dup" already exists'


async def test_get_missing_is_404_with_status(kube: Kube) -> None:
    status, body, _ = await kube.raw("GET", f"/apis/apps/v1/namespaces/{kube.ns}/deployments/none")
    assert status == 404
    assert body["reason"] == "NotFound"
    assert body["details"] == {"name": "none", "group": "apps", "kind": "deployments"}
    assert body["message"] == 'deployments.apps "none" not found'


async def test_create_in_missing_namespace_is_404(kube: Kube) -> None:
    missing = kube.unique("nowhere")
    with pytest.raises(ApiException) as err:
        await kube.core.create_namespaced_config_map(missing, cm("x"))
    assert err.value.status == 404


async def test_update_with_stale_resource_version_is_409_conflict(kube: Kube) -> None:
    first = await kube.core.create_namespaced_config_map(kube.ns, cm("c", v="1"))
    first.data = {"v": "2"}
    second = await kube.core.replace_namespaced_config_map("c", kube.ns, first)
    assert int(second.metadata.resource_version) > int(first.metadata.resource_version)
    stale = cm("c", v="3")
    stale.metadata.resource_version = first.metadata.resource_version
    status, body, _ = await kube.raw(
        "PUT",
        f"/api/v1/namespaces/{kube.ns}/configmaps/c",
        client.ApiClient().sanitize_for_serialization(stale),
    )
    assert status == 409
    assert body["reason"] == "Conflict"
    assert body["message"].startswith('Operation cannot be fulfilled on configmaps "c"')
    current = await kube.core.read_namespaced_config_map("c", kube.ns)
    assert current.data == {"v": "2"}


async def test_update_of_a_recreated_object_with_the_old_uid_is_409(kube: Kube) -> None:
    """A read-modify-write without resourceVersion still carries the uid it read: the
    uid is a precondition, so the update does not land on a new object of that name."""
    old = await kube.core.create_namespaced_config_map(kube.ns, cm("r", v="1"))
    await kube.core.delete_namespaced_config_map("r", kube.ns)
    new = await kube.core.create_namespaced_config_map(kube.ns, cm("r", v="new"))
    stale = cm("r", v="stale")
    stale.metadata.uid = old.metadata.uid
    status, body, _ = await kube.raw(
        "PUT",
        f"/api/v1/namespaces/{kube.ns}/configmaps/r",
        kube.api.sanitize_for_serialization(stale),
    )
    assert status == 409, body
    assert body["reason"] == "Conflict"
    assert "Precondition failed: UID in precondition" in body["message"]
    current = await kube.core.read_namespaced_config_map("r", kube.ns)
    assert current.data == {"v": "new"}
    assert current.metadata.resource_version == new.metadata.resource_version
    # The right uid is no obstacle.
    stale.metadata.uid = new.metadata.uid
    replaced = await kube.core.replace_namespaced_config_map("r", kube.ns, stale)
    assert replaced.data == {"v": "stale"}


@pytest.mark.parametrize(
    ("content_type", "patch"),
    [
        ("application/merge-patch+json", {"metadata": {"uid": "0000"}, "data": {"v": "2"}}),
        ("application/strategic-merge-patch+json", {"metadata": {"uid": "0000"}}),
        (
            "application/json-patch+json",
            [{"op": "replace", "path": "/metadata/uid", "value": "0000"}],
        ),
    ],
)
async def test_patching_the_uid_is_422_immutable(
    kube: Kube, content_type: str, patch: object
) -> None:
    made = await kube.core.create_namespaced_config_map(kube.ns, cm("p", v="1"))
    status, body, _ = await kube.raw(
        "PATCH", f"/api/v1/namespaces/{kube.ns}/configmaps/p", patch, content_type=content_type
    )
    assert status == 422, body
    assert body["details"]["causes"][0]["field"] == "metadata.uid"
    assert "field is immutable" in body["message"]
    current = await kube.core.read_namespaced_config_map("p", kube.ns)
    assert current.metadata.uid == made.metadata.uid
    assert current.metadata.resource_version == made.metadata.resource_version


async def test_update_without_resource_version_is_unconditional(kube: Kube) -> None:
    await kube.core.create_namespaced_config_map(kube.ns, cm("u", v="1"))
    replaced = await kube.core.replace_namespaced_config_map("u", kube.ns, cm("u", v="2"))
    assert replaced.data == {"v": "2"}


async def test_update_missing_object_is_404(kube: Kube) -> None:
    with pytest.raises(ApiException) as err:
        await kube.core.replace_namespaced_config_map("ghost", kube.ns, cm("ghost"))
    assert err.value.status == 404


async def test_update_that_changes_nothing_keeps_the_resource_version(kube: Kube) -> None:
    made = await kube.core.create_namespaced_config_map(kube.ns, cm("same", a="1"))
    again = await kube.core.replace_namespaced_config_map("same", kube.ns, made)
    assert again.metadata.resource_version == made.metadata.resource_version


async def test_name_in_body_must_match_url(kube: Kube) -> None:
    await kube.core.create_namespaced_config_map(kube.ns, cm("right"))
    status, body, _ = await kube.raw(
        "PUT", f"/api/v1/namespaces/{kube.ns}/configmaps/right", {"metadata": {"name": "wrong"}}
    )
    assert status == 400
    assert body["reason"] == "BadRequest"


async def test_namespace_in_body_must_match_url(kube: Kube) -> None:
    status, body, _ = await kube.raw(
        "POST",
        f"/api/v1/namespaces/{kube.ns}/configmaps",
        {"metadata": {"name": "x", "namespace": "default"}},
    )
    assert status == 400
    assert body["reason"] == "BadRequest"
    assert "namespace" in body["message"]


async def test_invalid_name_is_422_with_cause(kube: Kube) -> None:
    status, body, _ = await kube.raw(
        "POST", f"/api/v1/namespaces/{kube.ns}/configmaps", {"metadata": {"name": "Bad_Name"}}
    )
    assert status == 422
    assert body["reason"] == "Invalid"
    assert body["details"]["kind"] == "ConfigMap"
    assert body["details"]["name"] == "Bad_Name"
    causes = body["details"]["causes"]
    assert any(c["field"] == "metadata.name" and c["reason"] == "FieldValueInvalid" for c in causes)
    assert body["message"].startswith(
        'ConfigMap "Bad_Name" is invalid: metadata.name: Invalid value'
    )


async def test_pod_without_containers_is_422_required(kube: Kube) -> None:
    status, body, _ = await kube.raw(
        "POST", f"/api/v1/namespaces/{kube.ns}/pods", {"metadata": {"name": "p"}, "spec": {}}
    )
    assert status == 422
    assert any(
        c["field"] == "spec.containers" and c["reason"] == "FieldValueRequired"
        for c in body["details"]["causes"]
    )


async def test_pod_with_missing_image_and_bad_restart_policy_lists_both_causes(kube: Kube) -> None:
    body = pod("p", restartPolicy="Sometimes")
    del body["spec"]["containers"][0]["image"]
    status, status_body, _ = await kube.raw("POST", f"/api/v1/namespaces/{kube.ns}/pods", body)
    assert status == 422
    fields = {(c["field"], c["reason"]) for c in status_body["details"]["causes"]}
    assert ("spec.containers[0].image", "FieldValueRequired") in fields
    assert ("spec.restartPolicy", "FieldValueNotSupported") in fields


async def test_malformed_json_body_is_400(kube: Kube) -> None:
    status, body, _ = await kube.raw(
        "POST",
        f"/api/v1/namespaces/{kube.ns}/configmaps",
        b"{not json",
        content_type="application/json",
    )
    assert status == 400
    assert body["kind"] == "Status" and body["reason"] == "BadRequest"


async def test_wrong_value_type_is_400(kube: Kube) -> None:
    status, body, _ = await kube.raw(
        "POST",
        f"/api/v1/namespaces/{kube.ns}/configmaps",
        {"metadata": {"name": "typed"}, "data": {"n": 5}},
    )
    assert status == 400
    assert body["reason"] == "BadRequest"


async def test_pod_defaults_are_filled_in(kube: Kube) -> None:
    made = await kube.core.create_namespaced_pod(kube.ns, pod("defaults"))
    spec = made.spec
    assert spec.restart_policy == "Always"
    assert spec.dns_policy == "ClusterFirst"
    assert spec.termination_grace_period_seconds == 30
    assert spec.scheduler_name == "default-scheduler"
    container = spec.containers[0]
    assert container.image_pull_policy == "IfNotPresent"
    assert container.termination_message_path == "/dev/termination-log"
    assert made.status.phase == "Pending"
    assert made.status.qos_class == "BestEffort"
    keys = {t.key for t in spec.tolerations or []}
    assert {"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"} <= keys


async def test_latest_image_is_pulled_always(kube: Kube) -> None:
    body = pod("latest")
    body["spec"]["containers"][0]["image"] = "busybox"
    made = await kube.core.create_namespaced_pod(kube.ns, body)
    assert made.spec.containers[0].image_pull_policy == "Always"


async def test_pod_spec_is_immutable_but_image_may_change(kube: Kube) -> None:
    await kube.core.create_namespaced_pod(kube.ns, pod("imm"))
    patched = await kube.core.patch_namespaced_pod(
        "imm", kube.ns, {"spec": {"containers": [{"name": "main", "image": "busybox:1.37"}]}}
    )
    assert patched.spec.containers[0].image == "busybox:1.37"
    status, body, _ = await kube.raw(
        "PATCH",
        f"/api/v1/namespaces/{kube.ns}/pods/imm",
        {"spec": {"restartPolicy": "Never"}},
        content_type="application/merge-patch+json",
    )
    assert status == 422
    assert body["reason"] == "Invalid"


async def test_secret_data_must_be_base64(kube: Kube) -> None:
    status, body, _ = await kube.raw(
        "POST",
        f"/api/v1/namespaces/{kube.ns}/secrets",
        {"metadata": {"name": "s"}, "data": {"password": "not base64!"}},
    )
    assert status == 400
    assert body["reason"] == "BadRequest"
    with pytest.raises(ApiException):
        await kube.core.read_namespaced_secret("s", kube.ns)


async def test_secret_string_data_is_stored_base64_in_data(kube: Kube) -> None:
    made = await kube.core.create_namespaced_secret(
        kube.ns,
        client.V1Secret(metadata=client.V1ObjectMeta(name="sd"), string_data={"user": "admin"}),
    )
    assert made.type == "Opaque"
    assert made.data == {"user": base64.b64encode(b"admin").decode()}
    assert made.string_data is None


async def test_dry_run_create_stores_nothing(kube: Kube) -> None:
    made = await kube.core.create_namespaced_config_map(kube.ns, cm("dry"), dry_run="All")
    assert made.metadata.name == "dry"
    with pytest.raises(ApiException) as err:
        await kube.core.read_namespaced_config_map("dry", kube.ns)
    assert err.value.status == 404


async def test_delete_returns_status_for_configmaps_and_object_for_pods(kube: Kube) -> None:
    made = await kube.core.create_namespaced_config_map(kube.ns, cm("gone"))
    status, body, _ = await kube.raw("DELETE", f"/api/v1/namespaces/{kube.ns}/configmaps/gone")
    assert status == 200
    assert body["kind"] == "Status" and body["status"] == "Success"
    assert body["details"]["name"] == "gone"
    assert body["details"]["kind"] == "configmaps"
    assert body["details"]["uid"] == made.metadata.uid
    await kube.core.create_namespaced_pod(kube.ns, pod("gone-pod"))
    status, body, _ = await kube.raw("DELETE", f"/api/v1/namespaces/{kube.ns}/pods/gone-pod")
    assert status == 200
    assert body["kind"] == "Pod"
    with pytest.raises(ApiException) as err:
        await kube.core.read_namespaced_pod("gone-pod", kube.ns)
    assert err.value.status == 404


async def test_delete_missing_is_404(kube: Kube) -> None:
    with pytest.raises(ApiException) as err:
        await kube.core.delete_namespaced_config_map("never", kube.ns)
    assert err.value.status == 404


async def test_delete_precondition_on_uid_is_409(kube: Kube) -> None:
    await kube.core.create_namespaced_config_map(kube.ns, cm("pre"))
    status, body, _ = await kube.raw(
        "DELETE",
        f"/api/v1/namespaces/{kube.ns}/configmaps/pre",
        {
            "kind": "DeleteOptions",
            "apiVersion": "v1",
            "preconditions": {"uid": "00000000-0000-0000-0000-000000000000"},
        },
    )
    assert status == 409
    assert body["reason"] == "Conflict"
    assert await kube.core.read_namespaced_config_map("pre", kube.ns)


async def test_wrong_token_is_401(kube: Kube) -> None:
    status, body, _ = await kube.raw(
        "GET", "/api/v1/namespaces", headers={"Authorization": "Bearer wrong"}
    )
    assert status == 401
    assert body["kind"] == "Status"


async def test_quantities_may_be_json_numbers(kube: Kube) -> None:
    body = pod("q")
    body["spec"]["containers"][0]["resources"] = {"limits": {"cpu": 2}, "requests": {"cpu": "500m"}}
    status, made, _ = await kube.raw("POST", f"/api/v1/namespaces/{kube.ns}/pods", body)
    assert status == 201, made
    resources = made["spec"]["containers"][0]["resources"]
    assert resources == {"limits": {"cpu": "2"}, "requests": {"cpu": "500m"}}
    assert made["status"]["qosClass"] == "Burstable"


@pytest.mark.parametrize(
    ("quantity", "why"),
    [
        ("1.2.3", "quantities must match the regular expression"),
        ("1e3e3", "quantities must match the regular expression"),
        ("0x10", "quantities must match the regular expression"),
        ("", "quantities must match the regular expression"),
        ("1K", "unable to parse quantity's suffix"),
        ("1e", "unable to parse quantity's suffix"),
        ("--1", "unable to parse quantity's suffix"),
        ("1Gi2", "unable to parse quantity's suffix"),
    ],
)
async def test_malformed_quantity_is_400(kube: Kube, quantity: str, why: str) -> None:
    """kube-apiserver decodes a resource.Quantity as it reads the body; what it cannot
    parse never reaches the store (nor the placement controller or a kubelet)."""
    body = pod("badq")
    body["spec"]["containers"][0]["resources"] = {"requests": {"memory": quantity}}
    status, answer, _ = await kube.raw("POST", f"/api/v1/namespaces/{kube.ns}/pods", body)
    assert status == 400, answer
    assert answer["reason"] == "BadRequest"
    assert why in answer["message"]
    status, _, _ = await kube.raw("GET", f"/api/v1/namespaces/{kube.ns}/pods/badq")
    assert status == 404


@pytest.mark.parametrize("quantity", ["1.5Gi", "100m", "1e3", "2E-1", " 64Mi ", ".5", "5.", "e3"])
async def test_well_formed_quantities_are_accepted(kube: Kube, quantity: str) -> None:
    body = pod("goodq")
    body["spec"]["containers"][0]["resources"] = {"requests": {"memory": quantity}}
    status, answer, _ = await kube.raw("POST", f"/api/v1/namespaces/{kube.ns}/pods", body)
    assert status == 201, answer


async def test_negative_request_is_422(kube: Kube) -> None:
    body = pod("negq")
    body["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "-100m"}}
    status, answer, _ = await kube.raw("POST", f"/api/v1/namespaces/{kube.ns}/pods", body)
    assert status == 422, answer
    cause = answer["details"]["causes"][0]
    assert cause["field"] == "spec.containers[0].resources.requests[cpu]"
    assert "must be greater than or equal to 0" in cause["message"]


async def test_requests_default_to_limits(kube: Kube) -> None:
    body = pod("lim")
    body["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "500m", "memory": "64Mi"}}
    made = await kube.core.create_namespaced_pod(kube.ns, body)
    resources = made.spec.containers[0].resources
    assert resources.requests == {"cpu": "500m", "memory": "64Mi"}
    assert made.status.qos_class == "Guaranteed"


async def test_empty_optional_lists_and_zero_values_are_dropped(kube: Kube) -> None:
    body = pod("omit")
    container = body["spec"]["containers"][0]
    container["env"] = []
    container["volumeMounts"] = [{"name": "v", "mountPath": "/v", "readOnly": False}]
    body["spec"]["volumes"] = [{"name": "v", "emptyDir": {}}]
    status, made, _ = await kube.raw("POST", f"/api/v1/namespaces/{kube.ns}/pods", body)
    assert status == 201, made
    stored = made["spec"]["containers"][0]
    assert "env" not in stored
    assert stored["volumeMounts"] == [{"name": "v", "mountPath": "/v"}]
    assert made["spec"]["volumes"] == [{"name": "v", "emptyDir": {}}]
