"""Signing node CSRs: at join (authenticated by a bootstrap token) and at renewal
(authenticated by the node's current certificate over its live session).

Join, in order — nothing is consumed or written before every check has passed:

1. the CSR parses, its signature holds (proof that the node has the key), its key is
   ECDSA P-256 and its subject is ``CN=system:node:<name>, O=system:nodes``;
2. the token is valid (:meth:`TokenStore.validate` says which way it is not);
3. the token allows this node name, and the labels asked for are allowed;
4. no *other* key holds a valid certificate for this name (else anyone holding a token
   could take over a live node's identity); the same key may join again, so a node
   whose join answer was lost can retry;
5. a single-use token is marked used (guarded by resourceVersion);
6. the Node exists with the token's and the node's labels and the edge role label
   (created if absent, labels merged if present: a node recovering with ``--renew`` keeps
   its Node and labels);
7. the certificate is signed, recorded (:class:`CertificateRegistry`), and returned.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from cryptography import x509
from cryptography.x509.oid import NameOID

from cloudhub.errors import KubeAPIError, KubeConflict, KubeNotFound
from cloudhub.kube import NODES, KubeClient, retrying
from cloudhub.pki.ca import CAManager
from cloudhub.pki.errors import (
    CertificateRevoked,
    CSRRefused,
    NodeAlreadyJoined,
    NodeNameRefused,
)
from cloudhub.pki.labels import check_labels, reserved
from cloudhub.pki.records import CertificateRegistry, key_pin
from cloudhub.pki.settings import PKISettings
from cloudhub.pki.tokens import TokenStore, format_time
from protocol import pki
from protocol.messages import CertRenewRequest, CertRenewResponse

__all__ = ["MIN_RENEWAL_FRACTION", "JoinResult", "NodeSigner"]

log = logging.getLogger(__name__)

MIN_RENEWAL_FRACTION = 0.5
"""A renewal is refused while the current certificate has used less than this fraction
of its lifetime (agents renew at 70-90 %): a node looping on renewals cannot make the hub
sign and record a certificate per message."""

JOINED_AT_ANNOTATION = "edgefleet.io/joined-at"

EDGE_ROLE_LABEL = "node-role.kubernetes.io/edge"
"""The label that makes a Node an edge node for the hub (``cloudhub.nodes.model``'s, which
cannot be imported here: the hub's settings import this package)."""


@dataclass(frozen=True, slots=True)
class JoinResult:
    """What a successful join gives the node."""

    node_name: str
    certificate: x509.Certificate
    ca_pem: bytes
    labels: Mapping[str, str]
    """The labels the Node was given at this join (token's and node's)."""


def _csr_node_name(csr: x509.CertificateSigningRequest) -> str:
    cns = csr.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    cn = str(cns[0].value) if len(cns) == 1 else ""
    if not cn.startswith(pki.NODE_COMMON_NAME_PREFIX):
        raise CSRRefused(
            f"the CSR subject {csr.subject.rfc4514_string()!r} is not CN=system:node:<name>"
        )
    return cn[len(pki.NODE_COMMON_NAME_PREFIX) :]


class NodeSigner:
    """Signs node certificates for joins and renewals.

    Args:
        client: the hub's API client (Node labels at join).
        settings: the PKI settings (certificate lifetime).
        ca: the started CA manager.
        tokens: the bootstrap token store.
        registry: the started certificate registry.
        clock: the wall clock, seconds since the epoch (``time.time``; a test passes one it
            can move, so expiry is reached without waiting for it).
    """

    def __init__(
        self,
        client: KubeClient,
        settings: PKISettings,
        ca: CAManager,
        tokens: TokenStore,
        registry: CertificateRegistry,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self._clock = clock
        self.settings = settings
        self.ca = ca
        self.tokens = tokens
        self.registry = registry

    # -- join ----------------------------------------------------------------------------

    async def join(
        self, *, token: str, csr_pem: bytes, labels: Mapping[str, str] | None = None
    ) -> JoinResult:
        """Sign a joining node's CSR (see the module docstring for the checks).

        Args:
            token: the bootstrap token ``<id>.<secret>``.
            csr_pem: the node's PEM CSR.
            labels: labels the node asks for (``edgeagent join --labels``).

        Returns:
            The certificate, the CA bundle and the labels applied.

        Raises:
            TokenError: the token is malformed, unknown, wrong, deleted, expired or used.
            CSRRefused: the CSR is unusable.
            NodeNameRefused: the token is for another node name, or a label is reserved.
            NodeAlreadyJoined: another key holds a valid certificate for the name.
            KubeAPIError: the API failed; nothing the node could see was changed
                except, possibly, a consumed single-use token, which the same node and key
                may present again.
        """
        csr = self._load_csr(csr_pem)
        node_name = _csr_node_name(csr)
        pin = key_pin(csr.public_key())
        stored = await self.tokens.validate(token, node_name=node_name, key_pin=pin)
        if stored.node_name and stored.node_name != node_name:
            raise NodeNameRefused(
                f"bootstrap token {stored.token_id} may only join node {stored.node_name!r}, "
                f"not {node_name!r}: join with --node-name {stored.node_name}, or ask the "
                "operator for a token without a node name"
            )
        asked = dict(labels or {})
        try:
            check_labels(asked)
        except ValueError as exc:
            raise NodeNameRefused(f"invalid label: {exc}") from exc
        for key in asked:
            if reserved(key) and stored.labels.get(key) != asked[key]:
                raise NodeNameRefused(
                    f"label {key!r} may only be set by the operator: ask for a token made "
                    f"with 'cloudhub token create --labels {key}=...'"
                )
        merged = {**asked, **stored.labels}
        now = self._clock()
        if stored.node_name != node_name:
            for held in await self.registry.certificates(node_name):
                if held.valid(now) and held.key_pin != pin:
                    raise NodeAlreadyJoined(
                        f"node {node_name!r} already has a valid certificate (serial "
                        f"{held.serial:x}, until {format_time(held.not_after)}) for another "
                        f"key. If this is a replacement for that machine, revoke the old one "
                        f"first ('cloudhub node revoke {node_name}'), or use a token made with "
                        f"'--node-name {node_name}'; otherwise pick another --node-name"
                    )
        await self.tokens.consume(stored, node_name=node_name, key_pin=pin)
        await self._ensure_node(node_name, merged)
        certificate = self._sign(csr, node_name, now)
        await self.registry.record(node_name, certificate, via="join")
        log.info(
            "node %s joined with token %s (certificate %x until %s)",
            node_name,
            stored.token_id,
            certificate.serial_number,
            format_time(certificate.not_valid_after_utc.timestamp()),
        )
        return JoinResult(
            node_name=node_name, certificate=certificate, ca_pem=self.ca.ca_pem, labels=merged
        )

    def _load_csr(self, csr_pem: bytes) -> x509.CertificateSigningRequest:
        try:
            csr = pki.load_csr_pem(csr_pem)
        except pki.PKIError as exc:
            raise CSRRefused(f"the CSR does not parse: {exc}") from exc
        if not csr.is_signature_valid:
            raise CSRRefused("the CSR's signature is invalid")
        return csr

    def _sign(
        self, csr: x509.CertificateSigningRequest, node_name: str, now: float
    ) -> x509.Certificate:
        try:
            return pki.sign_node_csr(
                self.ca.authority,
                csr,
                lifetime=self.settings.node_cert_lifetime,
                now=now,
                node_name=node_name,
            )
        except pki.PKIError as exc:
            raise CSRRefused(f"the CSR cannot be signed: {exc}") from exc

    async def _ensure_node(self, node_name: str, labels: Mapping[str, str]) -> None:
        # The edge role label makes it an edge node from birth, as the hub registers them.
        labels = {**labels, EDGE_ROLE_LABEL: ""}
        annotations = {JOINED_AT_ANNOTATION: format_time(self._clock())}
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": node_name, "labels": dict(labels), "annotations": annotations},
        }
        try:
            await retrying(lambda: self.client.create(NODES, body), what="create Node")
            return
        except KubeConflict:
            pass
        patch = {"metadata": {"labels": dict(labels), "annotations": annotations}}
        try:
            await retrying(lambda: self.client.patch(NODES, node_name, patch), what="label Node")
        except KubeNotFound:
            # Deleted between our create and patch: create it once more.
            await retrying(lambda: self.client.create(NODES, body), what="create Node")

    # -- renewal -------------------------------------------------------------------------

    async def renew(
        self,
        node_name: str,
        request: CertRenewRequest,
        *,
        peer_certificate: x509.Certificate | None = None,
    ) -> CertRenewResponse:
        """Answer a ``cert_renew_request`` from a node's live session.

        The session's mutual TLS already authenticated the node: ``node_name`` is the
        name in its verified client certificate (``link.peer_node_name``), and the CSR must
        be for that same name.

        Args:
            node_name: the authenticated node.
            request: the node's request.
            peer_certificate: the certificate the session was authenticated with
                (``link.peer_certificate``); when given, a revoked one is refused, a
                renewal earlier than half its lifetime is refused, and the new certificate
                is recorded as renewing it.

        Returns:
            A response with the certificate and the CA bundle, or with ``error`` saying
            why not (never raises for a bad request or an API failure).
        """

        def refuse(why: str) -> CertRenewResponse:
            log.warning("refused certificate renewal for node %s: %s", node_name, why)
            return CertRenewResponse(request_id=request.request_id, error=why)

        now = self._clock()
        if peer_certificate is not None:
            try:
                self.registry.check(peer_certificate)
            except CertificateRevoked as exc:
                return refuse(str(exc))
            issued = peer_certificate.not_valid_before_utc.timestamp() + pki.CLOCK_SKEW
            expires = peer_certificate.not_valid_after_utc.timestamp()
            if expires > issued and (now - issued) / (expires - issued) < MIN_RENEWAL_FRACTION:
                return refuse(
                    f"too early: the current certificate is valid until {format_time(expires)};"
                    f" renew after {MIN_RENEWAL_FRACTION:.0%} of its lifetime"
                )
        try:
            csr = self._load_csr(request.csr_pem)
            certificate = self._sign(csr, node_name, now)
        except CSRRefused as exc:
            return refuse(exc.message)
        try:
            await self.registry.record(
                node_name, certificate, via="renewal", renewing=peer_certificate
            )
        except CertificateRevoked as exc:
            return refuse(str(exc))
        except KubeAPIError as exc:
            return refuse(f"the hub could not record the certificate ({exc}); retry later")
        log.info(
            "renewed the certificate of node %s (serial %x until %s)",
            node_name,
            certificate.serial_number,
            format_time(certificate.not_valid_after_utc.timestamp()),
        )
        return CertRenewResponse(
            request_id=request.request_id,
            certificate_pem=pki.dump_certificate_pem(certificate),
            ca_pem=self.ca.ca_pem,
        )
