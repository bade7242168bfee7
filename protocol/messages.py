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
- ``coalesce_key()``: messages with equal keys replace each other in an outbox while not
  yet sent (latest-wins), e.g. pod status per pod uid; ``None`` means "never coalesce".

Field types are checked from the annotations when a message is constructed (and so also
when one is decoded); the per-class ``_check()`` adds value rules (ranges, formats). The
checks are computed once per class when it is registered; nothing is reflected per message.
Dict fields that carry Kubernetes JSON (``object``, ``status``, ``node_info``) are checked
to be maps with string keys, not validated deeper: the hub and the agent own their shape.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
import typing
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from protocol.errors import CloseCode, DecodeError, ErrorCode, InvalidMessage

__all__ = [
    "MAX_PROTOCOL_VERSION",
    "MAX_SEQ",
    "MIN_PROTOCOL_VERSION",
    "PROTOCOL_VERSION",
    "REGISTRY",
    "Ack",
    "CertRenewRequest",
    "CertRenewResponse",
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
    "SyncDone",
    "TwinDesired",
    "TwinReported",
    "Welcome",
]

PROTOCOL_VERSION = 1
"""The protocol version this code speaks best (docs/protocol.md)."""
MIN_PROTOCOL_VERSION = 1
"""The oldest protocol version this code still speaks."""
MAX_PROTOCOL_VERSION = PROTOCOL_VERSION
"""The newest protocol version this code speaks."""

MAX_SEQ = 2**64 - 1
"""The largest sequence number (msgpack's unsigned 64-bit range)."""

# RFC 1123 subdomain, as Kubernetes validates Node names.
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


# --- references ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, init=False)
class ObjectRef:
    """Which Kubernetes object a message is about (a small value, never a joined string).

    Raises:
        InvalidMessage: a field is not a str, or ``kind``, ``name`` or ``uid`` is empty.
    """

    kind: str
    """The object's kind, e.g. ``"Pod"``, ``"ConfigMap"``, ``"Device"``."""
    namespace: str
    """Its namespace, ``""`` for cluster-scoped objects (Node, Device classes)."""
    name: str
    """Its ``metadata.name``."""
    uid: str
    """Its ``metadata.uid``: the identity that survives renames and recreations."""

    def __init__(self, kind: str, namespace: str, name: str, uid: str) -> None:
        # Written out rather than generated: every decoded pod status and event carries a
        # ref, so the valid case is one expression and four slot stores.
        if not (
            isinstance(kind, str)
            and kind
            and isinstance(namespace, str)
            and isinstance(name, str)
            and name
            and isinstance(uid, str)
            and uid
        ):
            for field_name, value in (
                ("kind", kind),
                ("namespace", namespace),
                ("name", name),
                ("uid", uid),
            ):
                if not isinstance(value, str):
                    got = "nothing" if value is _MISSING else type(value).__name__
                    raise InvalidMessage(field_name, f"expected str, got {got}")
                if not value and field_name != "namespace":
                    raise InvalidMessage(field_name, "must not be empty")
        _ref_kind(self, kind)  # the slots, set as the frozen dataclass __init__ would
        _ref_namespace(self, namespace)
        _ref_name(self, name)
        _ref_uid(self, uid)

    def _to_wire(self) -> dict[str, str]:
        return {"kind": self.kind, "namespace": self.namespace, "name": self.name, "uid": self.uid}


# ObjectRef's slots, set directly by ObjectRef() and the decoders once the values are checked.
_REF_SETTERS = {f"_ref_{n}": ObjectRef.__dict__[n].__set__ for n in ObjectRef.__slots__}
_ref_kind = _REF_SETTERS["_ref_kind"]
_ref_namespace = _REF_SETTERS["_ref_namespace"]
_ref_name = _REF_SETTERS["_ref_name"]
_ref_uid = _REF_SETTERS["_ref_uid"]


# --- field checks and wire mapping, generated once per class ---------------------------------
#
# Each message class gets three functions compiled from its annotations when it is
# registered: ``__init__`` (replacing the dataclass one: type checks on the arguments, the
# slots set, then the class's ``_check()`` value rules), ``_to_body`` and ``_from_body``.
# They are generated, as dataclasses generates ``__init__``, because this is the
# per-message cost of the whole layer (the goal is at most 1.3x the bare transport's cost
# per 1 KiB message): straight-line code with the checks inlined runs several times faster
# than a loop over field descriptors, and checking before storing saves reading every field
# back as a ``__post_init__`` would.

