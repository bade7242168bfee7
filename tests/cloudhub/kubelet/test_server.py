"""The kubelet API's HTTPS server on its own (real TLS on loopback): a caller without a
certificate from the client CA fails the handshake, one whose name is not allowed gets
403 (counted, logged), unknown paths 404, and a reissued serving certificate is presented
to new connections without a restart."""

from __future__ import annotations

import asyncio
import ssl
import time
import tracemalloc

from cloudhub.kubelet.server import KubeletServer
from protocol import pki
from protocol.transport import TLSCredentials


class _NoStreams:
    def endpoint(self, node: str):  # pragma: no cover - no request gets this far here
        return None


def _server_creds(ca: pki.CertificateAuthority) -> TLSCredentials:
    cert, key = pki.issue_server_certificate(
        ca, dns_names=["localhost"], ip_addresses=["127.0.0.1"], lifetime=3600, now=time.time()
    )
    return TLSCredentials(cas=(ca.certificate,), chain=(cert,), private_key=key)


def _client_context(ca: pki.CertificateAuthority, creds: TLSCredentials | None, tmp_path):
    context = ssl.create_default_context(cadata=pki.dump_certificate_pem(ca.certificate).decode())
    if creds is not None:
        pem = tmp_path / "client.pem"
        pem.write_bytes(
            pki.dump_certificate_pem(creds.chain) + pki.dump_private_key_pem(creds.private_key)
        )
        context.load_cert_chain(str(pem))
    return context


async def _get(port: int, context: ssl.SSLContext, path: str) -> tuple[bytes, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
    data = await reader.read()
    cert = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    writer.close()
    return data, cert


async def test_callers_are_checked_and_the_certificate_follows(pki_ca, tmp_path) -> None:
    served = [_server_creds(pki_ca.ca)]
    client_ca = pki.dump_certificate_pem(pki_ca.ca.certificate)
    server = KubeletServer(
        _NoStreams(),  # type: ignore[arg-type]
        lambda ns, name: None,
        lambda: served[-1],
        client_ca,
        host="127.0.0.1",
        port=0,
        allowed_names=("system:node:kube-apiserver",),
    )
    port = await server.start()
    try:
        allowed = pki_ca.node("kube-apiserver")
        good = _client_context(pki_ca.ca, allowed, tmp_path)
        data, cert = await _get(port, good, "/healthz")
        assert data.startswith(b"HTTP/1.1 200") and cert == served[0].chain[0].public_bytes(
            pki.serialization.Encoding.DER
        )
        data, _ = await _get(port, good, "/nothing/here")
        assert data.startswith(b"HTTP/1.1 404")
        # a certificate from the CA, but another name: 403, counted
        other = _client_context(pki_ca.ca, pki_ca.node("edge-1"), tmp_path)
        data, _ = await _get(port, other, "/containerLogs/default/p/c")
        assert data.startswith(b"HTTP/1.1 403") and server.refused == 1
        # no certificate at all, or one from another CA: the handshake fails
        for context in (
            _client_context(pki_ca.ca, None, tmp_path),
            _client_context(pki_ca.ca, pki_ca.other_ca, tmp_path),
        ):
            try:  # TLS 1.3: the client learns of the refusal on its first read
                data, _ = await _get(port, context, "/healthz")
            except (ssl.SSLError, ConnectionError):
                data = b""
            assert data == b"", data
        # a reissued serving certificate: new connections get it
        served.append(_server_creds(pki_ca.ca))
        assert server.refresh_credentials() is True
        assert server.refresh_credentials() is False
        _, cert = await _get(port, good, "/healthz")
        assert cert == served[1].chain[0].public_bytes(pki.serialization.Encoding.DER)
    finally:
        await server.aclose()


async def test_idle_connections_cost_little_and_are_closed(pki_ca, monkeypatch) -> None:
    """Regression (break1): the kubelet API used asyncio's TLS layer, which allocates a
    256 KiB read buffer per accepted connection: 2,000 TCP connections that never sent a
    ClientHello held 600 MiB of the hub. Now 50 of them cost under 64 KiB each (Python
    allocations, traced) and each is closed after the handshake timeout."""
    import psutil

    from cloudhub.kubelet import server as kubelet_server
    from tests.edgeagent.hublink.fleet import eventually

    monkeypatch.setattr(kubelet_server, "TLS_HANDSHAKE_S", 1.0)
    server = KubeletServer(
        _NoStreams(),  # type: ignore[arg-type]
        lambda ns, name: None,
        lambda: _server_creds(pki_ca.ca),
        pki.dump_certificate_pem(pki_ca.ca.certificate),
        host="127.0.0.1",
        port=0,
    )
    port = await server.start()
    me = psutil.Process()

    def accepted() -> int:
        return sum(
            1
            for c in me.net_connections("tcp4")
            if c.laddr and c.laddr.port == port and c.status == psutil.CONN_ESTABLISHED
        )

    tracemalloc.start()
    writers = []
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(50):
            writers.append(await asyncio.open_connection("127.0.0.1", port))
        await eventually(lambda: accepted() == 50, "the server accepted the 50 connections")
        await asyncio.sleep(0)  # one loop turn: each accepted connection has its protocol
        grown = tracemalloc.get_traced_memory()[0] - before
        assert grown < 50 * 64 * 1024, f"{grown / 50 / 1024:.0f} KiB per idle connection"
        for reader, _ in writers:  # nothing sent: the server ends each after the timeout
            assert await asyncio.wait_for(reader.read(), 10.0) == b""
    finally:
        tracemalloc.stop()
        for _, writer in writers:
            writer.close()
        await server.aclose()
