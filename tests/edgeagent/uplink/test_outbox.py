"""The store's outbox driven through the real protocol session (client and server
sans-I/O, bytes pumped in memory): numbering, resend after a reconnect, acks, latest-wins."""

from __future__ import annotations

import pathlib

from edgeagent.store import Store
from edgeagent.uplink.sources.outbox import hello, sent_messages, to_message
from protocol.messages import KubeEvent, PodStatus, Welcome
from protocol.session import Acked, HelloReceived, MessageReceived, Role, Session
from tests.edgeagent.conftest import Ref


def pump(a: Session, b: Session, now: float) -> None:
    for _ in range(10):
        data_a, data_b = a.data_to_send(), b.data_to_send()
        if not data_a and not data_b:
            return
        if data_a:
            b.receive_data(data_a, now)
        if data_b:
            a.receive_data(data_b, now)


def open_pair(store: Store, received_up_to: int, now: float) -> tuple[Session, Session, list]:
    client = Session(Role.CLIENT, now=now, next_seq=store.next_seq())
    server = Session(Role.SERVER, now=now)
    client.connect(
        hello(store, node_name="edge-1", agent_version="0.1.0"), now, pending=sent_messages(store)
    )
    pump(client, server, now)
    [event] = [e for e in server.events_received() if isinstance(e, HelloReceived)]
    assert event.hello.inventory == store.inventory()
    server.accept(
        Welcome(
            version=event.version,
            hub_time=now,
            session_id="s1",
            received_up_to=received_up_to,
            heartbeat_interval=20.0,
        ),
        now,
    )
    pump(client, server, now)
    client.events_received()
    return client, server, [e for e in server.events_received() if isinstance(e, MessageReceived)]


def send_unsent(store: Store, client: Session, now: float) -> None:
    for entry in store.outbox_unsent():
        store.outbox_mark_sent(entry.id, client.send(to_message(entry), now))


def test_outbox_through_a_real_session(tmp_path: pathlib.Path):
    store = Store.open(tmp_path / "store.db")
    pod = Ref("Pod", "default", "web", "u1")
    store.apply_upsert(pod, "7", {"metadata": {"name": "web"}})
    store.record_pod_status(pod, {"phase": "Pending"}, 1.0)
    store.outbox_append(
        "event",
        {
            "ref": {"kind": "Pod", "namespace": "default", "name": "web", "uid": "u1"},
            "type": "Normal",
            "reason": "Started",
            "message": "Started container c",
            "timestamp": 2.0,
            "count": 1,
        },
    )
    store.record_pod_status(pod, {"phase": "Running"}, 3.0)  # replaces the unsent Pending

    client, server, got = open_pair(store, received_up_to=0, now=10.0)
    send_unsent(store, client, 10.0)
    pump(client, server, 10.0)
    got += [e for e in server.events_received() if isinstance(e, MessageReceived)]
    assert [type(e.message) for e in got] == [KubeEvent, PodStatus]
    assert got[1].message.status == {"phase": "Running"}
    assert got[1].message.ref.uid == "u1"
    first, second = got[0].seq, got[1].seq
    assert second == first + 1 and first >= 1

    # the link drops before the hub's ack arrives; the agent restarts
    store.close()
    store = Store.open(tmp_path / "store.db")
    assert [e.seq for e in store.outbox_sent()] == [first, second]
    assert store.next_seq() > second
    # the hub had processed the event: the welcome says so, only the status is resent
    client, server, got = open_pair(store, received_up_to=first, now=20.0)
    assert [(e.seq, type(e.message)) for e in got] == [(second, PodStatus)]
    store.record_pod_status(pod, {"phase": "Failed"}, 21.0)
    send_unsent(store, client, 21.0)
    pump(client, server, 21.0)
    got = [e for e in server.events_received() if isinstance(e, MessageReceived)]
    assert got[0].seq > second and got[0].message.status == {"phase": "Failed"}
    # the hub acks everything: the outbox empties
    server.handle_timer(30.0)
    pump(client, server, 30.0)
    acked = [e for e in client.events_received() if isinstance(e, Acked)]
    assert acked
    store.outbox_ack(acked[-1].up_to)
    assert store.outbox_depth() == 0
    store.close()
