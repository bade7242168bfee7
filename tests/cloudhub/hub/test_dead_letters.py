"""A ConfigMap over the session's message limit (issue 15 item 3) is a dead letter: it is
not sent (a placeholder goes in its place, ``protocol.undelivered``), the pod that uses it
and the ConfigMap say why (a Warning Event naming the size limit), it is counted in
``edgefleet_hub_dead_letters_total``, and nothing queued behind it is held up. On both APIs
and both transports."""

from __future__ import annotations

import pytest

from cloudhub.bridge.deadletters import DeadLetter, DeadLetters
from cloudhub.kube import CONFIGMAPS, EVENTS, PODS, KubeClient
from protocol.chunking import Limits
from protocol.errors import ErrorCode
from protocol.messages import KubeEvent, ObjectDelete, ObjectRef, ObjectUpsert, SyncDone
from protocol.undelivered import placeholder, undelivered
from tests.cloudhub.hub.conftest import BOTH, DEADLINE, Hubs, configmap, eventually, pod

LIMIT = 64 * 1024


def uses(name: str) -> dict:
    return {"volumes": [{"name": "cfg", "configMap": {"name": name}}]}


@pytest.mark.parametrize("transport", ["quic", "websocket"])
@pytest.mark.parametrize("cluster", BOTH, indirect=True)
async def test_a_configmap_over_the_limit_is_a_dead_letter_the_pod_explains(
    hubs: Hubs, kube: KubeClient, namespace: str, unique, transport: str
) -> None:
    hub = await hubs.start({"session.max_message_size": LIMIT})
    node = unique("edge-big")
    await kube.create(CONFIGMAPS, configmap("big", namespace, {"blob": "x" * (100 * 1024)}))
    await kube.create(CONFIGMAPS, configmap("small", namespace, {"k": "v"}))
    big_pod = await kube.create(PODS, pod("web", namespace, node, **uses("big")))
    small_pod = await kube.create(PODS, pod("ok", namespace, node, **uses("small")))
    agent = hubs.agent(node, transport=transport)
    await agent.wait_for(lambda: agent.synced, DEADLINE)
    # What follows the dead letter arrives: both pods, the small ConfigMap, the sync's end.
    held = {ref.name: obj for ref, _, obj in agent.store.values()}
    assert {"web", "ok", "small", "big"} <= set(held)
    # "big" is its placeholder (protocol.undelivered): identity and sizes, no data
    assert "data" not in held["big"] and undelivered(held["big"]) is not None
    size, limit = undelivered(held["big"]) or (0, 0)
    assert size > 100 * 1024 and limit == LIMIT
    assert big_pod["metadata"]["uid"] in agent.store and small_pod["metadata"]["uid"] in agent.store

    async def warnings(kind: str, name: str) -> list[dict]:
        items, _ = await kube.list(
            EVENTS,
            namespace,
            field_selector=f"involvedObject.kind={kind},involvedObject.name={name}",
        )
        return [e for e in items if e["reason"] == "ObjectTooLarge"]

    async def pod_warned() -> bool:
        return bool(await warnings("Pod", "web"))

    async def configmap_warned() -> bool:
        return bool(await warnings("ConfigMap", "big"))

    await eventually(pod_warned, "an ObjectTooLarge Event on the pod")
    await eventually(configmap_warned, "an ObjectTooLarge Event on the ConfigMap")
    (event,) = await warnings("Pod", "web")
    assert event["type"] == "Warning"
    assert f"ConfigMap {namespace}/big" in event["message"]
    assert f"over the {LIMIT} bytes the session to node {node} carries" in event["message"]
    assert not await warnings("Pod", "ok")
    counted = hub.metrics.registry.get_sample_value(
        "edgefleet_hub_dead_letters_total",
        {"direction": "down", "kind": "object_upsert", "reason": "too_large"},
    )
    assert counted == 1.0
    (letter,) = hub.dead_letters.entries(node)
    assert letter.ref is not None and letter.ref.name == "big"
    assert len(hub.registry.sessions()) == 1  # one session: nothing was closed over it