_MISSING: Any = type("_Missing", (), {"__repr__": lambda self: "<missing>"})()
_INT_MIN = -(2**63)

# annotation -> (check expression over ``v``, what is expected, in words)
_CHECKS: dict[object, tuple[str, str]] = {
    str: ("isinstance(v, str)", "str"),
    int: ("isinstance(v, int) and v.__class__ is not bool and _INT_MIN <= v <= MAX_SEQ", "int"),
    float: (
        "isinstance(v, (float, int)) and v.__class__ is not bool and -_INF < v < _INF",
        "finite number",
    ),
    bool: ("v.__class__ is bool", "bool"),
    bytes: ("isinstance(v, bytes)", "bytes"),
    Any: ("v is not _MISSING", "any value"),
    # container checks run in C: all(map(isinstance, items, repeat(type)))
    dict[str, Any]: ("isinstance(v, dict) and all(map(isinstance, v, _STR))", "map with str keys"),
    dict[str, str]: (
        "isinstance(v, dict) and all(map(isinstance, v, _STR))"
        " and all(map(isinstance, v.values(), _STR))",
        "map of str to str",
    ),
    dict[str, list]: (
        "isinstance(v, dict) and all(map(isinstance, v, _STR))"
        " and all(map(isinstance, v.values(), _LIST))",
        "map of str to list",
    ),
    tuple[str, ...]: ("isinstance(v, tuple) and all(map(isinstance, v, _STR))", "list of str"),
    ObjectRef: ("v.__class__ is ObjectRef", "ObjectRef map"),
    CloseCode: ("v.__class__ is CloseCode", "CloseCode int"),
    ErrorCode: ("v.__class__ is ErrorCode", "ErrorCode int"),
}


def _or_new(value: object, factory: Callable[[], Any]) -> object:
    return factory() if value is _MISSING else value


def _bad(cls: type[Message], name: str, value: object) -> InvalidMessage:
    """The error for a field that failed its type check (slow path)."""
    if value is _MISSING:
        return InvalidMessage(name, "missing")
    return InvalidMessage(name, f"expected {cls._expected[name]}, got {type(value).__name__}")


