"""Admission of new TCP connections: a bound on handshakes pending per source address.

A TLS handshake that never completes holds a connection, an OpenSSL object and its buffers
(~57 KiB measured on the hub while pending) until the hello deadline drops it; a peer that
opens thousands and sends nothing more holds thousands. :class:`PendingLimit` counts, per
source address, the connections still in TLS or the upgrade, and refuses more than
``limit`` at once: the excess is dropped as it arrives, before any TLS work. A connection
leaves the count once its upgrade is done or it ends. Legitimate handshakes take
milliseconds, so the bound only bites on connections left half-open (or on a site whose
whole fleet, behind one NAT address, dials in the same instant: they retry with back-off).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["PendingLimit"]


class PendingLimit:
    """At most ``limit`` pending connections per source address.

    Args:
        limit: pending connections allowed per source address (>= 1).
    """

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        self.limit = limit
        self._pending: dict[str, int] = {}
        self.refused = 0
        """Connections refused so far."""

    def __len__(self) -> int:
        """Source addresses with pending connections."""
        return len(self._pending)

    def admit(self, peername: Any) -> Callable[[], None] | None:
        """Count a new connection from ``peername`` (``transport.get_extra_info``).

        Returns:
            ``release()`` to call exactly once when it is no longer pending, or ``None``
            when it is refused (its source is at the limit).
        """
        source = str(peername[0]) if isinstance(peername, tuple) and peername else "?"
        count = self._pending.get(source, 0)
        if count >= self.limit:
            self.refused += 1
            return None
        self._pending[source] = count + 1
        released = False

        def release() -> None:
            nonlocal released
            if released:
                return
            released = True
            left = self._pending.get(source, 1) - 1
            if left > 0:
                self._pending[source] = left
            else:
                self._pending.pop(source, None)

        return release
