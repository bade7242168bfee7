"""The day-2 stream kinds (logs, exec, attach, port-forward; docs/streams.md): the hub opens
a stream toward one container, data flows both ways under per-stream credit
(:mod:`protocol.streams`), and either side closes or resets it. Registered with the codec
like every kind in :mod:`protocol.messages`, which re-exports them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from protocol.errors import ErrorCode, InvalidMessage
from protocol.messages import Message, register_message
from protocol.priority import Priority

__all__ = [
    "MAX_STREAM_CHUNK",
    "StreamClose",
    "StreamData",
    "StreamOpen",
    "StreamReset",
    "StreamResize",
    "StreamWindow",
]

# --- day-2 streams (logs, exec, attach, port-forward; protocol/streams.py) ---------------------

#: Largest ``stream_data`` payload, bytes: bulk data goes in slices this size so that no
#: single frame holds heartbeats back for long.
MAX_STREAM_CHUNK = 16 * 1024

_STREAM_OPERATIONS = ("logs", "exec", "attach", "portforward")


def _check_range(field_name: str, value: int, low: int, high: int, unit: str = "") -> None:
    """Raise InvalidMessage naming ``field_name`` unless ``low <= value <= high``."""
    if not (low <= value <= high):
        raise InvalidMessage(field_name, f"must be in {_bound(low)}..{_bound(high)}{unit}")


def _bound(n: int) -> str:
    """``n`` as the rules are written: 2**32-1 rather than 4294967295."""
    for power in (31, 32):
        if n == 2**power - 1:
            return f"2**{power}-1"
    return str(n)


def _check_stream_id(stream_id: int) -> None:
    _check_range("stream_id", stream_id, 1, 2**32 - 1)


@register_message
@dataclass(frozen=True, slots=True)
class StreamOpen(Message):
    """The hub opens a stream toward one container of one of the node's pods."""

    kind: ClassVar[str] = "stream_open"
    from_hub: ClassVar[bool] = True
    priority: ClassVar[Priority] = Priority.CONTROL

    stream_id: int
    """Chosen by the hub, unique among the session's open streams (1..2**32-1)."""
    operation: str
    """``"logs"``, ``"exec"``, ``"attach"`` or ``"portforward"``."""
    namespace: str
    """The pod's namespace."""
    pod: str
    """The pod's name."""
    container: str
    """The container's name in the pod spec (``""`` for port-forward)."""
    window: int
    """Bytes the edge may send on this stream before the hub grants more (``stream_window``)."""
    params: dict[str, Any] = field(default_factory=dict)
    """Per operation: logs ``follow``, ``tail_lines``, ``since_seconds``, ``since_time``
    (seconds since the epoch), ``timestamps``, ``previous``, ``limit_bytes``; exec
    ``command`` (list of str), ``stdin``, ``stdout``, ``stderr``, ``tty``; portforward
    ``port``."""
    user: str = ""
    """Who asked (the apiserver's ``X-Remote-User``), for the edge's log."""

    def _check(self) -> None:
        _check_stream_id(self.stream_id)
        if self.operation not in _STREAM_OPERATIONS:
            raise InvalidMessage("operation", f"must be one of {', '.join(_STREAM_OPERATIONS)}")
        _check_range("window", self.window, 0, 2**31 - 1, " bytes")
        if not self.namespace or not self.pod:
            raise InvalidMessage("pod", "namespace and pod must not be empty")


@register_message
@dataclass(frozen=True, slots=True)
class StreamData(Message):
    """Bytes on one channel of a stream (either way), within the receiver's window."""

    kind: ClassVar[str] = "stream_data"
    from_edge: ClassVar[bool] = True
    from_hub: ClassVar[bool] = True
    priority: ClassVar[Priority] = Priority.BULK
    flow_field: ClassVar[str | None] = "stream_id"  # streams take turns in the lane

    stream_id: int
    """The stream."""
    channel: int
    """0 stdin, 1 stdout, 2 stderr (the Kubernetes channel numbers); 0 for logs and
    port-forward data."""
    data: bytes
    """At most ``MAX_STREAM_CHUNK`` bytes; counts against the receiver's window."""
    eof: bool = False
    """The sender writes no more on this channel (stdin closed)."""
    blocked: bool = False
    """This chunk used the sender's last credit (as QUIC's STREAM_DATA_BLOCKED): the
    receiver may grow the stream's window (``protocol.streams``). Older peers ignore it."""

    def _check(self) -> None:
        _check_stream_id(self.stream_id)
        _check_range("channel", self.channel, 0, 255)
        if len(self.data) > MAX_STREAM_CHUNK:
            raise InvalidMessage("data", f"must be at most {MAX_STREAM_CHUNK} bytes")


@register_message
@dataclass(frozen=True, slots=True)
class StreamWindow(Message):
    """Credit: the receiver consumed data and the sender may send ``credit`` more bytes."""

    kind: ClassVar[str] = "stream_window"
    from_edge: ClassVar[bool] = True
    from_hub: ClassVar[bool] = True
    priority: ClassVar[Priority] = Priority.CONTROL

    stream_id: int
    """The stream."""
    credit: int
    """Bytes added to the sender's window (1..2**31-1)."""

    def _check(self) -> None:
        _check_stream_id(self.stream_id)
        _check_range("credit", self.credit, 1, 2**31 - 1, " bytes")


@register_message
@dataclass(frozen=True, slots=True)
class StreamResize(Message):
    """The terminal of an exec/attach stream with ``tty`` changed size (hub to edge)."""

    kind: ClassVar[str] = "stream_resize"
    from_hub: ClassVar[bool] = True
    priority: ClassVar[Priority] = Priority.CONTROL

    stream_id: int
    """The stream."""
    width: int
    """Columns (1..65535)."""
    height: int
    """Rows (1..65535)."""

    def _check(self) -> None:
        _check_stream_id(self.stream_id)
        _check_range("width", self.width, 1, 65535)
        _check_range("height", self.height, 1, 65535)


@register_message
@dataclass(frozen=True, slots=True)
class StreamClose(Message):
    """The edge's orderly end of a stream: everything was sent (the command exited, the
    log ended); the hub answers nothing."""

    kind: ClassVar[str] = "stream_close"
    from_edge: ClassVar[bool] = True
    priority: ClassVar[Priority] = Priority.BULK  # after the stream's data, never before it
    flow_field: ClassVar[str | None] = "stream_id"  # in its stream's flow: after its data

    stream_id: int
    """The stream."""
    exit_code: int | None = None
    """The exec'd command's exit code, or ``None`` (logs, port-forward)."""

    def _check(self) -> None:
        _check_stream_id(self.stream_id)


@register_message
@dataclass(frozen=True, slots=True)
class StreamReset(Message):
    """Either side aborts a stream at once (cancelled by the caller, refused, failed);
    the receiver drops what it buffered for it and answers nothing."""

    kind: ClassVar[str] = "stream_reset"
    from_edge: ClassVar[bool] = True
    from_hub: ClassVar[bool] = True
    priority: ClassVar[Priority] = Priority.CONTROL

    stream_id: int
    """The stream."""
    code: ErrorCode
    """Why (``NOT_FOUND``: no such pod or container here; ``INVALID_MESSAGE``: a flow
    control or channel rule broken; ``UNSUPPORTED``; ``INTERNAL``...)."""
    reason: str = ""
    """Human-readable detail, shown to the user (kubectl prints it)."""

    def _check(self) -> None:
        _check_stream_id(self.stream_id)
