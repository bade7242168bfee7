"""Status subresource, generation, finalizers and graceful deletion, deletecollection."""

from __future__ import annotations

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from tests.contract.conftest import Kube


def deployment(name: str, image: str = "busybox:1.36", replicas: int = 1) -> client.V1Deployment:
    labels = {"app": name}
    return client.V1Deployment(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1DeploymentSpec(
            replicas=replicas,
            selector=client.V1LabelSelector(match_labels=labels),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels=labels),
                spec=client.V1PodSpec(containers=[client.V1Container(name="c", image=image)]),
            ),
        ),
    )


def pod(name: str, node: str | None = None) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1PodSpec(
            containers=[client.V1Container(name="c", image="busybox:1.36")], node_name=node
        ),
    )


async def test_deployment_defaults_and_generation_on_spec_change(kube: Kube) -> None:
    made = await kube.apps.create_namespaced_deployment(kube.ns, deployment("web"))
    assert made.metadata.generation == 1
    assert made.spec.strategy.type == "RollingUpdate"
    assert made.spec.revision_history_limit == 10
    assert made.spec.progress_deadline_seconds == 600
    labelled = await kube.apps.patch_namespaced_deployment(
        "web", kube.ns, {"metadata": {"labels": {"x": "y"}}}
    )
    assert labelled.metadata.generation == 1
    scaled = await kube.apps.patch_namespaced_deployment("web", kube.ns, {"spec": {"replicas": 3}})
    assert scaled.metadata.generation == 2


async def test_status_is_ignored_on_the_main_resource(kube: Kube) -> None:
    await kube.apps.create_namespaced_deployment(kube.ns, deployment("st"))
    patched = await kube.apps.patch_namespaced_deployment(
        "st", kube.ns, {"status": {"replicas": 7}, "spec": {"replicas": 2}}
    )
    assert patched.spec.replicas == 2
    # (On a cluster with controllers the deployment controller may have written
    # status in between, but never 7 replicas.)
    assert patched.status.replicas != 7


async def test_status_subresource_changes_only_status(kube: Kube) -> None:
    made = await kube.apps.create_namespaced_deployment(kube.ns, deployment("sub"))
    body = {
        "spec": {"replicas": 9},
        "metadata": {"labels": {"sneaky": "yes"}},
        "status": {"replicas": 1, "readyReplicas": 1, "observedGeneration": 1},
    }
    patched = await kube.apps.patch_namespaced_deployment_status("sub", kube.ns, body)
    assert patched.status.ready_replicas == 1
    assert patched.spec.replicas == 1
    assert not (patched.metadata.labels or {}).get("sneaky")
    assert patched.metadata.generation == made.metadata.generation
    assert int(patched.metadata.resource_version) > int(made.metadata.resource_version)
    read = await kube.apps.read_namespaced_deployment_status("sub", kube.ns)
    assert read.spec.replicas == 1


async def test_pod_status_update_through_put(kube: Kube) -> None:
    await kube.core.create_namespaced_pod(kube.ns, pod("ps", node="edge-1"))
    current = await kube.core.read_namespaced_pod_status("ps", kube.ns)
    current.status.phase = "Running"
    current.status.pod_ip = "10.1.2.3"
    current.status.conditions = [client.V1PodCondition(type="Ready", status="True")]
    updated = await kube.core.replace_namespaced_pod_status("ps", kube.ns, current)
    assert updated.status.phase == "Running"
    running = await kube.core.list_namespaced_pod(kube.ns, field_selector="status.phase=Running")
    assert [p.metadata.name for p in running.items] == ["ps"]
    stale = current
    stale.status.phase = "Failed"
    with pytest.raises(ApiException) as err:
        await kube.core.replace_namespaced_pod_status("ps", kube.ns, stale)
    assert err.value.status == 409


async def test_finalizers_make_deletion_two_step(kube: Kube) -> None:
    body = client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="fin", finalizers=["example.com/hold"])
    )
    made = await kube.core.create_namespaced_config_map(kube.ns, body)
    status, deleted, _ = await kube.raw("DELETE", f"/api/v1/namespaces/{kube.ns}/configmaps/fin")
    assert status == 200
    assert deleted["kind"] == "ConfigMap"
    assert deleted["metadata"]["deletionTimestamp"]
    held = await kube.core.read_namespaced_config_map("fin", kube.ns)
    assert held.metadata.deletion_timestamp is not None
    assert int(held.metadata.resource_version) > int(made.metadata.resource_version)
    status, _, _ = await kube.raw(
        "PATCH",
        f"/api/v1/namespaces/{kube.ns}/configmaps/fin",
        {"metadata": {"finalizers": ["example.com/hold", "example.com/more"]}},
        content_type="application/merge-patch+json",
    )
    assert status == 422
    await kube.core.patch_namespaced_config_map("fin", kube.ns, {"metadata": {"finalizers": None}})
    with pytest.raises(ApiException) as err:
        await kube.core.read_namespaced_config_map("fin", kube.ns)
    assert err.value.status == 404


