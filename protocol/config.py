"""The tunables of one session (``SessionConfig``) and their validation.

Kept beside ``protocol.session`` as aioquic keeps ``QuicConfiguration`` in
``quic/configuration.py``: the transports, the hub's and the agent's settings build one
without reading the state machine. Sans-I/O like the session (pyproject's contract).
"""

from __future__ import annotations

from dataclasses import dataclass

from protocol.chunking import DEFAULT_MAX_MESSAGE_SIZE
from protocol.codec import DEFAULT_MAX_FRAME_SIZE
from protocol.errors import SettingsError
from protocol.messages import MAX_PROTOCOL_VERSION, MIN_PROTOCOL_VERSION

__all__ = ["DEFAULT_CONFIG", "SessionConfig"]


@dataclass(frozen=True, slots=True)
class SessionConfig:
    """The tunables of one session. All durations in seconds, sizes in bytes.

    Raises:
        SettingsError: a value is out of range; ``key`` names it.
    """

    window: int = 256
    """Messages (needing an ack) sent and not yet acknowledged before ``send()`` raises
    ``WindowFull``. 256 x 1 KiB keeps a 100 ms path busy at 2.5 MB/s while bounding what a
    reconnect may have to resend."""
    ping_interval: float = 20.0
    """Client: ping after this long (plus 5%) without sending, or without hearing anything
    since the last ping or the oldest unacknowledged message. The hub's
    ``welcome.heartbeat_interval`` overrides it. 20 s (21 with the slack) stays below the
    30 s idle timeout of common NAT UDP mappings, so QUIC paths stay open."""
    liveness_timeout: float = 60.0
    """Declare the peer dead after this long without receiving a byte (3 ping intervals:
    two lost pings are tolerated)."""
    ack_delay: float = 0.05
    """Acknowledge received messages at most this long after the first unacknowledged one."""
    ack_every: int = 64
    """... or as soon as this many are unacknowledged (a quarter of the default window, so a
    fast sender never stalls on a full window)."""
    close_timeout: float = 5.0
    """How long ``close()`` waits for the peer's ``close`` before giving up."""
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE
    """The largest frame payload accepted and sent (4 MiB); the handshake agrees on the
    smaller of both sides' (``protocol.chunking.agree_limits``)."""
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
    """The largest message accepted and sent (bytes), cut into chunks below the frame
    limit (``protocol.chunking``); agreed at the handshake like ``max_frame_size``.
    Reassembly holds at most three such messages."""
    min_version: int = MIN_PROTOCOL_VERSION
    """The oldest protocol version we speak (the server negotiates from this range)."""
    max_version: int = MAX_PROTOCOL_VERSION
    """The newest protocol version we speak."""
    manual_ack: bool = False
    """Acknowledge only what the application has released with ``Session.release()``
    instead of everything delivered. The hub sets it so that an edge message is acked only
    once its effect is durable in the Kubernetes API: until then it stays unacknowledged
    on the edge and is resent after a reconnect (store-and-forward)."""

    def __post_init__(self) -> None:
        _positive_int(self, "window")
        _positive_int(self, "ack_every")
        _positive_int(self, "max_frame_size")
        _positive_int(self, "max_message_size")
        _positive_int(self, "min_version")
        _positive_int(self, "max_version")
        for key in ("ping_interval", "liveness_timeout", "ack_delay", "close_timeout"):
            value = getattr(self, key)
            if not (isinstance(value, (int, float)) and not isinstance(value, bool)):
                raise SettingsError(key, "a number of seconds", value)
            if not 0 < value < float("inf"):
                raise SettingsError(key, "> 0 seconds", value)
        if self.liveness_timeout <= self.ping_interval:
            raise SettingsError(
                "liveness_timeout",
                f"> ping_interval ({self.ping_interval} s)",
                self.liveness_timeout,
            )
        for key in ("max_frame_size", "max_message_size"):
            if getattr(self, key) > 2**32 - 1:
                raise SettingsError(key, "<= 2**32 - 1 bytes", getattr(self, key))
        if self.max_version < self.min_version:
            raise SettingsError(
                "max_version", f">= min_version ({self.min_version})", self.max_version
            )
        if not isinstance(self.manual_ack, bool):
            raise SettingsError("manual_ack", "a bool", self.manual_ack)


def _positive_int(config: SessionConfig, key: str) -> None:
    value = getattr(config, key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise SettingsError(key, "an int >= 1", value)


DEFAULT_CONFIG = SessionConfig()
"""The defaults; immutable, so shared by the 10,000 sessions of a hub."""
