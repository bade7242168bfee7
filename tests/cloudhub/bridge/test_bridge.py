"""The bridge's parts on a real Link and Session with no transport under them.

The link's session is a real hub-side ``manual_ack`` session; what it would send is read
back with ``session.data_to_send()`` and decoded.
"""

from __future__ import annotations

import asyncio

import pytest

from cloudhub.bridge import (
    UNKNOWN_KIND,
    AckTracker,
    Decision,
    Dispatcher,
    Inbound,
    NodeAuthorizer,
    NodeObjects,
    NodeSession,
    Outbox,
    SessionRegistry,
)
from protocol.codec import FrameDecoder, encode
from protocol.config import SessionConfig
from protocol.errors import CloseCode, ErrorCode, MessageTooLarge
from protocol.messages import (
    Ack,
    Error,
    Hello,
    ObjectDelete,
    ObjectRef,
    ObjectUpsert,
    PodStatus,
    SyncDone,
    Welcome,
)
from protocol.session import Role, Session
from protocol.transport import Link
from tests.waiting import eventually

CONFIG = SessionConfig(manual_ack=True, ack_delay=0.01, close_timeout=0.2)


def open_link(node: str = "edge-1") -> Link:
    loop = asyncio.get_running_loop()
    link = Link("test", Session(Role.SERVER, CONFIG, now=loop.time()), peer_node_name=node)
    link.data_received(encode(Hello(1, 1, node, "t")))
    link.accept(Welcome(1, 0.0, "s", 0, 5.0))
    link.session.data_to_send()  # the welcome
    return link


def sent(link: Link) -> list:
    decoder = FrameDecoder()
    decoder.feed(link.session.data_to_send())
    out = []
    while (frame := decoder.next_frame()) is not None:
        out.append(frame[1])
    return out


def status(seq: int) -> bytes:
    ref = ObjectRef("Pod", "ns", f"p{seq}", f"u{seq}")
    return encode(PodStatus(ref=ref, status={}, observed_at=0.0), seq)


def obj(kind: str, name: str, uid: str, rv: str) -> dict:
    return {
        "kind": kind,
        "metadata": {"name": name, "namespace": "ns", "uid": uid, "resourceVersion": rv},
    }


async def test_acks_are_released_in_order_as_effects_complete() -> None:
    link = open_link()
    tracker = AckTracker(link)
    link.data_received(status(1) + status(2) + status(3))
    for seq in (1, 2, 3):
        tracker.received(seq)
    tracker.done(2)
    assert link.session.acked_up_to == 0  # 1 still in progress
    assert tracker.in_progress == 2
    tracker.done(1)
    assert link.session.acked_up_to == 2
    tracker.done(3)
    tracker.done(3)  # twice is harmless
    assert link.session.acked_up_to == 3 and tracker.in_progress == 0
    link.session.handle_timer(link.now() + 1.0)
    assert Ack(3) in sent(link)


async def test_outbox_is_in_order_and_latest_wins_per_object() -> None:
    link = open_link()
    outbox = Outbox(link)
    a1 = ObjectUpsert(ObjectRef("Pod", "ns", "a", "ua"), "1", {})
    b = ObjectUpsert(ObjectRef("ConfigMap", "ns", "b", "ub"), "1", {})
    a2 = ObjectUpsert(ObjectRef("Pod", "ns", "a", "ua"), "2", {})
    done = SyncDone(2)  # no coalescing key; the BULK lane, like the upserts
    for message in (a1, b, a2, done, done):
        outbox.put(message)
    assert len(outbox) == 4
    await outbox.drained()
    assert sent(link) == [b, a2, done, done]
    await outbox.aclose()


async def test_outbox_skips_a_message_that_cannot_be_sent() -> None:
    link = open_link()
    dead: list = []
    outbox = Outbox(link, on_dead_letter=lambda message, error: dead.append((message, error)))
    huge = ObjectUpsert(ObjectRef("ConfigMap", "ns", "big", "ub"), "1", {"d": "x" * 9_000_000})
    small = ObjectUpsert(ObjectRef("ConfigMap", "ns", "small", "us"), "1", {})
    outbox.put(huge)
    outbox.put(small)
    await outbox.drained()
    assert sent(link) == [small]  # over the limit: a dead letter, skipped
    [(message, error)] = dead
    assert message is huge and isinstance(error, MessageTooLarge)
    # open_link's hello announces no limits: whole frames only, under the 4 MiB default
    assert error.limit == 4 * 1024 * 1024 and error.size > 9_000_000
    await outbox.aclose()


