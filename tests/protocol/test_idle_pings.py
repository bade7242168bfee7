"""An idle agent's pings, on a simulated link with latency (time injected, no clock).

The idle uplink budget (0.1 kbit/s) leaves room for the pings the liveness rule needs and
no more: with one acknowledged message a minute and a 20 s ping interval, two pings per
minute keep the path fed. Two things used to add a third: a ping fired while the minute's
message still waited for its ack (the ack was an answer on its way), and a ping due at the
same moment as the application's next message (60 s is three intervals) going out first.
"""

from __future__ import annotations

import heapq
import itertools

import pytest

from protocol import (
    Acked,
    HelloReceived,
    MetricsBatch,
    Ping,
    Role,
    Session,
    SessionConfig,
    SessionState,
    Welcome,
)
from protocol.codec import FrameDecoder
from tests.protocol.helpers import hello


class DelayedLink:
    """A client and a server ``Session`` whose bytes take ``one_way`` seconds to arrive.

    ``app_first`` decides which runs first when the application's message and a session
    timer are due at the same moment (an event loop runs them in either order).
    """

    def __init__(self, *, one_way: float, app_first: bool, heartbeat: float = 20.0) -> None:
        self.one_way = one_way
        self.app_first = app_first
        self.heartbeat = heartbeat
        self.now = 0.0
        self.client = Session(Role.CLIENT, SessionConfig(), now=0.0)
        self.server = Session(Role.SERVER, SessionConfig(), now=0.0)
        self.wire: list[tuple[float, int, bool, bytes]] = []  # (arrival, order, to_server, data)
        self.order = 0
        self.up: list[tuple[float, str]] = []  # (time, kind) of every frame the client sent
        self.acks_at: list[float] = []  # when an ack reached the client

    def flush(self) -> None:
        for side, to_server in ((self.client, True), (self.server, False)):
            data = side.data_to_send()
            if not data:
                continue
            if to_server:
                decoder = FrameDecoder()
                decoder.feed(data)
                self.up += [(self.now, message.kind) for _, message in decoder]
            self.order += 1
            heapq.heappush(self.wire, (self.now + self.one_way, self.order, to_server, data))
        for event in self.server.events_received():
            if isinstance(event, HelloReceived):
                self.server.accept(Welcome(event.version, 0.0, "s-1", 0, self.heartbeat), self.now)
                self.flush()
        for event in self.client.events_received():
            if isinstance(event, Acked):
                self.acks_at.append(self.now)

    def timers(self) -> None:
        for side in (self.client, self.server):
            deadline = side.get_timer()
            if deadline is not None and deadline <= self.now:
                side.handle_timer(self.now)

    def run(self, until: float, app_times: list[float]) -> None:
        """Run to ``until``; the application sends one MetricsBatch at each of ``app_times``."""
        self.client.connect(hello(), self.now)
        self.flush()
        pending = sorted(app_times)
        while True:
            candidates = [t for t in (self.client.get_timer(), self.server.get_timer()) if t]
            if self.wire:
                candidates.append(self.wire[0][0])
            if pending:
                candidates.append(pending[0])
            self.now = min(candidates)
            if self.now > until:
                return
            while self.wire and self.wire[0][0] <= self.now:
                _, _, to_server, data = heapq.heappop(self.wire)
                (self.server if to_server else self.client).receive_data(data, self.now)
            app_due = bool(pending) and pending[0] <= self.now
            if app_due and self.app_first:
                self.send_batch(pending.pop(0))
            self.timers()
            if app_due and not self.app_first:
                self.send_batch(pending.pop(0))
            self.flush()

    def send_batch(self, _: float) -> None:
        assert self.client.state is SessionState.OPEN
        self.client.send(MetricsBatch("edge-1", {"t": [self.now]}), self.now)


@pytest.mark.parametrize("app_first", [True, False], ids=["app_first", "timer_first"])
@pytest.mark.parametrize("one_way", [0.001, 0.025, 0.3])
def test_an_idle_client_sends_only_the_pings_it_needs(one_way: float, app_first: bool) -> None:
    link = DelayedLink(one_way=one_way, app_first=app_first)
    start, hour = 5.0, 3600.0
    batches = [start + 60.0 * i for i in range(60)]  # one acked message a minute
    link.run(start + hour - 1.0, batches)

    pings = [t for t, kind in link.up if kind == "ping"]
    sent = [t for t, kind in link.up if kind == "metrics_batch"]
    assert len(sent) == 60 and len(link.acks_at) == 60
    # Two pings per minute: the fewest that keep every silence under 20 s x 1.05.
    assert len(pings) == 2 * 60, pings[:12]
    # None while a batch waits for its ack (the ack answers "is the hub there?").
    for batch_at, ack_at in zip(sent, link.acks_at, strict=True):
        assert not [p for p in pings if batch_at <= p <= ack_at], (batch_at, ack_at)
    # ...and the path is still fed: the client is never silent for more than the slack.
    times = sorted(t for t, kind in link.up if t >= start)
    assert max(b - a for a, b in itertools.pairwise(times)) <= 20.0 * 1.05 + 1e-9


def test_jittered_application_messages_do_not_tie_with_pings() -> None:
    # The agent samples on a fixed 15 s grid and sends each fourth sample's batch after a
    # sampling time that varies: the batch lands just before or just after the minute.
    link = DelayedLink(one_way=0.025, app_first=False)
    jitter = [0.0, 0.4, 0.05, 0.3, 0.0, 0.2, 0.45, 0.1]
    batches = [5.0 + 60.0 * i + jitter[i % len(jitter)] for i in range(60)]
    link.run(3605.0, batches)
    assert sum(1 for _, kind in link.up if kind == "ping") == 120


def test_an_awaited_ack_defers_the_probe_but_not_forever() -> None:
    link = DelayedLink(one_way=0.01, app_first=True)
    link.run(30.0, [])  # open, one ping/pong round
    client = link.client
    probe_at = client.get_timer()
    assert probe_at is not None
    # A message just before the probe is due: its ack will answer, so no ping for now.
    client.send(MetricsBatch("edge-1", {}), probe_at - 0.001)
    client.data_to_send()  # sent into a cut: the ack never comes back
    assert client.get_timer() == pytest.approx(probe_at - 0.001 + 21.0)
    client.handle_timer(probe_at + 1.0)
    assert client.data_to_send() == b""
    # An interval later the ack has still not come: the hub may be gone, so probe.
    client.handle_timer(probe_at - 0.001 + 21.0)
    decoder = FrameDecoder()
    decoder.feed(client.data_to_send())
    assert [message for _, message in decoder] == [Ping(nonce=2)]
