"""The hub's clock as the agent keeps it (issue 15 items 5 and 6b): a skew measured at a
welcome holds while the wall clock moves with the monotonic clock and is dropped when the
wall clock is stepped; the node certificate is refused locally only when both clocks say
it expired; a clock behind a certificate's notBefore is named with both times and NTP."""

from __future__ import annotations

import logging
import pathlib
import time

import pytest

from edgeagent.certs import HubClock
from edgeagent.certs.clock import clock_behind, explain_tls_failure, iso
from edgeagent.credentials import FileCredentials, certificate_validity
from edgeagent.errors import CredentialsError
from edgeagent.settings import AgentSettings
from protocol import pki
from tests.clock import ManualClock
from tests.edgeagent.hublink.fleet import write_node_pki


def clocks() -> tuple[ManualClock, ManualClock]:
    return ManualClock(1_800_000_000.0), ManualClock(1000.0)  # wall, monotonic


def test_the_skew_holds_while_both_clocks_move_together(caplog) -> None:
    wall, mono = clocks()
    clock = HubClock(wall=wall, monotonic=mono)
    assert clock.skew is None and clock.now() == wall()  # nothing measured yet
    with caplog.at_level(logging.WARNING):
        assert clock.measure(wall() + 1800) == -1800  # the board is 30 minutes behind
    assert "behind by 1800 s" in caplog.text and "NTP" in caplog.text
    wall.advance(3600)
    mono.advance(3600)
    assert clock.skew == -1800 and clock.now() == wall() + 1800
    # NTP slews (at most 500 ppm): 1 s over an hour is drift, not a step
    wall.advance(3601)
    mono.advance(3600)
    assert clock.skew == -1800 and clock.steps == 0


@pytest.mark.parametrize("step", [1800.0, -600.0])
def test_a_stepped_wall_clock_drops_the_skew(step: float, caplog) -> None:
    wall, mono = clocks()
    clock = HubClock(wall=wall, monotonic=mono)
    clock.measure(wall() + 1800)
    mono.advance(10)
    wall.advance(10 + step)  # NTP corrects the clock (or an operator's date -s)
    with caplog.at_level(logging.WARNING):
        assert clock.now() == wall()  # ours alone: the old skew described another clock
    assert clock.skew is None and clock.steps == 1
    [line] = [r.getMessage() for r in caplog.records if "stepped" in r.getMessage()]
    assert ("forward" if step > 0 else "back") in line and "1800 s skew" in line
    # the next welcome measures again
    assert clock.measure(wall() - 5, limit=60) == 5 and clock.skew == 5


def _settings(tmp_path: pathlib.Path) -> AgentSettings:
    return AgentSettings(node_name="pi-c", state_dir=tmp_path / "state")


def test_the_certificate_is_refused_locally_only_when_both_clocks_say_expired(
    tmp_path: pathlib.Path, pki_ca
) -> None:
    write_node_pki(tmp_path / "state" / "pki", pki_ca.ca, "pi-c")
    _, not_after = certificate_validity((tmp_path / "state" / "pki" / "node.crt").read_bytes())
    valid, expired = lambda: not_after - 143, lambda: not_after + 143
    # the corrected clock alone says expired (a stale skew): dial, the hub judges
    assert FileCredentials(_settings(tmp_path), wall_clock=valid, hub_clock=expired)()
    # our clock alone says expired (ours is ahead of the hub's): dial, the hub judges
    assert FileCredentials(_settings(tmp_path), wall_clock=expired, hub_clock=valid)()
    with pytest.raises(CredentialsError) as info:
        FileCredentials(_settings(tmp_path), wall_clock=expired, hub_clock=expired)()
    assert "expired" in str(info.value) and "join --renew" in str(info.value)


def test_a_clock_behind_a_certificate_is_named_with_both_times() -> None:
    now = time.time()
    text = clock_behind(now - 3 * 3600, now - 300, "the hub's serving certificate")
    assert text is not None
    assert iso(now - 3 * 3600) in text and iso(now - 300) in text
    assert "notBefore" in text and "2.9 hours behind" in text and "timedatectl set-ntp" in text
    assert clock_behind(now, now - 300, "x") is None
    assert "not a time" not in iso(now)
    assert "s since the epoch" in iso(1e20)  # out of range: still a message


