"""The agent's side of the join endpoint, in the standard library only (``http.client``
and ``ssl``): joining is a one-shot command and must not need an event loop.

Discovery as kubeadm does it:

1. :func:`fetch_ca` reads ``/v1/ca`` over TLS *without* verifying anything (we do not know
   the CA yet) and keeps the serving certificate it was shown and the answer's ``Date``
   (the hub's clock), for diagnostics only;
2. :func:`pin_ca` accepts the bundle only if one of its certificates' public-key hash
   equals the ``--ca-cert-hash`` pin, and trusts only that certificate from then on;
3. :func:`post_join` sends the CSR and token over TLS that trusts only the pinned CA and
   checks the server name we dialled; a serving certificate that lacks that name fails
   with an error naming it and listing the names it does cover, and one that is not valid
   yet (or no longer) by this node's clock fails naming this clock against the
   certificate's notBefore (notAfter) and the hub's ``Date``, and NTP: a board without a
   real-time clock that boots hours behind, not an interception.
"""

from __future__ import annotations

import email.utils
import http.client
import ipaddress
import json
import ssl
import time
from dataclasses import dataclass
from typing import Any

from edgeagent.certs.clock import NTP_HINT, iso, span
from edgeagent.certs.errors import JoinFailed

__all__ = ["DEFAULT_JOIN_PORT", "HubAddress", "fetch_ca", "pin_ca", "post_join"]

DEFAULT_JOIN_PORT = 7444
"""The hub's join port when ``--hub`` names none."""

_MAX_ANSWER = 1024 * 1024
_HOSTNAME_MISMATCH = 62  # X509_V_ERR_HOSTNAME_MISMATCH
_IP_MISMATCH = 64  # X509_V_ERR_IP_ADDRESS_MISMATCH
_NOT_YET_VALID = 9  # X509_V_ERR_CERT_NOT_YET_VALID
_HAS_EXPIRED = 10  # X509_V_ERR_CERT_HAS_EXPIRED

_HINTS = {
    "TokenMalformed": "Copy the whole token printed by 'cloudhub token create'",
    "BadRequest": "This agent and the hub may be of incompatible versions",
    "CSRRefused": "This agent and the hub may be of incompatible versions",
}


