"""Node authorization: a node sees and names only its own objects; refusals keep the session."""

from __future__ import annotations

import time

from cloudhub.kube import EVENTS, PODS, SECRETS, KubeClient
from protocol.errors import CloseCode, ErrorCode
from protocol.messages import KubeEvent, ObjectRef, PodStatus
from protocol.transport import SessionRejected
from tests.cloudhub.hub.conftest import DEADLINE, Hubs, eventually, pod, secret
from tests.sim import node_credentials


def uid(obj: dict) -> str:
    return obj["metadata"]["uid"]


def ref_of(obj: dict) -> ObjectRef:
    meta = obj["metadata"]
    return ObjectRef(obj["kind"], meta.get("namespace", ""), meta["name"], meta["uid"])


async def _two_nodes(hubs: Hubs, kube: KubeClient, namespace: str, unique):
    a, b = hubs.agent(unique("edge-a")), hubs.agent(unique("edge-b"))
    await a.wait_for(lambda: a.synced, DEADLINE)
    await b.wait_for(lambda: b.synced, DEADLINE)
    b_secret = await kube.create(SECRETS, secret("b-secret", namespace, {"token": "b"}))
    b_secret.setdefault("kind", "Secret")
    b_pod = await kube.create(
        PODS,
        pod(
            "b-pod",
            namespace,
            b.name,
            volumes=[{"name": "s", "secret": {"secretName": "b-secret"}}],
        ),
    )
    b_pod.setdefault("kind", "Pod")
    await b.wait_for(lambda: uid(b_pod) in b.store and uid(b_secret) in b.store, DEADLINE)
    return a, b, b_secret, b_pod


async def test_naming_another_nodes_secret_or_pod_is_refused_and_the_session_survives(
    hubs: Hubs, kube: KubeClient, namespace: str, unique
) -> None:
    hub = await hubs.start()
    a, b, b_secret, b_pod = await _two_nodes(hubs, kube, namespace, unique)
    sessions = a.sessions
    # B may name its own pod's Secret (the by-reference index says so)
    b.send(
        KubeEvent(
            ref=ref_of(b_secret),
            type="Normal",
            reason="Mounted",
            message="my secret",
            timestamp=time.time(),
        )
    )
    await b.wait_for(lambda: b.all_acked, DEADLINE)
    assert not b.errors
    # A asks about B's Secret (an event naming it) and claims B's pod's status
    a.send(
        KubeEvent(
            ref=ref_of(b_secret),
            type="Warning",
            reason="Probe",
            message="reading your secret",
            timestamp=time.time(),
        )
    )
    a.send(PodStatus(ref=ref_of(b_pod), status={"phase": "Failed"}, observed_at=time.time()))
    await a.wait_for(
        lambda: len([e for e in a.errors if e.code is ErrorCode.FORBIDDEN]) == 2, DEADLINE
    )
    forbidden = [e for e in a.errors if e.code is ErrorCode.FORBIDDEN]
    assert all(e.in_reply_to is not None for e in forbidden)
    assert "b-secret" in forbidden[0].message and "b-pod" in forbidden[1].message
    # refused is processed: acknowledged, not resent forever; the session lives on
    await a.wait_for(lambda: a.all_acked, DEADLINE)
    assert a.connected and a.sessions == sessions
    # nothing was written: B's pod is Running (B's own report), not Failed
    await eventually(
        lambda: _phase_is(kube, "b-pod", namespace, "Running"), "B's own status written"
    )
    # A still gets its own pods, never B's objects
    mine = await kube.create(PODS, pod("a-pod", namespace, a.name))
    await a.wait_for(lambda: uid(mine) in a.store, DEADLINE)
    assert uid(b_secret) not in a.store and uid(b_pod) not in a.store
    # logged as metrics and recorded as Events on A's Node
    refused = hub.metrics.registry.get_sample_value(
        "edgefleet_hub_refused_messages_total", {"kind": "event", "code": "FORBIDDEN"}
    )
    assert refused == 1

    async def refusal_events() -> bool:
        events, _ = await kube.list(
            EVENTS, "default", field_selector=f"involvedObject.name={a.name}"
        )
        return sum(e["reason"] == "MessageRefused" for e in events) == 2

    await eventually(refusal_events, "MessageRefused Events on node A")


async def test_an_inventory_claiming_another_nodes_secret_gets_a_delete_not_the_secret(
    hubs: Hubs, kube: KubeClient, namespace: str, unique
) -> None:
    await hubs.start()
    a, _b, b_secret, _ = await _two_nodes(hubs, kube, namespace, unique)
    await a.stop()
    # A reconnects claiming to hold B's Secret at an old resourceVersion
    a.store[uid(b_secret)] = (ref_of(b_secret), "1", {})
    a.start()
    await a.wait_for(lambda: a.synced and uid(b_secret) not in a.store, DEADLINE)
    assert a.deletes[uid(b_secret)] == 1
    assert not any(u == uid(b_secret) for u, _ in a.upserts)


async def test_a_hello_naming_another_node_than_the_certificate_is_refused(
    hubs: Hubs, pki_ca, unique
) -> None:
    await hubs.start()
    name = unique("edge-imposter")
    other = hubs.agent(
        name, credentials=node_credentials(pki_ca.ca, unique("edge-real")), start=False
    )
    try:
        await other.dial()
    except SessionRejected as exc:
        assert exc.code is CloseCode.UNAUTHORIZED
        assert "client certificate" in exc.reason
    else:  # pragma: no cover - the assertion below explains
        raise AssertionError("the hub accepted a hello naming another node")


async def test_without_node_authorization_existing_objects_are_allowed(
    hubs: Hubs, kube: KubeClient, namespace: str, unique
) -> None:
    await hubs.start({"authorization.node_authorization": False})
    a, _b, _, b_pod = await _two_nodes(hubs, kube, namespace, unique)
    a.send(
        PodStatus(
            ref=ref_of(b_pod),
            status={"phase": "Running", "message": "set by A"},
            observed_at=time.time(),
        )
    )
    await a.wait_for(lambda: a.all_acked, DEADLINE)
    assert not [e for e in a.errors if e.code is ErrorCode.FORBIDDEN]
    await eventually(lambda: _message_is(kube, "b-pod", namespace, "set by A"), "A's write")


async def _phase_is(kube: KubeClient, name: str, ns: str, phase: str) -> bool:
    return ((await kube.get(PODS, name, ns)).get("status") or {}).get("phase") == phase


async def _message_is(kube: KubeClient, name: str, ns: str, message: str) -> bool:
    return ((await kube.get(PODS, name, ns)).get("status") or {}).get("message") == message
