"""Pods down with their ConfigMaps and Secrets, status up, graceful deletion, level-based sync."""

from __future__ import annotations

import pytest

from cloudhub.errors import KubeNotFound
from cloudhub.kube import CONFIGMAPS, PODS, SECRETS, KubeClient
from tests.cloudhub.hub.conftest import (
    BOTH,
    DEADLINE,
    Hubs,
    configmap,
    eventually,
    pod,
    secret,
)


def uid(obj: dict) -> str:
    return obj["metadata"]["uid"]


def pod_with_refs(name: str, ns: str, node: str, cm: str, sec: str) -> dict:
    return pod(
        name,
        ns,
        node,
        volumes=[{"name": "config", "configMap": {"name": cm}}],
        containers=[
            {
                "name": "app",
                "image": "busybox:1.36",
                "env": [
                    {
                        "name": "TOKEN",
                        "valueFrom": {"secretKeyRef": {"name": sec, "key": "token"}},
                    }
                ],
            }
        ],
    )


async def _gone(kube: KubeClient, name: str, ns: str) -> bool:
    try:
        await kube.get(PODS, name, ns)
    except KubeNotFound:
        return True
    return False


@pytest.mark.parametrize("cluster", BOTH, indirect=True)
@pytest.mark.parametrize("transport", ["quic", "websocket"])
async def test_pod_is_delivered_with_its_configmap_and_secret_and_its_status_written(
    hubs: Hubs, kube: KubeClient, namespace: str, unique, transport: str
) -> None:
    await hubs.start()
    node = unique("edge-pod")
    agent = hubs.agent(node, transport=transport)
    await agent.wait_for(lambda: agent.synced, DEADLINE)
    cm = await kube.create(CONFIGMAPS, configmap("app-config", namespace, {"a": "1"}))
    sec = await kube.create(SECRETS, secret("app-secret", namespace, {"token": "s3cret"}))
    created = await kube.create(
        PODS, pod_with_refs("web", namespace, node, "app-config", "app-secret")
    )
    await agent.wait_for(lambda: {uid(cm), uid(sec), uid(created)} <= set(agent.store), DEADLINE)
    # the ConfigMap and the Secret arrive before the pod that needs them
    order = list(agent.store)
    assert order.index(uid(cm)) < order.index(uid(created))
    assert order.index(uid(sec)) < order.index(uid(created))
    assert agent.holds("ConfigMap", namespace, "app-config")["data"] == {"a": "1"}
    assert agent.holds("Secret", namespace, "app-secret")["type"] == "Opaque"

    async def running() -> bool:
        current = await kube.get(PODS, "web", namespace)
        return (current.get("status") or {}).get("phase") == "Running"

    await eventually(running, "the pod's status written as Running")
    status = (await kube.get(PODS, "web", namespace))["status"]
    assert status["hostIP"] == "10.0.0.1" and status["podIP"] == "10.0.0.1"
    assert status["startTime"]
    [container] = status["containerStatuses"]
    assert container["ready"] is True and container["restartCount"] == 0
    assert container["containerID"].startswith("sim://") and container["imageID"]
    assert "running" in container["state"]
    assert {c["type"] for c in status["conditions"]} >= {"Ready", "ContainersReady"}
    # the status message was acknowledged once written
    await agent.wait_for(lambda: agent.all_acked, DEADLINE)


async def test_a_pod_on_another_node_and_unreferenced_objects_are_not_sent(
    hubs: Hubs, kube: KubeClient, namespace: str, unique
) -> None:
    await hubs.start()
    mine, other = unique("edge-mine"), unique("edge-other")
    agent = hubs.agent(mine)
    await agent.wait_for(lambda: agent.synced, DEADLINE)
    await kube.create(CONFIGMAPS, configmap("unused", namespace, {"x": "1"}))
    await kube.create(SECRETS, secret("theirs", namespace, {"token": "x"}))
    await kube.create(PODS, pod_with_refs("theirs", namespace, other, "unused", "theirs"))
    marker = await kube.create(PODS, pod("mine", namespace, mine))
    await agent.wait_for(lambda: uid(marker) in agent.store, DEADLINE)
    assert [ref.name for ref, _, _ in agent.store.values()] == ["mine"]


async def test_configmap_update_is_delivered(
    hubs: Hubs, kube: KubeClient, namespace: str, unique
) -> None:
    await hubs.start()
    node = unique("edge-cm")
    agent = hubs.agent(node)
    await agent.wait_for(lambda: agent.synced, DEADLINE)
    cm = await kube.create(CONFIGMAPS, configmap("conf", namespace, {"v": "1"}))
    await kube.create(SECRETS, secret("sec", namespace, {"token": "t"}))
    await kube.create(PODS, pod_with_refs("app", namespace, node, "conf", "sec"))
    await agent.wait_for(lambda: uid(cm) in agent.store, DEADLINE)
    cm["data"] = {"v": "2"}
    updated = await kube.replace(CONFIGMAPS, cm)
    rv = updated["metadata"]["resourceVersion"]
    await agent.wait_for(lambda: agent.store[uid(cm)][1] == rv, DEADLINE)
    assert agent.holds("ConfigMap", namespace, "conf")["data"] == {"v": "2"}


