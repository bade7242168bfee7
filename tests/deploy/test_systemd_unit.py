"""systemd/edgeagent.service: ``systemd-analyze verify`` passes with no warning (in a
root tree holding the unit, the systemd units it depends on and an executable at its
ExecStart path), and the unit says what the design asks of it."""

from __future__ import annotations

import configparser
import pathlib
import re
import shutil
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
UNIT = REPO / "systemd" / "edgeagent.service"
SYSTEM_UNITS = pathlib.Path("/usr/lib/systemd/system")

pytestmark = pytest.mark.skipif(
    shutil.which("systemd-analyze") is None or not SYSTEM_UNITS.is_dir(),
    reason="systemd-analyze and the system's unit files are needed",
)


def systemd_version() -> int:
    out = subprocess.run(["systemctl", "--version"], capture_output=True, text=True, check=True)
    return int(re.match(r"systemd (\d+)", out.stdout).group(1))


def verify_tree(root: pathlib.Path) -> str:
    """``systemd-analyze verify --root`` on the edgeagent unit installed under ``root``
    (with its drop-ins); the system's own units are copied in for its dependencies.

    Returns:
        Everything it printed (empty when it has nothing to say).
    """
    system = root / "usr/lib/systemd/system"
    if not system.exists():
        shutil.copytree(SYSTEM_UNITS, system, symlinks=True)
    # The start guard's interpreter (ExecStartPre=-/usr/bin/python3 ...), as on a device.
    python = root / "usr/bin/python3"
    if not python.exists():
        python.parent.mkdir(parents=True, exist_ok=True)
        python.write_text("#!/bin/sh\n")
        python.chmod(0o755)
    result = subprocess.run(
        ["systemd-analyze", "verify", f"--root={root}", "edgeagent.service"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    output = (result.stdout + result.stderr).strip()
    assert result.returncode == 0, output
    return output


def verify(tmp_path: pathlib.Path, unit_text: str, dropins: dict[str, str] | None = None) -> str:
    """Verify a unit text (and drop-ins) in a fresh root with an executable at ExecStart."""
    root = tmp_path / "root"
    unit_dir = root / "etc/systemd/system"
    unit_dir.mkdir(parents=True)
    (unit_dir / "edgeagent.service").write_text(unit_text)
    for name, text in (dropins or {}).items():
        (unit_dir / "edgeagent.service.d").mkdir(exist_ok=True)
        (unit_dir / "edgeagent.service.d" / name).write_text(text)
    # Where install.sh puts the venv's script and the first-boot join.
    (root / "opt/edgeagent/bin").mkdir(parents=True)
    for name in ("edgeagent", "edgeagent-first-boot"):
        exe = root / "opt/edgeagent/bin" / name
        exe.write_text("#!/bin/sh\n")
        exe.chmod(0o755)
    return verify_tree(root)


def install_dropin(name: str) -> str:
    """The text of a drop-in that install.sh writes (from its here-document)."""
    script = (REPO / "deploy" / "install.sh").read_text()
    return script.split(f"{name}\" 0644 <<'EOF'\n", 1)[1].split("EOF\n", 1)[0]


def test_systemd_analyze_verify_passes_without_warnings(tmp_path: pathlib.Path) -> None:
    assert verify(tmp_path, UNIT.read_text()) == ""


def test_verify_reports_a_broken_unit(tmp_path: pathlib.Path) -> None:
    # The check above means something: a typo is reported (verify exits 0 on warnings).
    broken = UNIT.read_text().replace("ProtectHome=", "ProtectHomme=")
    assert "Unknown key 'ProtectHomme'" in verify(tmp_path, broken)


def test_restart_backoff_dropin_only_where_systemd_knows_it(tmp_path: pathlib.Path) -> None:
    script = (REPO / "deploy" / "install.sh").read_text()
    dropin = install_dropin("10-restart-backoff.conf")
    output = verify(tmp_path, UNIT.read_text(), {"10-restart-backoff.conf": dropin})
    if systemd_version() >= 254:
        assert output == ""
    else:  # why install.sh writes it only on systemd >= 254
        assert "Unknown key 'RestartSteps'" in output
    assert "BACKOFF_SYSTEMD=254" in script


def test_process_runtime_dropin_verifies(tmp_path: pathlib.Path) -> None:
    dropin = install_dropin("20-process-runtime.conf")
    assert "PrivateTmp=no" in dropin
    assert verify(tmp_path, UNIT.read_text(), {"20-process-runtime.conf": dropin}) == ""


def test_unit_has_what_the_design_asks() -> None:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # keys are case-sensitive in systemd
    parser.read_string(UNIT.read_text())
    service = parser["Service"]
    assert service["Type"] == "notify"
    assert service["WatchdogSec"] == "30s"
    assert service["Restart"] == "always" and service["RestartSec"]
    assert parser["Unit"]["StartLimitIntervalSec"] == "0"  # never give up
    assert service["ExecStart"].startswith("/opt/edgeagent/bin/edgeagent run --config ")
    # A golden image's device joins on its first boot, unsandboxed (it writes /etc).
    assert service["ExecStartPre"] == "+/opt/edgeagent/bin/edgeagent-first-boot"
    for key, value in {
        "NoNewPrivileges": "yes",
        "ProtectSystem": "full",
        "ProtectHome": "read-only",
        "PrivateTmp": "yes",
        "StateDirectory": "edgeagent",
        "StateDirectoryMode": "0700",
    }.items():
        assert service[key] == value, key
    assert "/var/lib/edgeagent" in service["ReadWritePaths"].split()
    assert service["KillMode"] == "process"  # process-runtime pods outlive an agent restart
    assert parser["Install"]["WantedBy"] == "multi-user.target"