def _compile(cls: type[Message]) -> None:
    """Generate ``__init__``, ``_to_body`` and ``_from_body`` for a message class.

    ``__init__`` keeps the dataclass signature (field order, defaults, default factories).
    ``_from_body`` runs exactly the checks ``__init__`` runs (the same expressions, on the
    decoded values), then builds the instance from its slots without going through
    ``__init__`` again: decoding validates every field once, not twice.
    A nested ``ObjectRef`` map is checked as ``ObjectRef()`` checks it and built the same
    way; anything unusual about it takes ``ObjectRef()`` itself, for the same error.
    """
    hints = typing.get_type_hints(cls)
    env: dict[str, Any] = {
        "ObjectRef": ObjectRef,
        "CloseCode": CloseCode,
        "ErrorCode": ErrorCode,
        "MAX_SEQ": MAX_SEQ,
        "_INT_MIN": _INT_MIN,
        "_INF": float("inf"),
        "_MISSING": _MISSING,
        "_STR": itertools.repeat(str),  # endless and stateless: map() stops at the items
        "_LIST": itertools.repeat(list),
        "_bad": _bad,
        "_or_new": _or_new,
        "cls": cls,
        "InvalidMessage": InvalidMessage,
        "DecodeError": DecodeError,
        "_new": object.__new__,
        **_REF_SETTERS,
    }
    params, init_lines, to_body, to_body_refs, decode_lines, sets = [], [], [], [], [], []
    expected: dict[str, str] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        name, hint = f.name, hints[f.name]
        hint_args = typing.get_args(hint)
        optional = type(None) in hint_args and len(hint_args) == 2
        if optional:
            hint = next(a for a in hint_args if a is not type(None))
        if hint not in _CHECKS:  # pragma: no cover - a programming error caught at import
            raise TypeError(f"{cls.__name__}.{name}: unsupported annotation {hint!r}")
        expr, words = _CHECKS[hint]
        if optional:
            expr, words = f"v is None or ({expr})", f"{words} or nil"
        expected[name] = words
        check = f"if not ({expr}):\n        raise _bad(cls, {name!r}, v)"
        # wire form: ObjectRef as a map; enums are ints and pack as such
        if hint is ObjectRef:
            to_body_refs.append(f"    {name}_ = self.{name}")
            to_body.append(
                f"{name!r}: {{'kind': {name}_.kind, 'namespace': {name}_.namespace, "
                f"'name': {name}_.name, 'uid': {name}_.uid}}"
            )
        else:
            to_body.append(f"{name!r}: self.{name}")
        value = f"get({name!r}, _MISSING)"
        params.append(name)
        if f.default is not dataclasses.MISSING:
            env[f"_default_{name}"] = f.default
            value = f"get({name!r}, _default_{name})"
            params[-1] = f"{name}=_default_{name}"
        elif f.default_factory is not dataclasses.MISSING:
            env[f"_factory_{name}"] = f.default_factory
            value = f"_or_new(get({name!r}, _MISSING), _factory_{name})"
            params[-1] = f"{name}=_MISSING"
            init_lines.append(f"    if {name} is _MISSING:\n        {name} = _factory_{name}()")
        init_lines.append(f"    v = {name}\n    {check}")
        decode_lines.append(f"        v = {value}")
        if hint is ObjectRef:  # a map on the wire; its own errors name ``<field>.<key>``
            decode_lines += [
                "        if v.__class__ is dict:",
                "            r = v.get",
                "            k, ns, n, u = r('kind', _MISSING), r('namespace', ''), "
                "r('name', _MISSING), r('uid', _MISSING)",
                "            if (k.__class__ is str and ns.__class__ is str and n.__class__ is str"
                " and u.__class__ is str and k and n and u):",  # ObjectRef's own rules
                "                v = _new(ObjectRef)",
                "                _ref_kind(v, k); _ref_namespace(v, ns); _ref_name(v, n); "
                "_ref_uid(v, u)",
                "            else:",
                "                try:",
                "                    v = ObjectRef(k, ns, n, u)",
                "                except InvalidMessage as exc:",
                f"                    raise DecodeError('b.{name}.' + exc.field, exc.reason, "
                "cls.kind) from exc",
            ]
        elif hint in (CloseCode, ErrorCode):
            env[f"_enum_{name}"] = hint
            decode_lines += [
                "        if v.__class__ is int:",
                "            try:",
                f"                v = _enum_{name}(v)",
                "            except ValueError:",
                f"                raise DecodeError('b.{name}', 'unknown {hint.__name__} value ' "
                "+ str(v), cls.kind) from None",
            ]
        elif hint == tuple[str, ...]:
            decode_lines.append("        if v.__class__ is list: v = tuple(v)")
        decode_lines.append(f"        {check}".replace("\n", "\n    "))
        decode_lines.append(f"        {name}_ = v")
        env[f"_set_{name}"] = cls.__dict__[name].__set__  # the slot, as __init__ sets it
        sets.append(name)
    has_rules = cls._check is not Message._check  # only classes with value rules pay
    source = "\n".join(
        [
            f"def __init__(self, {', '.join(params)}):",
            *init_lines,
            *(f"    _set_{n}(self, {n})" for n in sets),
            *(["    self._check()"] if has_rules else []),
            "def _to_body(self):",
            *to_body_refs,
            f"    return {{{', '.join(to_body)}}}",
            "def _from_body(body):",
            "    get = body.get",
            "    try:",
            *decode_lines,
            "        self = _new(cls)",
            *(f"        _set_{n}(self, {n}_)" for n in sets),
            *(["        self._check()"] if has_rules else []),
            "    except InvalidMessage as exc:",
            "        raise DecodeError('b.' + exc.field, exc.reason, cls.kind) from exc",
            "    return self",
        ]
    )
    exec(compile(source, f"<protocol.messages {cls.__name__}>", "exec"), env)
    init = env["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    cls.__init__ = init  # type: ignore[method-assign]
    cls._to_body = env["_to_body"]  # type: ignore[method-assign]
    cls._from_body = staticmethod(env["_from_body"])  # type: ignore[method-assign,assignment]
    cls._expected = expected


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
    _expected: ClassVar[dict[str, str]] = {}

    def _check(self) -> None:
        """Value rules beyond the field types; subclasses override."""

    def coalesce_key(self) -> Hashable | None:
        """The latest-wins key: equal keys replace each other in an outbox, ``None`` never."""
        return None

    def _to_body(self) -> dict[str, Any]:  # replaced per class by _compile
        """The body map for the wire (``protocol.codec`` uses it)."""
        raise NotImplementedError

    @staticmethod
    def _from_body(body: dict[Any, Any]) -> Message:  # replaced per class by _compile
        """Build from a decoded body map, ignoring unknown keys.

        Raises:
            DecodeError: a field is missing or invalid; ``field`` is ``"b.<name>"``.
        """
        raise NotImplementedError


REGISTRY: dict[str, type[Message]] = {}
"""Every message class by its wire tag."""


def _register(cls: type[M]) -> type[M]:
    """Record a message class by its tag and compile its checks and wire mapping."""
    _compile(cls)
    if cls.kind in REGISTRY:  # pragma: no cover - a programming error caught at import
        raise TypeError(f"duplicate message kind {cls.kind!r}")
    REGISTRY[cls.kind] = cls
    return cls


# --- handshake -------------------------------------------------------------------------------


@_register
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


@_register
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

    def _check(self) -> None:
        if not (self.version >= 1):
            raise InvalidMessage("version", "must be >= 1")
        if not self.session_id:
            raise InvalidMessage("session_id", "must not be empty")
        if not (0 <= self.received_up_to <= MAX_SEQ):
            raise InvalidMessage("received_up_to", "must be >= 0")
        if not (self.heartbeat_interval > 0):
            raise InvalidMessage("heartbeat_interval", "must be > 0 seconds")


# --- level-based object state (hub -> edge) ---------------------------------------------------


@_register
@dataclass(frozen=True, slots=True)
class ObjectUpsert(Message):
    """Create or replace an object the edge must hold (pod, ConfigMap, Secret, device)."""

    kind: ClassVar[str] = "object_upsert"
    from_hub: ClassVar[bool] = True

    ref: ObjectRef
    """The object."""
    resource_version: str
    """Its ``metadata.resourceVersion`` (opaque; compare for equality only)."""
    object: dict[str, Any]
    """The raw API JSON of the object."""

    def coalesce_key(self) -> Hashable | None:
        """The object's uid: a newer upsert or delete replaces an unsent one."""
        return self.ref.uid


@_register
@dataclass(frozen=True, slots=True)
class ObjectDelete(Message):
    """The edge must drop this object (deleted in the cloud, or no longer bound here)."""

    kind: ClassVar[str] = "object_delete"
    from_hub: ClassVar[bool] = True

    ref: ObjectRef
    """The object."""
    resource_version: str
    """The resourceVersion of the deletion, or ``""`` when found missing at re-sync."""

    def coalesce_key(self) -> Hashable | None:
        """The object's uid: replaces an unsent upsert of the same object."""
        return self.ref.uid


@_register
@dataclass(frozen=True, slots=True)
class SyncDone(Message):
    """Marks the end of the reconnect diff: the edge's store now matches the API."""

    kind: ClassVar[str] = "sync_done"
    from_hub: ClassVar[bool] = True

    inventory_size: int
    """How many objects the edge should now hold (a cross-check, >= 0)."""

    def _check(self) -> None:
        if not (self.inventory_size >= 0):
            raise InvalidMessage("inventory_size", "must be >= 0")


# --- streams and status (edge -> hub) ---------------------------------------------------------


@_register
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


@_register
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


@_register
@dataclass(frozen=True, slots=True)
class TwinDesired(Message):
    """The desired properties of a device twin, as set in the cloud."""

    kind: ClassVar[str] = "twin_desired"
    from_hub: ClassVar[bool] = True

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
        """The newest desired state of a device replaces an unsent one. Keyed apart from
        the Device's own ``object_upsert`` (whose key is the bare uid): sharing the key made
        a ``twin_desired`` queued right after the Device was created replace its upsert, so
        the node never got the Device."""
        return ("twin_desired", self.ref.uid)


@_register
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


@_register
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


@_register
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


@_register
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


@_register
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


@_register
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


@_register
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


@_register
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


@_register
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


@_register
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
