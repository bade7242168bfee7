"""A small file system to fill, for the disk-full tests of both programs.

``mount_small_tmpfs`` mounts a tmpfs of a given size (root only; where it cannot, the test
is skipped with the reason, and fails under ``CI=true``: :func:`tests.environment.missing`),
``fill`` writes until it is full. The ``small_fs`` fixture in ``tests/conftest.py`` is the
one way tests get one.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import shutil
import subprocess
from collections.abc import Iterator

from tests.environment import missing

__all__ = ["fill", "mount_small_tmpfs"]


@contextlib.contextmanager
def mount_small_tmpfs(path: pathlib.Path, size: str) -> Iterator[pathlib.Path]:
    """A tmpfs of ``size`` (``"1m"``, ``"2m"``) mounted at ``path``, unmounted afterwards."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        missing("filling a disk needs root to mount a small tmpfs", "run the suite as root")
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        missing(f"cannot mount a small tmpfs to fill: {done.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(directory: pathlib.Path) -> pathlib.Path:
    """Write a file until the file system is full; return it (unlink it to free the space)."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"x" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)
    return filler
