"""Fixtures for the hub's device tests: where the shared KubeEdge manifests are."""

from __future__ import annotations

import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]


def find_shared_manifests() -> pathlib.Path | None:
    """``shared/data/manifests`` beside the repository (CI) or an ancestor of it (worktrees)."""
    for base in (ROOT, *ROOT.parents):
        candidate = base / "shared" / "data" / "manifests"
        if (candidate / "PROVENANCE.md").is_file():
            return candidate
    return None


@pytest.fixture(scope="session")
def kubeedge_dir() -> pathlib.Path:
    shared = find_shared_manifests()
    if shared is None:
        pytest.skip("shared/data/manifests is not next to the repository on this machine")
    return shared / "kubeedge"
