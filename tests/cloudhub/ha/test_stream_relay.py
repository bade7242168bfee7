"""Day-2 streams across replicas (issue 18 item 2): a stream opened at replica A for a node
that replica B serves is relayed to B over mutual TLS with peer certificates from the hub
CA, against the embedded API and the reference kube-apiserver; a client that is no replica
(a node's certificate, another CA), a bad open, and a node nobody serves are refused."""

from __future__ import annotations

import ssl
import time

import msgpack
import pytest
import websockets
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.x509.oid import NameOID
from websockets.asyncio.client import connect

from cloudhub.ha import replica_lease_name
from cloudhub.ha.peers import (
    PEER_ORGANIZATION,
    PeerCredentials,
    is_peer_certificate,
    issue_peer_credentials,
)
from cloudhub.ha.replicas import PEER_ADDRESS_ANNOTATION
from cloudhub.kube import LEASES, KubeClient
from cloudhub.kubelet import NodeOffline, StreamUnavailable
from cloudhub.kubelet.extension import kubelet_extension
from protocol import pki
from protocol.errors import ErrorCode
from protocol.stream_messages import StreamClose, StreamData, StreamOpen, StreamReset, StreamWindow
from protocol.transport import TLSCredentials
from protocol.transport.tls import client_ssl_context
from tests.clock import ManualClock
from tests.cloudhub.ha.conftest import ha_settings
from tests.cloudhub.hub.conftest import BOTH, DEADLINE, Hubs, eventually

PEER = {"ha.peer_address": "127.0.0.1", "ha.peer_port": 0}


def sample(hub, name: str, **labels: str) -> float:
    return hub.metrics.registry.get_sample_value(name, labels) or 0.0


async def _replicas(hubs: Hubs, namespace: str, node: str):
    """Replica B serving ``node``'s agent, then replica A, which knows B's address."""
    ca = hubs.pki.ca
    b = await hubs.start(
        ha_settings(namespace, "replica-b", **PEER),
        extensions=[kubelet_extension(peer_ca=lambda: ca)],
    )
    agent = hubs.agent(node)  # dials B, the last hub started
    await agent.wait_for(lambda: agent.synced, DEADLINE)
    a = await hubs.start(
        ha_settings(namespace, "replica-a", **PEER),
        extensions=[kubelet_extension(peer_ca=lambda: ca)],
    )

    async def a_knows_b() -> bool:
        return a.replicas.peer_address("replica-b") == f"127.0.0.1:{b.relay.port}"

    await eventually(a_knows_b, "replica A sees replica B's published address")
    return a, b, agent


def _opens(agent) -> list[StreamOpen]:
    return [m for m in agent.others if isinstance(m, StreamOpen)]


@pytest.mark.parametrize("cluster", BOTH, indirect=True)
async def test_a_stream_at_replica_a_for_a_node_on_replica_b_is_relayed_to_it(
    hubs: Hubs, kube: KubeClient, namespace: str, node_name: str
) -> None:
    a, b, agent = await _replicas(hubs, namespace, node_name)
    lease = await kube.get(LEASES, replica_lease_name("replica-b"), namespace)
    assert lease["metadata"]["annotations"][PEER_ADDRESS_ANNOTATION].startswith("127.0.0.1:")
    assert a.streams.endpoint(node_name) is None and await a.streams.reachable(node_name)

    params = {"command": ["sh"], "stdin": True, "stdout": True, "stderr": False, "tty": False}
    stream = await a.streams.open(node_name, "exec", "default", "web", "app", params, user="alice")
    await agent.wait_for(lambda: bool(_opens(agent)), DEADLINE)
    (opened,) = _opens(agent)
    assert (opened.operation, opened.pod, opened.params["command"]) == ("exec", "web", ["sh"])
    assert stream.id == opened.stream_id  # B's stream id, named at A

    # the caller's stdin at A reaches the node through B, within the credit the node grants
    agent.send(StreamWindow(stream_id=opened.stream_id, credit=64 * 1024))
    await stream.write(0, b"echo hi\n")

    def got_stdin() -> bool:
        return any(
            isinstance(m, StreamData) and m.stream_id == opened.stream_id and m.data == b"echo hi\n"
            for m in agent.others
        )

    await agent.wait_for(got_stdin, DEADLINE)
    # the node's output and exit code reach the caller at A
    agent.send(StreamData(stream_id=opened.stream_id, channel=1, data=b"hi\n"))
    event = await stream.read()
    assert event is not None and (event.channel, event.data) == (1, b"hi\n")
    agent.send(StreamClose(stream_id=opened.stream_id, exit_code=3))
    assert await stream.read() is None
    assert stream.ended is not None and stream.ended.code is None
    assert stream.ended.exit_code == 3
    a.streams.finished(stream)
    assert sample(a, "edgefleet_hub_streams_total", kind="exec", result="ok") == 1

    async def b_counted() -> bool:
        return sample(b, "edgefleet_hub_streams_total", kind="exec", result="ok") == 1

    await eventually(b_counted, "replica B counted the relayed stream")


