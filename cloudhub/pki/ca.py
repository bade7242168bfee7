"""The hub CA: one per fleet, shared by every hub replica through the API.

At start each replica calls :meth:`CAManager.start`:

1. If the operator supplied CA files (``pki.ca_cert_file``/``pki.ca_key_file``), use them.
2. Else read the Secret ``pki.ca_secret`` (``kubernetes.io/tls``: ``tls.crt``,
   ``tls.key``) in the hub's namespace: an operator may have created it to supply a CA,
   or an earlier start did.
3. Else generate a CA and *create* the Secret. Create is atomic in the API: when several
   replicas start together, exactly one create succeeds; the others get 409
   AlreadyExists and load the winner's CA. (Generating, then writing with update or
   apply, is how two replicas end up with two CAs and every node rejected by one of them.)

The manager also issues the replica's serving certificate for every name in
``pki.server_names`` (the key never leaves the process) and publishes the
``edgefleet-hub-info`` ConfigMap (CA bundle, its pin, the join address) that
``cloudhub token create`` reads, as kubeadm's ``cluster-info``.
"""

from __future__ import annotations

import base64
import logging
import pathlib
import time

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from cloudhub.errors import KubeConflict, KubeNotFound
from cloudhub.kube import CONFIGMAPS, SECRETS, KubeClient, retrying, update_with_retry
from cloudhub.pki.errors import CAConfigError
from cloudhub.pki.settings import PKISettings, split_names
from protocol import pki
from protocol.transport import TLSCredentials

__all__ = ["CA_COMMON_NAME", "HUB_INFO_CONFIGMAP", "CAManager", "read_hub_info"]

log = logging.getLogger(__name__)

CA_COMMON_NAME = "edgefleet-hub-ca"
"""Subject CN of a generated hub CA."""

HUB_INFO_CONFIGMAP = "edgefleet-hub-info"
"""ConfigMap in the hub's namespace: ``ca.crt``, ``caCertHash``, ``joinAddress``."""


def _check_ca(cert: x509.Certificate, key: ec.EllipticCurvePrivateKey, where: str) -> None:
    try:
        constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
    except x509.ExtensionNotFound:
        constraints = None
    if constraints is None or not constraints.ca:
        raise CAConfigError(f"{where}: the certificate is not a CA (basicConstraints CA:TRUE)")
    if not isinstance(key.curve, ec.SECP256R1):
        raise CAConfigError(f"{where}: the CA key must be ECDSA P-256, got {key.curve.name}")
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    der = serialization.Encoding.DER
    if cert.public_key().public_bytes(der, spki) != key.public_key().public_bytes(der, spki):
        raise CAConfigError(f"{where}: the private key does not belong to the CA certificate")
    if cert.not_valid_after_utc.timestamp() <= time.time():
        raise CAConfigError(
            f"{where}: the CA expired at {cert.not_valid_after_utc.isoformat()}; supply a new one"
        )


def _load_pair(cert_pem: bytes, key_pem: bytes, where: str) -> pki.CertificateAuthority:
    try:
        cert = pki.load_certificate_pem(cert_pem)
        key = pki.load_private_key_pem(key_pem)
    except pki.PKIError as exc:
        raise CAConfigError(f"{where}: {exc}") from exc
    _check_ca(cert, key, where)
    return pki.CertificateAuthority(certificate=cert, private_key=key)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


