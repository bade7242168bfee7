"""The up-going streams, one source per stream behind one protocol (:mod:`.base`)."""

from edgeagent.uplink.sources.base import DownHandler, Outgoing, UpSource

__all__ = ["DownHandler", "Outgoing", "UpSource"]
