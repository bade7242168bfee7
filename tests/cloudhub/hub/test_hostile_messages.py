"""Messages from a node about its own objects that the hub or the API cannot take: each is
refused with the reason (the field named), acknowledged (not resent forever), the session
lives on, and other nodes' writes go on."""

from __future__ import annotations

import time

from cloudhub.kube import PODS, KubeClient
from protocol.errors import ErrorCode
from protocol.messages import KubeEvent, ObjectRef, PodStatus
from tests.cloudhub.hub.conftest import DEADLINE, Hubs, eventually, pod

BAD_STATUSES = [
    ({"phase": 5}, "status.phase"),
    ({"conditions": [{"type": [1]}]}, "status.conditions[0].type"),  # not even hashable
    ({"conditions": "x", "containerStatuses": "y"}, "containerStatuses"),
    ({"containerStatuses": [1, 2, {"name": None}]}, "containerStatuses"),
    ({"startTime": "yesterday"}, "startTime"),
    ({"podIP": {"a": 1}}, "podIP"),
    ({"message": "m" * 3_000_000}, "limit"),  # a pod over the API's object size limit
]


async def test_statuses_the_api_refuses_are_answered_and_the_hub_goes_on(
    hubs: Hubs, kube: KubeClient, namespace: str, unique
) -> None:
    await hubs.start()
    a = hubs.agent(unique("edge-a"), auto_status=False)
    b = hubs.agent(unique("edge-b"))
    await a.wait_for(lambda: a.synced, DEADLINE)
    mine = await kube.create(PODS, pod("a-pod", namespace, a.name))
    ref = ObjectRef("Pod", namespace, "a-pod", mine["metadata"]["uid"])
    await a.wait_for(lambda: ref.uid in a.store, DEADLINE)
    sessions = a.sessions
    for status, named in BAD_STATUSES:
        before = len(a.errors)
        a.send(PodStatus(ref=ref, status=status, observed_at=time.time()))
        await a.wait_for(lambda n=before: len(a.errors) > n and a.all_acked, DEADLINE)
        (error,) = a.errors[before:]
        assert error.code is ErrorCode.INVALID_MESSAGE, error
        assert named in error.message, error.message
    assert a.connected and a.sessions == sessions
    # a good report after all that is written
    a.send(PodStatus(ref=ref, status={"phase": "Running", "hostIP": "10.0.0.9"}, observed_at=1.0))
    await eventually(lambda: _phase(kube, "a-pod", namespace, "Running"), "A's good status")
    # and the other node's writes were never held up
    await kube.create(PODS, pod("b-pod", namespace, b.name))
    await eventually(lambda: _phase(kube, "b-pod", namespace, "Running"), "B's status")


async def _phase(kube: KubeClient, name: str, ns: str, phase: str) -> bool:
    return ((await kube.get(PODS, name, ns)).get("status") or {}).get("phase") == phase


async def test_an_event_dated_outside_what_kubernetes_can_write_is_invalid(
    hubs: Hubs, kube: KubeClient, namespace: str, unique
) -> None:
    await hubs.start()
    a = hubs.agent(unique("edge-a"))
    await a.wait_for(lambda: a.synced, DEADLINE)
    node = ObjectRef("Node", "", a.name, a.name)
    sessions = a.sessions
    for timestamp in (1e18, -1e18):  # finite, but no RFC 3339 time (years 1-9999)
        before = len(a.errors)
        a.send(KubeEvent(ref=node, type="Normal", reason="R", message="m", timestamp=timestamp))
        await a.wait_for(lambda n=before: len(a.errors) > n and a.all_acked, DEADLINE)
        (error,) = a.errors[before:]
        assert error.code is ErrorCode.INVALID_MESSAGE, error
        assert "timestamp" in error.message, error.message
    assert a.connected and a.sessions == sessions
