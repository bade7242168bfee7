"""``edgeagent hold`` / ``unhold``: the real program against a state directory."""

from __future__ import annotations

import pathlib
import subprocess
import sys

from edgeagent.upgrade import held


def edgeagent(*args: str) -> subprocess.CompletedProcess:
    program = pathlib.Path(sys.executable).parent / "edgeagent"
    return subprocess.run([str(program), *args], capture_output=True, text=True, timeout=60)


def test_hold_and_unhold(tmp_path: pathlib.Path) -> None:
    state = str(tmp_path)
    done = edgeagent("hold", "--state-dir", state, "--reason", "audit week")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "upgrades held on this node: audit week"
    assert held(tmp_path, None, 0.0) == "Held: audit week"
    assert edgeagent("unhold", "--state-dir", state).stdout.strip() == "upgrades released"
    assert held(tmp_path, None, 0.0) == ""
    assert edgeagent("unhold", "--state-dir", state).stdout.strip() == "upgrades were not held"


def test_hold_with_an_unusable_state_dir_fails_clearly(tmp_path: pathlib.Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    failed = edgeagent("hold", "--state-dir", str(blocker / "sub"))
    assert failed.returncode != 0
    assert "edgeagent:" in failed.stderr or "Error" in failed.stderr


def test_hold_in_a_state_dir_that_does_not_exist_is_refused(tmp_path: pathlib.Path) -> None:
    """Found by breakit5: ``edgeagent hold --state-dir`` with a typo made that directory
    and said "upgrades held on this node" while the agent (reading its own state
    directory) was not held at all."""
    typo = tmp_path / "var" / "lib" / "edgagent"
    failed = edgeagent("hold", "--state-dir", str(typo), "--reason", "audit")
    assert failed.returncode == 1, failed.stdout
    assert f"{typo}" in failed.stderr and "does not exist" in failed.stderr
    assert "--state-dir" in failed.stderr
    assert not typo.exists()