def test_a_tls_failure_is_explained_by_the_clock_only_when_time_is_the_cause() -> None:
    now = time.time()
    node_cert = ("this node's certificate", now - 300)
    # before a certificate the hub issued: behind by at least the difference, whatever
    # the TLS error says
    text = explain_tls_failure("connection reset", now - 7200, [node_cert])
    assert text is not None and "115 minutes behind" in text and "notBefore" in text
    # the words of OpenSSL and of aioquic
    for error in (
        "certificate verify failed: certificate is not yet valid (_ssl.c:1006)",
        "TLS alert certificate_expired Certificate is not valid yet",
    ):
        said = explain_tls_failure(error, now, [node_cert])
        assert said is not None and "not valid yet" in said and "NTP" in said
    expired = explain_tls_failure("certificate verify failed: certificate has expired", now, [])
    assert expired is not None and "ahead" in expired and "renew" in expired
    # a measured hub clock far ahead of ours
    measured = explain_tls_failure("handshake failed", now, [], hub_time=now + 600)
    assert measured is not None and "10 minutes" in measured
    # not a matter of time
    assert explain_tls_failure("connection refused", now, [node_cert]) is None
    assert explain_tls_failure("handshake failed", now, [], hub_time=now + 5) is None


def _serving_der(pki_ca, now: float) -> bytes:
    from cryptography.hazmat.primitives.serialization import Encoding

    cert, _ = pki.issue_server_certificate(
        pki_ca.ca, dns_names=["hub.example"], lifetime=3600, now=now
    )
    return cert.public_bytes(Encoding.DER)


def test_the_join_names_a_clock_outside_the_serving_certificates_validity(pki_ca) -> None:
    from edgeagent.certs.joinclient import HubAddress, _clock_failure

    hub = HubAddress.parse("hub.example:7444")
    now = time.time()
    later = _serving_der(pki_ca, now + 3 * 3600)  # valid from 3 h from now (minus 5 min)
    behind = _clock_failure(hub, 9, later, now + 3 * 3600)
    assert behind.reason == "ClockBehind" and "2.9 hours behind" not in str(behind)
    assert "3.0 hours behind" in str(behind) and "(its Date header)" in str(behind)
    assert "notBefore" in str(behind) and "timedatectl set-ntp true" in behind.hint
    no_date = _clock_failure(hub, 9, None, None)
    assert no_date.reason == "ClockBehind" and "not valid yet" in str(no_date)

    old = _serving_der(pki_ca, now - 2 * 3600)  # expired an hour ago (+ 5 min)
    ahead = _clock_failure(hub, 10, old, now - 2 * 3600)  # the hub's clock: still valid
    assert ahead.reason == "ClockAhead" and "ahead" in str(ahead) and "NTP" in ahead.hint
    gone = _clock_failure(hub, 10, old, now)  # the hub's clock agrees: it expired
    assert gone.reason == "ServingCertificateExpired" and "renew" in gone.hint


def test_a_rejection_is_explained_by_whose_clock_says_what() -> None:
    from edgeagent.certs.clock import explain_rejection

    now, hint = time.time(), "run the re-join"
    unknown = explain_rejection(now, 0, None, hint)
    assert "timedatectl" in unknown and unknown.endswith(hint)
    expired = explain_rejection(now, now - 3600, None, hint)
    assert "expired at" in expired and "60 minutes ago" in expired
    by_hub = explain_rejection(now, now + 60, now + 7200, hint)
    assert "by the hub's clock" in by_hub and "2.0 hours behind" in by_hub and "NTP" in by_hub
    both_valid = explain_rejection(now, now + 3600, now + 5, hint)
    assert "by this node's clock and the hub's" in both_valid and "CA" in both_valid
    ours_only = explain_rejection(now, now + 3600, None, hint)
    assert "unless that clock is behind" in ours_only and "CA" in ours_only


def test_the_measured_hub_clock_is_none_until_measured_and_after_a_step() -> None:
    wall, mono = clocks()
    clock = HubClock(wall=wall, monotonic=mono)
    assert clock.measured() is None
    clock.measure(wall() + 100)
    assert clock.measured() == wall() + 100
    wall.advance(500)  # stepped
    assert clock.measured() is None