async def test_an_edge_message_over_the_hub_limit_is_refused_acked_and_counted(
    hubs: Hubs, kube: KubeClient, namespace: str, unique
) -> None:
    """An agent that ignores the agreed limit (sends a chunked event over it): the hub
    refuses it before buffering it, acks it (never resent), counts it, keeps the session,
    and takes what follows."""
    hub = await hubs.start({"session.max_message_size": LIMIT})
    node = unique("edge-loud")
    agent = hubs.agent(node)
    await agent.wait_for(lambda: agent.synced, DEADLINE)
    assert agent.link is not None
    session = agent.link.session
    assert session.limits.max_message_size == LIMIT  # agreed at the handshake
    session._sendq.configure(Limits(session.limits.max_frame_size, 64 * LIMIT))  # misbehave
    sessions = agent.sessions
    agent.send(KubeEvent(ObjectRef("Node", "", node, node), "Warning", "Loud", "m" * LIMIT, 1.0))
    await agent.wait_for(lambda: agent.errors and agent.all_acked, DEADLINE)
    (error,) = agent.errors
    assert error.code is ErrorCode.TOO_LARGE and f"{LIMIT}-byte limit" in error.message
    counted = hub.metrics.registry.get_sample_value(
        "edgefleet_hub_dead_letters_total",
        {"direction": "up", "kind": "unknown", "reason": "too_large"},
    )
    assert counted == 1.0 and agent.connected and agent.sessions == sessions


@pytest.mark.parametrize("cluster", BOTH, indirect=True)
async def test_a_dead_letter_row_goes_once_the_object_reaches_the_node(
    hubs: Hubs, kube: KubeClient, namespace: str, unique
) -> None:
    """Issue 15 gap: the row of a ConfigMap over the limit stayed in the table after a
    smaller version of it was sent. Now it goes when a version that fits is sent (not when
    its placeholder is), and when the object is deleted."""
    hub = await hubs.start({"session.max_message_size": LIMIT})
    node = unique("edge-shrink")
    big = await kube.create(CONFIGMAPS, configmap("big", namespace, {"blob": "x" * (100 * 1024)}))
    gone = await kube.create(CONFIGMAPS, configmap("gone", namespace, {"blob": "y" * (100 * 1024)}))
    await kube.create(PODS, pod("web", namespace, node, **uses("big")))
    await kube.create(PODS, pod("old", namespace, node, **uses("gone")))
    agent = hubs.agent(node)
    await agent.wait_for(lambda: agent.synced, DEADLINE)
    rows = {letter.ref.name for letter in hub.dead_letters.entries(node) if letter.ref}
    assert rows == {"big", "gone"}  # the placeholders sent meanwhile did not settle them

    await kube.patch(CONFIGMAPS, "big", {"data": {"blob": "small"}}, namespace)

    def arrived() -> bool:
        held = agent.store.get(big["metadata"]["uid"])
        return held is not None and (held[2].get("data") or {}).get("blob") == "small"

    await agent.wait_for(arrived, DEADLINE)
    assert [letter.ref.name for letter in hub.dead_letters.entries(node) if letter.ref] == ["gone"]

    await kube.delete(CONFIGMAPS, "gone", namespace)
    await agent.wait_for(lambda: gone["metadata"]["uid"] not in agent.store, DEADLINE)
    assert hub.dead_letters.entries(node) == []
    assert len(hub.registry.sessions()) == 1


def test_only_the_object_itself_settles_its_row() -> None:
    """The placeholder, another node's upsert of it, another object and other kinds leave
    the row; the object's own upsert (or delete) to that node removes it, once."""
    ref = ObjectRef("ConfigMap", "default", "big", "u-big")
    table = DeadLetters()
    table.add(DeadLetter("n1", "object_upsert", ref, "too large", 1.0))
    body = {"kind": "ConfigMap", "metadata": {"name": "big", "uid": "u-big"}, "data": {}}
    other = ObjectRef("ConfigMap", "default", "small", "u-small")
    for node, message in [
        ("n1", ObjectUpsert(ref, "2", placeholder(body, 200_000, LIMIT))),
        ("n2", ObjectUpsert(ref, "2", body)),
        ("n1", ObjectUpsert(other, "2", body)),
        ("n1", SyncDone(1)),
        ("n1", KubeEvent(ref, "Normal", "X", "x", 1.0)),
    ]:
        assert table.delivered(node, message) is None
    assert len(table) == 1
    (row,) = table.entries("n1")
    assert table.delivered("n1", ObjectUpsert(ref, "3", body)) is row
    assert table.delivered("n1", ObjectDelete(ref, "4")) is None and len(table) == 0
    table.add(DeadLetter("n1", "object_upsert", ref, "too large", 2.0))
    assert table.delivered("n1", ObjectDelete(ref, "4")) is not None and len(table) == 0
