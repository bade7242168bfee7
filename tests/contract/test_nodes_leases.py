"""Nodes, node status and Leases as the hub writes them for edge nodes."""

from __future__ import annotations

import datetime

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from tests.contract.conftest import Kube
from tests.environment import not_applicable


async def make_node(kube: Kube, name: str) -> client.V1Node:
    body = client.V1Node(
        metadata=client.V1ObjectMeta(
            name=name, labels={"node-role.kubernetes.io/edge": "", "kubernetes.io/arch": "arm64"}
        ),
        status=client.V1NodeStatus(
            capacity={"cpu": "4", "memory": "3906Mi", "pods": "110"},
            allocatable={"cpu": "4", "memory": "3806Mi", "pods": "110"},
            conditions=[
                client.V1NodeCondition(type="Ready", status="True", reason="EdgeConnected")
            ],
            addresses=[client.V1NodeAddress(type="InternalIP", address="10.0.0.7")],
        ),
    )
    made = await kube.core.create_node(body)
    kube.cluster_scoped(lambda: kube.core.delete_node(name))
    return made


async def test_node_keeps_status_given_at_create(kube: Kube) -> None:
    name = kube.unique("edge")
    made = await make_node(kube, name)
    assert made.status.capacity["cpu"] == "4"
    assert made.status.conditions[0].type == "Ready"
    edge = await kube.core.list_node(
        label_selector="node-role.kubernetes.io/edge,kubernetes.io/arch=arm64"
    )
    assert name in {n.metadata.name for n in edge.items}


async def test_node_status_patch_merges_conditions_by_type(kube: Kube) -> None:
    name = kube.unique("edge")
    await make_node(kube, name)
    patched = await kube.core.patch_node_status(
        name,
        {
            "status": {
                "conditions": [{"type": "MemoryPressure", "status": "False", "reason": "Fine"}]
            }
        },
    )
    types = {c.type: c.status for c in patched.status.conditions}
    assert types == {"Ready": "True", "MemoryPressure": "False"}
    not_ready = await kube.core.patch_node_status(
        name, {"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "Gone"}]}}
    )
    assert {c.type: c.status for c in not_ready.status.conditions}["Ready"] == "False"


async def test_node_unschedulable_field_selector(kube: Kube) -> None:
    name = kube.unique("cordon")
    await make_node(kube, name)
    await kube.core.patch_node(name, {"spec": {"unschedulable": True}})
    cordoned = await kube.core.list_node(field_selector="spec.unschedulable=true")
    assert name in {n.metadata.name for n in cordoned.items}


async def test_lease_create_renew_and_conflict(kube: Kube) -> None:
    # MicroTime needs its 6 fractional digits: a datetime with microsecond 0 would be
    # sent without them (isoformat) and refused.
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=123456)
    body = client.V1Lease(
        metadata=client.V1ObjectMeta(name="edge-1"),
        spec=client.V1LeaseSpec(
            holder_identity="hub-0", lease_duration_seconds=40, renew_time=now, acquire_time=now
        ),
    )
    made = await kube.coordination.create_namespaced_lease(kube.ns, body)
    assert made.spec.holder_identity == "hub-0"
    made.spec.renew_time = now + datetime.timedelta(seconds=10)
    renewed = await kube.coordination.replace_namespaced_lease("edge-1", kube.ns, made)
    assert renewed.spec.renew_time > made.metadata.creation_timestamp - datetime.timedelta(
        seconds=1
    )
    made.spec.holder_identity = "hub-1"
    with pytest.raises(ApiException) as err:
        await kube.coordination.replace_namespaced_lease("edge-1", kube.ns, made)
    assert err.value.status == 409
    bad = client.V1Lease(
        metadata=client.V1ObjectMeta(name="bad"), spec=client.V1LeaseSpec(lease_duration_seconds=0)
    )
    with pytest.raises(ApiException) as err:
        await kube.coordination.create_namespaced_lease(kube.ns, bad)
    assert err.value.status == 422


async def test_times_are_parsed_and_stored_in_utc(kube: Kube) -> None:
    path = f"/apis/coordination.k8s.io/v1/namespaces/{kube.ns}/leases"
    body = {
        "metadata": {"name": "t"},
        "spec": {"renewTime": "2026-01-02T03:04:05.123456+01:00", "holderIdentity": "h"},
    }
    status, made, _ = await kube.raw("POST", path, body)
    assert status == 201, made
    assert made["spec"]["renewTime"] == "2026-01-02T02:04:05.123456Z"
    for bad in (
        "2026-01-02T03:04:05Z",
        "2026-01-02T03:04:05.1234567Z",
        "2026-01-02 03:04:05.123456Z",
    ):
        body = {"metadata": {"name": "bad"}, "spec": {"renewTime": bad}}
        status, answer, _ = await kube.raw("POST", path, body)
        assert status == 400, bad
        assert answer["reason"] == "BadRequest"
    event = {
        "metadata": {"name": "ev"},
        "involvedObject": {"kind": "Pod", "name": "p", "namespace": kube.ns},
        "firstTimestamp": "2026-01-02T03:04:05.5+01:00",
    }
    status, made, _ = await kube.raw("POST", f"/api/v1/namespaces/{kube.ns}/events", event)
    assert status == 201, made
    assert made["firstTimestamp"] == "2026-01-02T02:04:05Z"
    event["metadata"]["name"] = "ev2"
    event["firstTimestamp"] = "yesterday"
    status, _, _ = await kube.raw("POST", f"/api/v1/namespaces/{kube.ns}/events", event)
    assert status == 400


async def test_field_validation_strict_refuses_unknown_fields(kube: Kube) -> None:
    body = {"metadata": {"name": "strict"}, "data": {"a": "1"}, "dta": {"typo": "x"}}
    status, answer, _ = await kube.raw(
        "POST",
        f"/api/v1/namespaces/{kube.ns}/configmaps",
        body,
        query=[("fieldValidation", "Strict")],
    )
    if status == 201:
        not_applicable("this API server predates server-side field validation (1.25)")
    assert status == 400
    assert 'unknown field "dta"' in answer["message"]
    status, made, _ = await kube.raw("POST", f"/api/v1/namespaces/{kube.ns}/configmaps", body)
    assert status == 201
    assert "dta" not in made


async def test_new_node_is_tainted_not_ready_and_allocatable_defaults(kube: Kube) -> None:
    name = kube.unique("fresh")
    made = await kube.core.create_node(
        client.V1Node(
            metadata=client.V1ObjectMeta(name=name),
            status=client.V1NodeStatus(capacity={"cpu": "2", "pods": "10"}),
        )
    )
    kube.cluster_scoped(lambda: kube.core.delete_node(name))
    # TaintNodesByCondition admission: not-ready until the node lifecycle says otherwise.
    assert [(t.key, t.effect) for t in made.spec.taints] == [
        ("node.kubernetes.io/not-ready", "NoSchedule")
    ]
    assert made.status.allocatable == {"cpu": "2", "pods": "10"}
