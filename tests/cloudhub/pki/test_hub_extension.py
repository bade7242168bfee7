"""The PKI plugged into the real hub (``cloudhub.hub.Hub`` with ``pki_extension``): the hub
serves edges with the serving certificate from the PKI, renews certificates over its own
session server, and closes sessions whose certificates are revoked."""

from __future__ import annotations

import asyncio
import pathlib
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from cloudhub.hub import Hub
from cloudhub.kube import EVENTS, NODES
from cloudhub.pki import CertificateRegistry
from cloudhub.pki.extension import PKIExtension, pki_extension
from cloudhub.settings import load_hub_settings
from edgeagent.certs import CertificateRenewer
from protocol.errors import CloseCode
from protocol.events import Closed, MessageReceived
from protocol.messages import PROTOCOL_VERSION, CertRenewResponse, Hello, KubeEvent, ObjectRef
from protocol.transport import Link, SessionRejected, connect_quic, connect_websocket
from tests.cloudhub.hub.conftest import TEST_SETTINGS
from tests.cloudhub.pki.conftest import NAMESPACE, Cluster
from tests.cloudhub.pki.test_join import Node
from tests.sim.agent import default_node_info
from tests.waiting import eventually

CONNECT = {"quic": connect_quic, "websocket": connect_websocket}


@pytest.fixture
async def make_hub(cluster: Cluster) -> AsyncIterator[Any]:
    hubs: list[Hub] = []

    async def start(**overrides: Any) -> tuple[Hub, PKIExtension]:
        values = {
            **TEST_SETTINGS,
            "kube.kubeconfig": cluster.kubeconfig,
            "pki.namespace": NAMESPACE,
            "pki.join_host": "127.0.0.1",
            "pki.join_port": 0,
            "pki.server_names": "localhost,127.0.0.1",
        }
        values.update(overrides)
        settings = load_hub_settings(overrides=values)
        extension = pki_extension(settings.pki)
        hub = Hub(settings, extensions=[extension])  # no TLS files: the PKI provides them
        hubs.append(hub)
        await hub.start()
        return hub, extension

    yield start
    for hub in hubs:
        await hub.aclose()


class EdgeNode:
    """A joined node with a renewer and, once dialled, a session to the hub."""

    def __init__(self, node: Node, hub: Hub) -> None:
        self.node, self.hub = node, hub
        self.renewer = CertificateRenewer(
            node.paths, uniform=lambda a, b: a, retry_base=1.0, retry_cap=2.0
        )
        self.link: Link | None = None
        self.closed: Closed | None = None
        self.sent = 0

    @classmethod
    async def join(cls, tmp: pathlib.Path, hub: Hub, ext: PKIExtension, name: str) -> EdgeNode:
        assert ext.pki is not None
        token, _ = await ext.pki.tokens.create(ttl=3600)
        node = Node(tmp, name)
        await node.join(f"localhost:{ext.pki.join_server.port}", token, ext.pki.ca.ca_hash)
        return cls(node, hub)

    async def dial(self, transport: str) -> Link:
        port = self.hub.quic_port if transport == "quic" else self.hub.websocket_port
        return await CONNECT[transport](
            "127.0.0.1",
            port,
            credentials=self.renewer.credentials(),
            hello=Hello(
                min_version=PROTOCOL_VERSION,
                max_version=PROTOCOL_VERSION,
                node_name=self.node.name,
                agent_version="test",
                node_info=default_node_info(self.node.name),
            ),
            server_name="localhost",
            timeout=10.0,
        )

    async def read(self) -> None:
        assert self.link is not None
        async for event in self.link:
            if isinstance(event, MessageReceived) and isinstance(event.message, CertRenewResponse):
                self.renewer.handle(event.message)
            elif isinstance(event, Closed):
                self.closed = event

    async def send_events(self, stop: asyncio.Event) -> None:
        assert self.link is not None
        ref = ObjectRef("Node", "", self.node.name, self.node.name)
        while not stop.is_set():
            self.sent += 1
            await self.link.send(KubeEvent(ref, "Normal", "Tick", f"tick {self.sent}", time.time()))
            await asyncio.sleep(0.1)


