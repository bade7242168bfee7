"""The PKI as a hub extension: ``Hub(settings, extensions=[pki_extension(settings.pki)])``.

At install (after the hub's API client exists, before it serves edges) it:

1. ensures the hub's namespace exists when the hub runs its embedded API (on a cluster the
   manifests create it, and the hub's RBAC grants no Namespace writes);
2. starts :class:`HubPKI`: loads or creates the CA, loads every revocation, starts the join
   endpoint;
3. gives the hub its serving credentials for the edge listeners (``hub.credentials``, and
   ``hub.credentials_source``: the listeners pick up the certificate reissued at two
   thirds of ``pki.server_cert_lifetime`` without a restart);
4. refuses sessions whose certificate is revoked (``hub.edge.peer_checks``);
5. answers ``cert_renew_request`` (``hub.dispatcher``) with a certificate signed for the
   node the session authenticated;
6. revokes a deleted Node's certificates (``hub.on_node_deleted``) and closes the session
   of a node whose certificate is revoked by any replica or by ``cloudhub node revoke``;
7. stops all of it when the hub closes (a task owned by the hub).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from cloudhub.errors import KubeConflict
from cloudhub.kube import NAMESPACES, retrying
from cloudhub.pki.errors import CertificateRevoked
from cloudhub.pki.hub import HubPKI
from cloudhub.pki.settings import PKISettings
from protocol.errors import CloseCode
from protocol.messages import CertRenewRequest

if TYPE_CHECKING:
    from cloudhub.bridge.dispatch import Inbound
    from cloudhub.hub import Hub
    from protocol.transport import Link

__all__ = ["PKIExtension", "pki_extension"]

log = logging.getLogger(__name__)


class PKIExtension:
    """Installs the PKI into a hub (see the module docstring); ``pki`` is set once
    installed."""

    def __init__(self, settings: PKISettings) -> None:
        self.settings = settings
        self.pki: HubPKI | None = None
        self._hub: Hub | None = None

    async def __call__(self, hub: Hub) -> None:
        assert hub.kube is not None and hub.edge is not None
        self._hub = hub
        self._check_session_port(hub)
        if hub.settings.kube.mode == "embedded":
            await self._ensure_namespace(hub)
        pki = HubPKI(hub.kube, self.settings)
        # Node deletions come from the hub's own Node informer (on_node_deleted).
        await pki.start(watch_nodes=False)
        self.pki = pki
        hub.credentials = pki.serving_credentials()
        hub.credentials_source = pki.serving_credentials  # reissued at 2/3 of its lifetime
        hub.edge.peer_checks.append(self._peer_check)
        hub.dispatcher.register(CertRenewRequest, self._renew)
        hub.on_node_deleted.append(pki.node_deleted)
        pki.add_revocation_listener(self._revoked)
        hub.add_task(self._own(pki), name="pki")

    def _check_session_port(self, hub: Hub) -> None:
        """Warn when joining nodes are told a session port this hub does not listen on
        (``--listen-quic-port 27443`` alone: every node joins, then dials 7443)."""
        listen = hub.settings.listen
        port = listen.quic_port if listen.quic else listen.websocket_port
        told = self.settings.session_port
        if port and told != port:
            log.warning(
                "joining nodes are told to connect to port %d (pki.session_port) but this hub "
                "listens on %d: set --pki-session-port %d, unless a load balancer or NAT "
                "forwards %d to it",
                told,
                port,
                port,
                told,
            )

    async def _ensure_namespace(self, hub: Hub) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": self.settings.namespace},
        }
        try:
            # rbac: embedded API only (on a cluster, deploy/hub/00-namespace.yaml makes it)
            await retrying(lambda: hub.kube.create(NAMESPACES, body), what="create namespace")
        except KubeConflict:
            pass

    @staticmethod
    async def _own(pki: HubPKI) -> None:
        try:
            await asyncio.Event().wait()  # until the hub cancels its tasks at close
        finally:
            await pki.close()

    def _peer_check(self, link: Link) -> str | None:
        assert self.pki is not None
        if link.peer_certificate is None:
            return "no client certificate"
        try:
            self.pki.check(link.peer_certificate)
        except CertificateRevoked as exc:
            return str(exc)
        return None

    async def _renew(self, inbound: Inbound) -> None:
        assert self.pki is not None
        link = inbound.session.link
        response = await self.pki.renew(inbound.node, inbound.message, link.peer_certificate)
        inbound.reply(response)

    def _revoked(self, node: str, serials: frozenset[int]) -> None:
        # A revocation covers every valid certificate of the node, so its session goes
        # whichever certificate opened it: that one, or an older one that expired while
        # the session lived on and was renewed over it (its serial is not among the
        # revoked, since an expired certificate is not revoked).
        hub = self._hub
        if hub is not None and hub.events is not None:
            listed = ", ".join(f"{s:x}" for s in sorted(serials)) or "none valid"
            hub.events.node_event(
                node,
                "Warning",
                "CertificateRevoked",
                f"certificates of node {node} revoked (serials {listed}): the hub refuses its "
                "sessions until it joins again with a new bootstrap token",
            )
        session = hub.registry.get(node) if hub is not None else None
        if session is None or session.closed:
            return
        certificate = session.link.peer_certificate
        serial = f"{certificate.serial_number:x}" if certificate is not None else "none"
        log.warning(
            "closing the session of node %s (certificate %s): its certificates were revoked",
            node,
            serial,
        )
        session.close_soon(CloseCode.UNAUTHORIZED, "certificate revoked")


def pki_extension(settings: PKISettings) -> PKIExtension:
    """The PKI extension for ``Hub(..., extensions=[...])``."""
    return PKIExtension(settings)
