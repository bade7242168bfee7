"""``HubPKI``: the hub's whole PKI behind one object, started and closed with the hub.

The hub plugs it in with :func:`cloudhub.pki.extension.pki_extension`; what that does,
step by step::

    hub_pki = HubPKI(kube_client, settings.pki)
    await hub_pki.start()                             # CA, records, join endpoint
    credentials = hub_pki.serving_credentials()       # for serve_quic / serve_websocket
    hub_pki.add_revocation_listener(close_sessions)   # (node_name, serials) -> None
    ...
    # on every accepted hello, before link.accept():
    hub_pki.check(link.peer_certificate)              # raises CertificateRevoked
    # on MessageReceived(CertRenewRequest) from a session:
    await link.send(await hub_pki.renew(link.peer_node_name, msg, link.peer_certificate))
    ...
    await hub_pki.close()
"""

from __future__ import annotations

import time
from collections.abc import Callable

from cryptography import x509

from cloudhub.kube import Informer, KubeClient
from cloudhub.pki.ca import CAManager
from cloudhub.pki.join import JoinServer
from cloudhub.pki.records import CertificateRegistry, RevocationListener
from cloudhub.pki.settings import PKISettings
from cloudhub.pki.signer import NodeSigner
from cloudhub.pki.tokens import TokenStore
from protocol.messages import CertRenewRequest, CertRenewResponse
from protocol.transport import TLSCredentials

__all__ = ["HubPKI"]


class HubPKI:
    """The CA, bootstrap tokens, certificate records and revocation, and the join endpoint.

    Args:
        client: the hub's API client.
        settings: the PKI settings.
        clock: the wall clock the tokens, the certificate records and the signer read,
            seconds since the epoch (``time.time``). The TLS handshakes always use the
            system's.
    """

    def __init__(
        self, client: KubeClient, settings: PKISettings, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.settings = settings
        self.ca = CAManager(client, settings)
        self.tokens = TokenStore(
            client, settings.namespace, retention=settings.token_retention, clock=clock
        )
        self.registry = CertificateRegistry(client, settings.namespace, clock=clock)
        self.signer = NodeSigner(client, settings, self.ca, self.tokens, self.registry, clock=clock)
        self.join_server = JoinServer(settings, self.ca, self.tokens, self.signer)
        self._started: list = []

    async def start(
        self,
        *,
        node_informer: Informer | None = None,
        watch_nodes: bool = True,
        serve_join: bool = True,
    ) -> None:
        """Load or create the CA, load every revocation, start the join endpoint.

        Args:
            node_informer: a running shared Node informer to take deletions from, or
                ``None``.
            watch_nodes: with no ``node_informer``, watch Nodes here; ``False`` when the
                caller reports deletions with :meth:`node_deleted`.
            serve_join: ``False`` on replicas that should not serve joins.

        Raises:
            CAConfigError: the CA is unusable. KubeAPIError: the API failed.
            TimeoutError: revocations could not be loaded. OSError: the join port is taken.
        """
        await self.ca.start()
        await self.registry.start(node_informer, watch_nodes=watch_nodes)
        self._started.append(self.registry)
        if serve_join:
            try:
                await self.join_server.start()
            except BaseException:
                await self.close()
                raise
            self._started.append(self.join_server)

    async def close(self) -> None:
        """Stop the join endpoint and the watches."""
        while self._started:
            await self._started.pop().close()

    def serving_credentials(self) -> TLSCredentials:
        """The replica's serving certificate and the CA that client certificates must
        chain to (see :meth:`CAManager.serving_credentials`)."""
        return self.ca.serving_credentials()

    def check(self, certificate: x509.Certificate) -> None:
        """Refuse a revoked node certificate (one dictionary lookup).

        Raises:
            CertificateRevoked: with a message to send in the close reason.
        """
        self.registry.check(certificate)

    def node_deleted(self, name: str, uid: str = "") -> None:
        """Revoke the certificates of a deleted Node (see
        :meth:`CertificateRegistry.node_deleted`)."""
        self.registry.node_deleted(name, uid)

    def add_revocation_listener(self, listener: RevocationListener) -> None:
        """Call ``listener(node_name, serials)`` when certificates are revoked."""
        self.registry.add_listener(listener)

    async def renew(
        self,
        node_name: str,
        request: CertRenewRequest,
        peer_certificate: x509.Certificate | None = None,
    ) -> CertRenewResponse:
        """Answer a ``cert_renew_request`` (see :meth:`NodeSigner.renew`)."""
        return await self.signer.renew(node_name, request, peer_certificate=peer_certificate)
