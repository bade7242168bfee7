"""edgeagent.upgrade.venvs and .guard: side-by-side venvs, the switch, the start guard.

Real venvs and real pip (no index): the stand-in wheels of tests/edgeagent/upgrade/wheels.
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

import pytest

from edgeagent.upgrade import STAMP, InstallFailed, Layout, guard
from tests.edgeagent.upgrade.wheels import make_wheel, sha256


def agent_says(prefix: pathlib.Path) -> str:
    """What the venv's installed console script prints (its #! line must name prefix)."""
    proc = subprocess.run(
        [str(prefix / "bin" / "python"), "-I", "-m", "edgeagent"], capture_output=True, text=True
    )
    return proc.stdout.strip()


def test_stage_builds_beside_the_running_venv_and_switch_swaps(
    prefix: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    layout = Layout(prefix)
    wheel = make_wheel(tmp_path, "0.5.0")
    before = sorted(p.name for p in prefix.rglob("*"))
    assert layout.stage(wheel, sha256(wheel)) == "0.5.0"
    assert sorted(p.name for p in prefix.rglob("*")) == before  # the running one untouched
    assert layout.version() == "0.4.0" and layout.version(layout.staging) == "0.5.0"
    scripts = [p for p in (layout.staging / "bin").iterdir() if p.is_file()]
    assert not any(str(layout.staging).encode() in p.read_bytes() for p in scripts)
    layout.switch()
    assert layout.version() == "0.5.0" and layout.version(layout.previous) == "0.4.0"
    assert not layout.staging.exists()
    assert (prefix / STAMP).read_text().strip() == sha256(wheel)
    assert agent_says(prefix) == "edgeagent 0.5.0"
    layout.rollback()
    assert layout.version() == "0.4.0" and layout.version(layout.failed) == "0.5.0"
    assert agent_says(prefix) == "edgeagent 0.4.0"


def test_a_new_agent_failing_its_smoke_test_is_never_switched_to(
    prefix: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    layout = Layout(prefix)
    broken = make_wheel(tmp_path, "0.5.0", exit_status=3)
    with pytest.raises(InstallFailed) as caught:
        layout.stage(broken, sha256(broken))
    assert caught.value.reason == "SmokeTestFailed" and "exited 3" in str(caught.value)
    assert not layout.staging.exists() and layout.version() == "0.4.0"
    with pytest.raises(InstallFailed):
        layout.switch()


def test_a_file_that_is_not_a_wheel_fails_in_pip_and_changes_nothing(
    prefix: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    bogus = tmp_path / "edgefleet-0.5.0-py3-none-any.whl"
    bogus.write_bytes(b"not a zip")
    with pytest.raises(InstallFailed) as caught:
        Layout(prefix).stage(bogus, sha256(bogus))
    assert caught.value.reason == "InstallFailed"
    assert not Layout(prefix).staging.exists()


def test_recover_finishes_a_switch_cut_between_its_renames(prefix: pathlib.Path) -> None:
    layout = Layout(prefix)
    prefix.rename(layout.previous)  # power cut after the first rename of a rollback
    layout.recover()
    assert layout.version() == "0.4.0"
    layout.recover()  # nothing to do now
    assert layout.version() == "0.4.0"


def probation_for(prefix: pathlib.Path, **fields) -> dict:
    return {
        "upgrade": "agent",
        "uid": "u-1",
        "version": "0.5.0",
        "previous_version": "0.4.0",
        "prefix": str(prefix),
        "deadline": 1_000.0,
        "max_attempts": 2,
        **fields,
    }


def run_guard(script: pathlib.Path, state: pathlib.Path) -> subprocess.CompletedProcess:
    """The unit's ExecStartPre: the system's Python runs the copied script."""
    base = getattr(sys, "_base_executable", sys.executable)
    return subprocess.run(
        [base, "-I", str(script), str(state)], capture_output=True, text=True, check=True
    )


def test_the_guard_script_rolls_back_an_agent_that_keeps_crashing_at_start(
    prefix: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    layout = Layout(prefix)
    wheel = make_wheel(tmp_path, "0.5.0")
    layout.stage(wheel, sha256(wheel))
    state = tmp_path / "state"
    guard.write_probation(state, probation_for(prefix, deadline=10**12))
    script = state / "upgrade" / "guard.py"
    shutil.copyfile(guard.__file__, script)
    layout.switch()
    for _ in range(2):  # two starts allowed: the new agent crashed each time
        assert run_guard(script, state).stderr == ""
        assert layout.version() == "0.5.0"
    third = run_guard(script, state)
    assert "rolled back" in third.stderr
    assert layout.version() == "0.4.0" and agent_says(prefix) == "edgeagent 0.4.0"
    result = guard.read_result(state)
    assert result is not None
    assert (result["phase"], result["reason"], result["version"]) == (
        "RolledBack",
        "CrashedAtStart",
        "0.4.0",
    )
    assert guard.probation(state) is None
    assert run_guard(script, state).stderr == ""  # no probation: nothing more happens
    assert layout.version() == "0.4.0"


def test_past_the_deadline_the_guard_rolls_back_as_hub_unreachable(
    prefix: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    layout = Layout(prefix)
    prefix.with_name("edgeagent.previous").mkdir()
    shutil.copytree(prefix / "bin", layout.previous / "bin", symlinks=True)
    state = tmp_path / "state"
    guard.write_probation(state, probation_for(prefix, deadline=100.0, max_attempts=5))
    assert guard.on_start(state, now=50.0) == "probation"
    assert guard.on_start(state, now=101.0) == "rolled-back"
    assert guard.read_result(state, consume=True)["reason"] == "HubUnreachable"
    assert guard.read_result(state) is None
    assert layout.failed.exists()


def test_a_confirmed_probation_ends_and_a_bad_guard_call_never_fails_the_start(
    tmp_path: pathlib.Path,
) -> None:
    state = tmp_path / "state"
    guard.write_probation(state, probation_for(tmp_path / "nowhere"))
    assert guard.confirm(state)["version"] == "0.5.0"
    assert guard.on_start(state, now=0.0) == "none"
    assert guard.main(["guard.py"]) == 0  # usage error: still exit 0
    (state / "upgrade" / "probation.json").write_text("{not json")
    assert guard.on_start(state, now=0.0) == "none"
    guard.write_probation(state, probation_for(tmp_path / "nowhere", deadline=0.0))
    assert guard.main(["guard.py", str(state)]) == 0  # no previous venv: logged, exit 0


def _without_pip(prefix: pathlib.Path, tmp_path: pathlib.Path) -> pathlib.Path:
    """Leave ``prefix`` as deploy/install.sh does: no pip in the venv, the pip wheel it was
    installed with in ``share/edgefleet`` (built here from pip's cache, as the wheelhouse
    builder does). Returns the wheel."""
    site = next((prefix / "lib").glob("python3*/site-packages"))
    for path in [*site.glob("pip"), *site.glob("pip-*.dist-info"), *(prefix / "bin").glob("pip*")]:
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    version = subprocess.run(
        [sys.executable, "-m", "pip", "--version"], capture_output=True, text=True, check=True
    ).stdout.split()[1]
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path / "pw"),
         f"pip=={version}"],
        check=True, timeout=300,
    )  # fmt: skip
    (wheel,) = (tmp_path / "pw").glob("pip-*.whl")
    (prefix / "share" / "edgefleet").mkdir(parents=True, exist_ok=True)
    return pathlib.Path(shutil.copy(wheel, prefix / "share" / "edgefleet"))


def test_a_venv_without_pip_is_upgraded_with_the_pip_wheel_install_sh_kept(
    prefix: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    _without_pip(prefix, tmp_path)
    no_pip = subprocess.run([str(prefix / "bin" / "python"), "-I", "-m", "pip", "--version"])
    assert no_pip.returncode != 0  # really no pip in the venv
    layout = Layout(prefix)
    wheel = make_wheel(tmp_path, "0.5.0")
    assert layout.stage(wheel, sha256(wheel)) == "0.5.0"
    layout.switch()
    assert agent_says(prefix) == "edgeagent 0.5.0"


def test_a_venv_with_no_pip_at_all_fails_the_stage_and_changes_nothing(
    prefix: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    for found in _without_pip(prefix, tmp_path).parent.glob("pip-*.whl"):
        found.unlink()
    layout = Layout(prefix)
    wheel = make_wheel(tmp_path, "0.5.0")
    with pytest.raises(InstallFailed, match="pip"):
        layout.stage(wheel, sha256(wheel))
    assert not layout.staging.exists() and layout.version() == "0.4.0"


def test_the_guard_script_makes_install_shs_switch_and_rollback(
    prefix: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """install.sh moves the venvs with ``guard.py --switch|--rollback PREFIX``: the same
    functions the agent uses, run as a script by the system's Python."""
    layout = Layout(prefix)
    script = tmp_path / "guard.py"
    shutil.copyfile(guard.__file__, script)
    base = getattr(sys, "_base_executable", sys.executable)

    def move(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([base, "-I", str(script), *args], capture_output=True, text=True)

    nothing = move("--switch", str(prefix))  # no .new staged
    assert nothing.returncode == 1 and "no " in nothing.stderr and ".new" in nothing.stderr
    assert layout.version() == "0.4.0"
    none_back = move("--rollback", str(prefix))  # no .previous yet
    assert none_back.returncode == 1 and ".previous" in none_back.stderr
    assert layout.version() == "0.4.0"
    bad = move("--upgrade", str(prefix))
    assert bad.returncode == 2 and "usage" in bad.stderr

    wheel = make_wheel(tmp_path, "0.5.0")
    layout.stage(wheel, sha256(wheel))
    assert move("--switch", str(prefix)).returncode == 0
    assert layout.version() == "0.5.0" and layout.version(layout.previous) == "0.4.0"
    assert agent_says(prefix) == "edgeagent 0.5.0"
    assert move("--rollback", str(prefix)).returncode == 0
    assert layout.version() == "0.4.0" and layout.version(layout.failed) == "0.5.0"
    assert not layout.previous.exists()
