"""Every PKI flow of the hub, run against an API as a given client (for the RBAC tests):
CA creation and loading, the join endpoint, bootstrap tokens, a join over TLS, a renewal,
a re-join keeping the Node, revocation by Node deletion and by command, pruning, and the
start-up reconciliation of Nodes deleted while no hub ran."""

from __future__ import annotations

import asyncio
import pathlib

from cloudhub.kube import NODES, KubeClient
from cloudhub.pki import CertificateRegistry, HubPKI, PKISettings
from edgeagent.certs import CertificateRenewer
from tests.cloudhub.pki.test_join import Node


def settings(**overrides) -> PKISettings:
    values = {
        "namespace": "edgefleet",
        "join_host": "127.0.0.1",
        "join_port": 0,
        "server_names": ("localhost",),
        "token_retention": 0.0,
    }
    values.update(overrides)
    return PKISettings(**values)


async def exercise(client: KubeClient, admin: KubeClient, tmp: pathlib.Path, tag: str) -> None:
    """Run the flows with ``client`` (the hub's identity); ``admin`` plays the operator."""
    first = HubPKI(client, settings())
    await first.start()
    try:
        second = HubPKI(client, settings())  # another replica: loads the CA
        await second.start(serve_join=False)
        await second.close()

        token, stored = await first.tokens.create(ttl=3600, labels={"site": tag})
        await first.tokens.list()
        name = f"rbac-{tag}"
        node = Node(tmp, name)
        address = f"localhost:{first.join_server.port}"
        await node.join(address, token, first.ca.ca_hash)

        # Re-join of an existing Node (labels patched), after revoking its certificate.
        await CertificateRegistry(client, "edgefleet").revoke(name, "test")
        await node.join(address, token, None, node_name=None, renew=True)

        renewer = CertificateRenewer(node.paths, uniform=lambda a, b: a)
        request = renewer.make_request()
        await first.renew(name, request)  # no peer certificate: no "too early" check
        renewer.forget(request.request_id)

        # Deleting the Node revokes its certificates (watch → get → record update).
        revoked = asyncio.Event()
        first.add_revocation_listener(lambda n, s: revoked.set() if n == name else None)
        await admin.delete(NODES, name)
        await asyncio.wait_for(revoked.wait(), 20)

        await first.tokens.delete(stored.token_id)
        await first.tokens.prune()
    finally:
        await first.close()
    # A Node deleted while no hub ran is revoked at the next start.
    other = Node(tmp, f"{name}-2")
    third = HubPKI(client, settings())
    await third.start()
    try:
        token, _ = await third.tokens.create(ttl=3600)
        await other.join(f"localhost:{third.join_server.port}", token, third.ca.ca_hash)
    finally:
        await third.close()
    await admin.delete(NODES, other.name)
    fourth = HubPKI(client, settings())
    revoked_at_start = asyncio.Event()
    fourth.add_revocation_listener(lambda n, s: revoked_at_start.set())
    await fourth.start(serve_join=False)
    try:
        if not fourth.registry.is_revoked(other.paths.load().chain[0]):
            await asyncio.wait_for(revoked_at_start.wait(), 20)
    finally:
        await fourth.close()
