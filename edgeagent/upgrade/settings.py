"""Settings of agent upgrades on the node (the agent's settings group ``upgrade``)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from edgeagent.errors import ConfigError

__all__ = ["UpgradeSettings"]

_WINDOW = re.compile(r"(([01][0-9]|2[0-3]):[0-5][0-9]-([01][0-9]|2[0-3]):[0-5][0-9])?")


@dataclass(frozen=True, slots=True)
class UpgradeSettings:
    """Agent upgrades ordered by the hub (docs/upgrade.md).

    Attributes:
        enabled: carry out EdgeUpgrade orders (off by default: an agent run from a
            development venv must not replace it; deploy/install.sh's config turns it on).
        prefix: the running venv (``/opt/edgeagent``); empty means the interpreter's own
            (``sys.prefix``). Its ``.new``/``.previous``/``.failed`` siblings are the
            layout install.sh uses.
        cache_budget: bytes the artifact cache may hold (under ``<state_dir>/upgrade``);
            256 MiB holds a wheelhouse of the agent and its dependencies twice.
        window: a maintenance window ``HH:MM-HH:MM`` in UTC (may wrap midnight) outside
            which orders wait; empty: any time.
        max_attempts: starts of a new agent the guard allows before it rolls back (a crash
            at start, or a hang systemd's start timeout ends, counts one).
    """

    enabled: bool = False
    prefix: str = ""
    cache_budget: int = 256 * 1024 * 1024
    window: str = ""
    max_attempts: int = 3

    def __post_init__(self) -> None:
        if _WINDOW.fullmatch(self.window) is None:
            raise ConfigError("upgrade.window must be HH:MM-HH:MM (UTC)", key="upgrade.window")
        if self.cache_budget < 1 or self.max_attempts < 1:
            raise ConfigError(
                "upgrade.cache_budget and upgrade.max_attempts must be >= 1", key="upgrade"
            )