@pytest.mark.slow
async def test_rotation_over_the_hub_keeps_sessions_and_loses_nothing(
    make_hub, cluster: Cluster, tmp_path: pathlib.Path
) -> None:
    # 20-second certificates renewed at 70 % (14 s): three renewals in ~43 s, on a QUIC and
    # a WebSocket session to the real hub at once, each sending 10 Events a second.
    hub, ext = await make_hub(**{"pki.node_cert_lifetime": 20.0})
    edges: list[EdgeNode] = []
    tasks: list[asyncio.Task] = []
    stop = asyncio.Event()
    renewed = asyncio.Semaphore(0)
    try:
        for transport in ("quic", "websocket"):
            edge = await EdgeNode.join(tmp_path, hub, ext, f"rot-{transport}")
            edge.renewer = CertificateRenewer(
                edge.node.paths,
                uniform=lambda a, b: a,
                retry_base=1.0,
                retry_cap=2.0,
                on_renewed=lambda _c: renewed.release(),
            )
            edge.link = await edge.dial(transport)
            edges.append(edge)
            tasks += [
                asyncio.create_task(edge.read()),
                asyncio.create_task(edge.send_events(stop)),
                asyncio.create_task(edge.renewer.run(edge.link.send)),
            ]
        first = {e.node.name: e.renewer.credentials().chain[0].serial_number for e in edges}

        async def three_renewals() -> None:
            while not all(e.renewer.renewals >= 3 for e in edges):
                await renewed.acquire()

        await asyncio.wait_for(three_renewals(), 90)
        stop.set()
        await asyncio.gather(*tasks[1::3])  # senders done

        # acks come as the hub writes the Events
        await eventually(
            lambda: not any(e.link.session.unacked() for e in edges), "every Event acked", 30
        )
        for edge in edges:
            assert edge.closed is None and not edge.link.closed  # never dropped
        items, _ = await cluster.client.list(EVENTS, "default")
        for edge in edges:
            ticks = {
                e["message"]
                for e in items
                if e.get("reason") == "Tick" and e["involvedObject"]["name"] == edge.node.name
            }
            assert ticks == {f"tick {i}" for i in range(1, edge.sent + 1)}  # none lost
            assert edge.sent > 300
            current = edge.renewer.credentials().chain[0]
            assert current.serial_number != first[edge.node.name]
        # The first certificates expired long ago: only the renewed ones can dial.
        for edge, transport in zip(edges, ("quic", "websocket"), strict=True):
            again = await edge.dial(transport)
            await again.close()
    finally:
        stop.set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for edge in edges:
            if edge.link is not None:
                await edge.link.close()


async def test_revocation_closes_the_hub_session_within_a_second(
    make_hub, cluster: Cluster, tmp_path: pathlib.Path
) -> None:
    hub, ext = await make_hub()
    assert ext.pki is not None
    edge = await EdgeNode.join(tmp_path, hub, ext, "pi-hub")
    latencies = {}
    attached = asyncio.Event()
    hub.registry.on_connect.append(lambda session: attached.set())
    other = await cluster.new_client()  # the operator's CLI, or another replica
    try:
        for how in ("node revoke", "node deleted"):
            attached.clear()
            edge.link = await edge.dial("websocket")
            edge.closed = None
            reader = asyncio.create_task(edge.read())
            await asyncio.wait_for(attached.wait(), 20)
            started = time.monotonic()
            if how == "node revoke":
                assert await CertificateRegistry(other, NAMESPACE).revoke("pi-hub", "stolen")
            else:
                await other.delete(NODES, "pi-hub")
            await asyncio.wait_for(reader, 5)
            latencies[how] = time.monotonic() - started
            await edge.link.close()
            assert edge.closed is not None and edge.closed.code == CloseCode.UNAUTHORIZED

            # The old certificate is refused from now on (the Node deletion revokes too,
            # through the hub's own Node informer).
            async def refused() -> SessionRejected | None:
                try:
                    link = await edge.dial("quic")
                except SessionRejected as exc:
                    return exc
                await link.close()  # the revocation is still on its way: try again
                return None

            rejected = await eventually(refused, "the old certificate refused", 10)
            assert "revoked" in rejected.reason
            # A new token gives a certificate that is accepted.
            token, _ = await ext.pki.tokens.create(ttl=3600)
            await edge.node.join(
                f"localhost:{ext.pki.join_server.port}", token, None, node_name=None, renew=True
            )
        link = await edge.dial("quic")
        await link.close()
    finally:
        await other.close()
    print(f"revocation closed the hub session in {latencies}")
    assert all(latency < 1.0 for latency in latencies.values()), latencies


