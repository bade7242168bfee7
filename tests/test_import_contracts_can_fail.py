"""The import-linter contracts can actually fail.

tests/test_lint.py checks that the contracts hold; this checks that they would catch a
regression: in a copy of the packages, an ``import time`` slipped into the session, an
``asyncio`` import reached indirectly from the codec, the bridge importing the hub, a
feature importing the embedded API, a second SQLite user in the hub, the agent's store
importing a feature and its uplink importing the daemon must each break the contract named
for it.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("module", "line", "expected"),
    [
        ("protocol/session.py", "import time\n", "protocol.session is not allowed to import time"),
        ("protocol/events.py", "import os\n", "protocol.events is not allowed to import os"),
        (
            "protocol/config.py",
            "import protocol.sneaky\n",
            "protocol.config is not allowed to import asyncio",
        ),
        (
            "protocol/codec.py",
            "import protocol.sneaky\n",
            "protocol.codec is not allowed to import asyncio",
        ),
        ("protocol/backoff.py", "from random import uniform\n", "is not allowed to import random"),
        (
            "cloudhub/bridge/outbox.py",
            "import cloudhub.hub\n",
            "cloudhub.bridge.outbox -> cloudhub.hub",
        ),
        (
            "cloudhub/metrics/store.py",
            "import cloudhub.standalone.store\n",
            "cloudhub.metrics is not allowed to import cloudhub.standalone",
        ),
        (
            "cloudhub/events.py",
            "import sqlite3\n",
            "cloudhub.events -> sqlite3",
        ),
        (
            "edgeagent/store/twins.py",
            "import edgeagent.devices.twins\n",
            "edgeagent.store.twins -> edgeagent.devices.twins",
        ),
        (
            "edgeagent/uplink/session.py",
            "import edgeagent.agent\n",
            "edgeagent.uplink.session -> edgeagent.agent",
        ),
    ],
)
def test_the_sans_io_contract_catches_a_forbidden_import(
    tmp_path: pathlib.Path, module: str, line: str, expected: str
) -> None:
    lint_imports = shutil.which("lint-imports")
    assert lint_imports, "lint-imports is installed with the test extra"
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    for package in ("protocol", "cloudhub", "edgeagent"):
        shutil.copytree(
            ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    (tmp_path / "protocol" / "sneaky.py").write_text("import asyncio\n")
    target = tmp_path / module
    target.write_text(line + target.read_text())
    proc = subprocess.run(
        [lint_imports, "--no-cache"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0, proc.stdout
    assert expected in proc.stdout, proc.stdout + proc.stderr
