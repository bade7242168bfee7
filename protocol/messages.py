"""The wire messages: one frozen, slotted dataclass per kind, registered by tag.

Each class declares on itself, as class attributes, everything the session and the
outboxes need to know about it, so that nothing is inferred from strings or payloads:

- ``kind``: the wire tag (``"pod_status"``).
- ``needs_ack``: the session numbers it, keeps it unacknowledged until the peer's
  cumulative ``ack`` covers it, and exposes it for persistence and resend (streams:
  at-least-once). Kinds without it are level-based (re-synced after every reconnect) or
  session-local.
- ``from_edge`` / ``from_hub``: which side may send it; the session refuses the rest.
- ``control``: the session itself sends it (hello, welcome, ack, ping, pong, close);
  ``Session.send()`` refuses it.
- ``priority``: its send lane, CONTROL > STATUS > BULK (``protocol.chunking``).
- ``coalesce_key()``: messages with equal keys replace each other in an outbox while not
  yet sent (latest-wins), e.g. pod status per pod uid; ``None`` means "never coalesce".

Field types are checked from the annotations when a message is constructed (and so also
when one is decoded); the per-class ``_check()`` adds value rules (ranges, formats). The
checks are computed once per class when it is registered; nothing is reflected per message.
Dict fields that carry Kubernetes JSON (``object``, ``status``, ``node_info``) are checked
to be maps with string keys, not validated deeper: the hub and the agent own their shape.
"""

from __future__ import annotations

import re
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from protocol.errors import CloseCode, ErrorCode, InvalidMessage
from protocol.fields import MAX_SEQ, check_limits, compile_message
from protocol.objectref import ObjectRef
from protocol.priority import Priority

__all__ = [
    "MAX_PROTOCOL_VERSION",
    "MAX_SEQ",
    "MIN_PROTOCOL_VERSION",
    "PROTOCOL_VERSION",
    "REGISTRY",
    "STORE_RECOVERED",
    "Ack",
    "CertRenewRequest",
    "CertRenewResponse",
    "Chunk",
    "Close",
    "Error",
    "Hello",
    "KubeEvent",
    "Message",
    "MetricsBatch",
    "ObjectDelete",
    "ObjectRef",
    "ObjectUpsert",
    "Ping",
    "PodDeleted",
    "PodStatus",
    "Pong",
    "Priority",
    "SyncDone",
    "TwinDesired",
    "TwinReported",
    "Welcome",
    "register_message",
]

PROTOCOL_VERSION = 1
"""The protocol version this code speaks best (docs/protocol.md)."""
MIN_PROTOCOL_VERSION = 1
"""The oldest protocol version this code still speaks."""
MAX_PROTOCOL_VERSION = PROTOCOL_VERSION
"""The newest protocol version this code speaks."""

# RFC 1123 subdomain, as Kubernetes validates Node names.
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


# --- the message base class ------------------------------------------------------------------

M = TypeVar("M", bound="Message")


class Message:
    """Base of every wire message. Subclasses are frozen slotted dataclasses.

    Raises:
        InvalidMessage: on construction, when a field has the wrong type or value; the
            exception's ``field`` names it (dotted for nested values, ``"ref.uid"``).
    """

    __slots__ = ()

    kind: ClassVar[str]
    """The wire tag."""
    needs_ack: ClassVar[bool] = False
    """Numbered, kept until acknowledged, resent after reconnect (at-least-once)."""
    from_edge: ClassVar[bool] = False
    """The edge (session client) may send it."""
    from_hub: ClassVar[bool] = False
    """The hub (session server) may send it."""
    control: ClassVar[bool] = False
    """Sent by the session itself; ``Session.send()`` refuses it."""
    priority: ClassVar[Priority] = Priority.STATUS
    """The send lane (:class:`Priority`); numbered kinds always ride STATUS."""
    flow_field: ClassVar[str | None] = None
    """In the BULK lane: the field whose value is the message's flow (messages of one flow
    keep their order, flows take turns: ``protocol.chunking.SendQueue``); ``None``: the
    lane's one ordered flow."""
    _expected: ClassVar[dict[str, str]] = {}

    def _check(self) -> None:
        """Value rules beyond the field types; subclasses override."""

    def coalesce_key(self) -> Hashable | None:
        """The latest-wins key: equal keys replace each other in an outbox, ``None`` never."""
        return None

    def _to_body(self) -> dict[str, Any]:  # replaced per class by compile_message
        """The body map for the wire (``protocol.codec`` uses it)."""
        raise NotImplementedError

    @staticmethod
    def _from_body(body: dict[Any, Any]) -> Message:  # replaced per class by compile_message
        """Build from a decoded body map, ignoring unknown keys.

        Raises:
            DecodeError: a field is missing or invalid; ``field`` is ``"b.<name>"``.
        """
        raise NotImplementedError