async def test_pod_bound_to_a_node_is_deleted_gracefully(kube: Kube) -> None:
    await kube.core.create_namespaced_pod(kube.ns, pod("grace", node="edge-1"))
    first = await kube.core.delete_namespaced_pod("grace", kube.ns)
    assert first.metadata.deletion_timestamp is not None
    assert first.metadata.deletion_grace_period_seconds == 30
    still = await kube.core.read_namespaced_pod("grace", kube.ns)
    assert still.metadata.deletion_timestamp is not None
    await kube.core.delete_namespaced_pod("grace", kube.ns, grace_period_seconds=0)
    with pytest.raises(ApiException) as err:
        await kube.core.read_namespaced_pod("grace", kube.ns)
    assert err.value.status == 404


async def test_unscheduled_pod_is_deleted_at_once(kube: Kube) -> None:
    await kube.core.create_namespaced_pod(kube.ns, pod("now"))
    await kube.core.delete_namespaced_pod("now", kube.ns)
    with pytest.raises(ApiException) as err:
        await kube.core.read_namespaced_pod("now", kube.ns)
    assert err.value.status == 404


async def test_deletecollection_with_selector_returns_the_deleted_list(kube: Kube) -> None:
    for name, lab in (("k1", "keep"), ("d1", "drop"), ("d2", "drop")):
        await kube.core.create_namespaced_config_map(
            kube.ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name, labels={"x": lab}))
        )
    status, body, _ = await kube.raw(
        "DELETE", f"/api/v1/namespaces/{kube.ns}/configmaps", query=[("labelSelector", "x=drop")]
    )
    assert status == 200
    assert body["kind"] == "ConfigMapList"
    assert sorted(i["metadata"]["name"] for i in body["items"]) == ["d1", "d2"]
    left = await kube.core.list_namespaced_config_map(kube.ns, label_selector="x")
    assert [i.metadata.name for i in left.items] == ["k1"]


async def test_merge_json_and_strategic_patches(kube: Kube) -> None:
    await kube.apps.create_namespaced_deployment(kube.ns, deployment("p"))
    path = f"/apis/apps/v1/namespaces/{kube.ns}/deployments/p"
    # Strategic merge: containers merge by name (a new sidecar is added).
    status, body, _ = await kube.raw(
        "PATCH",
        path,
        {
            "spec": {
                "template": {"spec": {"containers": [{"name": "side", "image": "busybox:1.36"}]}}
            }
        },
        content_type="application/strategic-merge-patch+json",
    )
    assert status == 200, body
    names = [c["name"] for c in body["spec"]["template"]["spec"]["containers"]]
    # The new container goes first: without $setElementOrder, apimachinery puts the
    # items a patch adds before the ones only the server had.
    assert names == ["side", "c"]
    # Merge patch: lists are replaced.
    status, body, _ = await kube.raw(
        "PATCH",
        path,
        {
            "spec": {
                "template": {"spec": {"containers": [{"name": "only", "image": "busybox:1.36"}]}}
            }
        },
        content_type="application/merge-patch+json",
    )
    assert status == 200, body
    assert [c["name"] for c in body["spec"]["template"]["spec"]["containers"]] == ["only"]
    # JSON patch, with a failing test operation first.
    status, body, _ = await kube.raw(
        "PATCH",
        path,
        [{"op": "test", "path": "/spec/replicas", "value": 5}],
        content_type="application/json-patch+json",
    )
    assert status == 422
    status, body, _ = await kube.raw(
        "PATCH",
        path,
        [{"op": "replace", "path": "/spec/replicas", "value": 4}],
        content_type="application/json-patch+json",
    )
    assert status == 200
    assert body["spec"]["replicas"] == 4


async def test_strategic_merge_patch_delete_directive(kube: Kube) -> None:
    made = deployment("d")
    made.spec.template.spec.containers.append(client.V1Container(name="side", image="x:1"))
    await kube.apps.create_namespaced_deployment(kube.ns, made)
    status, body, _ = await kube.raw(
        "PATCH",
        f"/apis/apps/v1/namespaces/{kube.ns}/deployments/d",
        {"spec": {"template": {"spec": {"containers": [{"name": "side", "$patch": "delete"}]}}}},
        content_type="application/strategic-merge-patch+json",
    )
    assert status == 200, body
    assert [c["name"] for c in body["spec"]["template"]["spec"]["containers"]] == ["c"]


