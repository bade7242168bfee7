"""Real wheels and venvs for the upgrade tests: a stand-in ``edgefleet`` distribution
whose ``python -m edgeagent run --help`` exits with a chosen status, installed by pip."""

from __future__ import annotations

import base64
import hashlib
import pathlib
import shutil
import subprocess
import sys
import zipfile


def make_wheel(
    directory: pathlib.Path, version: str, *, exit_status: int = 0, padding: int = 0
) -> pathlib.Path:
    """``edgefleet-<version>-py3-none-any.whl`` in ``directory``; its agent's smoke test
    (``python -m edgeagent run --help``) exits ``exit_status``; ``padding`` bytes of data
    make it span several transfer chunks (stored, not compressed)."""
    files = {
        "edgeagent/padding.txt": "x" * padding,
        "edgeagent/__init__.py": f'__version__ = "{version}"\n',
        "edgeagent/__main__.py": (
            f"import sys\nprint('edgeagent {version}')\nsys.exit({exit_status})\n"
        ),
        f"edgefleet-{version}.dist-info/METADATA": (
            f"Metadata-Version: 2.1\nName: edgefleet\nVersion: {version}\n"
        ),
        f"edgefleet-{version}.dist-info/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
        f"edgefleet-{version}.dist-info/entry_points.txt": (
            "[console_scripts]\nedgeagent = edgeagent.__main__:main\n"
        ),
    }
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{name},sha256={digest.decode()},{len(text.encode())}")
    record_name = f"edgefleet-{version}.dist-info/RECORD"
    record.append(f"{record_name},,")
    path = directory / f"edgefleet-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
        zf.writestr(record_name, "\n".join(record) + "\n")
    return path


def sha256(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def make_venv(prefix: pathlib.Path, wheel: pathlib.Path) -> None:
    """A venv at ``prefix`` (with pip, as install.sh makes it) with ``wheel`` installed."""
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", str(prefix)], check=True, capture_output=True)
    subprocess.run(
        [str(prefix / "bin/python"), "-m", "pip", "install", "-q", "--no-index", str(wheel)],
        check=True,
        capture_output=True,
    )


def copy_venv(template: pathlib.Path, prefix: pathlib.Path) -> None:
    """A copy of a made venv at another prefix, as install.sh's relocate would leave it."""
    shutil.copytree(template, prefix, symlinks=True)
    old, new = str(template).encode(), str(prefix).encode()
    for path in [prefix / "pyvenv.cfg", *(prefix / "bin").iterdir()]:
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            if old in data:
                path.write_bytes(data.replace(old, new))