REGISTRY: dict[str, type[Message]] = {}
"""Every message class by its wire tag."""


def register_message(cls: type[M]) -> type[M]:
    """Record a message class by its tag and compile its checks and wire mapping: the
    class decorator of every message kind, here and in the sibling message modules."""
    # only classes with value rules pay for calling them
    compile_message(cls, has_rules=cls._check is not Message._check)
    if cls.kind in REGISTRY:  # pragma: no cover - a programming error caught at import
        raise TypeError(f"duplicate message kind {cls.kind!r}")
    REGISTRY[cls.kind] = cls
    return cls


# --- handshake -------------------------------------------------------------------------------


@register_message
@dataclass(frozen=True, slots=True)
class Hello(Message):
    """The edge's opening message: who it is, what it speaks, what it already has."""

    kind: ClassVar[str] = "hello"
    from_edge: ClassVar[bool] = True
    control: ClassVar[bool] = True

    min_version: int
    """The oldest protocol version the edge speaks (>= 1)."""
    max_version: int
    """The newest protocol version the edge speaks (>= ``min_version``)."""
    node_name: str
    """The Kubernetes Node name (an RFC 1123 subdomain, as Kubernetes requires)."""
    agent_version: str
    """The agent's release, e.g. ``"0.1.0"``, for logs and the Node's nodeInfo."""
    capabilities: tuple[str, ...] = ()
    """Optional features the edge supports, e.g. ``("twins", "metrics")``."""
    inventory: dict[str, str] = field(default_factory=dict)
    """Objects the edge holds: uid -> resourceVersion, so the hub sends only the diff."""
    node_info: dict[str, Any] = field(default_factory=dict)
    """Node facts as Kubernetes JSON: ``labels``, ``capacity``, ``allocatable``,
    ``nodeInfo``, ``addresses``."""
    max_frame_size: int = 0
    """The largest frame payload (bytes) the edge takes; 0: an edge before negotiation."""
    max_message_size: int = 0
    """The largest message (bytes, reassembled) the edge takes; 0: it takes no chunks."""

    def _check(self) -> None:
        if not (self.min_version >= 1):
            raise InvalidMessage("min_version", "must be >= 1")
        if not (self.max_version >= self.min_version):
            raise InvalidMessage("max_version", "must be >= min_version")
        if not (
            len(self.node_name) <= 253 and _DNS_SUBDOMAIN.fullmatch(self.node_name) is not None
        ):
            raise InvalidMessage(
                "node_name",
                f"{self.node_name!r} is not an RFC 1123 subdomain (a Kubernetes Node name)",
            )
        check_limits(self.max_frame_size, self.max_message_size)


@register_message
@dataclass(frozen=True, slots=True)
class Welcome(Message):
    """The hub's answer to an accepted ``hello``."""

    kind: ClassVar[str] = "welcome"
    from_hub: ClassVar[bool] = True
    control: ClassVar[bool] = True

    version: int
    """The negotiated protocol version (the highest in both ranges)."""
    hub_time: float
    """The hub's wall clock, seconds since the Unix epoch (for the edge's skew estimate)."""
    session_id: str
    """An opaque id the hub gave this session, for logs on both sides."""
    received_up_to: int
    """The highest edge seq the hub has processed (0 if unknown); the edge drops its
    pending messages up to it and resends the rest."""
    heartbeat_interval: float
    """Seconds; the edge pings after this long (plus 5%) without traffic (overrides its own
    ``ping_interval``, so the hub can tune the load of 10,000 idle nodes)."""
    max_frame_size: int = 0
    """The frame limit both use (bytes): the smaller of both; 0: a hub before negotiation."""
    max_message_size: int = 0
    """The message limit both use (bytes): the smaller of both; 0: no chunks."""

    def _check(self) -> None:
        if not (self.version >= 1):
            raise InvalidMessage("version", "must be >= 1")
        if not self.session_id:
            raise InvalidMessage("session_id", "must not be empty")
        if not (0 <= self.received_up_to <= MAX_SEQ):
            raise InvalidMessage("received_up_to", "must be >= 0")
        if not (self.heartbeat_interval > 0):
            raise InvalidMessage("heartbeat_interval", "must be > 0 seconds")
        check_limits(self.max_frame_size, self.max_message_size)


# --- level-based object state (hub -> edge) ---------------------------------------------------


