"""Fixtures for the hub's device tests: where the shared KubeEdge manifests are."""

from __future__ import annotations

import pathlib

import pytest

from tests.data import MANIFESTS


@pytest.fixture(scope="session")
def kubeedge_dir() -> pathlib.Path:
    """The KubeEdge part of the repository's copy of the shared manifests."""
    return MANIFESTS / "kubeedge"