async def test_outbox_after_the_link_closed_sends_nothing() -> None:
    link = open_link()
    outbox = Outbox(link)
    link.connection_lost("gone")
    outbox.put(SyncDone(0))
    await outbox.drained()
    await outbox.aclose()
    assert len(outbox) == 0


async def test_sync_sends_the_difference_then_sync_done() -> None:
    desired = [
        obj("ConfigMap", "same", "u1", "5"),
        obj("ConfigMap", "newer", "u2", "9"),
        obj("Pod", "new", "u4", "3"),
    ]
    objects = NodeObjects()
    objects.add_source("test", lambda node: desired if node == "edge-1" else [])
    link = open_link()
    session = NodeSession("edge-1", link, "s-1", objects)
    queued = session.sync({"u1": "5", "u2": "7", "u3": "1"})
    await session.outbox.drained()
    assert queued == 3
    messages = sent(link)
    assert messages[0] == ObjectDelete(ObjectRef(UNKNOWN_KIND, "", "u3", "u3"), "")
    assert [(m.ref.uid, m.resource_version) for m in messages[1:3]] == [("u2", "9"), ("u4", "3")]
    assert messages[3] == SyncDone(inventory_size=3)
    # a change later: only that is sent, and a removal names the object it knew
    desired.pop(1)
    assert session.refresh() == 1
    await session.outbox.drained()
    assert sent(link) == [ObjectDelete(ObjectRef("ConfigMap", "ns", "newer", "u2"), "")]
    assert session.refresh() == 0
    await session.aclose()


async def test_dispatch_unsupported_failing_and_async_handlers() -> None:
    link = open_link()
    objects = NodeObjects()
    refused = []
    session = NodeSession(
        "edge-1", link, "s-1", objects, on_refused=lambda i, code, text: refused.append(code)
    )
    dispatcher = Dispatcher()
    link.data_received(status(1) + status(2) + status(3))
    msg = PodStatus(ObjectRef("Pod", "ns", "p", "u"), {}, 0.0)
    for seq in (1, 2, 3):
        session.acks.received(seq)

    dispatcher.dispatch(Inbound(session, 1, msg))  # nothing registered
    assert refused == [ErrorCode.UNSUPPORTED]

    def broken(inbound: Inbound) -> None:
        raise RuntimeError("bug")

    dispatcher.register(PodStatus, broken)
    dispatcher.dispatch(Inbound(session, 2, msg))
    assert refused[-1] is ErrorCode.INTERNAL

    started, finished = asyncio.Event(), asyncio.Event()

    async def slow(inbound: Inbound) -> None:
        started.set()
        await finished.wait()

    dispatcher.register(PodStatus, slow)
    dispatcher.dispatch(Inbound(session, 3, msg))
    await asyncio.wait_for(started.wait(), 5)
    assert link.session.acked_up_to == 2  # 3 in progress
    finished.set()
    await eventually(lambda: link.session.acked_up_to == 3, "3 acked once its handler ended", 5)
    await session.outbox.drained()
    errors = [m for m in sent(link) if isinstance(m, Error)]
    assert [(e.code, e.in_reply_to) for e in errors] == [
        (ErrorCode.UNSUPPORTED, 1),
        (ErrorCode.INTERNAL, 2),
    ]
    with pytest.raises(ValueError):
        dispatcher.register(ObjectUpsert, slow)  # the hub sends those
    await dispatcher.aclose()
    await session.aclose()


