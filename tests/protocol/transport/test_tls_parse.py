"""``parse_certificate``: the WebSocket server parses each peer certificate once, with
``cryptography`` imported only there (it was referenced but never imported: every
WebSocket session presenting a client certificate to a hub failed with NameError)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from cryptography.hazmat.primitives.serialization import Encoding

from protocol.transport.errors import TransportError
from protocol.transport.tls import parse_certificate
from tests.testpki import make_test_pki


def test_parses_a_der_certificate() -> None:
    cert = make_test_pki().client.chain[0]
    parsed = parse_certificate(cert.public_bytes(Encoding.DER))
    assert parsed == cert


def test_garbage_is_a_transport_error() -> None:
    with pytest.raises(TransportError, match="does not parse"):
        parse_certificate(b"not a certificate")


def test_works_in_a_fresh_interpreter() -> None:
    """Nothing else imported first (the agent imports no cryptography on WebSocket)."""
    code = (
        "from protocol.transport.tls import parse_certificate\n"
        "try:\n    parse_certificate(b'x')\nexcept Exception as e:\n    print(type(e).__name__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "TransportError", out.stderr
