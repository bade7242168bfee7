"""The CRDs an operator installs: what ``deploy/crds/kustomization.yaml`` lists, in order
(the directory also holds the kustomization itself, which is not a CRD)."""

from __future__ import annotations

import pathlib
from typing import Any

import yaml

CRDS_DIR = pathlib.Path(__file__).resolve().parent.parent / "deploy" / "crds"


def crd_paths() -> list[pathlib.Path]:
    """The CRD files of ``deploy/crds``, as its kustomization lists them."""
    kustomization = yaml.safe_load((CRDS_DIR / "kustomization.yaml").read_text())
    return [CRDS_DIR / name for name in kustomization["resources"]]


def crd_documents() -> list[dict[str, Any]]:
    """The CRDs of ``deploy/crds`` as objects to create."""
    return [yaml.safe_load(path.read_text()) for path in crd_paths()]
