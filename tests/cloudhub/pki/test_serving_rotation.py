"""Every listener picks up new serving credentials without a restart (issue 15 item 4).

The QUIC and WebSocket listeners used to keep the credentials built at start: once the
serving certificate expired (365 days by default) every agent was refused. Here with a
short lifetime, real handshakes on both transports after the first certificate expired,
and the join port; then operator-supplied ``tls.*`` files replaced on disk, as
cert-manager does (an atomic ``..data`` symlink swap), and a half-written rotation.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import ssl
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from cryptography import x509

from cloudhub.hub import Hub
from cloudhub.pki.extension import pki_extension
from cloudhub.settings import load_hub_settings
from protocol import pki
from protocol.messages import PROTOCOL_VERSION, Hello
from protocol.transport import (
    TLSCredentials,
    client_ssl_context,
    connect_quic,
    connect_websocket,
)
from tests.cloudhub.hub.conftest import TEST_SETTINGS
from tests.cloudhub.pki.conftest import NAMESPACE, Cluster
from tests.sim import node_credentials
from tests.sim.agent import default_node_info
from tests.testpki import TestPKI, make_test_pki
from tests.waiting import eventually

DEADLINE = 30.0
CONNECT = {"quic": connect_quic, "websocket": connect_websocket}


@pytest.fixture
async def hubs() -> AsyncIterator[list[Hub]]:
    started: list[Hub] = []
    yield started
    for hub in started:
        await hub.aclose()


async def start(hubs: list[Hub], **overrides: Any) -> tuple[Hub, Any]:
    """A hub with its own CA (the PKI extension, returned) or, with ``tls.*``, without."""
    settings = load_hub_settings(
        overrides={**TEST_SETTINGS, "listen.credentials_check_interval": 0.2, **overrides}
    )
    ext = pki_extension(settings.pki) if not settings.tls.ca_file else None
    hub = Hub(settings, extensions=[ext] if ext is not None else [])
    hubs.append(hub)
    await hub.start()
    return hub, ext


async def dial(hub: Hub, transport: str, credentials: TLSCredentials, node: str) -> None:
    """A full session handshake (TLS, hello, welcome) that the hub accepts; then closed."""
    port = hub.quic_port if transport == "quic" else hub.websocket_port
    hello = Hello(
        min_version=PROTOCOL_VERSION,
        max_version=PROTOCOL_VERSION,
        node_name=node,
        agent_version="test",
        node_info=default_node_info(node),
    )
    link = await CONNECT[transport](
        "127.0.0.1",
        port,
        credentials=credentials,
        hello=hello,
        server_name="localhost",
        timeout=10.0,
    )
    await link.close()


async def served(port: int, context: ssl.SSLContext) -> x509.Certificate:
    """The certificate a TLS listener presents now (a fresh handshake)."""
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=context, server_hostname="localhost"
    )
    try:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        return x509.load_der_x509_certificate(der)
    finally:
        writer.close()
        await asyncio.gather(writer.wait_closed(), return_exceptions=True)
        del reader


async def test_the_hub_ca_s_reissued_certificate_reaches_every_listener(
    hubs: list[Hub], cluster: Cluster, tmp_path: pathlib.Path
) -> None:
    from tests.cloudhub.pki.test_hub_extension import EdgeNode

    lifetime = 6.0  # reissued once 4 s have passed
    hub, ext = await start(
        hubs,
        **{
            "kube.kubeconfig": cluster.kubeconfig,
            "pki.namespace": NAMESPACE,
            "pki.join_host": "127.0.0.1",
            "pki.join_port": 0,
            "pki.server_names": "localhost,127.0.0.1",
            "pki.server_cert_lifetime": lifetime,
        },
    )
    edge = await EdgeNode.join(tmp_path, hub, ext, "pi-rotate")
    credentials = edge.renewer.credentials()
    client = client_ssl_context(credentials)
    first = await served(hub.websocket_port or 0, client)
    join_context = ssl.create_default_context(cadata=ext.pki.ca.ca_pem.decode())
    assert (await served(ext.pki.join_server.port, join_context)).serial_number == (
        first.serial_number
    )
    for transport in ("quic", "websocket"):
        await dial(hub, transport, credentials, "pi-rotate")

    async def expired_and_replaced() -> x509.Certificate | None:
        now = time.time()
        current = await served(hub.websocket_port or 0, client)
        done = now > first.not_valid_after_utc.timestamp() + 1
        return current if done and current.serial_number != first.serial_number else None

    second = await eventually(expired_and_replaced, "the first certificate expired and replaced")
    assert second.not_valid_after_utc > first.not_valid_after_utc
    # Agents dialling now get the new certificate on both transports, and the join port.
    for transport in ("quic", "websocket"):
        await dial(hub, transport, credentials, "pi-rotate")
    joined = await served(ext.pki.join_server.port, join_context)
    assert joined.serial_number != first.serial_number
    expiry = hub.metrics.registry.get_sample_value(
        "edgefleet_hub_serving_certificate_expiry_timestamp_seconds"
    )
    assert expiry is not None and expiry > first.not_valid_after_utc.timestamp()
    assert hub.reloader is not None and hub.reloader.reloads >= 1


def write_pair(directory: pathlib.Path, test_pki: TestPKI, lifetime: float) -> x509.Certificate:
    """A server certificate from the test CA, as ``tls.crt``/``tls.key``/``ca.crt``."""
    cert, key = pki.issue_server_certificate(
        test_pki.ca,
        dns_names=["localhost"],
        ip_addresses=["127.0.0.1"],
        lifetime=lifetime,
        now=time.time(),
    )
    directory.mkdir(parents=True)
    (directory / "ca.crt").write_bytes(pki.dump_certificate_pem(test_pki.ca.certificate))
    (directory / "tls.crt").write_bytes(pki.dump_certificate_pem(cert))
    (directory / "tls.key").write_bytes(pki.dump_private_key_pem(key))
    return cert


async def test_tls_files_rotated_on_disk_are_picked_up(
    hubs: list[Hub], tmp_path: pathlib.Path
) -> None:
    test_pki = make_test_pki()
    # A Secret volume as the kubelet lays it out: files -> ..data/ -> a timestamped dir.
    mount = tmp_path / "tls"
    mount.mkdir()
    first = write_pair(mount / "..2024_01", test_pki, lifetime=5.0)
    (mount / "..data").symlink_to("..2024_01")
    for name in ("ca.crt", "tls.crt", "tls.key"):
        (mount / name).symlink_to(f"..data/{name}")
    hub, _ = await start(
        hubs,
        **{
            "kube.embedded_data_dir": str(tmp_path / "api"),
            "kube.embedded_port": 0,
            "tls.ca_file": str(mount / "ca.crt"),
            "tls.cert_file": str(mount / "tls.crt"),
            "tls.key_file": str(mount / "tls.key"),
        },
    )
    credentials = node_credentials(test_pki.ca, "pi-files")
    client = client_ssl_context(credentials)
    assert (await served(hub.websocket_port or 0, client)).serial_number == first.serial_number

    # cert-manager renews: a new directory, then ..data swapped in one rename.
    second = write_pair(mount / "..2024_02", test_pki, lifetime=3600.0)
    (mount / "..data_tmp").symlink_to("..2024_02")
    os.replace(mount / "..data_tmp", mount / "..data")

    async def rotated() -> bool:
        current = await served(hub.websocket_port or 0, client)
        return current.serial_number == second.serial_number

    await eventually(rotated, "the rotated files served")

    # Once the first certificate has expired, both transports still accept agents.
    async def first_expired() -> bool:
        return time.time() > first.not_valid_after_utc.timestamp() + 1

    await eventually(first_expired, "the first certificate's expiry")
    for transport in ("quic", "websocket"):
        await dial(hub, transport, credentials, "pi-files")

    # A rotation written in place, certificate before key: the pair does not match for a
    # moment; the hub keeps the last good pair, then takes the new one once it matches.
    data = mount / "..2024_02"
    cert, key = pki.issue_server_certificate(
        test_pki.ca, dns_names=["localhost"], lifetime=3600.0, now=time.time()
    )
    (data / "tls.crt").write_bytes(pki.dump_certificate_pem(cert))
    checks = hub.reloader.check() if hub.reloader is not None else None
    assert checks is False  # mismatched: nothing handed to the listeners
    assert (await served(hub.websocket_port or 0, client)).serial_number == second.serial_number
    await dial(hub, "quic", credentials, "pi-files")
    (data / "tls.key").write_bytes(pki.dump_private_key_pem(key))

    async def third() -> bool:
        return (await served(hub.websocket_port or 0, client)).serial_number == cert.serial_number

    await eventually(third, "the completed in-place rotation served")
    await dial(hub, "quic", credentials, "pi-files")
