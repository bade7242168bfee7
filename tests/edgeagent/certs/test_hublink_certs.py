"""The agent's hub connection and its certificates, in this process (a real agent core on
the process runtime, ``HubLink`` with its default credentials, a real hub with the PKI
extension on the embedded API, real QUIC and WebSocket): renewal over the live session
timed by the hub's clock, the renewed files used at the next dial, and certificates the
hub refuses at TLS turned into an error that names the recovery."""

from __future__ import annotations

import asyncio
import logging
import pathlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from edgeagent.certs import CertPaths
from edgeagent.credentials import certificate_validity
from edgeagent.settings import (
    AgentSettings,
    HubSettings,
    PodSettings,
    RuntimeSettings,
    StoreSettings,
)
from edgeagent.uplink.session import HubLink
from protocol import pki
from protocol.errors import CloseCode
from tests.edgeagent.certs.conftest import PKIHub
from tests.edgeagent.hublink.fleet import HubRunner, eventually, free_port, write_node_pki
from tests.edgeagent.uplink.test_session import InProcessAgent
from tests.testpki import TestPKI

DAY = 86400.0


def settings_for(state: pathlib.Path, node: str, url: str, **hub: Any) -> AgentSettings:
    return AgentSettings(
        node_name=node,
        state_dir=state,
        node_ip="127.0.0.1",
        runtime=RuntimeSettings(kind="process"),
        store=StoreSettings(commit_delay=0.05),
        pods=PodSettings(backoff_initial=0.4, backoff_max=3, resync_period=2),
        hub=HubSettings(url=url, backoff_base=0.1, backoff_cap=0.5, healthy_after=0.5, **hub),
    )


@pytest.fixture
async def agents() -> AsyncIterator[Callable[..., InProcessAgent]]:
    started: list[InProcessAgent] = []

    def start(settings: AgentSettings, link: HubLink) -> InProcessAgent:
        agent = InProcessAgent(settings, link)
        started.append(agent)
        agent.start()
        return agent

    try:
        yield start
    finally:
        for agent in started:
            await agent.stop()


def serial_on_disk(paths: CertPaths) -> int:
    return pki.load_certificate_pem(paths.cert.read_bytes()).serial_number


async def join(pki_hub: PKIHub, tmp_path: pathlib.Path, node: str) -> pathlib.Path:
    """``edgeagent join`` (its function, in a thread) with a token from the hub."""
    from edgeagent.join import run_join

    token, _ = await pki_hub.pki.tokens.create(ttl=3600)
    state = tmp_path / node / "state"
    config = tmp_path / node / "config.yaml"
    config.parent.mkdir(parents=True)
    config.write_text(f"state_dir: {state}\n")
    await asyncio.to_thread(
        run_join,
        hub=pki_hub.join_address,
        token=token,
        ca_cert_hash=pki_hub.pki.ca.ca_hash,
        node_name=node,
        labels=None,
        renew=False,
        config=config,
        state_dir=None,
        timeout=10.0,
        env={},
        echo=lambda line: None,
    )
    return state


@pytest.mark.slow
@pytest.mark.parametrize("pki_hub", [{"pki.node_cert_lifetime": 8.0}], indirect=True)
async def test_renewal_over_the_session_on_a_clock_ten_minutes_behind(
    pki_hub: PKIHub, agents, tmp_path: pathlib.Path, caplog
) -> None:
    """A board without a real-time clock, 10 minutes behind: the welcome's hub time is
    logged as skew and used for the renewal (by its own clock the new certificate would
    not be valid yet: notBefore is only 5 minutes back). The session goes on; the next
    dial uses the new certificate, after the first one expired."""
    caplog.set_level(logging.INFO, logger="edgeagent")
    state = await join(pki_hub, tmp_path, "pi-slow")
    paths = CertPaths.from_settings(settings_for(state, "pi-slow", pki_hub.url))
    first_serial = serial_on_disk(paths)
    _, first_expiry = certificate_validity(paths.cert.read_bytes())
    link = HubLink(wall_clock=lambda: time.time() - 600)
    agent = agents(settings_for(state, "pi-slow", pki_hub.url), link)
    await agent.connected()
    session_no = link.connection_id()
    assert link.skew is not None and -610 < link.skew < -590
    assert any("behind by 6" in r.getMessage() for r in caplog.records), "skew not logged"
    assert pki_hub.session("pi-slow").link.peer_certificate.serial_number == first_serial

    await eventually(lambda: link.renewer.renewals >= 1, "a renewal over the session", 30)
    renewed = serial_on_disk(paths)
    assert renewed != first_serial
    assert link.connection_id() == session_no  # the same session, never dropped
    assert not [r for r in caplog.records if "renewal failed" in r.getMessage()]

    # The first certificate expires; the hub drops the session (as a replica shutting
    # down does): the agent dials again with the files the renewal wrote.
    await eventually(lambda: time.time() > first_expiry + 0.5, "the first certificate expired")
    pki_hub.session("pi-slow").close_soon(CloseCode.GOING_AWAY, "test: replica leaving")
    await eventually(lambda: link.connection_id() not in (None, session_no), "a new session", 30)
    current = serial_on_disk(paths)  # a later renewal may have happened meanwhile
    assert pki_hub.session("pi-slow").link.peer_certificate.serial_number in (renewed, current)
    assert pki_hub.session("pi-slow").link.peer_certificate.serial_number != first_serial