async def test_authorizer_allows_own_objects_only() -> None:
    pods = {
        ("ns", "mine"): obj("Pod", "mine", "u-mine", "1"),
        ("ns", "theirs"): obj("Pod", "theirs", "u-theirs", "1"),
    }
    objects = NodeObjects()
    objects.add_source(
        "pods", lambda node: [pods["ns", "mine"]] if node == "edge-1" else [pods["ns", "theirs"]]
    )
    objects.add_kind("Pod", lambda ns, name: pods.get((ns, name)))
    authz = NodeAuthorizer(objects)
    assert authz.check("edge-1", ObjectRef("Pod", "ns", "mine", "u-mine")) is Decision.ALLOWED
    assert authz.check("edge-1", ObjectRef("Pod", "ns", "theirs", "u-theirs")) is Decision.FORBIDDEN
    # same name, another object (recreated): not found
    assert authz.check("edge-1", ObjectRef("Pod", "ns", "mine", "u-old")) is Decision.NOT_FOUND
    assert authz.check("edge-1", ObjectRef("Device", "ns", "d", "u-d")) is Decision.NOT_FOUND
    assert authz.check("edge-1", ObjectRef("Node", "", "edge-1", "x")) is Decision.ALLOWED
    assert authz.check("edge-1", ObjectRef("Node", "", "edge-2", "x")) is Decision.FORBIDDEN
    off = NodeAuthorizer(objects, enabled=False)
    assert off.check("edge-1", ObjectRef("Pod", "ns", "theirs", "u-theirs")) is Decision.ALLOWED


async def test_authorizing_an_indexed_kind_does_not_rebuild_the_desired_set() -> None:
    """Status up, review A2 step 13: a pod_status is authorized by one index lookup
    (``held_by``), not by rebuilding the node's whole desired set per message."""
    pods = {
        ("ns", "mine"): {**obj("Pod", "mine", "u-mine", "1"), "spec": {"nodeName": "edge-1"}},
        ("ns", "theirs"): {**obj("Pod", "theirs", "u-theirs", "1"), "spec": {"nodeName": "x"}},
    }
    built: list[str] = []

    def source(node: str) -> list[dict]:
        built.append(node)
        return [p for p in pods.values() if p["spec"]["nodeName"] == node]

    objects = NodeObjects()
    objects.add_source("pods", source)
    objects.add_kind(
        "Pod",
        lambda ns, name: pods.get((ns, name)),
        held_by=lambda node, pod: pod["spec"]["nodeName"] == node,
    )
    objects.add_kind("Device", lambda ns, name: pods.get((ns, name)))  # no index: rebuilds
    authz = NodeAuthorizer(objects)
    for _ in range(100):
        assert authz.check("edge-1", ObjectRef("Pod", "ns", "mine", "u-mine")) is Decision.ALLOWED
    assert authz.check("edge-1", ObjectRef("Pod", "ns", "theirs", "u-theirs")) is Decision.FORBIDDEN
    assert built == []
    assert authz.check("edge-1", ObjectRef("Device", "ns", "mine", "u-mine")) is Decision.ALLOWED
    assert built == ["edge-1"]  # a kind without an index still gets the exact answer


def test_a_change_hands_each_connected_node_its_desired_set_computed_once() -> None:
    """Pod down, review A1: the session no longer pulls the desired set back through the
    sources; it comes with the announcement, computed once per node and change, and not
    at all for nodes without a session."""
    built: list[str] = []

    def source(node: str) -> list[dict]:
        built.append(node)
        return [obj("Pod", f"p-{node}", f"u-{node}", "1")]

    objects = NodeObjects()
    objects.add_source("pods", source)
    got: list[tuple[str, list[str]]] = []
    for _ in range(2):  # two listeners share one computation
        objects.add_listener(
            lambda node, desired: got.append((node, list(desired))),
            wants=lambda node: node == "edge-1",
        )
    objects.changed(["edge-1", "edge-2", "edge-1", ""])
    assert built == ["edge-1"]
    assert got == [("edge-1", ["u-edge-1"]), ("edge-1", ["u-edge-1"])]


async def test_registry_supersedes_and_a_stale_detach_leaves_the_new_session() -> None:
    objects = NodeObjects()
    registry = SessionRegistry()
    events = []
    registry.on_connect.append(lambda s: events.append(("connect", s.session_id)))
    registry.on_disconnect.append(
        lambda s, current: events.append(("disconnect", s.session_id, current))
    )
    old = NodeSession("edge-1", open_link(), "old", objects)
    new = NodeSession("edge-1", open_link(), "new", objects)
    registry.attach(old)
    assert registry.attach(new) is old
    await old.aclose()  # waits for the SUPERSEDED close started on attach
    assert old.closed and old.link.close_event.code is CloseCode.SUPERSEDED
    assert registry.detach(old) is False
    assert registry.get("edge-1") is new
    assert events == [("connect", "old"), ("connect", "new"), ("disconnect", "old", False)]
    assert registry.detach(new) is True and registry.get("edge-1") is None
    await new.aclose()
