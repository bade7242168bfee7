"""The code base passes ruff and the import-linter contracts (pyproject.toml)."""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_ruff_clean() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "."], cwd=ROOT, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_import_contracts_hold() -> None:
    lint_imports = shutil.which("lint-imports")
    assert lint_imports, "lint-imports is installed with the test extra"
    proc = subprocess.run([lint_imports], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