@register_message
@dataclass(frozen=True, slots=True)
class ObjectUpsert(Message):
    """Create or replace an object the edge must hold (pod, ConfigMap, Secret, device)."""

    kind: ClassVar[str] = "object_upsert"
    from_hub: ClassVar[bool] = True
    priority: ClassVar[Priority] = Priority.BULK  # upserts, deletes, sync_done: one lane, in order

    ref: ObjectRef
    """The object."""
    resource_version: str
    """Its ``metadata.resourceVersion`` (opaque; compare for equality only)."""
    object: dict[str, Any]
    """The raw API JSON of the object."""

    def coalesce_key(self) -> Hashable | None:
        """The object's uid: a newer upsert or delete replaces an unsent one."""
        return self.ref.uid


@register_message
@dataclass(frozen=True, slots=True)
class ObjectDelete(Message):
    """The edge must drop this object (deleted in the cloud, or no longer bound here)."""

    kind: ClassVar[str] = "object_delete"
    from_hub: ClassVar[bool] = True
    priority: ClassVar[Priority] = Priority.BULK  # upserts, deletes, sync_done: one lane, in order

    ref: ObjectRef
    """The object."""
    resource_version: str
    """The resourceVersion of the deletion, or ``""`` when found missing at re-sync."""

    def coalesce_key(self) -> Hashable | None:
        """The object's uid: replaces an unsent upsert of the same object."""
        return self.ref.uid


@register_message
@dataclass(frozen=True, slots=True)
class SyncDone(Message):
    """Marks the end of the reconnect diff: the edge's store now matches the API."""

    kind: ClassVar[str] = "sync_done"
    from_hub: ClassVar[bool] = True
    priority: ClassVar[Priority] = Priority.BULK  # upserts, deletes, sync_done: one lane, in order

    inventory_size: int
    """How many objects the edge should now hold (a cross-check, >= 0)."""

    def _check(self) -> None:
        if not (self.inventory_size >= 0):
            raise InvalidMessage("inventory_size", "must be >= 0")


# --- streams and status (edge -> hub) ---------------------------------------------------------


@register_message
@dataclass(frozen=True, slots=True)
class PodStatus(Message):
    """The latest status of one pod the edge runs (latest-wins)."""

    kind: ClassVar[str] = "pod_status"
    needs_ack: ClassVar[bool] = True
    from_edge: ClassVar[bool] = True

    ref: ObjectRef
    """The pod (``kind == "Pod"``)."""
    status: dict[str, Any]
    """The PodStatus as Kubernetes JSON (phase, conditions, containerStatuses...)."""
    observed_at: float
    """Seconds since the Unix epoch when the edge observed it."""

    def _check(self) -> None:
        if not (self.ref.kind == "Pod"):
            raise InvalidMessage("ref.kind", "must be 'Pod'")

    def coalesce_key(self) -> Hashable | None:
        """The pod uid: a newer status (or the deletion) replaces an unsent one."""
        return self.ref.uid


@register_message
@dataclass(frozen=True, slots=True)
class PodDeleted(Message):
    """The edge has stopped and removed a terminating pod; the hub may finalise it."""

    kind: ClassVar[str] = "pod_deleted"
    needs_ack: ClassVar[bool] = True
    from_edge: ClassVar[bool] = True

    ref: ObjectRef
    """The pod (``kind == "Pod"``)."""

    def _check(self) -> None:
        if not (self.ref.kind == "Pod"):
            raise InvalidMessage("ref.kind", "must be 'Pod'")

    def coalesce_key(self) -> Hashable | None:
        """The pod uid, shared with ``PodStatus``: the deletion replaces an unsent status."""
        return self.ref.uid


@register_message
@dataclass(frozen=True, slots=True)
class TwinDesired(Message):
    """The desired properties of a device twin, as set in the cloud."""

    kind: ClassVar[str] = "twin_desired"
    from_hub: ClassVar[bool] = True
    priority: ClassVar[Priority] = Priority.BULK  # after the Device's upsert, in order

    ref: ObjectRef
    """The device."""
    version: int
    """The desired state's version (>= 0); higher wins."""
    properties: dict[str, Any]
    """Property name -> desired value."""

    def _check(self) -> None:
        if not (self.version >= 0):
            raise InvalidMessage("version", "must be >= 0")

    def coalesce_key(self) -> Hashable | None:
        """``("twin_desired", device uid)``: the newest desired state replaces an unsent
        one. Not the bare uid, which is the key of the Device's own ``object_upsert``: a
        desired state queued right behind the upsert that carries the Device must not
        replace it."""
        return ("twin_desired", self.ref.uid)


