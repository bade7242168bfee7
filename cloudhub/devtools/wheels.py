"""EdgeFleet wheels and wheelhouses built from this source tree, for ``cloudhub demo
--upgrade``, the deploy and upgrade tests and the benchmarks.

Each build copies only the sources a wheel needs (``pyproject.toml``, ``README.md`` and
the package and unit directories, a few MB) into a temporary directory that is checked
to lie outside the tree, so that a copy can never recurse into itself (a previous test
once filled /tmp that way).
"""

from __future__ import annotations

import hashlib
import pathlib
import re
import shutil
import subprocess
import sys

from cloudhub.devtools.errors import DevtoolsError

__all__ = ["REPO", "build_wheel", "make_wheelhouse", "write_manifest"]

REPO = pathlib.Path(__file__).resolve().parents[2]
"""The source tree (this package's checkout; an installed hub has none)."""
_SOURCES = ("protocol", "cloudhub", "edgeagent", "systemd")
_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", "dist")


def _pip(args: list[str], timeout: float, quiet: bool, cwd: pathlib.Path | None = None) -> None:
    """``python -m pip ARGS``; with ``quiet`` its output is kept from the terminal (the
    demo's live view) and given in the error.

    Raises:
        subprocess.CalledProcessError: pip failed (``quiet``: with its output).
    """
    done = subprocess.run(
        [sys.executable, "-m", "pip", *args],
        cwd=cwd,
        timeout=timeout,
        capture_output=quiet,
        text=True,
    )
    if done.returncode != 0:
        raise subprocess.CalledProcessError(done.returncode, done.args, done.stdout, done.stderr)


def build_wheel(
    work: pathlib.Path,
    *,
    version: str | None = None,
    agent_main: str | None = None,
    quiet: bool = False,
) -> pathlib.Path:
    """Build the EdgeFleet wheel from a copy of this tree under ``work``.

    Args:
        work: an empty directory outside the tree.
        version: replaces pyproject's version (an upgrade's "new" wheel).
        agent_main: replaces ``edgeagent/__main__.py`` (a broken agent for the rollback
            tests).
        quiet: keep pip's output from the terminal (it is in the error).

    Returns:
        The wheel file, under ``work/dist``.

    Raises:
        ValueError: ``work`` is inside the tree.
        subprocess.CalledProcessError: pip failed.
        DevtoolsError: this hub runs from an installed wheel, not a source tree.
    """
    if not (REPO / "pyproject.toml").is_file():
        raise DevtoolsError(f"no source tree at {REPO}: a wheel is built from a checkout")
    work = work.resolve()
    if work == REPO or REPO in work.parents:
        raise ValueError(f"{work} is inside the tree {REPO}: the copy would recurse")
    source = work / "src"
    source.mkdir(parents=True)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    for name in _SOURCES:
        shutil.copytree(REPO / name, source / name, ignore=_IGNORE, symlinks=True)
    if version is not None:
        project = source / "pyproject.toml"
        text = re.sub(r'(?m)^version = ".*"$', f'version = "{version}"', project.read_text())
        project.write_text(text)
    if agent_main is not None:
        (source / "edgeagent" / "__main__.py").write_text(agent_main)
    _pip(["wheel", "--no-deps", "-q", "-w", str(work / "dist"), "."], 300, quiet, source)
    shutil.rmtree(source)
    (built,) = (work / "dist").glob("edgefleet-*.whl")
    return built


def write_manifest(house: pathlib.Path) -> pathlib.Path:
    """Write ``house/SHA256SUMS`` (``sha256sum`` format) for every wheel in ``house``."""
    lines = [
        f"{hashlib.sha256(path.read_bytes()).hexdigest()}  {path.name}\n"
        for path in sorted(house.glob("*.whl"))
    ]
    manifest = house / "SHA256SUMS"
    manifest.write_text("".join(lines))
    return manifest


def make_wheelhouse(
    wheel: pathlib.Path, house: pathlib.Path, extra: str = "agent", *, quiet: bool = False
) -> None:
    """Fill ``house`` with ``wheel`` and the wheels of its dependencies (with ``extra``),
    from pip's cache (the test environment's install filled it), pip's own wheel (which
    install.sh installs with, as deploy/build-wheelhouse.sh adds it: the agent extra no
    longer brings it), and its manifest.

    Raises:
        subprocess.CalledProcessError: pip failed (``quiet``: its output kept, in the error).
    """
    _pip(["wheel", "-q", "-w", str(house), f"{wheel}[{extra}]", "pip"], 600, quiet)
    write_manifest(house)
