"""A hub with the upgrade extension, for the tests of agent upgrades over real sessions."""

from __future__ import annotations

import contextlib
import pathlib
from collections.abc import AsyncIterator
from typing import Any

import yaml

from cloudhub.kube import CRDS, KubeClient
from cloudhub.upgrade.extension import CRD_PATH, UpgradeExtension
from cloudhub.upgrade.settings import UpgradeSettings
from tests.edgeagent.hublink.fleet import HubRunner, free_port

__all__ = ["upgrade_hub"]


@contextlib.asynccontextmanager
async def upgrade_hub(
    kubeconfig: pathlib.Path,
    kube: KubeClient,
    credentials: Any,
    artifacts: pathlib.Path,
    *,
    interval: float = 0.1,
) -> AsyncIterator[HubRunner]:
    """A started hub on the embedded API at ``kubeconfig`` whose upgrade extension serves
    the artifacts in ``artifacts`` (read at each request: write them before or after) and
    makes a pass every ``interval`` seconds; stopped on exit.

    The EdgeUpgrade CRD is applied through ``kube`` first, as ``deploy/crds`` does on a
    cluster (the extension's own install is off).
    """
    await kube.create(CRDS, yaml.safe_load(CRD_PATH.read_text()))
    runner = HubRunner(
        kubeconfig,
        credentials,
        free_port(),
        extensions=lambda settings: [
            UpgradeExtension(
                UpgradeSettings(artifact_dir=str(artifacts), interval=interval, install_crd=False)
            )
        ],
    )
    await runner.start()
    try:
        yield runner
    finally:
        await runner.stop()