@register_message
@dataclass(frozen=True, slots=True)
class TwinReported(Message):
    """One reported property value of a device twin, from a local mapper."""

    kind: ClassVar[str] = "twin_reported"
    needs_ack: ClassVar[bool] = True
    from_edge: ClassVar[bool] = True

    ref: ObjectRef
    """The device."""
    property: str
    """The property name."""
    value: Any
    """The reported value (any msgpack value: nil, bool, number, str, bytes, list, map)."""
    version: int
    """The reported state's version (>= 0); higher wins."""
    timestamp: float
    """Seconds since the Unix epoch when the mapper reported it."""

    def _check(self) -> None:
        if not self.property:
            raise InvalidMessage("property", "must not be empty")
        if not (self.version >= 0):
            raise InvalidMessage("version", "must be >= 0")

    def coalesce_key(self) -> Hashable | None:
        """(device uid, property): a newer value of the same property replaces an unsent one."""
        return (self.ref.uid, self.property)


@register_message
@dataclass(frozen=True, slots=True)
class MetricsBatch(Message):
    """A batch of node and pod metric samples, column by column."""

    kind: ClassVar[str] = "metrics_batch"
    needs_ack: ClassVar[bool] = True
    from_edge: ClassVar[bool] = True

    node_name: str
    """The node the samples come from."""
    samples: dict[str, list]
    """Column name -> values (compact columnar lists; the metrics module names the columns
    and their units, e.g. ``"t"`` seconds, ``"cpu_millicores"``, ``"memory_bytes"``)."""


STORE_RECOVERED = "StoreRecovered"
"""The reason of the Warning Event an agent reports on its Node after its store was found
damaged and started empty (its running pods adopted until the hub's full sync); the hub
counts them (``edgefleet_hub_edge_store_recoveries_total``)."""


@register_message
@dataclass(frozen=True, slots=True)
class KubeEvent(Message):
    """A Kubernetes Event the edge records about an object (wire kind ``event``)."""

    kind: ClassVar[str] = "event"
    needs_ack: ClassVar[bool] = True
    from_edge: ClassVar[bool] = True

    ref: ObjectRef
    """The involved object."""
    type: str
    """``"Normal"`` or ``"Warning"``, as Kubernetes Events have."""
    reason: str
    """A short CamelCase reason, e.g. ``"BackOff"``, ``"Pulled"``."""
    message: str
    """Human-readable detail."""
    timestamp: float
    """Seconds since the Unix epoch of the last occurrence."""
    count: int = 1
    """How many times it occurred (>= 1), as Kubernetes aggregates repeats."""

    def _check(self) -> None:
        if self.type not in ("Normal", "Warning"):
            raise InvalidMessage("type", "must be 'Normal' or 'Warning'")
        if not self.reason:
            raise InvalidMessage("reason", "must not be empty")
        if not (self.count >= 1):
            raise InvalidMessage("count", "must be >= 1")


# --- session control -------------------------------------------------------------------------


@register_message
@dataclass(frozen=True, slots=True)
class Ack(Message):
    """Cumulative acknowledgement of the peer's numbered messages."""

    kind: ClassVar[str] = "ack"
    from_edge: ClassVar[bool] = True
    from_hub: ClassVar[bool] = True
    control: ClassVar[bool] = True

    up_to: int
    """Every seq <= ``up_to`` has been received and processed."""

    def _check(self) -> None:
        if not (0 <= self.up_to <= MAX_SEQ):
            raise InvalidMessage("up_to", "must be in 0..2**64-1")


@register_message
@dataclass(frozen=True, slots=True)
class Ping(Message):
    """A liveness probe; the peer answers with a ``pong`` carrying the same nonce."""

    kind: ClassVar[str] = "ping"
    from_edge: ClassVar[bool] = True
    from_hub: ClassVar[bool] = True
    control: ClassVar[bool] = True

    nonce: int
    """Echoed by the pong (0..2**64-1)."""

    def _check(self) -> None:
        if not (0 <= self.nonce <= MAX_SEQ):
            raise InvalidMessage("nonce", "must be in 0..2**64-1")


@register_message
@dataclass(frozen=True, slots=True)
class Pong(Message):
    """The answer to a ``ping``."""

    kind: ClassVar[str] = "pong"
    from_edge: ClassVar[bool] = True
    from_hub: ClassVar[bool] = True
    control: ClassVar[bool] = True

    nonce: int
    """The ping's nonce."""

    def _check(self) -> None:
        if not (0 <= self.nonce <= MAX_SEQ):
            raise InvalidMessage("nonce", "must be in 0..2**64-1")


