"""``edgeagent join`` on a board whose clock is hours behind (issue 15 item 6b), as a real
process on a clock 3 hours behind (libfaketime) against a real hub: the CA pin matches,
then the serving certificate is not valid yet by this clock; the error names this node's
clock against the certificate's notBefore and the hub's Date, and says NTP (not "TLS
interception"); with the clock set, the same command joins."""

from __future__ import annotations

import pathlib

from tests.edgeagent.certs.conftest import PKIHub, command
from tests.edgeagent.certs.test_flow import token_command
from tests.faketime import FakeClock


async def test_a_join_hours_behind_names_the_clock_and_ntp(
    pki_hub: PKIHub, tmp_path: pathlib.Path
) -> None:
    clock = FakeClock(tmp_path, -3 * 3600)
    printed = await token_command(pki_hub)
    config = tmp_path / "config.yaml"
    config.write_text(f"state_dir: {tmp_path / 'state'}\n")
    args = ("edgeagent", *printed[1:], "--node-name", "pi-late", "--config", str(config))

    late = await command(*args, env=clock.env())
    assert late.returncode == 1, (late.stdout, late.stderr)
    err = late.stderr
    assert "the hub CA matches" in err  # the pin held: this is not an interception
    assert "intercepting" not in err
    assert "this node's clock reads" in err and "serving certificate's notBefore" in err
    assert "the hub's clock reads" in err and "(its Date header)" in err
    assert "3.0 hours behind" in err
    assert "timedatectl set-ntp true" in err and "run the join again" in err
    assert not (tmp_path / "state" / "pki" / "node.crt").exists()

    clock.set(0)  # NTP set the clock
    joined = await command(*args, env=clock.env())
    assert joined.returncode == 0, joined.stderr
    assert (tmp_path / "state" / "pki" / "node.crt").exists()
