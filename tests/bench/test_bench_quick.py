"""CI smoke run: every benchmark runs at --quick and prints the runner's JSON shape.

The figures of a quick run are not asserted against their goals (the sizes are
reduced); this only keeps every benchmark from rotting.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

from tests.bench.run import available

RUNNER = pathlib.Path(__file__).with_name("run.py")


@pytest.mark.slow
@pytest.mark.parametrize("name", available())
def test_benchmark_runs_quick(name: str) -> None:
    proc = subprocess.run(
        [sys.executable, str(RUNNER), name, "--quick"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(proc.stdout)
    assert report["name"] == name
    assert report["goals"], "a benchmark must declare at least one goal"
    for goal in report["goals"]:
        assert set(goal) >= {"id", "value", "target", "unit", "met"}
        assert isinstance(goal["value"], (int, float)), goal
