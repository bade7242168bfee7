"""Certificates on live sessions, over real QUIC and WebSocket on loopback, with a minimal
session server wired to ``HubPKI`` (sessionhub.py): recovery after expiry, revocation
closing the session from another replica, renewal refusals. Rotation and revocation on the
real hub are in test_hub_extension.py."""

from __future__ import annotations

import asyncio
import pathlib
import random
import time

import pytest

from cloudhub.kube import NODES
from cloudhub.pki import CertificateRegistry
from edgeagent.certs import CertificateExpired, CertificateRenewer
from edgeagent.store import Store
from protocol.errors import CloseCode
from protocol.events import Closed, MessageReceived
from protocol.messages import CertRenewResponse, KubeEvent, ObjectRef
from protocol.transport import (
    ConnectFailed,
    Link,
    SessionRejected,
    connect_quic,
    connect_websocket,
)
from tests.clock import ManualClock
from tests.cloudhub.pki.conftest import Cluster, join_address
from tests.cloudhub.pki.sessionhub import SessionHub, hello
from tests.cloudhub.pki.test_join import Node

CONNECT = {"quic": connect_quic, "websocket": connect_websocket}


async def dial(hub: SessionHub, transport: str, renewer: CertificateRenewer, node: str) -> Link:
    return await CONNECT[transport](
        "127.0.0.1",
        hub.port(transport),
        credentials=renewer.credentials(),
        hello=hello(node),
        server_name="localhost",
        timeout=10.0,
    )


async def joined(tmp_path: pathlib.Path, hub_pki, name: str, **join: object) -> Node:
    node = Node(tmp_path, name)
    token, _ = await hub_pki.tokens.create(ttl=3600)
    await node.join(join_address(hub_pki), token, hub_pki.ca.ca_hash, **join)
    return node


class Agent:
    """The agent side of one session: sends numbered events while a renewer renews."""

    def __init__(self, link: Link, renewer: CertificateRenewer, node: str) -> None:
        self.link, self.renewer, self.node = link, renewer, node
        self.sent = 0
        self.closed: Closed | None = None

    async def read(self) -> None:
        async for event in self.link:
            if isinstance(event, MessageReceived) and isinstance(event.message, CertRenewResponse):
                self.renewer.handle(event.message)
            elif isinstance(event, Closed):
                self.closed = event

    async def send_events(self, stop: asyncio.Event) -> None:
        ref = ObjectRef("Node", "", self.node, f"uid-{self.node}")
        while not stop.is_set():
            self.sent += 1
            await self.link.send(
                KubeEvent(ref, "Normal", "Tick", f"message {self.sent}", time.time())
            )
            await asyncio.sleep(0.05)


async def test_expired_certificate_recovery_keeps_name_labels_and_store(
    start_hub, cluster: Cluster, tmp_path: pathlib.Path
) -> None:
    # One replica issues 3-second certificates, another (same CA, same API) 30-day ones:
    # the node joins, stays "offline" past expiry, and recovers with --renew. The replicas'
    # clock is injected instead of waited on: the short replica's last certificate for the
    # node is issued two minutes in the past (within the CA's own validity, which starts
    # CLOCK_SKEW before its creation), so it has expired, for TLS too, which reads the
    # system's clock; at the recovery the clock is 10 s ahead, past the join certificate.
    clock = ManualClock()
    short = await start_hub(node_cert_lifetime=3.0, clock=clock)
    normal = await start_hub(clock=clock)
    assert short.ca.ca_hash == normal.ca.ca_hash
    token, _ = await short.tokens.create(ttl=3600, labels={"site": "north"})
    node = Node(tmp_path, "pi-exp")
    await node.join(join_address(short), token, short.ca.ca_hash, labels={"shelf": "2"})
    settings_path = node.state_dir / "store.db"
    ref = ObjectRef("ConfigMap", "default", "cfg", "uid-cfg")
    with Store.open(settings_path) as store:
        store.apply_upsert(ref, "7", {"data": {"k": "v"}})

    clock.now = time.time() - 120
    then = CertificateRenewer(node.paths, uniform=random.uniform, clock=clock)
    then.apply(await short.renew("pi-exp", then.make_request(), None))
    renewer = CertificateRenewer(node.paths, uniform=random.uniform)
    assert renewer.not_after < time.time() - 100  # offline past expiry
    with pytest.raises(CertificateExpired) as caught:
        renewer.credentials()
    message = str(caught.value)
    assert "expired at" in message
    assert "edgeagent join --renew --token NEW_TOKEN" in message
    assert "keeps the node's name, labels and store" in message
    hub = await SessionHub(normal).start()
    try:
        with pytest.raises((ConnectFailed, SessionRejected)):
            await connect_quic(
                "127.0.0.1",
                hub.quic_port,
                credentials=node.paths.load(),
                hello=hello("pi-exp"),
                server_name="localhost",
                timeout=5.0,
            )
        # Recovery: a new token; hub and pin come from the join record, the name from
        # the old certificate.
        clock.now = time.time() + 10.0
        fresh, _ = await normal.tokens.create(ttl=3600)
        result = await node.join(
            join_address(normal), fresh, None, node_name=None, renew=True, labels=None
        )
        assert result["nodeName"] == "pi-exp"
        credentials = renewer.credentials()  # re-read: the files changed
        assert credentials.chain[0].not_valid_after_utc.timestamp() > time.time() + 86400
        link = await dial(hub, "quic", renewer, "pi-exp")
        await link.close()
    finally:
        await hub.close()
    labels = (await cluster.client.get(NODES, "pi-exp"))["metadata"]["labels"]
    assert labels == {"site": "north", "shelf": "2", "node-role.kubernetes.io/edge": ""}
    with Store.open(settings_path) as store:
        assert store.get_object("uid-cfg") is not None


