"""The agent packages' names imported on first use (``edgeagent.lazy``)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import edgeagent.devices
import edgeagent.metrics
import edgeagent.upgrade
import edgeagent.uplink

PACKAGES = [edgeagent.devices, edgeagent.metrics, edgeagent.upgrade, edgeagent.uplink]


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.__name__)
def test_every_public_name_resolves_and_is_listed(package) -> None:
    for name in package.__all__:
        assert getattr(package, name) is not None, name
    assert set(package.__all__) <= set(dir(package))


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.__name__)
def test_an_unknown_name_is_an_attribute_error(package) -> None:
    with pytest.raises(AttributeError, match=f"module '{package.__name__}' has no attribute"):
        package.no_such_name  # noqa: B018


def test_the_modules_behind_the_names_load_only_when_used() -> None:
    code = (
        "import sys, edgeagent.upgrade as u\n"
        "assert 'edgeagent.upgrade.manager' not in sys.modules\n"
        "m = u.UpgradeManager\n"
        "assert 'edgeagent.upgrade.manager' in sys.modules\n"
        "assert u.__dict__['UpgradeManager'] is m\n"  # kept: __getattr__ not asked again
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "ok", out.stderr
