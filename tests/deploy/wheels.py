"""EdgeFleet wheels and wheelhouses built from this tree, for the deploy tests.

Each build copies only the sources a wheel needs (``pyproject.toml``, ``README.md`` and
the package and unit directories, a few MB) into a temporary directory that is checked
to lie outside the tree, so that a copy can never recurse into itself (a previous test
once filled /tmp that way).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import http.server
import pathlib
import re
import shutil
import subprocess
import sys
import tarfile
import threading
from collections.abc import Iterator

__all__ = ["REPO", "build_wheel", "make_wheelhouse", "write_manifest"]

REPO = pathlib.Path(__file__).resolve().parents[2]
_SOURCES = ("protocol", "cloudhub", "edgeagent", "systemd")
_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", "dist")


def build_wheel(
    work: pathlib.Path, *, version: str | None = None, agent_main: str | None = None
) -> pathlib.Path:
    """Build the EdgeFleet wheel from a copy of this tree under ``work``.

    Args:
        work: an empty directory outside the tree.
        version: replaces pyproject's version (an upgrade's "new" wheel).
        agent_main: replaces ``edgeagent/__main__.py`` (a broken agent for the rollback
            tests).

    Returns:
        The wheel file, under ``work/dist``.

    Raises:
        ValueError: ``work`` is inside the tree.
        subprocess.CalledProcessError: pip failed.
    """
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
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(work / "dist"), "."],
        cwd=source,
        check=True,
        timeout=300,
    )
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


def make_wheelhouse(wheel: pathlib.Path, house: pathlib.Path, extra: str = "agent") -> None:
    """Fill ``house`` with ``wheel`` and the wheels of its dependencies (with ``extra``),
    from pip's cache (the test environment's install filled it), pip's own wheel (which
    install.sh installs with, as deploy/build-wheelhouse.sh adds it), and its manifest."""
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "-w", str(house), f"{wheel}[{extra}]", "pip"],
        check=True,
        timeout=600,
    )
    write_manifest(house)


@contextlib.contextmanager
def wheelhouse_over_http(house: pathlib.Path, name: str, served: pathlib.Path) -> Iterator[str]:
    """Serve ``house`` as the archive ``name`` (``wheelhouse/`` inside, as release.sh
    packs it) from ``served`` over plain HTTP on loopback, a real server in a thread.

    Yields:
        The server's base URL (``http://127.0.0.1:PORT``); the archive is ``{url}/{name}``.
    """
    served.mkdir()
    with tarfile.open(served / name, "w:gz") as archive:
        archive.add(house, arcname="wheelhouse")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
