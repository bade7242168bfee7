"""The one import site of ``sqlite3`` and ``sqlite_utils`` in the agent.

Why the mask: at import, ``sqlite_utils.db`` tries ``import numpy`` and ``import
pandas`` only to map their scalar types to SQLite column types. When numpy happens to
be installed on the device that costs about 17 MiB of RSS and 100 ms of start-up, for
nothing: the agent never stores numpy values. A ``None`` entry in ``sys.modules`` makes
``import numpy`` raise ``ImportError`` (documented import-system behaviour), so
sqlite-utils takes its "not installed" branch. The mask is only in place for the
duration of this import and is removed afterwards, so anything else in the process that
really wants numpy (a test, a REPL) can still import it. If numpy was already imported
before us, we leave it alone; sqlite-utils then uses it, which is harmless.
"""

from __future__ import annotations

import sqlite3
import sys

_MASKED = ("numpy", "pandas")


def _import_sqlite_utils():  # type: ignore[no-untyped-def]
    masked = [name for name in _MASKED if name not in sys.modules]
    for name in masked:
        sys.modules[name] = None  # type: ignore[assignment]
    try:
        import sqlite_utils
        import sqlite_utils.db
    finally:
        for name in masked:
            if sys.modules.get(name, 0) is None:
                del sys.modules[name]
    return sqlite_utils


sqlite_utils = _import_sqlite_utils()
Database = sqlite_utils.Database
Migrations = sqlite_utils.Migrations

__all__ = ["Database", "Migrations", "sqlite3", "sqlite_utils"]