@pytest.mark.parametrize("cluster", BOTH, indirect=True)
async def test_a_caller_that_goes_away_at_a_resets_the_nodes_stream_at_b(
    hubs: Hubs, namespace: str, node_name: str
) -> None:
    a, _, agent = await _replicas(hubs, namespace, node_name)
    stream = await a.streams.open(node_name, "logs", "default", "web", "app", {"follow": True})
    await agent.wait_for(lambda: bool(_opens(agent)), DEADLINE)
    await stream.reset(ErrorCode.INTERNAL, "the caller went away")

    def reset_reached_node() -> bool:
        return any(isinstance(m, StreamReset) for m in agent.others)

    await agent.wait_for(reset_reached_node, DEADLINE)
    a.streams.finished(stream, cancelled=True)


@pytest.mark.parametrize("cluster", BOTH, indirect=True)
async def test_a_node_nobody_serves_is_offline_at_every_replica(
    hubs: Hubs, namespace: str, node_name: str
) -> None:
    a, b, _ = await _replicas(hubs, namespace, node_name)
    for hub in (a, b):
        with pytest.raises(NodeOffline, match="node edge-nobody is offline since"):
            await hub.streams.open("edge-nobody", "logs", "default", "web", "app")
        assert not await hub.streams.reachable("edge-nobody")


@pytest.mark.parametrize("cluster", BOTH, indirect=True)
async def test_the_relay_refuses_clients_that_are_no_replica(
    hubs: Hubs, namespace: str, node_name: str
) -> None:
    _, b, _ = await _replicas(hubs, namespace, node_name)
    url = f"wss://127.0.0.1:{b.relay.port}/"
    # a node's certificate from the same CA: TLS passes, the relay refuses it
    context = client_ssl_context(hubs.pki.node(node_name))
    context.check_hostname = False
    async with connect(url, ssl=context) as ws:
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await ws.recv()
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
    assert b.relay.refused == 1
    # a certificate of another CA: the TLS handshake fails
    other = pki.generate_ca("not-the-hub-ca", lifetime=3600, now=time.time())
    stranger = issue_peer_credentials(other, "replica-x", lifetime=3600, now=time.time())
    context = client_ssl_context(
        TLSCredentials(
            cas=(hubs.pki.ca.certificate,), chain=stranger.chain, private_key=stranger.private_key
        )
    )
    context.check_hostname = False
    with pytest.raises((ssl.SSLError, OSError, websockets.WebSocketException)):
        async with connect(url, ssl=context, open_timeout=5) as ws:
            await ws.recv()
    # a real replica's certificate with a bad open: closed as a policy violation
    peer = issue_peer_credentials(hubs.pki.ca, "replica-z", lifetime=3600, now=time.time())
    context = client_ssl_context(peer)
    context.check_hostname = False
    async with connect(url, ssl=context) as ws:
        await ws.send(msgpack.packb({"node": node_name}))  # no operation, pod...
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await ws.recv()
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008


def test_only_peer_certificates_name_a_replica(pki_ca) -> None:
    now = time.time()
    peer = issue_peer_credentials(pki_ca.ca, "hub-0", lifetime=3600, now=now)
    cert = peer.chain[0]
    assert is_peer_certificate(cert.public_bytes(Encoding.DER)) == "hub-0"
    orgs = [a.value for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
    assert orgs == [PEER_ORGANIZATION]
    node = pki_ca.node("edge-1").chain[0]
    server = pki_ca.server.chain[0]
    for other in (node, server):
        assert is_peer_certificate(other.public_bytes(Encoding.DER)) == ""
    assert is_peer_certificate(None) == "" and is_peer_certificate(b"") == ""
    with pytest.raises(ValueError):
        issue_peer_credentials(pki_ca.ca, "", lifetime=3600, now=now)
    with pytest.raises(ValueError):
        issue_peer_credentials(pki_ca.ca, "hub-0", lifetime=0, now=now)


def test_peer_credentials_are_reissued_at_two_thirds_of_their_lifetime(pki_ca) -> None:
    clock = ManualClock(1_000_000.0)
    credentials = PeerCredentials(lambda: pki_ca.ca, "hub-0", lifetime=300.0, clock=clock)
    first = credentials()
    assert credentials() is first  # cached while fresh
    clock.advance(199.0)
    assert credentials() is first
    clock.advance(2.0)  # past 200 s of 300
    second = credentials()
    assert second is not first
    assert second.chain[0].not_valid_after_utc.timestamp() == pytest.approx(clock() + 300.0, abs=1)


@pytest.mark.parametrize("cluster", BOTH, indirect=True)
async def test_an_owner_whose_relay_cannot_be_reached_is_refused_with_its_name(
    hubs: Hubs, namespace: str, node_name: str
) -> None:
    a, b, _ = await _replicas(hubs, namespace, node_name)
    await b.relay.aclose()  # B still serves the node and renews its Lease; its relay is gone
    with pytest.raises(StreamUnavailable, match="is served by hub replica replica-b: cannot"):
        await a.streams.open(node_name, "logs", "default", "web", "app")
    assert sample(a, "edgefleet_hub_streams_total", kind="logs", result="offline") == 1
