"""Test helpers for the sans-I/O core: one sample message per kind, and ConnectionPair.

``ConnectionPair`` pumps bytes between a client and a server ``Session`` in memory, as
h11's ``ConnectionPair`` and aioquic's ``client_and_server()`` do: no network, time is a
number the test advances.
"""

from __future__ import annotations

from protocol import (
    Ack,
    CertRenewRequest,
    CertRenewResponse,
    Chunk,
    Close,
    CloseCode,
    Error,
    ErrorCode,
    Hello,
    HelloReceived,
    KubeEvent,
    Message,
    MetricsBatch,
    ObjectDelete,
    ObjectRef,
    ObjectUpsert,
    Ping,
    PodDeleted,
    PodStatus,
    Pong,
    Role,
    Session,
    SessionConfig,
    SessionEvent,
    SyncDone,
    TwinDesired,
    TwinReported,
    Welcome,
)
from protocol.prepull import ImagePullOrder, ImagePullProgress
from protocol.stream_messages import (
    StreamClose,
    StreamData,
    StreamOpen,
    StreamReset,
    StreamResize,
    StreamWindow,
)
from protocol.upgrade import (
    ArtifactChunk,
    ArtifactRequest,
    UpgradeOrder,
    UpgradeProgress,
    UpgradeRollback,
)

POD = ObjectRef(kind="Pod", namespace="default", name="web-0", uid="7d3c0d5e-pod")
DEVICE = ObjectRef(kind="Device", namespace="plant", name="thermo-1", uid="a1b2-device")


def sample_messages() -> list[Message]:
    """One valid message of every kind, with every optional field set somewhere."""
    return [
        Hello(
            min_version=1,
            max_version=1,
            node_name="edge-1.plant",
            agent_version="0.1.0",
            capabilities=("twins", "metrics"),
            inventory={"7d3c0d5e-pod": "1234"},
            node_info={"labels": {"site": "plant"}, "capacity": {"cpu": "4"}},
        ),
        Welcome(
            version=1,
            hub_time=1_700_000_000.25,
            session_id="s-1",
            received_up_to=41,
            heartbeat_interval=20.0,
        ),
        ObjectUpsert(ref=POD, resource_version="1235", object={"metadata": {"name": "web-0"}}),
        ObjectDelete(ref=POD, resource_version=""),
        SyncDone(inventory_size=3),
        PodStatus(ref=POD, status={"phase": "Running", "conditions": []}, observed_at=12.5),
        PodDeleted(ref=POD),
        TwinDesired(ref=DEVICE, version=3, properties={"setpoint": 21.5}),
        TwinReported(ref=DEVICE, property="temperature", value=20.9, version=4, timestamp=13.0),
        MetricsBatch(node_name="edge-1", samples={"t": [1.0, 2.0], "cpu_millicores": [150, 170]}),
        KubeEvent(
            ref=POD,
            type="Warning",
            reason="BackOff",
            message="restarting",
            timestamp=14.0,
            count=2,
        ),
        Ack(up_to=7),
        Ping(nonce=1),
        Pong(nonce=1),
        Chunk(id=3, offset=4, total=10, data=b"\x00chunk", seq=9),
        CertRenewRequest(request_id="r-1", csr_pem=b"-----BEGIN CERTIFICATE REQUEST-----\n"),
        CertRenewResponse(request_id="r-1", certificate_pem=b"cert", ca_pem=b"ca"),
        CertRenewResponse(request_id="r-2", error="CSR names another node"),
        Error(code=ErrorCode.FORBIDDEN, message="not your pod", in_reply_to=5),
        Close(code=CloseCode.OVERLOADED, reason="busy", retry_after=30.0),
        StreamOpen(
            stream_id=1,
            operation="exec",
            namespace="default",
            pod="web-0",
            container="app",
            window=65536,
            params={"command": ["sh"], "stdin": True},
            user="alice",
        ),
        StreamData(stream_id=1, channel=1, data=b"hi", eof=True),
        StreamWindow(stream_id=1, credit=4096),
        StreamResize(stream_id=1, width=80, height=24),
        StreamClose(stream_id=1, exit_code=0),
        StreamReset(stream_id=1, code=ErrorCode.NOT_FOUND, reason="no such container"),
        *upgrade_samples(),
        *prepull_samples(),
    ]


def prepull_samples() -> list[Message]:
    """One message of every image pre-pull kind (protocol.prepull)."""
    return [
        ImagePullOrder("web", "shop", "u-2", 3, ("registry.local:5000/shop/web:1.2",)),
        ImagePullProgress(
            "web", "shop", "u-2", 3, "Failed", 0, 1_700_000_000.5, "ErrImagePull", "no such"
        ),
    ]


