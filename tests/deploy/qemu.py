"""Foreign-architecture Debian roots under qemu user emulation, for the deploy tests.

:func:`unpacked_root` is scripts/qemu-root.sh's cached root (made once, then only read);
:func:`mounted_root` mounts a copy-on-write view of it, with /proc, /dev, /sys and the
host's name resolution, where the test's process can also reach it (the device API's
socket, the pods' logs); :func:`chroot` is the command line of a program inside it.
Everything started inside is ended by :func:`end_processes_in` (by pid: the processes
whose root directory is the view).
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator

from tests.deploy.wheels import REPO
from tests.environment import missing
from tests.waiting import eventually_sync

__all__ = ["chroot", "end_processes_in", "mounted_root", "unpacked_root"]

SCRIPT = REPO / "scripts" / "qemu-root.sh"
#: Where views are made: not /tmp (an installed agent is ~60 MB in the upper layer).
WORK_DIR = pathlib.Path(os.environ.get("EDGEFLEET_QEMU_WORK", "/var/tmp"))


def unpacked_root(arch: str, packages: tuple[str, ...] = ()) -> pathlib.Path:
    """The cached Debian 12 root of ``arch`` (``arm64``, ``armhf``) with ``packages``
    (python3 always), made by ``scripts/qemu-root.sh root`` if it is not cached yet (a cold
    arm64 root takes ~95 s). Never write into it: use :func:`mounted_root`.

    Raises:
        AssertionError: the script failed (its output attached).
    """
    if os.geteuid() != 0:
        missing("root is needed for qemu roots (binfmt_misc, debootstrap, mounts)")
    if shutil.which("qemu-aarch64-static") is None:
        missing("qemu-user-static is needed for foreign-architecture roots",
                "scripts/setup.sh test installs it")  # fmt: skip
    if shutil.which("debootstrap") is None:
        missing("debootstrap is needed for foreign-architecture roots",
                "scripts/setup.sh test installs it")  # fmt: skip
    made = subprocess.run(
        [str(SCRIPT), "root", arch, *packages], capture_output=True, text=True, timeout=1800
    )
    assert made.returncode == 0, made.stderr[-3000:]
    return pathlib.Path(made.stdout.strip().splitlines()[-1])


@contextlib.contextmanager
def mounted_root(lower: pathlib.Path) -> Iterator[pathlib.Path]:
    """A writable overlay of ``lower`` with /proc, /dev, /sys, a /tmp tmpfs and this
    machine's resolv.conf and hosts; unmounted and removed on exit, after
    :func:`end_processes_in` ended what still runs inside.

    Yields:
        The view's directory (the chroot's ``/``).
    """
    work = pathlib.Path(tempfile.mkdtemp(prefix="ef-qemu-", dir=WORK_DIR))
    merged = work / "m"
    for name in ("upper", "work", "m"):
        (work / name).mkdir()
    mounts: list[pathlib.Path] = []

    def mount(*args: str, at: pathlib.Path) -> None:
        subprocess.run(["mount", *args, str(at)], check=True, capture_output=True, timeout=60)
        mounts.append(at)

    try:
        mount("-t", "overlay", "overlay", "-o",
              f"lowerdir={lower},upperdir={work / 'upper'},workdir={work / 'work'}",
              at=merged)  # fmt: skip
        mount("-t", "proc", "proc", at=merged / "proc")
        mount("--rbind", "/dev", at=merged / "dev")
        mount("--rbind", "/sys", at=merged / "sys")
        mount("-t", "tmpfs", "-o", "size=64m", "tmpfs", at=merged / "tmp")
        for name in ("resolv.conf", "hosts"):
            (merged / "etc" / name).unlink(missing_ok=True)
            shutil.copy(f"/etc/{name}", merged / "etc" / name)
        yield merged
    finally:
        end_processes_in(merged)
        for at in reversed(mounts):
            subprocess.run(["umount", "-R", "-l", str(at)], capture_output=True, timeout=60)
        shutil.rmtree(work, ignore_errors=True)


def chroot(root: pathlib.Path, *command: str, **environ: str) -> list[str]:
    """The command line of ``command`` run as root inside ``root``, with a clean
    environment (``environ`` added: no variable of this machine leaks into the device)."""
    base = {"HOME": "/root", "LANG": "C.UTF-8",
            "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}  # fmt: skip
    pairs = [f"{k}={v}" for k, v in {**base, **environ}.items()]
    return ["chroot", str(root), "/usr/bin/env", "-i", *pairs, *command]


def end_processes_in(root: pathlib.Path, timeout: float = 10.0) -> list[int]:
    """SIGTERM every process whose root directory is ``root``, SIGKILL after ``timeout``
    seconds what is left. Returns the pids that were signalled."""
    found = _inside(root)
    for pid in found:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    # Their own shutdown, polled; what is left at the deadline is killed, not a failure.
    eventually_sync(
        lambda: not _inside(root),
        f"the processes in {root} to end",
        timeout,
        otherwise=lambda: False,
    )
    for pid in _inside(root):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return found


def _inside(root: pathlib.Path) -> list[int]:
    target = str(root)
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.readlink(f"/proc/{entry}/root") == target:
                    pids.append(int(entry))
            except OSError:
                continue
    return pids
