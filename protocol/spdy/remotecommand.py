"""Kubernetes' remote command protocol over SPDY, server side (kubelet's half of ``kubectl
exec`` and ``attach``), sans-I/O; ``v4.channel.k8s.io`` (what 1.20 negotiates first) and
``v3``/``v2`` (the same streams; the status on the error stream is v4's JSON only in v4).

The client opens one SPDY stream per channel, named by the ``streamtype`` header:
``error`` (first), ``stdin``, ``stdout``, ``stderr`` (not with a tty) and ``resize`` (with a
tty: JSON ``{"Width": w, "Height": h}`` objects, one after the other). The server replies to
each and starts the command once every stream the request asked for is there
(:class:`Ready`). Output goes on the stdout/stderr streams; at the end the server writes the
command's status on the error stream — v4: a ``metav1.Status``, ``Success``, or
``Failure`` with reason ``NonZeroExitCode`` and the code in ``details.causes`` (kubectl
exits with it) — and closes its halves.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass

from protocol.spdy.connection import (
    DataReceived,
    GoAwayReceived,
    SpdyConnection,
    SpdyProtocolError,
    StreamOpened,
    StreamReset,
)

__all__ = [
    "PROTOCOLS",
    "Ended",
    "Ready",
    "RemoteCommandServer",
    "Resize",
    "Stdin",
    "exit_status",
    "negotiate",
]

PROTOCOLS = ("v4.channel.k8s.io", "v3.channel.k8s.io", "v2.channel.k8s.io", "channel.k8s.io")
"""What this server speaks, best first (the ``X-Stream-Protocol-Version`` values)."""

#: Bytes of resize JSON buffered before the stream is refused (objects are ~30 bytes).
MAX_RESIZE_BUFFER = 4096


def negotiate(offered: list[str]) -> str | None:
    """The protocol to answer for the client's ``X-Stream-Protocol-Version`` values."""
    for protocol in PROTOCOLS:
        if protocol in offered:
            return protocol
    return None


def exit_status(exit_code: int | None, message: str = "") -> dict:
    """The v4 error-stream ``Status`` for a command's end (``None``: it could not run)."""
    if exit_code == 0:
        return {"metadata": {}, "status": "Success"}
    if exit_code is None:
        return {"metadata": {}, "status": "Failure", "message": message or "exec failed"}
    return {
        "metadata": {},
        "status": "Failure",
        "message": message or f"command terminated with non-zero exit code: exit code {exit_code}",
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": str(exit_code)}]},
    }


@dataclass(frozen=True, slots=True)
class Ready:
    """Every stream the request asked for is open: start the command."""


@dataclass(frozen=True, slots=True)
class Stdin:
    data: bytes
    eof: bool


@dataclass(frozen=True, slots=True)
class Resize:
    width: int
    height: int


@dataclass(frozen=True, slots=True)
class Ended:
    """The client went away (reset its streams, or GOAWAY)."""

    reason: str


RemoteCommandEvent = Ready | Stdin | Resize | Ended


#: The stream types, by themselves (the client's parsed copies are not kept).
_STREAM_TYPES = {name: name for name in ("error", "stdin", "stdout", "stderr", "resize")}


@functools.cache
def _expected(stdin: bool, stdout: bool, stderr: bool, resize: bool) -> frozenset[str]:
    wanted = ("stdin", stdin), ("stdout", stdout), ("stderr", stderr), ("resize", resize)
    return frozenset(["error"] + [name for name, asked in wanted if asked])