# --- certificates -----------------------------------------------------------------------------


@register_message
@dataclass(frozen=True, slots=True)
class CertRenewRequest(Message):
    """The edge asks for a new client certificate (at 80% of lifetime, as kubelet does)."""

    kind: ClassVar[str] = "cert_renew_request"
    from_edge: ClassVar[bool] = True

    request_id: str
    """Chosen by the edge; echoed by the response."""
    csr_pem: bytes
    """A PEM PKCS#10 CSR for a key generated on the device (the key never leaves it)."""

    def _check(self) -> None:
        if not self.request_id:
            raise InvalidMessage("request_id", "must not be empty")
        if not self.csr_pem:
            raise InvalidMessage("csr_pem", "must not be empty")


@register_message
@dataclass(frozen=True, slots=True)
class CertRenewResponse(Message):
    """The hub's answer: a signed certificate and the CA, or an error."""

    kind: ClassVar[str] = "cert_renew_response"
    from_hub: ClassVar[bool] = True

    request_id: str
    """The request's id."""
    certificate_pem: bytes | None = None
    """The signed PEM certificate, or ``None`` on error."""
    ca_pem: bytes | None = None
    """The PEM CA bundle to trust from now on, or ``None`` on error."""
    error: str | None = None
    """Why the request was refused, or ``None`` on success."""

    def _check(self) -> None:
        if not self.request_id:
            raise InvalidMessage("request_id", "must not be empty")
        issued = self.certificate_pem is not None and self.ca_pem is not None
        if not (issued != (self.error is not None)):
            raise InvalidMessage(
                "error", "exactly one of (certificate_pem and ca_pem) or error must be set"
            )


# --- errors and close -------------------------------------------------------------------------


@register_message
@dataclass(frozen=True, slots=True)
class Chunk(Message):
    """A piece of one frame payload over ``CHUNK_SIZE``, sent in order under one ``id``
    (ids of different lanes interleave); reassembled within ``max_message_size``
    (``protocol.chunking``)."""

    kind: ClassVar[str] = "chunk"
    from_edge: ClassVar[bool] = True
    from_hub: ClassVar[bool] = True
    control: ClassVar[bool] = True

    id: int
    """The sender's number for the chunked message (increasing within a session)."""
    offset: int
    """Where ``data`` starts in the payload (bytes); 0 first, then in order."""
    total: int
    """The payload's length (bytes), the same on every chunk of the id."""
    data: bytes
    """The payload's bytes from ``offset``."""
    seq: int = 0
    """The seq inside (0 if none): a refusal names it (``Error(TOO_LARGE)``) and acks it."""

    def _check(self) -> None:
        if not (0 <= self.id <= MAX_SEQ and 0 <= self.seq <= MAX_SEQ):
            raise InvalidMessage("id", "id and seq must be in 0..2**64-1")
        if not (0 < self.total <= 2**32 - 1):
            raise InvalidMessage("total", "must be in 1..2**32-1 bytes")
        if not (self.data and 0 <= self.offset and self.offset + len(self.data) <= self.total):
            raise InvalidMessage("offset", "the chunk must be non-empty and inside total")


@register_message
@dataclass(frozen=True, slots=True)
class Error(Message):
    """A problem with one message; the session goes on."""

    kind: ClassVar[str] = "error"
    from_edge: ClassVar[bool] = True
    from_hub: ClassVar[bool] = True

    code: ErrorCode
    """What went wrong."""
    message: str
    """Human-readable detail."""
    in_reply_to: int | None = None
    """The seq of the offending message, or ``None`` when it had none."""

    def _check(self) -> None:
        if not (self.in_reply_to is None or 1 <= self.in_reply_to <= MAX_SEQ):
            raise InvalidMessage("in_reply_to", "must be a seq (1..2**64-1) or nil")


@register_message
@dataclass(frozen=True, slots=True)
class Close(Message):
    """Ends the session in order; the peer answers with its own ``close``."""

    kind: ClassVar[str] = "close"
    from_edge: ClassVar[bool] = True
    from_hub: ClassVar[bool] = True
    control: ClassVar[bool] = True

    code: CloseCode
    """Why."""
    reason: str = ""
    """Human-readable detail (for ``VERSION_MISMATCH``, both version ranges)."""
    retry_after: float | None = None
    """Seconds the receiver should wait before reconnecting (``OVERLOADED``,
    ``GOING_AWAY``), or ``None``."""

    def _check(self) -> None:
        if not (self.retry_after is None or self.retry_after >= 0):
            raise InvalidMessage("retry_after", "must be >= 0 seconds or nil")