async def test_patch_with_stale_resource_version_is_409(kube: Kube) -> None:
    made = await kube.core.create_namespaced_config_map(
        kube.ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="rv"), data={"a": "1"})
    )
    await kube.core.patch_namespaced_config_map("rv", kube.ns, {"data": {"a": "2"}})
    status, body, _ = await kube.raw(
        "PATCH",
        f"/api/v1/namespaces/{kube.ns}/configmaps/rv",
        {"metadata": {"resourceVersion": made.metadata.resource_version}, "data": {"a": "3"}},
        content_type="application/merge-patch+json",
    )
    assert status == 409
    assert body["reason"] == "Conflict"


async def test_patch_missing_object_is_404_and_unknown_patch_type_415(kube: Kube) -> None:
    status, _, _ = await kube.raw(
        "PATCH",
        f"/api/v1/namespaces/{kube.ns}/configmaps/none",
        {"data": {}},
        content_type="application/merge-patch+json",
    )
    assert status == 404
    await kube.core.create_namespaced_config_map(
        kube.ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="t"))
    )
    status, body, _ = await kube.raw(
        "PATCH",
        f"/api/v1/namespaces/{kube.ns}/configmaps/t",
        {"data": {}},
        content_type="application/x-unknown-patch",
    )
    assert status == 415
    assert body["reason"] == "UnsupportedMediaType"


async def test_immutable_configmap_refuses_data_changes(kube: Kube) -> None:
    await kube.core.create_namespaced_config_map(
        kube.ns,
        client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name="imm"), data={"a": "1"}, immutable=True
        ),
    )
    with pytest.raises(ApiException) as err:
        await kube.core.patch_namespaced_config_map("imm", kube.ns, {"data": {"a": "2"}})
    assert err.value.status == 422
    labelled = await kube.core.patch_namespaced_config_map(
        "imm", kube.ns, {"metadata": {"labels": {"ok": "yes"}}}
    )
    assert labelled.metadata.labels == {"ok": "yes"}


async def test_scale_subresource(kube: Kube) -> None:
    await kube.apps.create_namespaced_deployment(kube.ns, deployment("sc", replicas=1))
    scale = await kube.apps.read_namespaced_deployment_scale("sc", kube.ns)
    assert scale.spec.replicas == 1
    assert scale.status.selector == "app=sc"
    scaled = await kube.apps.patch_namespaced_deployment_scale(
        "sc", kube.ns, {"spec": {"replicas": 4}}
    )
    assert scaled.spec.replicas == 4
    after = await kube.apps.read_namespaced_deployment("sc", kube.ns)
    assert after.spec.replicas == 4
    assert after.metadata.generation == 2
    stale = scale
    stale.spec.replicas = 2
    with pytest.raises(ApiException) as err:
        await kube.apps.replace_namespaced_deployment_scale("sc", kube.ns, stale)
    assert err.value.status == 409
    status, body, _ = await kube.raw(
        "PATCH",
        f"/apis/apps/v1/namespaces/{kube.ns}/deployments/sc/scale",
        {"spec": {"replicas": -1}},
        content_type="application/merge-patch+json",
    )
    assert status == 422
    assert body["reason"] == "Invalid"


async def test_daemonset_template_generation_annotation(kube: Kube) -> None:
    key = "deprecated.daemonset.template.generation"
    labels = {"app": "ds"}
    made = await kube.apps.create_namespaced_daemon_set(
        kube.ns,
        client.V1DaemonSet(
            metadata=client.V1ObjectMeta(name="ds"),
            spec=client.V1DaemonSetSpec(
                selector=client.V1LabelSelector(match_labels=labels),
                template=client.V1PodTemplateSpec(
                    metadata=client.V1ObjectMeta(labels=labels),
                    spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="x:1")]),
                ),
            ),
        ),
    )
    assert made.metadata.annotations[key] == "1"
    assert made.status.desired_number_scheduled == 0
    relabelled = await kube.apps.patch_namespaced_daemon_set(
        "ds", kube.ns, {"metadata": {"labels": {"x": "y"}}}
    )
    assert relabelled.metadata.annotations[key] == "1"
    changed = await kube.apps.patch_namespaced_daemon_set(
        "ds",
        kube.ns,
        {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x:2"}]}}}},
    )
    assert changed.metadata.annotations[key] == "2"
    assert changed.metadata.generation == 2
