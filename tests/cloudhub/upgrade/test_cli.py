"""``cloudhub upgrade status``'s options: bad values are usage errors (exit 2) before any
call to the API."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from cloudhub.upgrade.cli import upgrade


@pytest.mark.parametrize("interval", ["-1", "0", "nan", "soon"])
def test_an_interval_that_is_not_a_positive_number_is_a_usage_error(interval: str) -> None:
    """Regression (break1): ``--interval -1`` reached ``time.sleep(-1)`` (a ValueError
    traceback) after the first refresh, and ``--interval 0`` polled the API in a loop."""
    result = CliRunner().invoke(
        upgrade, ["status", "rollout-1", "--kubeconfig", "/nonexistent", "--interval", interval]
    )
    assert result.exit_code == 2, result.output
    assert "--interval" in result.output