class CAManager:
    """Loads or creates the hub CA and issues this replica's serving certificate.

    Args:
        client: the hub's API client.
        settings: the PKI settings.
    """

    def __init__(self, client: KubeClient, settings: PKISettings) -> None:
        self.client = client
        self.settings = settings
        self.origin = ""
        """How the CA was obtained: ``"files"``, ``"loaded"`` (from the Secret, including
        a start that lost the creation race) or ``"created"``."""
        self._ca: pki.CertificateAuthority | None = None
        self._serving: TLSCredentials | None = None
        self._serving_renew_at = 0.0

    # -- the CA --------------------------------------------------------------------------

    async def start(self) -> pki.CertificateAuthority:
        """Obtain the CA (see the module docstring). Safe to call on several replicas at once.

        Returns:
            The CA.

        Raises:
            CAConfigError: the supplied files or the stored Secret are unusable.
            KubeAPIError: the API failed (after retries).
        """
        s = self.settings
        if s.ca_cert_file:
            self._ca = self._from_files()
            self.origin = "files"
        else:
            secret = await self._get_secret()
            if secret is None:
                secret = await self._create_secret()
            self._ca = self._from_secret(secret)
        log.info(
            "hub CA %s (%s), pin %s",
            self._ca.certificate.subject.rfc4514_string(),
            self.origin,
            self.ca_hash,
        )
        return self._ca

    def _from_files(self) -> pki.CertificateAuthority:
        s = self.settings
        try:
            cert_pem = pathlib.Path(s.ca_cert_file).read_bytes()
            key_pem = pathlib.Path(s.ca_key_file).read_bytes()
        except OSError as exc:
            raise CAConfigError(f"cannot read the CA files: {exc}") from exc
        return _load_pair(cert_pem, key_pem, f"CA files {s.ca_cert_file}, {s.ca_key_file}")

    async def _get_secret(self) -> dict | None:
        s = self.settings
        try:
            return await retrying(
                lambda: self.client.get(SECRETS, s.ca_secret, s.namespace), what="get CA Secret"
            )
        except KubeNotFound:
            return None

    async def _create_secret(self) -> dict:
        s = self.settings
        ca = pki.generate_ca(CA_COMMON_NAME, lifetime=s.ca_lifetime, now=time.time())
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/tls",
            "metadata": {
                "name": s.ca_secret,
                "namespace": s.namespace,
                "labels": {"app.kubernetes.io/managed-by": "cloudhub"},
            },
            "data": {
                "tls.crt": _b64(pki.dump_certificate_pem(ca.certificate)),
                "tls.key": _b64(pki.dump_private_key_pem(ca.private_key)),
            },
        }
        try:
            created = await retrying(
                lambda: self.client.create(SECRETS, body, s.namespace), what="create CA Secret"
            )
        except KubeNotFound as exc:
            raise CAConfigError(
                f"namespace {s.namespace!r} does not exist: create it first "
                "(kubectl apply -f deploy/hub/00-namespace.yaml) or set pki.namespace"
            ) from exc
        except KubeConflict:
            # Another replica created it first (or our own earlier attempt did and its
            # answer was lost): load whatever won.
            log.info(
                "CA Secret %s/%s was created concurrently; loading it", s.namespace, s.ca_secret
            )
            secret = await self._get_secret()
            if secret is None:
                raise CAConfigError(
                    f"CA Secret {s.namespace}/{s.ca_secret} was reported to exist, then was "
                    "gone: is something deleting it?"
                ) from None
            self.origin = "loaded"
            return secret
        self.origin = "created"
        return created

    def _from_secret(self, secret: dict) -> pki.CertificateAuthority:
        s = self.settings
        where = f"CA Secret {s.namespace}/{s.ca_secret}"
        data = secret.get("data") or {}
        try:
            cert_pem = base64.b64decode(data["tls.crt"])
            key_pem = base64.b64decode(data["tls.key"])
        except (KeyError, ValueError, TypeError) as exc:
            raise CAConfigError(f"{where} lacks base64 tls.crt and tls.key") from exc
        if not self.origin:
            self.origin = "loaded"
        return _load_pair(cert_pem, key_pem, where)

    @property
    def authority(self) -> pki.CertificateAuthority:
        """The CA (after :meth:`start`)."""
        if self._ca is None:
            raise RuntimeError("CAManager.start() has not run")
        return self._ca

    @property
    def ca_pem(self) -> bytes:
        """The CA certificate as PEM (what agents trust)."""
        return pki.dump_certificate_pem(self.authority.certificate)

    @property
    def ca_hash(self) -> str:
        """The CA pin ``sha256:<hex>`` (``edgeagent join --ca-cert-hash``)."""
        return pki.ca_cert_hash(self.authority.certificate)

    # -- the serving certificate ---------------------------------------------------------

    def serving_credentials(self) -> TLSCredentials:
        """This replica's TLS credentials: a serving certificate from the hub CA covering
        every ``pki.server_names`` entry, trusting the hub CA for client certificates.

        Issued on first call and again once two thirds of its lifetime have passed; the
        caller builds new TLS contexts from a new object (compare by identity).
        """
        now = time.time()
        if self._serving is None or now >= self._serving_renew_at:
            s = self.settings
            dns, ips = split_names(s.server_names)
            cert, key = pki.issue_server_certificate(
                self.authority,
                dns_names=dns,
                ip_addresses=ips,
                lifetime=s.server_cert_lifetime,
                now=now,
            )
            self._serving = TLSCredentials(
                cas=(self.authority.certificate,), chain=(cert,), private_key=key
            )
            self._serving_renew_at = now + s.server_cert_lifetime * 2 / 3
            log.info("issued the hub serving certificate for %s", ", ".join(s.server_names))
        return self._serving

    # -- hub info ------------------------------------------------------------------------

    async def publish_hub_info(self, join_address: str) -> None:
        """Create or update the ``edgefleet-hub-info`` ConfigMap (CA, pin, join address)."""
        s = self.settings
        data = {
            "ca.crt": self.ca_pem.decode("ascii"),
            "caCertHash": self.ca_hash,
            "joinAddress": join_address,
        }
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": HUB_INFO_CONFIGMAP,
                "namespace": s.namespace,
                "labels": {"app.kubernetes.io/managed-by": "cloudhub"},
            },
            "data": data,
        }
        try:
            await retrying(
                lambda: self.client.create(CONFIGMAPS, body, s.namespace),
                what="create hub info ConfigMap",
            )
            return
        except KubeConflict:
            pass

        def update(current: dict) -> dict | None:
            if current.get("data") == data:
                return None
            current["data"] = data
            return current

        await update_with_retry(self.client, CONFIGMAPS, HUB_INFO_CONFIGMAP, s.namespace, update)


async def read_hub_info(client: KubeClient, namespace: str) -> dict[str, str] | None:
    """The ``edgefleet-hub-info`` data, or ``None`` when no hub has published it yet."""
    try:
        cm = await retrying(
            lambda: client.get(CONFIGMAPS, HUB_INFO_CONFIGMAP, namespace), what="get hub info"
        )
    except KubeNotFound:
        return None
    return dict(cm.get("data") or {})
