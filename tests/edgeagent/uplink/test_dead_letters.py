"""Dead letters (issue 15 item 1): the outbox source and the store's dead-letter tables
with a real SQLite store and the real protocol session (client and server sans-I/O,
bytes pumped in memory): a message over the agreed limits is skipped for the session, what
is behind it goes, and at the bound it moves to the dead letters with a Warning Event;
``SendFailed`` resends and the hub's ``TOO_LARGE`` refusals take the same path; nothing
acknowledged or still queued is lost."""

from __future__ import annotations

import pathlib
import sqlite3

import pytest

from edgeagent.settings import load_settings
from edgeagent.statusreport import collect, render
from edgeagent.store import Store
from edgeagent.uplink.sources.outbox import OutboxSource, hello, resend_list
from protocol.config import SessionConfig
from protocol.errors import MessageTooLarge
from protocol.events import SendFailed
from protocol.messages import Welcome
from protocol.session import Acked, HelloReceived, MessageReceived, Role, Session
from tests.edgeagent.conftest import Ref
from tests.edgeagent.uplink.test_outbox import pump

MIB = 1024 * 1024
NOW = 1_700_000_000.0
NODE = "edge-1"


def event_body(reason: str, size: int = 10) -> dict:
    return {
        "ref": {"kind": "Node", "namespace": "", "name": NODE, "uid": NODE},
        "type": "Warning",
        "reason": reason,
        "message": "m" * size,
        "timestamp": NOW,
        "count": 1,
    }


def connect(store: Store, *, hub_max_message: int) -> tuple[Session, Session, list]:
    """One session to a hub whose message limit is ``hub_max_message``: the client's
    events after the welcome (``SendFailed`` for a resend that no longer fits)."""
    client = Session(Role.CLIENT, now=NOW, next_seq=store.next_seq())
    server = Session(Role.SERVER, SessionConfig(max_message_size=hub_max_message), now=NOW)
    client.connect(
        hello(store, node_name=NODE, agent_version="0.1.0"), NOW, pending=resend_list(store)
    )
    pump(client, server, NOW)
    [got] = [e for e in server.events_received() if isinstance(e, HelloReceived)]
    server.accept(
        Welcome(
            version=got.version,
            hub_time=NOW,
            session_id="s",
            received_up_to=0,
            heartbeat_interval=20.0,
        ),
        NOW,
    )
    pump(client, server, NOW)
    return client, server, client.events_received()


def drain(source: OutboxSource, client: Session) -> None:
    """What ``HubLink._drain_once`` does with one source."""
    while items := source.messages_to_send(64):
        for item in items:
            try:
                seq = client.send(item.message, NOW)
            except MessageTooLarge as exc:
                source.too_large(item, exc)
                continue
            source.sent(item, seq)


def ack(source: OutboxSource, client: Session, server: Session) -> None:
    """The hub's delayed ack reaches the agent."""
    server.handle_timer(NOW + 1)
    pump(client, server, NOW + 1)
    for e in client.events_received():
        if isinstance(e, Acked):
            source.acked(e.up_to)


def delivered(server: Session) -> list[str]:
    return [
        e.message.reason  # type: ignore[attr-defined]
        for e in server.events_received()
        if isinstance(e, MessageReceived)
    ]


@pytest.fixture
def store(tmp_path: pathlib.Path):
    s = Store.open(tmp_path / "store.db")
    yield s
    s.close()