def test_join_labels_nodes_as_the_hub_does() -> None:
    from cloudhub.nodes.model import EDGE_ROLE_LABEL
    from cloudhub.pki import signer

    assert signer.EDGE_ROLE_LABEL == EDGE_ROLE_LABEL


async def test_hub_on_its_embedded_api_makes_namespace_and_ca(tmp_path: pathlib.Path) -> None:
    settings = load_hub_settings(
        overrides={
            **TEST_SETTINGS,
            "kube.embedded_data_dir": str(tmp_path / "api"),
            "kube.embedded_port": 0,
            "pki.join_host": "127.0.0.1",
            "pki.join_port": 0,
            "pki.server_names": "localhost",
        }
    )
    extension = pki_extension(settings.pki)
    async with Hub(settings, extensions=[extension]) as hub:
        assert extension.pki is not None and extension.pki.ca.origin == "created"
        edge = await EdgeNode.join(tmp_path, hub, extension, "pi-standalone")
        link = await edge.dial("quic")
        await link.close()
    # A restart on the same data directory keeps the CA: joined nodes stay valid.
    extension = pki_extension(settings.pki)
    async with Hub(settings, extensions=[extension]) as hub:
        assert extension.pki is not None and extension.pki.ca.origin == "loaded"
        link = await EdgeNode(edge.node, hub).dial("websocket")
        await link.close()


async def test_a_revoked_node_is_told_by_warnings_on_its_node(
    make_hub, cluster: Cluster, tmp_path: pathlib.Path
) -> None:
    # `kubectl describe node` must say the node is gone because it was revoked, not only
    # "Normal EdgeDisconnected" (issue 15 item 16).
    hub, ext = await make_hub()
    edge = await EdgeNode.join(tmp_path, hub, ext, "pi-revoked")
    attached = asyncio.Event()
    hub.registry.on_connect.append(lambda session: attached.set())
    edge.link = await edge.dial("websocket")
    reader = asyncio.create_task(edge.read())
    await asyncio.wait_for(attached.wait(), 20)
    assert await CertificateRegistry(cluster.client, NAMESPACE).revoke("pi-revoked", "stolen")
    await asyncio.wait_for(reader, 10)
    await edge.link.close()

    async def refused() -> SessionRejected | None:
        try:
            link = await edge.dial("quic")
        except SessionRejected as exc:
            return exc
        await link.close()  # the revocation reaches the peer check within a moment
        return None

    assert "revoked" in (await eventually(refused, "the revoked node refused", 20)).reason

    async def node_events() -> dict[str, dict]:
        items, _ = await cluster.client.list(EVENTS, "default")
        return {e["reason"]: e for e in items if e["involvedObject"]["name"] == "pi-revoked"}

    wanted = {"CertificateRevoked", "EdgeDisconnected", "SessionRefused"}
    seen: dict[str, dict] = {}

    async def all_written() -> bool:
        seen.update(await node_events())
        return wanted <= seen.keys()

    await eventually(all_written, f"the Events {sorted(wanted)}", 20, state=lambda: sorted(seen))
    events = seen
    assert events["CertificateRevoked"]["type"] == "Warning"
    assert "joins again with a new bootstrap token" in events["CertificateRevoked"]["message"]
    disconnected = events["EdgeDisconnected"]
    assert disconnected["type"] == "Warning", disconnected
    assert "UNAUTHORIZED: certificate revoked" in disconnected["message"]
    refused = events["SessionRefused"]
    assert refused["type"] == "Warning" and "revoked" in refused["message"]
    assert refused["message"].startswith("quic session refused: ")
