"""The agent's environments on disk, side by side: the layout deploy/install.sh uses.

One mechanism for both paths (``install.sh --upgrade`` by hand, an EdgeUpgrade from the
hub)::

    <prefix>              the running venv (/opt/edgeagent; the unit runs <prefix>/bin/edgeagent)
    <prefix>.new          the new venv being built and checked (nothing runs it yet)
    <prefix>.previous     the venv that ran before the last switch (the rollback target)
    <prefix>.failed       the venv a rollback replaced (kept to read why)
    <prefix>/.edgefleet-wheel.sha256   the digest of the wheel installed in that venv

The new venv is a copy of the running one (``shutil.copytree``, symlinks kept), into
which pip installs the ordered wheel only (``--no-index --no-deps --force-reinstall``:
no index, no dependency resolution, the running venv's dependencies are reused; a
version needing new dependencies fails its smoke test and is refused). The scripts'
``#!`` lines and ``pyvenv.cfg`` are rewritten from ``<prefix>.new`` to ``<prefix>``, as
install.sh's ``relocate`` does, so that the venv works once renamed. Every command is
an argument list (no shell) whose only variable parts are paths this module made.
"""

from __future__ import annotations

import dataclasses
import email.parser
import os
import pathlib
import shutil
import subprocess

from edgeagent.upgrade import guard
from edgeagent.upgrade.errors import InstallFailed

__all__ = ["STAMP", "Layout"]

STAMP = ".edgefleet-wheel.sha256"
_DIST = "edgefleet"


#: Where deploy/install.sh keeps the pip wheel it installed with, in a venv it leaves
#: without pip (pip and setuptools are a third of an agent's install otherwise).
PIP_WHEELS = pathlib.Path("share") / "edgefleet"


def pip_command(venv: pathlib.Path) -> list[str]:
    """The command that runs pip for ``venv`` with its own interpreter (``-I``): the pip
    wheel install.sh left in ``<venv>/share/edgefleet`` (run from the wheel file, which pip
    supports), else the venv's own pip module."""
    python = str(venv / "bin" / "python")
    wheels = sorted((venv / PIP_WHEELS).glob("pip-*-py3-none-any.whl"))
    if wheels:
        return [python, "-I", str(wheels[-1] / "pip")]
    return [python, "-I", "-m", "pip"]


@dataclasses.dataclass(frozen=True)
class Layout:
    """The venv directories around ``prefix`` (see the module docstring).

    Attributes:
        prefix: the running venv's directory.
        smoke_timeout_s: seconds the new agent's smoke test may take.
        pip_timeout_s: seconds pip may take to install the wheel.
    """

    prefix: pathlib.Path
    smoke_timeout_s: float = 60.0
    pip_timeout_s: float = 300.0

    @property
    def staging(self) -> pathlib.Path:
        return self.prefix.with_name(self.prefix.name + ".new")

    @property
    def previous(self) -> pathlib.Path:
        return self.prefix.with_name(self.prefix.name + ".previous")

    @property
    def failed(self) -> pathlib.Path:
        return self.prefix.with_name(self.prefix.name + ".failed")

    def version(self, venv: pathlib.Path | None = None) -> str:
        """The EdgeFleet version installed in ``venv`` (default: the running one), read
        from its ``.dist-info/METADATA`` without running it; "" when none is."""
        root = venv or self.prefix
        for meta in root.glob(f"lib/python*/site-packages/{_DIST}-*.dist-info/METADATA"):
            headers = email.parser.Parser().parsestr(meta.read_text(), headersonly=True)
            if headers.get("Name", "").lower() == _DIST:
                return headers.get("Version", "")
        return ""

    def recover(self) -> None:
        """Finish a switch or rollback a power cut interrupted between its two renames
        (no ``<prefix>``, but a ``.previous`` or ``.new`` to put there)."""
        if self.prefix.exists():
            return
        for candidate in (self.previous, self.staging):
            if (candidate / "bin" / "python").exists():
                os.rename(candidate, self.prefix)
                return

    def stage(self, wheel: pathlib.Path, sha256: str) -> str:
        """Build ``<prefix>.new`` with ``wheel`` installed and check that it starts.

        Returns:
            The version installed in it.

        Raises:
            InstallFailed: the copy, pip or the smoke test failed (``<prefix>.new`` is
                removed; the running venv was not touched).
        """
        staging = self.staging
        shutil.rmtree(staging, ignore_errors=True)
        try:
            shutil.copytree(self.prefix, staging, symlinks=True)
            python = str(staging / "bin" / "python")
            # -I: isolated (no current directory, no PYTHON* variables on sys.path).
            pip = [*pip_command(staging), "install", "--disable-pip-version-check", "--no-input"]
            only = ["--quiet", "--no-index", "--no-deps", "--force-reinstall", "--no-compile"]
            self._run(
                [*pip, *only, str(wheel)],
                "pip install",
                self.pip_timeout_s,
            )
            self._relocate(staging)
            self._run(
                [python, "-m", "edgeagent", "run", "--help"], "smoke test", self.smoke_timeout_s
            )
            (staging / STAMP).write_text(sha256 + "\n")
        except (OSError, InstallFailed) as exc:
            shutil.rmtree(staging, ignore_errors=True)
            if isinstance(exc, InstallFailed):
                raise
            raise InstallFailed(f"building {staging} failed: {exc}") from exc
        return self.version(staging)

    def _run(self, argv: list[str], what: str, timeout_s: float) -> None:
        try:
            proc = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                timeout=timeout_s,
                check=False,
                cwd=self.staging,
                env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PIP_NO_INDEX": "1"},
            )
        except subprocess.TimeoutExpired as exc:
            raise InstallFailed(f"{what} did not finish in {timeout_s:g} s") from exc
        if proc.returncode != 0:
            tail = " ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
            reason = "SmokeTestFailed" if what == "smoke test" else "InstallFailed"
            raise InstallFailed(f"{what} exited {proc.returncode}: {tail}", reason=reason)

    def _relocate(self, venv: pathlib.Path) -> None:
        old, new = os.fsencode(venv), os.fsencode(self.prefix)
        candidates = [venv / "pyvenv.cfg", *(venv / "bin").iterdir()]
        for path in candidates:
            if path.is_symlink() or not path.is_file():
                continue
            data = path.read_bytes()
            if b"\0" in data[:4096] or old not in data:
                continue
            path.write_bytes(data.replace(old, new))

    def switch(self) -> None:
        """``<prefix>.new`` becomes ``<prefix>``, the running one ``<prefix>.previous``.

        Raises:
            InstallFailed: there is no checked ``<prefix>.new``, or a rename failed.
        """
        if not (self.staging / STAMP).is_file():
            raise InstallFailed(f"{self.staging} was not staged")
        try:
            guard.switch_in(self.prefix)
        except OSError as exc:
            self.recover()
            raise InstallFailed(f"switching to {self.staging} failed: {exc}") from exc

    def rollback(self) -> None:
        """``<prefix>.previous`` becomes ``<prefix>`` again, the current one
        ``<prefix>.failed``.

        Raises:
            InstallFailed: there is no previous venv.
        """
        try:
            guard.swap_back(self.prefix)
        except OSError as exc:
            raise InstallFailed(f"rolling back to {self.previous} failed: {exc}") from exc
