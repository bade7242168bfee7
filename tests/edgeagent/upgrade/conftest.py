"""A real venv with the stand-in edgefleet 0.4.0, made once per session (pip, no index)."""

from __future__ import annotations

import pathlib

import pytest

from tests.edgeagent.upgrade.wheels import copy_venv, make_venv, make_wheel


@pytest.fixture(scope="session")
def venv_template(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    root = tmp_path_factory.mktemp("template")
    wheel = make_wheel(root, "0.4.0")
    prefix = root / "opt" / "edgeagent"
    prefix.parent.mkdir()
    make_venv(prefix, wheel)
    return prefix


@pytest.fixture
def prefix(tmp_path: pathlib.Path, venv_template: pathlib.Path) -> pathlib.Path:
    """``<tmp>/opt/edgeagent``: a running agent's venv (0.4.0), as install.sh leaves it."""
    target = tmp_path / "opt" / "edgeagent"
    target.parent.mkdir()
    copy_venv(venv_template, target)
    return target
