"""The import-linter contract that keeps the protocol core sans-I/O can actually fail.

tests/test_lint.py checks that the contracts hold; this checks that the sans-I/O one would
catch a regression: in a copy of the packages, an ``import time`` slipped into the session
and an ``asyncio`` import reached indirectly from the codec must both break it.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("module", "line", "expected"),
    [
        ("session.py", "import time\n", "protocol.session is not allowed to import time"),
        ("events.py", "import os\n", "protocol.events is not allowed to import os"),
        (
            "config.py",
            "import protocol.sneaky\n",
            "protocol.config is not allowed to import asyncio",
        ),
        (
            "codec.py",
            "import protocol.sneaky\n",
            "protocol.codec is not allowed to import asyncio",
        ),
        ("backoff.py", "from random import uniform\n", "is not allowed to import random"),
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
    target = tmp_path / "protocol" / module
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
