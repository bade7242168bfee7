"""The Event correlator on its own: aggregation, deduplication and the spam filter, with a
clock the test moves (client-go's rules, cloudhub/correlator.py)."""

from __future__ import annotations

from cloudhub.correlator import AGGREGATED_PREFIX, EventCorrelator
from cloudhub.kube.times import micro_time, rfc3339


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def correlator(clock: Clock, **kwargs: object) -> EventCorrelator:
    return EventCorrelator(clock=clock, stamp=rfc3339, micro_stamp=micro_time, **kwargs)


def event(
    name: str,
    message: str = "Edge agent connected over quic",
    *,
    node: str = "pi-1",
    reason: str = "EdgeConnected",
    at: float = 1_700_000_000.0,
) -> dict:
    stamp = rfc3339(at)
    return {
        "metadata": {"name": name, "namespace": "default"},
        "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node},
        "type": "Normal",
        "reason": reason,
        "message": message,
        "source": {"component": "cloudhub", "host": node},
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


def test_a_repeat_patches_the_first_event_with_a_count_and_a_series() -> None:
    clock = Clock()
    c = correlator(clock)
    first = c.correlate(event("pi-1.a"))
    assert first is not None and first.patch is None and first.event["metadata"]["name"] == "pi-1.a"
    for n in (2, 3):
        clock.now += 30
        again = c.correlate(event(f"pi-1.{n}", at=clock.now))
        assert again is not None and again.patch is not None
        assert again.event["metadata"]["name"] == "pi-1.a"  # the same object
        assert again.event["count"] == again.patch["count"] == n
        assert again.event["firstTimestamp"] == rfc3339(1_700_000_000.0)
        assert again.patch["lastTimestamp"] == rfc3339(clock.now)
        assert again.patch["series"] == {"count": n, "lastObservedTime": micro_time(clock.now)}


def test_different_objects_reasons_and_messages_are_kept_apart() -> None:
    c = correlator(Clock())
    assert c.correlate(event("a.1")).patch is None
    assert c.correlate(event("b.1", node="pi-2")).patch is None
    assert c.correlate(event("a.2", reason="EdgeDisconnected")).patch is None
    assert c.correlate(event("a.3", "Edge agent connected over websocket")).patch is None
    assert c.correlate(event("a.4")).patch is not None


def test_ten_similar_messages_are_combined_into_one_event() -> None:
    clock = Clock()
    c = correlator(clock, spam_burst=100)
    names = set()
    for i in range(30):
        clock.now += 1
        result = c.correlate(event(f"pi-1.{i}", f"refused: attempt {i}", reason="SessionRefused"))
        assert result is not None
        names.add(result.event["metadata"]["name"])
        if i >= 9:
            assert result.event["message"] == f"{AGGREGATED_PREFIX}refused: attempt {i}"
    assert len(names) == 10  # nine of their own, then one combined Event
    assert result.patch is not None and result.patch["count"] == 21
    # After the window, similar Events start counting afresh.
    clock.now += 601
    fresh = c.correlate(event("pi-1.late", "refused: attempt late", reason="SessionRefused"))
    assert fresh is not None and fresh.patch is None
    assert not fresh.event["message"].startswith(AGGREGATED_PREFIX)


def test_the_spam_filter_drops_past_the_burst_and_refills_slowly() -> None:
    clock = Clock()
    c = correlator(clock, spam_burst=5, spam_qps=0.1)
    results = [c.correlate(event(f"pi-1.{i}")) for i in range(8)]
    assert [r is not None for r in results] == [True] * 5 + [False] * 3
    # Another reason on the same node still gets through.
    assert c.correlate(event("pi-1.rev", "revoked", reason="CertificateRevoked")) is not None
    clock.now += 10  # one token back
    assert c.correlate(event("pi-1.x")) is not None
    assert c.correlate(event("pi-1.y")) is None


def test_the_caches_are_bounded() -> None:
    c = correlator(Clock(), cache_size=3)
    for i in range(10):
        c.correlate(event(f"n{i}.a", node=f"n{i}"))
    # The most recent are remembered, the oldest forgotten: an Event of n0 is recorded anew.
    assert c.correlate(event("n9.b", node="n9")).patch is not None
    assert c.correlate(event("n0.b", node="n0")).patch is None
