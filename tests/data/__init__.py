"""Real inputs written by other people, kept byte for byte (see manifests/PROVENANCE.md).

``MANIFESTS`` is the copy of the shared corpus of Kubernetes manifests, KubeEdge device
models and devices, and placement policies that the tests run against. It lives in the
repository (with its licences) so that a clean clone on a CI machine has it.
"""

from __future__ import annotations

import pathlib

MANIFESTS = pathlib.Path(__file__).resolve().parent / "manifests"

__all__ = ["MANIFESTS"]
