"""Why a day-2 stream cannot be opened (shared by the streams and the replica relay)."""

from __future__ import annotations

from cloudhub.errors import HubError

__all__ = ["NodeOffline", "RelayRefused", "StreamUnavailable"]


class StreamUnavailable(HubError):
    """A stream cannot be opened (node offline, too many streams); the message is for
    the user."""


class NodeOffline(StreamUnavailable):
    """The pod's node has no session with this hub (nor with any other replica)."""


class RelayRefused(HubError):
    """The replica serving the node refused the relayed open; ``offline`` when it no longer
    has the node's session."""

    def __init__(self, message: str, *, offline: bool) -> None:
        super().__init__(message)
        self.offline = offline
