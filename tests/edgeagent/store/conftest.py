"""Fixtures of the store tests: a tiny file system to fill up."""

from __future__ import annotations

import os
import pathlib
import subprocess

import pytest


@pytest.fixture
def small_fs(tmp_path: pathlib.Path):
    """A 1 MiB tmpfs to fill up (root only; skipped with the reason elsewhere)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True, text=True
    )
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs to fill: {proc.stderr.strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


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
