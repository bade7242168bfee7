"""The hub connection's small parts with no network: settings, node info, credentials,
the store's outbox hook and drop."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import time

import pytest

from edgeagent.credentials import FileCredentials
from edgeagent.errors import ConfigError, CredentialsError
from edgeagent.nodeinfo import go_arch, node_info, runtime_version
from edgeagent.settings import AgentSettings, HubSettings, NodeSettings, load_settings
from edgeagent.store import Store
from protocol import pki
from tests.edgeagent.conftest import Ref
from tests.edgeagent.hublink.fleet import ROOT, write_node_pki


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("quic://hub.example:7443", ("hub.example", 7443, 7443)),
        ("wss://hub.example:8443/", ("hub.example", 8443, 8443)),
        ("hub.example", ("hub.example", 7443, 7443)),
        ("10.0.0.5:9000", ("10.0.0.5", 9000, 9000)),
        ("quic://[fd00::1]:7443", ("fd00::1", 7443, 7443)),
    ],
)
def test_hub_address(url: str, expected: tuple):
    assert HubSettings(url=url).address() == expected


def test_hub_ports_override_the_url():
    assert HubSettings(url="quic://h:1", quic_port=2, websocket_port=3).address() == ("h", 2, 3)


@pytest.mark.parametrize("url", ["http://hub:80", "quic://:7443", "quic://hub:notaport", "hub:0"])
def test_bad_hub_url_is_refused_naming_it(url: str):
    with pytest.raises(ConfigError) as info:
        HubSettings(url=url)
    assert info.value.key == "hub.url" and url in str(info.value)


def test_bad_hub_settings_are_refused(tmp_path: pathlib.Path):
    with pytest.raises(ConfigError) as info:
        load_settings(None, env={}, overrides={"hub.transports": "quic,tcp"})
    assert info.value.key == "hub.transports"
    with pytest.raises(ConfigError) as info:
        load_settings(None, env={}, overrides={"hub.backoff_cap": "0"})
    assert info.value.key == "hub.backoff_cap"
    for size in ("1199", "16001"):
        with pytest.raises(ConfigError) as info:
            load_settings(None, env={}, overrides={"hub.quic_max_datagram_size": size})
        assert info.value.key == "hub.quic_max_datagram_size"
    with pytest.raises(ConfigError) as info:
        load_settings(None, env={}, overrides={"hub.quic_loopback_datagram_size": "100"})
    assert info.value.key == "hub.quic_loopback_datagram_size"
    with pytest.raises(ConfigError) as info:
        load_settings(None, env={"EDGEAGENT_NODE__MAX_PODS": "0"})
    assert info.value.key == "node.max_pods"


def test_hub_and_node_settings_from_file_env_and_flags(tmp_path: pathlib.Path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text(
        "hub:\n  url: quic://hub:7443\n  transports: [websocket]\n"
        "node:\n  labels: {site: a}\n  extended_resources: {edgefleet.io/gpio: '4'}\n"
    )
    s = load_settings(
        cfg,
        env={"EDGEAGENT_HUB__SERVER_NAME": "hub.example"},
        overrides={"node.labels": "site=b,zone=z"},
    )
    assert s.hub.transports == ("websocket",)
    assert s.hub.server_name == "hub.example"
    assert s.node.labels == {"site": "b", "zone": "z"}
    assert s.node.extended_resources == {"edgefleet.io/gpio": "4"}


def test_run_help_teaches_the_hub_settings():
    out = subprocess.run(
        [sys.executable, "-m", "edgeagent", "run", "--help"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=True,
    ).stdout
    for text in (
        "--hub URL",
        "hub.url",
        "hub.transports",
        "hub.ca_file",
        "hub.backoff_cap [s]",
        "node.labels",
        "node.reserved_cpu [millicores]",
        "EDGEAGENT_HUB__URL",
        "edgeagent join",
    ):
        assert text in out, text


def test_go_arch_names():
    assert go_arch("x86_64") == "amd64"
    assert go_arch("aarch64") == "arm64"
    assert go_arch("armv7l") == "arm"
    assert go_arch("Mystery") == "mystery"


def test_node_info_shape(tmp_path: pathlib.Path):
    settings = AgentSettings(
        node_name="pi-1",
        state_dir=tmp_path,
        node=NodeSettings(
            labels={"site": "a"},
            extended_resources={"edgefleet.io/gpio": "4"},
            max_pods=16,
            reserved_cpu=250,
            reserved_memory=64 * 1024 * 1024,
        ),
    )
    info = node_info(settings, "10.1.2.3")
    cap, alloc = info["capacity"], info["allocatable"]
    cpus = int(cap["cpu"])
    assert alloc["cpu"] == f"{cpus * 1000 - 250}m"
    assert int(cap["memory"][:-2]) - int(alloc["memory"][:-2]) == 64 * 1024
    assert cap["pods"] == alloc["pods"] == "16"
    assert int(cap["ephemeral-storage"]) > 0
    assert cap["edgefleet.io/gpio"] == alloc["edgefleet.io/gpio"] == "4"
    assert info["labels"] == {"site": "a"}
    assert info["addresses"] == [
        {"type": "InternalIP", "address": "10.1.2.3"},
        {"type": "Hostname", "address": "pi-1"},
    ]
    assert info["nodeInfo"]["operatingSystem"] == "linux"
    assert info["nodeInfo"]["containerRuntimeVersion"] == runtime_version(settings)
    assert runtime_version(settings).startswith("docker://")  # the default runtime


def _settings(tmp_path: pathlib.Path) -> AgentSettings:
    return AgentSettings(node_name="edge-1", state_dir=tmp_path / "state")


def test_credentials_not_joined_names_the_file_and_the_command(tmp_path: pathlib.Path):
    with pytest.raises(CredentialsError) as info:
        FileCredentials(_settings(tmp_path))()
    assert "ca.crt" in str(info.value) and "edgeagent join" in str(info.value)


def test_credentials_reload_when_the_files_change(tmp_path: pathlib.Path, pki_ca):
    settings = _settings(tmp_path)
    write_node_pki(settings.state_dir / "pki", pki_ca.ca, "edge-1")
    creds = FileCredentials(settings)
    first = creds()
    assert creds() is first  # not re-read
    cert = settings.state_dir / "pki" / "node.crt"
    before = cert.stat().st_mtime_ns
    write_node_pki(settings.state_dir / "pki", pki_ca.ca, "edge-1")  # a renewal
    # as written a second later: within one tick of the file system's clock the stamp
    # (inode, mtime, size) of a file rewritten in place may not change
    os.utime(cert, ns=(before + 10**9, before + 10**9))
    second = creds()
    assert second is not first and second.cert_pem != first.cert_pem
    assert creds.not_after > time.time()


def test_credentials_key_of_another_certificate_is_refused(tmp_path: pathlib.Path, pki_ca):
    settings = _settings(tmp_path)
    directory = settings.state_dir / "pki"
    write_node_pki(directory, pki_ca.ca, "edge-1")
    (directory / "node.key").write_bytes(pki.dump_private_key_pem(pki.generate_private_key()))
    with pytest.raises(CredentialsError) as info:
        FileCredentials(settings)()
    assert "does not belong" in str(info.value)


def test_credentials_garbage_is_refused(tmp_path: pathlib.Path, pki_ca):
    settings = _settings(tmp_path)
    directory = settings.state_dir / "pki"
    write_node_pki(directory, pki_ca.ca, "edge-1")
    (directory / "node.crt").write_text("not a certificate\n")
    with pytest.raises(CredentialsError) as info:
        FileCredentials(settings)()
    assert "unusable TLS material" in str(info.value)


def test_expired_certificate_names_the_renewal(tmp_path: pathlib.Path, pki_ca):
    settings = _settings(tmp_path)
    write_node_pki(settings.state_dir / "pki", pki_ca.ca, "edge-1")
    later = FileCredentials(settings, wall_clock=lambda: time.time() + 3 * 86400)
    with pytest.raises(CredentialsError) as info:
        later()
    assert "expired" in str(info.value) and "join --renew" in str(info.value)


def test_not_after_read_from_der_matches_cryptography(pki_ca):
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes

    from edgeagent.credentials import certificate_not_after

    for creds in (pki_ca.client, pki_ca.expired, pki_ca.server):
        pem = pki.dump_certificate_pem(creds.chain)
        assert certificate_not_after(pem) == creds.chain[0].not_valid_after_utc.timestamp()
    # after 2049 RFC 5280 uses GeneralizedTime
    key = pki.generate_private_key()
    name = x509.Name([x509.NameAttribute(x509.oid.NameOID.COMMON_NAME, "far")])
    far = datetime.datetime(2061, 3, 4, 5, 6, 7, tzinfo=datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(12345)
        .not_valid_before(datetime.datetime(2020, 1, 1, tzinfo=datetime.timezone.utc))
        .not_valid_after(far)
        .sign(key, hashes.SHA256())
    )
    assert certificate_not_after(pki.dump_certificate_pem(cert)) == far.timestamp()
    for bad in (b"", b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"):
        with pytest.raises(ValueError):
            certificate_not_after(bad)


def test_websocket_credentials_do_not_import_cryptography(tmp_path: pathlib.Path, pki_ca):
    write_node_pki(tmp_path / "state" / "pki", pki_ca.ca, "edge-1")
    state = str(tmp_path / "state")
    code = (
        "import sys, pathlib\n"
        "from edgeagent.settings import AgentSettings\n"
        "from edgeagent.credentials import FileCredentials\n"
        "import protocol.transport.websocket\n"
        "from protocol.transport.tls import client_ssl_context\n"
        f"s = AgentSettings(node_name='edge-1', state_dir=pathlib.Path({state!r}))\n"
        "client_ssl_context(FileCredentials(s)())\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('cryptography', 'aioquic', 'OpenSSL')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=True,
    ).stdout
    assert out.strip() == "[]", out


def test_outbox_hook_drop_and_mark_sent_of_a_replaced_message(tmp_path: pathlib.Path):
    store = Store.open(tmp_path / "store.db")
    calls = []
    remove = store.add_outbox_hook(lambda: calls.append(1))
    pod = Ref("Pod", "default", "web", "u1")
    store.record_pod_status(pod, {"phase": "Pending"}, 1.0)
    [pending] = store.outbox_unsent()
    store.record_pod_status(pod, {"phase": "Running"}, 2.0)  # replaces the unsent one
    assert len(calls) == 2
    seq = store.next_seq()
    assert store.outbox_mark_sent(pending.id, seq, missing_ok=True) is False
    assert store.next_seq() > seq  # the seq stays used
    [latest] = store.outbox_unsent()
    assert latest.body["status"] == {"phase": "Running"}
    assert store.outbox_drop(latest.id) is True
    assert store.outbox_drop(latest.id) is False
    assert store.outbox_depth() == 0
    remove()
    store.outbox_append("event", {"x": 1})
    assert len(calls) == 2
    store.close()


async def test_wait_event_never_loses_a_cancellation():
    """A loop woken in the same iteration as it is cancelled still ends (with
    ``asyncio.wait_for`` on Python 3.11 it ran on: the agent hung at SIGTERM)."""
    import asyncio

    from edgeagent.tasks import TaskSet, wait_event

    event = asyncio.Event()

    async def loop() -> None:
        while True:
            event.clear()
            await wait_event(event, 10)
            await asyncio.sleep(0)

    for _ in range(50):
        tasks = TaskSet("t")
        tasks.spawn(loop(), "loop")
        await asyncio.sleep(0.001)
        event.set()
        await asyncio.wait_for(tasks.close(), 2)  # cancels and waits: must not hang
    assert await wait_event(event, 0) is True
    event.clear()
    assert await wait_event(event, 0.01) is False