class RemoteCommandServer:
    """The server side of one exec/attach connection (after the HTTP upgrade).

    Args:
        stdin, stdout, stderr, tty: what the request's query asked for.
        protocol: the negotiated ``X-Stream-Protocol-Version``.
    """

    # one per open exec or attach, mostly idle: no __dict__, the expected set shared
    __slots__ = ("_ready", "_resize", "expected", "protocol", "spdy", "streams")

    def __init__(
        self, *, stdin: bool, stdout: bool, stderr: bool, tty: bool, protocol: str = PROTOCOLS[0]
    ) -> None:
        self.spdy = SpdyConnection(server=True)
        self.protocol = protocol
        self.expected = _expected(stdin, stdout, stderr and not tty, tty)
        """The stream types the request asked for (``error`` always)."""
        self.streams: dict[str, int] = {}
        """Stream type -> the client's SPDY stream id, as they open."""
        self._ready = False
        self._resize = b""

    def _kind(self, stream_id: int) -> str | None:
        for kind, known in self.streams.items():  # at most 5: no reverse dict kept
            if known == stream_id:
                return kind
        return None

    def receive_data(self, data: bytes) -> list[RemoteCommandEvent]:
        """Feed bytes from the client.

        Raises:
            SpdyProtocolError: broken framing or channel rules (answer nothing more but
                :meth:`data_to_send`, then drop the connection).
        """
        events: list[RemoteCommandEvent] = []
        for event in self.spdy.receive_data(data):
            if isinstance(event, StreamOpened):
                kind = (event.headers.get("streamtype") or [""])[0]
                kind = _STREAM_TYPES.get(kind, kind)  # kept as a key: the shared string
                if kind not in self.expected or kind in self.streams:
                    self.spdy.reset(event.stream_id, 1)
                    self.spdy.closed = True
                    raise SpdyProtocolError(f"an unexpected {kind or 'untyped'} stream")
                self.streams[kind] = event.stream_id
                self.spdy.reply(event.stream_id)
                if not self._ready and set(self.streams) == self.expected:
                    self._ready = True
                    events.append(Ready())
            elif isinstance(event, DataReceived):
                kind = self._kind(event.stream_id)
                if kind == "stdin":
                    events.append(Stdin(event.data, event.fin))
                elif kind == "resize":
                    events += self._resizes(event.data)
            elif isinstance(event, StreamReset):
                events.append(Ended(f"the client reset its {self._kind(event.stream_id)}"))
            elif isinstance(event, GoAwayReceived):
                events.append(Ended("the client sent GOAWAY"))
        return events

    def _resizes(self, data: bytes) -> list[RemoteCommandEvent]:
        self._resize += data
        if len(self._resize) > MAX_RESIZE_BUFFER:
            raise SpdyProtocolError("resize stream: more than 4 KiB without a whole object")
        events: list[RemoteCommandEvent] = []
        decoder = json.JSONDecoder()
        text = self._resize.decode("utf-8", "replace")
        pos = 0
        while True:
            while pos < len(text) and text[pos].isspace():
                pos += 1
            if pos >= len(text):
                break
            try:
                value, pos = decoder.raw_decode(text, pos)
            except json.JSONDecodeError:
                break  # incomplete: wait for more
            if not isinstance(value, dict):
                raise SpdyProtocolError("resize stream: not a JSON object")
            width, height = value.get("Width"), value.get("Height")
            if not (isinstance(width, int) and isinstance(height, int)) or not (
                0 < width <= 65535 and 0 < height <= 65535
            ):
                raise SpdyProtocolError(f"resize stream: bad size {value!r}")
            events.append(Resize(width, height))
        self._resize = text[pos:].encode()
        return events

    def write(self, channel: int, data: bytes) -> None:
        """Output on channel 1 (stdout) or 2 (stderr, or stdout when there is none)."""
        kind = "stdout" if channel == 1 or "stderr" not in self.streams else "stderr"
        stream_id = self.streams.get(kind)
        if stream_id is not None and data:
            self.spdy.send_data(stream_id, data)

    def finish(self, exit_code: int | None, message: str = "") -> None:
        """The command ended: its status on the error stream, then every half closed."""
        error = self.streams.get("error")
        if error is not None:
            status = exit_status(exit_code, message)
            if self.protocol.startswith("v4."):
                body = json.dumps(status).encode()
            else:  # v2/v3: the error text, empty on success
                body = b"" if exit_code == 0 else status.get("message", "").encode()
            self.spdy.send_data(error, body, fin=True)
        for kind, stream_id in self.streams.items():
            if kind != "error":
                self.spdy.send_data(stream_id, b"", fin=True)
        self.spdy.goaway()

    def data_to_send(self) -> bytes:
        return self.spdy.data_to_send()