@pytest.fixture
async def plain_hub(api, pki_ca: TestPKI) -> AsyncIterator[HubRunner]:
    """A hub trusting the test CA (no PKI extension): certificates are made here."""
    runner = HubRunner(api.kubeconfig_path, pki_ca.server, free_port())
    await runner.start()
    try:
        yield runner
    finally:
        await runner.stop()


def write_foreign_pki(directory: pathlib.Path, hub_ca: pki.CertificateAuthority, node: str):
    """The hub's CA to trust, but a node certificate from another CA (a node joined to
    another fleet, or a hub whose CA was replaced)."""
    other = pki.generate_ca("another-fleet", lifetime=DAY, now=time.time())
    write_node_pki(directory, other, node)
    (directory / "ca.crt").write_bytes(pki.dump_certificate_pem(hub_ca.certificate))


def write_expired_pki(directory: pathlib.Path, ca: pki.CertificateAuthority, node: str):
    """A node certificate of the hub's CA that expired half a day ago."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    key = pki.generate_private_key()
    cert = pki.sign_node_csr(
        ca, pki.build_node_csr(node, key), lifetime=DAY, now=time.time() - 1.5 * DAY
    )
    (directory / "ca.crt").write_bytes(pki.dump_certificate_pem(ca.certificate))
    (directory / "node.crt").write_bytes(pki.dump_certificate_pem(cert))
    (directory / "node.key").write_bytes(pki.dump_private_key_pem(key))


@pytest.mark.parametrize(
    ("case", "transports"),
    [
        ("foreign", "quic,websocket"),  # QUIC says so: no fallback to WebSocket
        ("foreign", "websocket"),
        ("expired, clock behind", "quic,websocket"),  # our clock says valid; the hub's not
        ("expired, clock behind", "websocket"),
    ],
)
async def test_certificate_the_hub_rejects_is_an_error_naming_the_recovery(
    plain_hub: HubRunner,
    pki_ca: TestPKI,
    agents,
    tmp_path: pathlib.Path,
    caplog,
    case: str,
    transports: str,
) -> None:
    caplog.set_level(logging.INFO, logger="edgeagent")
    state = tmp_path / "state"
    wall: Callable[[], float] = time.time
    if case == "foreign":
        write_foreign_pki(state / "pki", pki_ca.ca, "pi-x")
    else:
        write_expired_pki(state / "pki", pki_ca.ca, "pi-x")
        wall = lambda: time.time() - 2 * DAY  # noqa: E731 - a board that lost its clock
    settings = settings_for(state, "pi-x", plain_hub.url, transports=tuple(transports.split(",")))
    link = HubLink(wall_clock=wall)
    agent = agents(settings, link)

    def rejections() -> list[str]:
        return [r.getMessage() for r in caplog.records if "rejected this node's" in r.getMessage()]

    await eventually(lambda: len(rejections()) >= 3, "the rejection, retried with back-off")
    text = rejections()[0]
    assert "edgeagent join --renew --token NEW_TOKEN" in text and "cloudhub token create" in text
    assert "timedatectl" in text  # an expiry may be this node's clock
    if transports.startswith("quic"):
        assert "TLS alert bad_certificate" in text  # the hub's own words come through
        assert not any("trying WebSocket" in r.getMessage() for r in caplog.records)
    for record in caplog.records:
        if "rejected this node's" in record.getMessage():
            assert record.levelno == logging.ERROR
    session = agent.store.get_state("hub.session")
    assert session["state"] == "refused" and "edgeagent join --renew" in session["reason"]
    assert link.connection_id() is None

    # Recovery: a re-join writes good files; the running agent uses them at its next dial.
    write_node_pki(state / "pki", pki_ca.ca, "pi-x")
    await agent.connected()
    assert agent.store.get_state("hub.session")["state"] == "connected"


async def test_certificate_expired_by_our_clock_is_not_dialled_and_names_the_recovery(
    plain_hub: HubRunner, pki_ca: TestPKI, agents, tmp_path: pathlib.Path, caplog
) -> None:
    """The node was offline longer than its certificate lived: no dial (the hub would
    refuse it), an ERROR naming the recovery at every back-off step, the agent running."""
    caplog.set_level(logging.INFO, logger="edgeagent")
    state = tmp_path / "state"
    write_expired_pki(state / "pki", pki_ca.ca, "pi-old")
    link = HubLink()
    agent = agents(settings_for(state, "pi-old", plain_hub.url), link)

    def errors() -> list[logging.LogRecord]:
        return [r for r in caplog.records if "cannot dial the hub" in r.getMessage()]

    await eventually(lambda: len(errors()) >= 3, "the expiry, retried with back-off")
    text = errors()[0].getMessage()
    assert errors()[0].levelno == logging.ERROR
    assert "expired" in text and "0.5 days ago" in text
    assert "edgeagent join --renew --token NEW_TOKEN" in text
    session = agent.store.get_state("hub.session")
    assert session["state"] == "no-credentials" and "expired" in session["reason"]
    assert not any("QUIC" in r.getMessage() for r in caplog.records)  # never dialled
    write_node_pki(state / "pki", pki_ca.ca, "pi-old")  # the re-join
    await agent.connected()


async def test_a_clock_stepped_by_ntp_after_the_welcome_does_not_outlive_its_skew(
    plain_hub: HubRunner, pki_ca: TestPKI, agents, tmp_path: pathlib.Path, caplog
) -> None:
    """Issue 15 item 5: a board that booted 30 minutes behind (no RTC) connects; the
    welcome measures the skew; then NTP steps the clock right. A certificate with 20
    minutes left must not be judged expired at the next dial by the old skew applied to
    the corrected clock: the step drops the skew, the agent dials, the next welcome
    measures again."""
    caplog.set_level(logging.INFO, logger="edgeagent")
    state = tmp_path / "state"
    directory = state / "pki"
    directory.mkdir(parents=True, mode=0o700)
    key = pki.generate_private_key()
    cert = pki.sign_node_csr(
        pki_ca.ca, pki.build_node_csr("pi-ntp", key), lifetime=1200, now=time.time()
    )
    (directory / "ca.crt").write_bytes(pki.dump_certificate_pem(pki_ca.ca.certificate))
    (directory / "node.crt").write_bytes(pki.dump_certificate_pem(cert))
    (directory / "node.key").write_bytes(pki.dump_private_key_pem(key))
    _, not_after = certificate_validity((directory / "node.crt").read_bytes())
    offset = [1800.0]  # seconds this board's clock is behind
    link = HubLink(wall_clock=lambda: time.time() - offset[0])
    agent = agents(settings_for(state, "pi-ntp", plain_hub.url), link)
    await agent.connected()
    assert link.skew is not None and -1810 < link.skew < -1790

    offset[0] = 0.0  # NTP steps the clock 30 minutes forward
    assert time.time() + 1800 > not_after > time.time()  # old skew + new clock: "expired"
    first = link.connection_id()
    plain_hub.hub.registry.get("pi-ntp").close_soon(CloseCode.GOING_AWAY, "test: replica leaving")
    await eventually(lambda: link.connection_id() not in (None, first), "a new session", 30)

    messages = [r.getMessage() for r in caplog.records]
    assert not [m for m in messages if "cannot dial" in m or "expired" in m], messages
    assert any("stepped forward by 30 minutes" in m for m in messages), messages
    assert link.skew is not None and abs(link.skew) < 60  # measured again at the welcome
    assert agent.store.get_state("hub.session")["state"] == "connected"


async def test_a_rejection_says_whose_clock_expired_the_certificate(
    plain_hub: HubRunner, pki_ca: TestPKI, agents, tmp_path: pathlib.Path, caplog
) -> None:
    """Issue 15 item 5, the advice: a board three days behind connected (the welcome
    measured the skew), then its files hold a certificate that expired half a day ago by
    the hub's clock but not by its own; the hub rejects it at the next dial and the ERROR
    says it expired by the hub's clock while this one is behind, NTP, and the re-join."""
    caplog.set_level(logging.INFO, logger="edgeagent")
    state = tmp_path / "state"
    write_node_pki(state / "pki", pki_ca.ca, "pi-b")
    link = HubLink(wall_clock=lambda: time.time() - 3 * DAY)
    agent = agents(settings_for(state, "pi-b", plain_hub.url), link)
    await agent.connected()
    assert link.skew is not None and link.skew < -DAY
    write_expired_pki(state / "pki", pki_ca.ca, "pi-b")
    first = link.connection_id()
    plain_hub.hub.registry.get("pi-b").close_soon(CloseCode.GOING_AWAY, "test: replica leaving")

    def rejections() -> list[str]:
        return [r.getMessage() for r in caplog.records if "rejected this node's" in r.getMessage()]

    await eventually(rejections, "the hub's rejection")
    text = rejections()[0]
    assert "by the hub's clock" in text and "3.0 days behind" in text, text
    assert "timedatectl set-ntp true" in text and "edgeagent join --renew" in text
    assert link.connection_id() != first