@dataclass(frozen=True, slots=True)
class HubAddress:
    """Where the join endpoint is."""

    host: str
    """DNS name or IP address (no brackets): also the name the hub's certificate must
    cover."""
    port: int = DEFAULT_JOIN_PORT

    @classmethod
    def parse(cls, text: str) -> HubAddress:
        """Parse ``host``, ``host:port``, ``[v6]:port``, ``v6`` or ``https://host:port/``.

        Raises:
            ValueError: not an address.
        """
        rest = text.strip()
        for scheme in ("https://", "http://"):
            if rest.startswith(scheme):
                rest = rest[len(scheme) :]
        rest = rest.rstrip("/")
        port = DEFAULT_JOIN_PORT
        if rest.startswith("["):
            host, bracket, tail = rest[1:].partition("]")
            if not bracket:
                raise ValueError(f"{text!r} is not host[:port]: no closing ']'")
            if tail:
                if not tail.startswith(":"):
                    raise ValueError(f"{text!r} is not host[:port]")
                port = _port(tail[1:], text)
        elif rest.count(":") == 1:
            host, _, p = rest.partition(":")
            port = _port(p, text)
        else:
            host = rest  # a name, an IPv4 address, or an IPv6 address without a port
        if not host or "/" in host or " " in host:
            raise ValueError(f"{text!r} is not host[:port]")
        return cls(host=host, port=port)

    @property
    def is_ip(self) -> bool:
        try:
            ipaddress.ip_address(self.host)
        except ValueError:
            return False
        return True

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def _port(text: str, whole: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise ValueError(f"{whole!r}: {text!r} is not a port number") from None
    if not 0 < port < 65536:
        raise ValueError(f"{whole!r}: port {port} is out of range")
    return port


def _unreachable(hub: HubAddress, exc: BaseException) -> JoinFailed:
    return JoinFailed(
        "HubUnreachable",
        f"cannot reach the hub's join endpoint at {hub}: {exc or type(exc).__name__}",
        "Check the address and port (the join port is 7444 unless the operator changed "
        "it), DNS, and that the firewall lets TCP through",
        retryable=True,
    )


def fetch_ca(hub: HubAddress, *, timeout: float) -> tuple[bytes, bytes | None, float | None]:
    """Fetch the hub's CA bundle without trusting it (step 1).

    Returns:
        ``(ca_pem, serving_cert_der, hub_time)``: the bundle, the certificate the server
        showed, and the hub's clock from the answer's ``Date`` header (seconds since the
        epoch, ``None`` without one).

    Raises:
        JoinFailed: unreachable (``HubUnreachable``, retryable) or a bad answer.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # nothing is trusted until the pin is checked
    conn = http.client.HTTPSConnection(hub.host, hub.port, context=context, timeout=timeout)
    try:
        conn.request("GET", "/v1/ca", headers={"Accept": "application/x-pem-file"})
        served = conn.sock.getpeercert(binary_form=True) if conn.sock else None
        resp = conn.getresponse()
        body = resp.read(_MAX_ANSWER + 1)
    except (OSError, http.client.HTTPException) as exc:
        raise _unreachable(hub, exc) from exc
    finally:
        conn.close()
    if resp.status != 200 or len(body) > _MAX_ANSWER or b"BEGIN CERTIFICATE" not in body:
        raise JoinFailed(
            "BadAnswer",
            f"{hub} did not answer /v1/ca with a CA bundle (HTTP {resp.status})",
            "Check that the address is the hub's join endpoint",
        )
    return body, served, _date(resp.getheader("Date"))


def _date(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return email.utils.parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


def _validity(der: bytes | None) -> tuple[float, float] | None:
    if not der:
        return None
    from cryptography import x509

    try:
        cert = x509.load_der_x509_certificate(der)
    except ValueError:
        return None
    return cert.not_valid_before_utc.timestamp(), cert.not_valid_after_utc.timestamp()


def _clock_failure(
    hub: HubAddress, code: int, served_der: bytes | None, hub_time: float | None
) -> JoinFailed:
    """The error for a serving certificate outside its validity by this node's clock."""
    local = time.time()
    validity = _validity(served_der)
    hub_says = (
        f"; the hub's clock reads {iso(hub_time)} (its Date header)" if hub_time is not None else ""
    )
    if code == _NOT_YET_VALID:
        if validity is not None and local < validity[0]:
            said = (
                f"this node's clock reads {iso(local)}, before the hub's serving certificate's "
                f"notBefore {iso(validity[0])}"
            )
        else:
            said = (
                "the hub's serving certificate is not valid yet by this node's clock "
                f"({iso(local)})"
            )
        if hub_time is not None and hub_time > local:
            said += f"{hub_says}: this node's clock is {span(hub_time - local)} behind"
        else:
            said += hub_says
        return JoinFailed(
            "ClockBehind",
            said,
            f"This node's clock is wrong, not the hub: {NTP_HINT}; then run the join again",
        )
    not_after = f" at {iso(validity[1])}" if validity is not None else ""
    if hub_time is not None and validity is not None and hub_time < validity[1]:
        return JoinFailed(
            "ClockAhead",
            f"this node's clock reads {iso(local)}, after the hub's serving certificate "
            f"expired{not_after}{hub_says}, before that: this node's clock is ahead",
            f"{NTP_HINT[0].upper()}{NTP_HINT[1:]}; then run the join again",
        )
    return JoinFailed(
        "ServingCertificateExpired",
        f"the hub's serving certificate at {hub} expired{not_after} (this node's clock reads "
        f"{iso(local)}{hub_says})",
        "Ask the hub's operator to renew its serving certificate; if this node's clock is "
        f"wrong instead, {NTP_HINT}",
    )


def pin_ca(hub: HubAddress, ca_pem: bytes, expected: str) -> bytes:
    """Accept the bundle only if it holds the pinned CA (step 2).

    Args:
        ca_pem: the bundle from :func:`fetch_ca`.
        expected: ``sha256:<hex>`` from ``--ca-cert-hash``.

    Returns:
        The PEM of the one certificate that matched: the only one trusted from now on.

    Raises:
        JoinFailed: ``CAHashMismatch`` (no certificate matches) or ``BadAnswer``.
    """
    from protocol import pki

    try:
        certs = pki.load_certificates_pem(ca_pem)
    except pki.PKIError as exc:
        raise JoinFailed("BadAnswer", f"{hub} sent a CA bundle that does not parse: {exc}") from exc
    want = expected.strip().lower()
    for cert in certs:
        if pki.ca_cert_hash(cert) == want:
            return pki.dump_certificate_pem(cert)
    seen = ", ".join(pki.ca_cert_hash(c) for c in certs)
    raise JoinFailed(
        "CAHashMismatch",
        f"the hub at {hub} presented a CA whose public key hash is {seen}, not the pinned "
        f"{expected}",
        "You may be talking to another hub, or to something pretending to be it: check the "
        "--hub address and copy --ca-cert-hash again from 'cloudhub token create'",
    )


def _names(der: bytes | None) -> list[str]:
    if not der:
        return []
    from cryptography import x509

    try:
        cert = x509.load_der_x509_certificate(der)
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (ValueError, x509.ExtensionNotFound):
        return []
    return [*sans.get_values_for_type(x509.DNSName)] + [
        str(ip) for ip in sans.get_values_for_type(x509.IPAddress)
    ]


def post_join(
    hub: HubAddress,
    ca_pem: bytes,
    request: dict[str, Any],
    *,
    timeout: float,
    served_der: bytes | None = None,
    hub_time: float | None = None,
) -> dict[str, Any]:
    """Send the join request over TLS trusting only the pinned CA (step 3).

    Args:
        ca_pem: the pinned CA from :func:`pin_ca`.
        request: ``{"token", "csr", "labels"}``.
        served_der: the serving certificate :func:`fetch_ca` saw (names listed in errors).
        hub_time: the hub's clock :func:`fetch_ca` saw (named in clock errors).

    Returns:
        The hub's ``JoinResponse`` object.

    Raises:
        JoinFailed: ``ServerNameMismatch`` (the certificate lacks the name we dialled),
            ``ClockBehind`` / ``ClockAhead`` / ``ServingCertificateExpired`` (the serving
            certificate is outside its validity by this node's clock),
            ``CertificateRejected``, ``HubUnreachable`` (retryable), ``BadAnswer``, or the
            hub's refusal with its reason (``TokenExpired``, …).
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.verify_flags |= ssl.VERIFY_X509_STRICT
    context.load_verify_locations(cadata=ca_pem.decode("ascii"))
    context.check_hostname = True
    body = json.dumps(request).encode()
    conn = http.client.HTTPSConnection(hub.host, hub.port, context=context, timeout=timeout)
    try:
        conn.request("POST", "/v1/join", body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read(_MAX_ANSWER + 1)
    except ssl.SSLCertVerificationError as exc:
        if exc.verify_code in (_HOSTNAME_MISMATCH, _IP_MISMATCH):
            covered = ", ".join(_names(served_der)) or "no names"
            raise JoinFailed(
                "ServerNameMismatch",
                f"the hub's serving certificate does not cover {hub.host!r} (it covers: {covered})",
                f"Ask the operator to add {hub.host} to the hub's pki.server_names and "
                "restart it, or join with --hub set to one of the covered names",
            ) from exc
        if exc.verify_code in (_NOT_YET_VALID, _HAS_EXPIRED):
            raise _clock_failure(hub, exc.verify_code, served_der, hub_time) from exc
        raise JoinFailed(
            "CertificateRejected",
            f"the hub's serving certificate is not from the pinned CA: {exc.verify_message}",
            "Something between this node and the hub may be intercepting TLS; check the address",
        ) from exc
    except (OSError, http.client.HTTPException) as exc:
        raise _unreachable(hub, exc) from exc
    finally:
        conn.close()
    try:
        answer = json.loads(data) if len(data) <= _MAX_ANSWER else None
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        raise JoinFailed(
            "BadAnswer", f"{hub} answered the join with HTTP {resp.status} and no JSON"
        )
    if resp.status == 200 and answer.get("kind") == "JoinResponse":
        return answer
    reason = str(answer.get("reason") or f"HTTP{resp.status}")
    message = str(answer.get("message") or f"HTTP {resp.status}")
    hint = _HINTS.get(reason, "")
    retryable = resp.status in (429, 502, 503, 504)
    if retryable and not hint:
        hint = "The hub is busy or cannot reach its API; the join is retried"
    raise JoinFailed(reason, f"the hub refused the join: {message}", hint, retryable=retryable)
