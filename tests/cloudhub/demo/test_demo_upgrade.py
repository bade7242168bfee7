"""``cloudhub demo --upgrade`` end to end: the first node's agent installed by
deploy/install.sh, upgraded by an EdgeUpgrade to the next version built from this tree,
the node Healthy on it with no pod restart; the summary's check ``upgrade`` and the node's
reported version say so, and nothing is left behind.

Runs on podman's Docker API where ``cloudhub.devtools.engine`` can start it here, else the
process runtime, like tests/cloudhub/demo/test_demo.py.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from cloudhub.__main__ import main
from cloudhub.devtools.engine import unavailable_reason
from cloudhub.devtools.errors import DevtoolsError
from cloudhub.devtools.installed import bumped, current_version, installed_version
from cloudhub.devtools.wheels import REPO, build_wheel
from tests.cloudhub.demo.test_demo import _processes_under
from tests.environment import in_ci, missing
from tests.k8s.kube_apiserver import kubectl_path

ROOT = pathlib.Path(__file__).resolve().parents[3]


def test_help_explains_the_upgrade_flag() -> None:
    result = CliRunner().invoke(main, ["demo", "--help"])
    assert result.exit_code == 0
    for text in ("--upgrade", "EdgeUpgrade", "install.sh", "cloudhub", "upgrade status NAME"):
        assert text in result.output, text


def test_the_next_version_and_its_bad_inputs(tmp_path: pathlib.Path) -> None:
    assert bumped("0.1.0") == "0.1.1"
    assert bumped("1.9.9rc1") == "1.9.10"
    assert re.fullmatch(r"\d+\.\d+\.\d+.*", current_version())
    with pytest.raises(DevtoolsError, match=r"MAJOR\.MINOR\.PATCH"):
        bumped("latest")
    with pytest.raises(ValueError, match="inside the tree"):
        build_wheel(REPO / "build" / "wheel")


def test_a_quiet_build_that_pip_refuses_gives_pips_output(tmp_path: pathlib.Path) -> None:
    with pytest.raises(subprocess.CalledProcessError) as failed:
        build_wheel(tmp_path / "wheel", version="not a version", quiet=True)
    assert "not a version" in failed.value.stdout + failed.value.stderr


def test_the_installed_version_is_read_from_the_venv(tmp_path: pathlib.Path) -> None:
    assert installed_version(tmp_path / "none") == ""  # no venv there
    info = tmp_path / "lib" / "python3.11" / "site-packages" / "edgefleet-9.9.9.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: edgefleet\nVersion: 9.9.9\n")
    assert installed_version(tmp_path) == "9.9.9"
    other = info.parent / "other-1.0.dist-info"
    other.mkdir()
    (other / "METADATA").write_text("Metadata-Version: 2.1\nName: other\nVersion: 1.0\n")
    assert installed_version(tmp_path) == "9.9.9"


def test_demo_upgrades_one_agent(tmp_path: pathlib.Path) -> None:
    reason = unavailable_reason()
    if reason is not None and in_ci():
        pytest.fail(f"CI=true: the demo must run on podman, and {reason}", pytrace=False)
    if shutil.which("systemctl") is None:
        missing("systemctl", "install.sh --root enables the unit with systemctl --root")
    kubectl = str(kubectl_path() or "")
    if not kubectl:
        missing("kubectl is not available for the day-2 checks", "scripts/setup.sh test")
    runtime = "auto" if reason is None else "process"
    summary_path = tmp_path / "summary.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    args = [
        sys.executable, "-m", "cloudhub", "demo", "--nodes", "1", "--runtime", runtime,
        "--upgrade", "--summary-json", str(summary_path), "--kubectl", kubectl,
    ]  # fmt: skip
    started = time.monotonic()
    try:
        done = subprocess.run(
            args, env=env, cwd=ROOT, capture_output=True, text=True, timeout=600,
            start_new_session=True,
        )  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the demo did not end within 600 s:\n{exc.stdout}", pytrace=False)
    elapsed = time.monotonic() - started
    text = done.stdout + done.stderr
    print(text)  # the run's output, shown with -s
    summary = json.loads(summary_path.read_text())
    check = summary["checks"]["upgrade"]
    new = bumped(current_version())
    assert check["state"] == "converged", (check, text)
    assert f"Healthy on {new}" in check["detail"], check
    assert summary["nodes"]["edge-1"]["version"] == new, summary["nodes"]
    assert summary["upgrade"]["phase"] == "Completed", summary["upgrade"]
    (entry,) = summary["upgrade"]["nodes"]
    assert (entry["name"], entry["phase"]) == ("edge-1", "Healthy"), entry
    assert summary["converged"] and done.returncode == 0, text
    if runtime == "auto":
        assert summary["runtime"] == "docker", summary["runtime_reason"]
    # The live view showed the EdgeUpgrade's progress (`cloudhub upgrade status`'s view).
    assert re.search(r"demo-agent-\S+ -> " + re.escape(new), text), text
    directory = re.search(r"directory: (\S+)", text).group(1)
    assert _processes_under(directory) == []
    assert not pathlib.Path(directory).exists()
    print(f"cloudhub demo --upgrade: {elapsed:.0f} s")