def test_too_large_is_skipped_per_session_then_dead_lettered_with_an_event(store: Store):
    big = store.outbox_append("event", event_body("Huge", 2 * MIB))
    store.outbox_append("event", event_body("Small"))
    source = OutboxSource(store, node_name=NODE, max_attempts=2)
    for session_no in (1, 2):
        client, server, _ = connect(store, hub_max_message=1 * MIB)
        source.session_started(0)
        drain(source, client)
        pump(client, server, NOW)
        got = delivered(server)
        ack(source, client, server)
        if session_no == 1:
            # skipped for this session, not dropped: the small one behind it went
            assert got == ["Small"]
            assert store.send_attempts(big) == 1 and store.dead_letter_count() == 0
            assert [e.id for e in store.outbox_unsent()] == [big]
        else:
            assert got == ["MessageTooLarge"]  # the Warning about the dead letter
    [dead] = store.dead_letters()
    assert (dead.id, dead.kind, dead.attempts) == (big, "event", 2)
    assert dead.body["reason"] == "Huge" and len(dead.body["message"]) == 2 * MIB
    assert dead.size > 2 * MIB and "over 1048576 bytes" in dead.reason
    assert store.send_attempts(big) == 0
    assert all(e.id != big for e in store.outbox_pending())


def test_a_resend_that_no_longer_fits_is_reported_and_dead_lettered(store: Store):
    """Sent (and not acknowledged) to a hub that took 8 MiB; the next hub takes 1 MiB."""
    big = store.outbox_append("event", event_body("Huge", 2 * MIB))
    source = OutboxSource(store, node_name=NODE, max_attempts=1)
    client, _server, _ = connect(store, hub_max_message=8 * MIB)
    source.session_started(0)
    drain(source, client)  # sent; the session then drops before the ack
    [sent] = store.outbox_sent()
    assert sent.id == big
    client, server, events = connect(store, hub_max_message=1 * MIB)
    [failed] = [e for e in events if isinstance(e, SendFailed)]
    assert failed.seq == sent.seq
    source.session_started(0)
    source.send_failed(failed.seq, failed.error)
    drain(source, client)
    pump(client, server, NOW)
    assert delivered(server) == ["MessageTooLarge"]
    assert [d.id for d in store.dead_letters()] == [big]
    [warning] = store.outbox_pending()  # sent, waiting for the hub's ack
    assert warning.body["reason"] == "MessageTooLarge"


def test_a_failed_resend_under_the_bound_is_queued_again_unsent(store: Store):
    ref = Ref("Pod", "default", "web", "u1")
    store.record_pod_status(ref, {"phase": "Running", "message": "x" * (2 * MIB)}, 1.0)
    source = OutboxSource(store, node_name=NODE, max_attempts=3)
    client, _server, _ = connect(store, hub_max_message=8 * MIB)
    drain(source, client)
    [sent] = store.outbox_sent()
    source.send_failed(sent.seq, MessageTooLarge("pod_status", 2 * MIB, MIB))
    [again] = store.outbox_unsent()
    assert again.id == sent.id and again.seq is None
    assert store.send_attempts(sent.id) == 1 and store.dead_letter_count() == 0
    assert source.messages_to_send(10) == []  # not in this session again


def test_a_failed_resend_replaced_by_a_newer_status_is_dropped(store: Store):
    """Latest wins: a newer status for the pod is queued, the old one goes."""
    ref = Ref("Pod", "default", "web", "u1")
    store.record_pod_status(ref, {"phase": "Pending", "message": "x" * (2 * MIB)}, 1.0)
    source = OutboxSource(store, node_name=NODE, max_attempts=3)
    client, _server, _ = connect(store, hub_max_message=8 * MIB)
    drain(source, client)
    [sent] = store.outbox_sent()
    newer = store.record_pod_status(ref, {"phase": "Running"}, 2.0)
    source.send_failed(sent.seq, MessageTooLarge("pod_status", 2 * MIB, MIB))
    assert [e.id for e in store.outbox_pending()] == [newer]
    assert store.dead_letter_count() == 0


def test_a_refusal_by_the_hub_dead_letters_at_once_before_the_ack(store: Store):
    pod = Ref("Pod", "default", "web", "u1")
    store.record_pod_status(pod, {"phase": "Running"}, 1.0)
    source = OutboxSource(store, node_name=NODE, max_attempts=3)
    client, _server, _ = connect(store, hub_max_message=8 * MIB)
    drain(source, client)
    [sent] = store.outbox_sent()
    assert source.refused(sent.seq, "pod_status of 9000000 bytes is over 8388608") is True
    assert source.refused(sent.seq + 1000, "not ours") is False
    [dead] = store.dead_letters()
    assert dead.attempts == 1 and dead.reason.startswith("refused by the hub")
    [warning] = store.outbox_unsent()
    assert warning.kind == "event" and warning.body["ref"]["kind"] == "Pod"
    assert warning.body["ref"]["uid"] == "u1" and warning.body["reason"] == "MessageTooLarge"
    store.outbox_ack(sent.seq)  # the hub's ack of the refused seq then finds nothing
    assert store.dead_letter_count() == 1


