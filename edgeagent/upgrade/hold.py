"""Edge-side hold: ``edgeagent hold`` / ``unhold`` and a maintenance window.

A held node carries out no upgrade order (the hub sees ``held`` in the node's upgrade
state and keeps it Pending, as KubeEdge's hold-upgrade does). The hold is a file,
``<state_dir>/upgrade/hold.json`` (``{"reason", "since"}``), so that the CLI sets it
without talking to the running agent. A maintenance window (``HH:MM-HH:MM`` in UTC, may
wrap past midnight) holds the node outside those hours.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import re

from edgeagent.errors import ConfigError

__all__ = ["Window", "held", "hold", "parse_window", "unhold"]

_WINDOW = re.compile(r"([01][0-9]|2[0-3]):([0-5][0-9])-([01][0-9]|2[0-3]):([0-5][0-9])")


@dataclasses.dataclass(frozen=True)
class Window:
    """A daily window in UTC, as minutes after midnight (``start == end``: all day)."""

    start_min: int
    end_min: int

    def contains(self, now: float) -> bool:
        """Whether ``now`` (epoch seconds) falls inside the window."""
        minute = int(now // 60) % (24 * 60)
        if self.start_min == self.end_min:
            return True
        if self.start_min < self.end_min:
            return self.start_min <= minute < self.end_min
        return minute >= self.start_min or minute < self.end_min


def parse_window(text: str) -> Window | None:
    """``"22:00-04:00"`` → a :class:`Window`; ``""`` → None (no window: always allowed).

    Raises:
        ConfigError: anything else.
    """
    if not text:
        return None
    match = _WINDOW.fullmatch(text.strip())
    if match is None:
        raise ConfigError(
            f"maintenance window {text!r}: want HH:MM-HH:MM (UTC)", key="upgrade.window"
        )
    h1, m1, h2, m2 = (int(g) for g in match.groups())
    return Window(h1 * 60 + m1, h2 * 60 + m2)


def _path(state_dir: pathlib.Path) -> pathlib.Path:
    return pathlib.Path(state_dir) / "upgrade" / "hold.json"


def hold(state_dir: pathlib.Path, reason: str, now: float) -> None:
    """Hold upgrades on this node until :func:`unhold`."""
    path = _path(state_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"reason": reason, "since": now}))
    os.replace(tmp, path)


def unhold(state_dir: pathlib.Path) -> bool:
    """Release the hold; True when there was one."""
    path = _path(state_dir)
    existed = path.exists()
    path.unlink(missing_ok=True)
    return existed


def held(state_dir: pathlib.Path, window: Window | None, now: float) -> str:
    """Why upgrades wait on this node now ("" when they do not): ``"Held: <reason>"``
    or ``"OutsideMaintenanceWindow"``."""
    path = _path(state_dir)
    if path.exists():
        try:
            reason = json.loads(path.read_text()).get("reason", "")
        except (OSError, ValueError, AttributeError):
            reason = ""
        return f"Held: {reason}" if reason else "Held"
    if window is not None and not window.contains(now):
        return "OutsideMaintenanceWindow"
    return ""
