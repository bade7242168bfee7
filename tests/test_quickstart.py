"""The README's Quick start is what CI runs: its first block's two command lines are the
installer-and-demo and installer-and-suite scripts, as ``scripts/fresh-root.sh`` reads them
(CI runs the second in a fresh Debian root; ``scripts/fresh-root.sh demo`` the first)."""

from __future__ import annotations

import os
import pathlib
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _commands() -> dict[str, str]:
    out = subprocess.run(
        [str(ROOT / "scripts" / "fresh-root.sh"), "commands"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout
    return dict(line.split(": ", 1) for line in out.splitlines())


def test_the_readme_leads_with_the_two_commands() -> None:
    commands = _commands()
    assert commands == {"demo": "scripts/demo.sh", "test": "scripts/test.sh"}
    for command in commands.values():
        script = ROOT / command.split()[0]
        assert script.is_file() and os.access(script, os.X_OK), script
        # Each installs what is missing first, through the one installer.
        assert "scripts/setup.sh" in script.read_text()


def test_the_scripts_parse_and_explain_themselves() -> None:
    for name in ("setup.sh", "demo.sh", "test.sh", "fresh-root.sh"):
        subprocess.run(["bash", "-n", str(ROOT / "scripts" / name)], check=True, timeout=30)
    usage = subprocess.run(
        [str(ROOT / "scripts" / "setup.sh"), "--help"], capture_output=True, text=True, timeout=30
    )
    assert usage.returncode == 0 and "scripts/setup.sh demo" in usage.stdout
    wrong = subprocess.run(
        [str(ROOT / "scripts" / "setup.sh"), "bogus"], capture_output=True, text=True, timeout=30
    )
    assert wrong.returncode == 2 and "usage: scripts/setup.sh demo|test" in wrong.stderr


def test_setup_is_quiet_when_there_is_nothing_to_do() -> None:
    """The test environment is installed (this test runs in it): a second run says nothing."""
    done = subprocess.run(
        [str(ROOT / "scripts" / "setup.sh"), "test"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "" and done.stderr == ""