async def test_configmap_deleted_and_recreated_while_offline_arrives_new(
    hubs: Hubs, kube: KubeClient, namespace: str, unique
) -> None:
    await hubs.start()
    node = unique("edge-recreate")
    agent = hubs.agent(node)
    await agent.wait_for(lambda: agent.synced, DEADLINE)
    old = await kube.create(CONFIGMAPS, configmap("conf", namespace, {"v": "old"}))
    await kube.create(SECRETS, secret("sec", namespace, {"token": "t"}))
    await kube.create(PODS, pod_with_refs("app", namespace, node, "conf", "sec"))
    await agent.wait_for(lambda: uid(old) in agent.store, DEADLINE)
    await agent.stop()
    await kube.delete(CONFIGMAPS, "conf", namespace)
    new = await kube.create(CONFIGMAPS, configmap("conf", namespace, {"v": "new"}))
    assert uid(new) != uid(old)
    agent.start()
    await agent.wait_for(lambda: agent.synced, DEADLINE)
    assert uid(old) not in agent.store and agent.deletes[uid(old)] == 1
    assert agent.store[uid(new)][2]["data"] == {"v": "new"}


@pytest.mark.parametrize("cluster", BOTH, indirect=True)
async def test_pod_deleted_while_offline_is_deleted_at_reconnect(
    hubs: Hubs, kube: KubeClient, namespace: str, unique
) -> None:
    await hubs.start()
    node = unique("edge-offline-del")
    agent = hubs.agent(node)
    await agent.wait_for(lambda: agent.synced, DEADLINE)
    keep = await kube.create(PODS, pod("keep", namespace, node))
    doomed = await kube.create(PODS, pod("doomed", namespace, node))
    await agent.wait_for(lambda: {uid(keep), uid(doomed)} <= set(agent.store), DEADLINE)
    await agent.stop()
    # graceful deletion: the pod waits (deletionTimestamp set) for its node to confirm
    await kube.delete(PODS, "doomed", namespace)
    terminating = await kube.get(PODS, "doomed", namespace)
    assert terminating["metadata"]["deletionTimestamp"]
    agent.start()
    await eventually(lambda: _gone(kube, "doomed", namespace), "the pod removed from the API")
    await agent.wait_for(lambda: uid(doomed) not in agent.store, DEADLINE)
    assert uid(keep) in agent.store
    await agent.wait_for(lambda: agent.all_acked, DEADLINE)


@pytest.mark.parametrize("cluster", BOTH, indirect=True)
async def test_graceful_deletion_while_connected(
    hubs: Hubs, kube: KubeClient, namespace: str, unique
) -> None:
    await hubs.start()
    node = unique("edge-del")
    agent = hubs.agent(node)
    await agent.wait_for(lambda: agent.synced, DEADLINE)
    created = await kube.create(PODS, pod("web", namespace, node))
    await agent.wait_for(lambda: uid(created) in agent.store, DEADLINE)
    await kube.delete(PODS, "web", namespace, grace_period_seconds=30)
    await eventually(lambda: _gone(kube, "web", namespace), "the pod finalised by the hub")
    await agent.wait_for(lambda: uid(created) not in agent.store, DEADLINE)


async def test_a_pod_the_edge_did_not_confirm_stays_terminating(
    hubs: Hubs, kube: KubeClient, namespace: str, unique
) -> None:
    """Without the edge's pod_deleted the hub does not remove a terminating pod."""
    hub = await hubs.start()
    node = unique("edge-slow")
    agent = hubs.agent(node, auto_delete=False)
    await agent.wait_for(lambda: agent.synced, DEADLINE)
    created = await kube.create(PODS, pod("web", namespace, node))
    await agent.wait_for(lambda: uid(created) in agent.store, DEADLINE)
    await kube.delete(PODS, "web", namespace)
    await agent.wait_for(
        lambda: bool(agent.store[uid(created)][2]["metadata"].get("deletionTimestamp")), DEADLINE
    )
    # the edge saw the deletion; nothing removed the pod
    assert not await _gone(kube, "web", namespace)
    deleted = hub.metrics.registry.get_sample_value(
        "edgefleet_hub_pod_deletions_total", {"result": "deleted"}
    )
    assert not deleted


async def test_pod_deleted_on_an_edge_that_is_not_terminating_is_refused(
    hubs: Hubs, kube: KubeClient, namespace: str, unique
) -> None:
    from protocol.errors import ErrorCode
    from protocol.messages import PodDeleted

    await hubs.start()
    node = unique("edge-rogue")
    agent = hubs.agent(node)
    await agent.wait_for(lambda: agent.synced, DEADLINE)
    created = await kube.create(PODS, pod("web", namespace, node))
    await agent.wait_for(lambda: uid(created) in agent.store, DEADLINE)
    ref = agent.store[uid(created)][0]
    agent.send(PodDeleted(ref=ref))
    await agent.wait_for(
        lambda: any(e.code is ErrorCode.INVALID_MESSAGE for e in agent.errors), DEADLINE
    )
    assert not await _gone(kube, "web", namespace)
    await agent.wait_for(lambda: agent.all_acked, DEADLINE)  # refused, but acknowledged
