"""Agent upgrades on the node (docs/upgrade.md).

- :mod:`~edgeagent.upgrade.artifact`: the artifact cache (resume, budget, digest first).
- :mod:`~edgeagent.upgrade.venvs`: the venvs side by side (install.sh's layout).
- :mod:`~edgeagent.upgrade.guard`: the start guard and probation (standard library only).
- :mod:`~edgeagent.upgrade.hold`: ``edgeagent hold`` / ``unhold``, the maintenance window.
- :mod:`~edgeagent.upgrade.manager`: an order carried out, progress reported.

The names below are imported on first use (PEP 562): every agent reads
:mod:`~edgeagent.upgrade.settings` through its settings, but upgrades are off by default,
and the modules above (``email``, ``bz2``/``lzma`` through ``shutil``, ``hashlib``) cost
about 1.5 MiB of RSS that an agent which never upgrades should not carry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from edgeagent.lazy import lazy_exports

# Imported at once: small, and ``hold`` must be the function, not the submodule of that
# name (importing a submodule later binds its name here only on its first import).
from edgeagent.upgrade.errors import (
    BudgetExceeded,
    DigestMismatch,
    InstallFailed,
    OrderRefused,
    UpgradeFailed,
)
from edgeagent.upgrade.hold import Window, held, hold, parse_window, unhold

if TYPE_CHECKING:
    from edgeagent.upgrade.artifact import ArtifactCache
    from edgeagent.upgrade.manager import CHUNK_BYTES, UpgradeManager
    from edgeagent.upgrade.venvs import STAMP, Layout

_WHERE = {
    "ArtifactCache": "artifact",
    "CHUNK_BYTES": "manager",
    "UpgradeManager": "manager",
    "STAMP": "venvs",
    "Layout": "venvs",
}

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


__getattr__, __dir__ = lazy_exports(globals(), _WHERE)
