"""EdgeFleet wire protocol: typed messages, the msgpack frame codec, a sans-I/O session.

This package is the contract between ``cloudhub`` and ``edgeagent`` (docs/protocol.md).
Its core modules (``errors``, ``messages``, ``codec``, ``config``, ``events``, ``states``,
``session``, ``backoff``) do no I/O, read no clock and draw no random numbers; the asyncio
transports live in ``protocol.transport`` and are imported from there, not re-exported
here, so that importing ``protocol`` stays cheap on the edge.
"""

# isort: off
# First: registers the agent upgrade messages (protocol.upgrade) before protocol.states
# builds its per-role tables of receivable kinds from the registry.
import protocol.upgrade  # noqa: F401

# isort: on
from protocol.backoff import DEFAULT_BASE, DEFAULT_CAP, backoff, is_retryable, retry_delay
from protocol.codec import DEFAULT_MAX_FRAME_SIZE, FrameDecoder, decode_payload, encode
from protocol.config import SessionConfig
from protocol.errors import (
    CloseCode,
    ConnectionClosed,
    DecodeError,
    ErrorCode,
    FrameTooLarge,
    InvalidMessage,
    ProtocolError,
    RemoteProtocolError,
    SettingsError,
    StateError,
    TransportError,
    UnknownKind,
    UsageError,
    VersionMismatch,
    WindowFull,
)
from protocol.events import (
    Acked,
    Closed,
    Established,
    HelloReceived,
    MessageReceived,
    PeerDead,
    PeerError,
    SessionEvent,
)
from protocol.messages import (
    MAX_PROTOCOL_VERSION,
    MIN_PROTOCOL_VERSION,
    PROTOCOL_VERSION,
    REGISTRY,
    Ack,
    CertRenewRequest,
    CertRenewResponse,
    Close,
    Error,
    Hello,
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
    SyncDone,
    TwinDesired,
    TwinReported,
    Welcome,
)
from protocol.session import Session
from protocol.settings import SettingInfo, describe, load_settings
from protocol.states import TRANSITIONS, Role, SessionState, negotiate_version

__all__ = [
    "DEFAULT_BASE",
    "DEFAULT_CAP",
    "DEFAULT_MAX_FRAME_SIZE",
    "MAX_PROTOCOL_VERSION",
    "MIN_PROTOCOL_VERSION",
    "PROTOCOL_VERSION",
    "REGISTRY",
    "TRANSITIONS",
    "Ack",
    "Acked",
    "CertRenewRequest",
    "CertRenewResponse",
    "Close",
    "CloseCode",
    "Closed",
    "ConnectionClosed",
    "DecodeError",
    "Error",
    "ErrorCode",
    "Established",
    "FrameDecoder",
    "FrameTooLarge",
    "Hello",
    "HelloReceived",
    "InvalidMessage",
    "KubeEvent",
    "Message",
    "MessageReceived",
    "MetricsBatch",
    "ObjectDelete",
    "ObjectRef",
    "ObjectUpsert",
    "PeerDead",
    "PeerError",
    "Ping",
    "PodDeleted",
    "PodStatus",
    "Pong",
    "ProtocolError",
    "RemoteProtocolError",
    "Role",
    "Session",
    "SessionConfig",
    "SessionEvent",
    "SessionState",
    "SettingInfo",
    "SettingsError",
    "StateError",
    "SyncDone",
    "TransportError",
    "TwinDesired",
    "TwinReported",
    "UnknownKind",
    "UsageError",
    "VersionMismatch",
    "Welcome",
    "WindowFull",
    "backoff",
    "decode_payload",
    "describe",
    "encode",
    "is_retryable",
    "load_settings",
    "negotiate_version",
    "retry_delay",
]
