"""``cloudhub upgrade status``: bad options are usage errors (exit 2) before any call to
the API; a name that does not exist is named, exit 2; against the embedded API."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import yaml
from click.testing import CliRunner, Result

from cloudhub.kube import CRDS, KubeClient
from cloudhub.standalone import APIServerSettings, EmbeddedAPIServer
from cloudhub.upgrade.cli import EDGEUPGRADES, upgrade
from cloudhub.upgrade.extension import CRD_PATH


@pytest.mark.parametrize("interval", ["-1", "0", "nan", "soon"])
def test_an_interval_that_is_not_a_positive_number_is_a_usage_error(interval: str) -> None:
    """Regression (break1): ``--interval -1`` reached ``time.sleep(-1)`` (a ValueError
    traceback) after the first refresh, and ``--interval 0`` polled the API in a loop."""
    result = CliRunner().invoke(
        upgrade, ["status", "rollout-1", "--kubeconfig", "/nonexistent", "--interval", interval]
    )
    assert result.exit_code == 2, result.output
    assert "--interval" in result.output


@pytest.fixture
async def api() -> AsyncIterator[EmbeddedAPIServer]:
    async with EmbeddedAPIServer(APIServerSettings(data_dir=None, port=0)) as server:
        yield server


async def status_of(api: EmbeddedAPIServer, *args: str) -> Result:
    """``cloudhub upgrade status`` in a thread (it runs its own event loop) against ``api``."""
    command = ["status", *args, "--kubeconfig", str(api.kubeconfig_path)]
    return await asyncio.to_thread(CliRunner().invoke, upgrade, command)


@pytest.mark.parametrize("crd", [True, False], ids=["crd-applied", "no-crd"])
@pytest.mark.parametrize("once", [True, False], ids=["once", "live"])
async def test_a_name_that_does_not_exist_is_named_and_exits_2(
    api: EmbeddedAPIServer, crd: bool, once: bool
) -> None:
    if crd:
        kube = await KubeClient.from_kubeconfig(str(api.kubeconfig_path))
        try:
            await kube.create(CRDS, yaml.safe_load(CRD_PATH.read_text()))
        finally:
            await kube.close()
    result = await status_of(api, "no-such-rollout", *(["--once"] if once else []))
    assert result.exit_code == 2, result.output
    assert "no EdgeUpgrade named 'no-such-rollout'" in result.stderr
    assert "Traceback" not in result.output


async def test_an_existing_upgrade_is_shown_once(api: EmbeddedAPIServer) -> None:
    kube = await KubeClient.from_kubeconfig(str(api.kubeconfig_path))
    try:
        await kube.create(CRDS, yaml.safe_load(CRD_PATH.read_text()))
        await kube.create(
            EDGEUPGRADES,
            {
                "apiVersion": "apps.edgefleet.io/v1alpha1",
                "kind": "EdgeUpgrade",
                "metadata": {"name": "rollout-1"},
                "spec": {
                    "version": "1.2.3",
                    "artifact": {"sha256": "ab" * 32, "name": "edgefleet-1.2.3-py3-none-any.whl"},
                },
            },
        )
    finally:
        await kube.close()
    result = await status_of(api, "rollout-1", "--once")
    assert result.exit_code == 0, result.output
    assert "rollout-1 -> 1.2.3" in result.stdout


@pytest.mark.parametrize("once", [True, False], ids=["once", "live"])
async def test_an_invalid_upgrade_shows_why_and_the_live_view_ends(
    api: EmbeddedAPIServer, once: bool
) -> None:
    """Found by breakit5: the view showed ``Invalid (spec.healthGate.soakSeconds)`` without the
    hub's message (what is wrong with it), and the live view waited forever for an
    EdgeUpgrade that cannot progress until it is edited."""
    kube = await KubeClient.from_kubeconfig(str(api.kubeconfig_path))
    why = "spec.healthGate.soakSeconds: must be below timeoutSeconds"
    try:
        await kube.create(CRDS, yaml.safe_load(CRD_PATH.read_text()))
        await kube.create(
            EDGEUPGRADES,
            {
                "apiVersion": "apps.edgefleet.io/v1alpha1",
                "kind": "EdgeUpgrade",
                "metadata": {"name": "soak-too-long"},
                "spec": {
                    "version": "1.2.3",
                    "artifact": {"sha256": "ab" * 32, "name": "edgefleet-1.2.3-py3-none-any.whl"},
                    "healthGate": {"soakSeconds": 60, "timeoutSeconds": 30},
                },
            },
        )
        status = {"phase": "Invalid", "reason": "spec.healthGate.soakSeconds", "message": why}
        await kube.patch(EDGEUPGRADES, "soak-too-long", {"status": status}, subresource="status")
    finally:
        await kube.close()
    result = await asyncio.wait_for(
        status_of(api, "soak-too-long", "--interval", "0.1", *(["--once"] if once else [])), 30
    )
    assert result.exit_code == (0 if once else 1), result.output
    assert why in " ".join(result.stdout.split())