def test_a_failure_of_a_message_already_gone_is_a_no_op(store: Store):
    gone = store.outbox_append("event", event_body("Gone"))
    [entry] = store.outbox_unsent()
    store.outbox_drop(gone)
    assert store.outbox_send_failed(entry, "too large", size=1, max_attempts=1) is None
    assert store.dead_letter_count() == 0 and store.send_attempts(gone) == 0


def test_status_shows_the_dead_letters(tmp_path: pathlib.Path):
    settings = load_settings(
        tmp_path / "none.yaml", overrides={"node_name": NODE, "state_dir": str(tmp_path)}
    )
    store = Store.open(settings.store_path, settings.store)
    try:
        store.outbox_append("event", event_body("Huge"))
        [entry] = store.outbox_unsent()
        store.outbox_send_failed(
            entry,
            "event encodes to 9437336 bytes, over 8388608 bytes",
            size=9437336,
            max_attempts=1,
        )
        store.flush()
    finally:
        store.close()
    report = collect(settings)
    assert report["dead_letters"]["count"] == 1
    [latest] = report["dead_letters"]["latest"]
    assert latest["object"] == f"Node {NODE}" and latest["size"] == 9437336
    text = render(report)
    assert "dead letters: 1 message(s)" in text
    assert f"event  Node {NODE}  event encodes to 9437336 bytes" in text


def test_status_of_a_store_from_before_dead_letters(tmp_path: pathlib.Path):
    """A store an older agent wrote (no m005 yet) read by ``edgeagent status`` (read-only,
    so not migrated): the report says the dead letters are unavailable, nothing fails."""
    settings = load_settings(
        tmp_path / "none.yaml", overrides={"node_name": NODE, "state_dir": str(tmp_path)}
    )
    Store.open(settings.store_path, settings.store).close()
    conn = sqlite3.connect(settings.store_path)
    with conn:
        conn.execute("DROP TABLE dead_letter")
        conn.execute("DROP TABLE send_failure")
        conn.execute("DELETE FROM _sqlite_migrations WHERE name = 'm005_dead_letters'")
    conn.close()
    report = collect(settings)
    assert report["dead_letters"]["count"] == 0 and "error" in report["dead_letters"]
    assert "dead letters" not in render(report)
    with Store.open(settings.store_path, settings.store) as s:  # the agent migrates it
        assert s.recovered_from is None and s.dead_letter_count() == 0


def test_the_attempts_bound_is_checked(tmp_path: pathlib.Path):
    from edgeagent.errors import ConfigError

    with pytest.raises(ConfigError, match="dead_letter_attempts"):
        load_settings(tmp_path / "none.yaml", overrides={"hub.dead_letter_attempts": 0})


def test_attempts_of_messages_that_went_after_all_are_forgotten(store: Store):
    """A message that failed once and was then sent and acknowledged (a later hub took
    more) leaves no attempt row behind once another message fails."""
    first = store.outbox_append("event", event_body("Once"))
    [entry] = store.outbox_unsent()
    assert store.outbox_send_failed(entry, "too large", size=1, max_attempts=3) is None
    store.outbox_mark_sent(first, store.next_seq())
    store.outbox_ack(store.next_seq())
    assert store.send_attempts(first) == 1  # kept until the next failure looks
    store.outbox_append("event", event_body("Other"))
    [other] = store.outbox_unsent()
    store.outbox_send_failed(other, "too large", size=1, max_attempts=3)
    assert store.send_attempts(first) == 0 and store.send_attempts(other.id) == 1