@pytest.mark.parametrize("how", ["node deleted", "node revoke"])
async def test_revocation_closes_the_session_within_a_second(
    start_hub, cluster: Cluster, tmp_path: pathlib.Path, how: str
) -> None:
    hub_pki = await start_hub()
    hub = await SessionHub(hub_pki).start()
    try:
        node = await joined(tmp_path, hub_pki, "pi-rev")
        renewer = CertificateRenewer(node.paths, uniform=random.uniform)
        link = await dial(hub, "websocket", renewer, "pi-rev")
        agent = Agent(link, renewer, "pi-rev")
        reader = asyncio.create_task(agent.read())
        await hub.wait_for(lambda: "pi-rev" in hub.links)
        other = await cluster.new_client()  # another replica, or the CLI
        started = time.monotonic()
        if how == "node deleted":
            await other.delete(NODES, "pi-rev")
        else:
            assert await CertificateRegistry(other, hub_pki.settings.namespace).revoke(
                "pi-rev", "stolen"
            )
        await asyncio.wait_for(reader, 5)
        latency = time.monotonic() - started
        await link.close()
        await other.close()
        print(f"revocation ({how}) closed the session in {latency * 1000:.0f} ms")
        assert agent.closed is not None and agent.closed.code == CloseCode.UNAUTHORIZED
        assert latency < 1.0
        # The old certificate stays refused ...
        with pytest.raises(SessionRejected) as rejected:
            await dial(hub, "quic", renewer, "pi-rev")
        assert rejected.value.code == CloseCode.UNAUTHORIZED
        assert "revoked" in rejected.value.reason
        # ... and a later join with a new token gives a certificate that is accepted.
        fresh, _ = await hub_pki.tokens.create(ttl=3600)
        await node.join(join_address(hub_pki), fresh, None, node_name=None, renew=True)
        again = await dial(hub, "quic", renewer, "pi-rev")
        await again.close()
    finally:
        await hub.close()


async def test_renewal_refused_after_revocation(start_hub, tmp_path: pathlib.Path) -> None:
    hub_pki = await start_hub(node_cert_lifetime=4.0)
    node = await joined(tmp_path, hub_pki, "pi-late")
    cert = node.paths.load().chain[0]
    renewer = CertificateRenewer(node.paths, uniform=random.uniform)
    await hub_pki.registry.revoke("pi-late", "Node deleted")
    request = renewer.make_request()
    response = await hub_pki.renew("pi-late", request, cert)
    assert response.error is not None and "revoked" in response.error
    renewer.forget(request.request_id)


async def test_renewal_too_early_is_refused(start_hub, tmp_path: pathlib.Path) -> None:
    hub_pki = await start_hub()
    node = await joined(tmp_path, hub_pki, "pi-eager")
    renewer = CertificateRenewer(node.paths, uniform=random.uniform)
    request = renewer.make_request()
    response = await hub_pki.renew("pi-eager", request, node.paths.load().chain[0])
    assert response.error is not None and "too early" in response.error
    renewer.forget(request.request_id)


async def test_renewal_for_another_node_name_is_refused(start_hub, tmp_path) -> None:
    hub_pki = await start_hub()
    node = await joined(tmp_path, hub_pki, "pi-a")
    renewer = CertificateRenewer(node.paths, uniform=random.uniform)
    request = renewer.make_request()  # a CSR for pi-a ...
    response = await hub_pki.renew("pi-b", request)  # ... on pi-b's session
    assert response.error is not None and "expected 'pi-b'" in response.error
    renewer.forget(request.request_id)


async def test_nodes_deleted_while_no_hub_ran_are_revoked_at_start(
    start_hub, cluster: Cluster, tmp_path: pathlib.Path
) -> None:
    first = await start_hub()
    node = await joined(tmp_path, first, "pi-gone")
    serial = node.paths.load().chain[0].serial_number
    await first.close()
    await cluster.client.delete(NODES, "pi-gone")
    second = await start_hub()
    revoked = asyncio.Event()  # the start-up reconciliation runs in the background
    second.add_revocation_listener(lambda node, serials: revoked.set())
    if not second.registry.is_revoked(node.paths.load().chain[0]):
        await asyncio.wait_for(revoked.wait(), 10)
    assert second.registry.is_revoked(node.paths.load().chain[0])
    assert [r.serial for r in await second.registry.certificates("pi-gone")] == [serial]
