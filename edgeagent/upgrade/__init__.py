"""Agent upgrades on the node (docs/upgrade.md).

- :mod:`~edgeagent.upgrade.artifact`: the artifact cache (resume, budget, digest first).
- :mod:`~edgeagent.upgrade.venvs`: the venvs side by side (install.sh's layout).
- :mod:`~edgeagent.upgrade.guard`: the start guard and probation (standard library only).
- :mod:`~edgeagent.upgrade.hold`: ``edgeagent hold`` / ``unhold``, the maintenance window.
- :mod:`~edgeagent.upgrade.manager`: an order carried out, progress reported.
"""

from edgeagent.upgrade.artifact import ArtifactCache
from edgeagent.upgrade.errors import (
    BudgetExceeded,
    DigestMismatch,
    InstallFailed,
    OrderRefused,
    UpgradeFailed,
)
from edgeagent.upgrade.hold import Window, held, hold, parse_window, unhold
from edgeagent.upgrade.manager import CHUNK_BYTES, UpgradeManager
from edgeagent.upgrade.venvs import STAMP, Layout

__all__ = [
    "CHUNK_BYTES",
    "STAMP",
    "ArtifactCache",
    "BudgetExceeded",
    "DigestMismatch",
    "InstallFailed",
    "Layout",
    "OrderRefused",
    "UpgradeFailed",
    "UpgradeManager",
    "Window",
    "held",
    "hold",
    "parse_window",
    "unhold",
]
