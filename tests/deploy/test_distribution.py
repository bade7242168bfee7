"""The agent-only distribution (issue 16 item 3): ``edgefleet[agent]`` installed from a
wheelhouse into a fresh venv with no index pulls none of the hub's dependencies, and the
installed agent starts; ``edgefleet[hub]`` brings them."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest
import tomllib

from tests.deploy.wheels import REPO, build_wheel, make_wheelhouse

#: Distributions only the hub imports (kubernetes_asyncio, the embedded API's JSON and patch
#: libraries, /metrics, the operator tables).
HUB_ONLY = {"kubernetes-asyncio", "orjson", "jsonpatch", "prometheus-client", "rich"}

_LIST = (
    "import importlib.metadata as m, json\n"
    "print(json.dumps(sorted({d.metadata['Name'].lower().replace('_', '-')"
    " for d in m.distributions()})))\n"
)


@pytest.fixture(scope="module")
def agent_house(tmp_path_factory: pytest.TempPathFactory) -> tuple[pathlib.Path, pathlib.Path]:
    wheel = build_wheel(tmp_path_factory.mktemp("wheel"))
    house = tmp_path_factory.mktemp("house")
    make_wheelhouse(wheel, house, "agent")
    return wheel, house


def fresh_venv(where: pathlib.Path) -> pathlib.Path:
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True, timeout=120)
    return where / "bin" / "python"


def installed(python: pathlib.Path) -> set[str]:
    out = subprocess.run([python, "-c", _LIST], check=True, capture_output=True, timeout=60)
    return set(json.loads(out.stdout))


def test_the_extras_split_the_dependencies() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    names = {
        key: {spec.split(">")[0].split("=")[0].lower().replace("_", "-") for spec in specs}
        for key, specs in {
            "base": project["dependencies"],
            **project["optional-dependencies"],
        }.items()
    }
    assert not (names["base"] | names["agent"]) & HUB_ONLY
    assert HUB_ONLY <= names["hub"]


@pytest.mark.slow
def test_agent_only_install_has_no_hub_dependency(
    agent_house: tuple[pathlib.Path, pathlib.Path], tmp_path: pathlib.Path
) -> None:
    wheel, house = agent_house
    python = fresh_venv(tmp_path / "venv")
    subprocess.run(
        [
            python,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-index",
            "--find-links",
            house,
            f"{wheel}[agent]",
        ],
        check=True,
        timeout=600,
    )
    have = installed(python)
    assert "edgefleet" in have and "aiodocker" in have and "psutil" in have
    assert not have & HUB_ONLY, have & HUB_ONLY
    agent = tmp_path / "venv" / "bin" / "edgeagent"
    run = subprocess.run([agent, "run", "--help"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and "--node-name" in run.stdout, run.stderr


@pytest.mark.slow
def test_hub_install_from_an_agent_wheelhouse_is_refused(
    agent_house: tuple[pathlib.Path, pathlib.Path], tmp_path: pathlib.Path
) -> None:
    """The agent's wheelhouse does not hold the hub: pip names what is missing."""
    wheel, house = agent_house
    python = fresh_venv(tmp_path / "venv")
    result = subprocess.run(
        [python, "-m", "pip", "install", "--no-index", "--find-links", house, f"{wheel}[hub]"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode != 0
    assert "kubernetes" in (result.stdout + result.stderr).lower()
