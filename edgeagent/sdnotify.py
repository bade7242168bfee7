"""systemd's notify protocol, spoken directly: one datagram per message.

``Type=notify`` units get ``NOTIFY_SOCKET`` (a path, or ``@name`` for the abstract
namespace) and, with ``WatchdogSec=``, ``WATCHDOG_USEC``. Messages are newline-separated
``KEY=VALUE`` lines in one ``AF_UNIX``/``SOCK_DGRAM`` datagram: ``READY=1``,
``STATUS=…``, ``WATCHDOG=1``, ``STOPPING=1`` (sd_notify(3)). Without ``NOTIFY_SOCKET`` every
call is a no-op, so the agent runs the same outside systemd.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping

__all__ = ["Notifier"]

log = logging.getLogger(__name__)


class Notifier:
    """Sends notifications to the service manager.

    Args:
        address: the ``NOTIFY_SOCKET`` value, or ``None``/``""`` for no service manager.
        watchdog_usec: ``WATCHDOG_USEC`` (microseconds), or 0 when there is no watchdog.
    """

    def __init__(self, address: str | None, watchdog_usec: int = 0) -> None:
        self._address: str | None = None
        self._sock: socket.socket | None = None
        self.watchdog_usec = watchdog_usec
        if address:
            self._address = "\0" + address[1:] if address.startswith("@") else address
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            self._sock.setblocking(False)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Notifier:
        """From ``NOTIFY_SOCKET`` and ``WATCHDOG_USEC``/``WATCHDOG_PID`` in ``env``."""
        usec = 0
        try:
            usec = int(env.get("WATCHDOG_USEC", "0"))
            pid = env.get("WATCHDOG_PID")
            if pid and int(pid) != os.getpid():
                usec = 0  # the watchdog is meant for another process
        except ValueError:
            usec = 0
        return cls(env.get("NOTIFY_SOCKET"), usec)

    @property
    def enabled(self) -> bool:
        """Whether a service manager listens."""
        return self._sock is not None

    @property
    def watchdog_interval(self) -> float | None:
        """Seconds between ``WATCHDOG=1`` pings (half the watchdog timeout), or ``None``."""
        return self.watchdog_usec / 2_000_000 if self.watchdog_usec > 0 else None

    def notify(self, **fields: str) -> bool:
        """Send ``KEY=VALUE`` lines; returns whether the datagram was sent."""
        if self._sock is None or self._address is None:
            return False
        text = "\n".join(f"{k}={str(v).replace(chr(10), ' ')}" for k, v in fields.items())
        try:
            self._sock.sendto(text.encode(), self._address)
            return True
        except OSError as exc:
            log.debug("sd_notify failed: %s", exc)
            return False

    def ready(self, status: str) -> None:
        """``READY=1`` with a one-line status."""
        self.notify(READY="1", STATUS=status)

    def status(self, status: str) -> None:
        """A one-line ``STATUS=``."""
        self.notify(STATUS=status)

    def watchdog(self) -> None:
        """``WATCHDOG=1``: the main loop is alive."""
        self.notify(WATCHDOG="1")

    def stopping(self, status: str) -> None:
        """``STOPPING=1``."""
        self.notify(STOPPING="1", STATUS=status)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