def upgrade_samples() -> list[Message]:
    """One message of every agent upgrade kind (protocol.upgrade)."""
    digest = "ab" * 32
    return [
        UpgradeOrder(
            upgrade="agent-0-5",
            uid="u-1",
            version="0.5.0",
            sha256=digest,
            artifact="edgefleet-0.5.0-py3-none-any.whl",
            size=1234,
            allow_downgrade=True,
            gate_s=120.0,
        ),
        UpgradeRollback(upgrade="agent-0-5", uid="u-1", reason="BatchRolledBack"),
        UpgradeProgress(
            upgrade="agent-0-5",
            uid="u-1",
            phase="RolledBack",
            version="0.4.0",
            observed_at=1_700_000_000.5,
            reason="CrashedAtStart",
            message="exit status 1",
        ),
        ArtifactRequest(sha256=digest, offset=65536, length=65536),
        ArtifactChunk(sha256=digest, offset=0, data=b"PK\x03\x04", total=1234, error=""),
    ]


def hello(min_version: int = 1, max_version: int = 1, **kwargs: object) -> Hello:
    return Hello(min_version, max_version, "edge-1", "0.1.0", **kwargs)  # type: ignore[arg-type]


def status(i: int = 0) -> PodStatus:
    return PodStatus(ref=POD, status={"phase": "Running", "n": i}, observed_at=float(i))


class ConnectionPair:
    """A client and a server session wired to each other in memory.

    Events are collected per side in ``client_events`` / ``server_events``; ``take()``
    drains one side's list. ``wire`` decides whether bytes get through: set it to False to
    cut the link (bytes are dropped, no FIN: a silent partition).
    """

    def __init__(
        self,
        client_config: SessionConfig | None = None,
        server_config: SessionConfig | None = None,
        *,
        now: float = 0.0,
        next_seq: int = 1,
    ) -> None:
        self.now = now
        self.client = Session(Role.CLIENT, client_config, now=now, next_seq=next_seq)
        self.server = Session(Role.SERVER, server_config, now=now)
        self.client_events: list[SessionEvent] = []
        self.server_events: list[SessionEvent] = []
        self.wire = True
        self.sent_frames: dict[Role, int] = {Role.CLIENT: 0, Role.SERVER: 0}

    def pump(self) -> None:
        """Move bytes both ways until neither side has anything to send."""
        for _ in range(1000):
            c_out = self.client.data_to_send()
            s_out = self.server.data_to_send()
            self.client_events += self.client.events_received()
            self.server_events += self.server.events_received()
            if not c_out and not s_out:
                return
            if self.wire:
                if c_out:
                    self.server.receive_data(c_out, self.now)
                if s_out:
                    self.client.receive_data(s_out, self.now)
        raise AssertionError("the sessions keep talking to each other")

    def take(self, side: Session) -> list[SessionEvent]:
        """Drain the events collected for one side."""
        events = self.client_events if side is self.client else self.server_events
        taken = list(events)
        events.clear()
        return taken

    def run_until(self, t: float) -> None:
        """Advance time to ``t``, firing every timer due on the way, in order."""
        while True:
            due = [x for x in (self.client.get_timer(), self.server.get_timer()) if x is not None]
            nxt = min(due, default=None)
            if nxt is None or nxt > t:
                break
            self.now = max(self.now, nxt)
            for side in (self.client, self.server):
                timer = side.get_timer()
                if timer is not None and timer <= self.now:
                    side.handle_timer(self.now)
            self.pump()
        self.now = max(self.now, t)
        self.pump()

    def handshake(
        self,
        the_hello: Hello | None = None,
        *,
        received_up_to: int = 0,
        heartbeat_interval: float = 20.0,
        pending: list[tuple[int, Message]] | tuple[()] = (),
    ) -> None:
        """Run hello / welcome to OPEN; leaves the handshake events in the lists."""
        self.client.connect(the_hello or hello(), self.now, pending=pending)
        self.pump()
        received = [e for e in self.server_events if isinstance(e, HelloReceived)]
        assert received, self.server_events
        self.server.accept(
            Welcome(
                version=received[-1].version,
                hub_time=1_700_000_000.0,
                session_id="s-1",
                received_up_to=received_up_to,
                heartbeat_interval=heartbeat_interval,
            ),
            self.now,
        )
        self.pump()
