"""The code base passes ruff and the import-linter contracts (pyproject.toml)."""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

import grimp
import pytest

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


@pytest.fixture(scope="module")
def import_graph() -> grimp.ImportGraph:
    """The direct imports between the modules of the three packages (grimp, which
    import-linter is built on)."""
    return grimp.build_graph("protocol", "cloudhub", "edgeagent", cache_dir=None)


def _private(module: str) -> bool:
    return any(part.startswith("_") and not part.startswith("__") for part in module.split("."))


def test_no_program_imports_a_private_protocol_module(import_graph: grimp.ImportGraph) -> None:
    """The hub and the agent use ``protocol``'s public modules only (``protocol.tasks``,
    not the former ``protocol.transport._tasks``): a private module may change shape with
    the protocol package alone."""
    offenders = sorted(
        f"{imp['importer']} -> {imp['imported']}"
        for module in import_graph.modules
        if module.startswith("protocol.") and _private(module)
        for importer in import_graph.find_modules_that_directly_import(module)
        if not importer.startswith("protocol")
        for imp in import_graph.get_import_details(importer=importer, imported=module)
    )
    assert offenders == []
