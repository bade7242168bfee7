"""The seams other parts plug into, used the way they will be: an extension that adds a
message handler, per-node objects from its own informer, a peer check and hooks."""

from __future__ import annotations

import asyncio
import time

from cloudhub.bridge import Inbound
from cloudhub.hub import Hub
from cloudhub.kube import CONFIGMAPS, NODES, KubeClient
from protocol.errors import CloseCode, ErrorCode
from protocol.messages import MetricsBatch, TwinReported
from protocol.transport import SessionRejected
from tests.cloudhub.hub.conftest import DEADLINE, Hubs, configmap, eventually

NODE_LABEL = "example.edgefleet.io/node"


class Example:
    """What twins or metrics will look like: a few lines against the hub's seams."""

    def __init__(self) -> None:
        self.batches: list[tuple[str, dict]] = []
        self.connected: list[str] = []
        self.disconnected: list[tuple[str, bool]] = []
        self.deleted: list[str] = []
        self.release = asyncio.Event()

    def install(self, hub: Hub) -> None:
        # per-node objects, sent down like pods: ConfigMaps labelled with a node name
        informer = hub.add_informer(
            CONFIGMAPS,
            label_selector=NODE_LABEL,
            indexers={"node": lambda o: [o["metadata"]["labels"][NODE_LABEL]]},
        )
        hub.objects.add_source("example", lambda node: informer.by_index("node", node))

        def changed(event: str, obj: dict, old: dict | None) -> None:
            nodes = {obj["metadata"]["labels"][NODE_LABEL]}
            if old is not None:
                nodes.add(old["metadata"]["labels"][NODE_LABEL])
            hub.objects.changed(nodes)

        informer.add_handler(changed)
        # a stream the edge sends: ingest, then done() (the message is acked)
        hub.dispatcher.register(MetricsBatch, self.on_batch)
        # an async handler: done when it returns
        hub.dispatcher.register(TwinReported, self.on_twin)
        hub.edge.peer_checks.append(self.check)
        hub.registry.on_connect.append(lambda s: self.connected.append(s.node))
        hub.registry.on_disconnect.append(lambda s, cur: self.disconnected.append((s.node, cur)))
        hub.on_node_deleted.append(self.deleted.append)

    def on_batch(self, inbound: Inbound) -> None:
        message = inbound.message
        assert isinstance(message, MetricsBatch)
        if message.node_name != inbound.node:
            inbound.refuse(ErrorCode.FORBIDDEN, "metrics of another node")
            return
        self.batches.append((inbound.node, message.samples))
        inbound.done()

    async def on_twin(self, inbound: Inbound) -> None:
        await self.release.wait()

    async def check(self, link) -> str | None:
        return "revoked" if link.peer_node_name.startswith("revoked-") else None


async def test_an_extension_plugs_in_objects_handlers_checks_and_hooks(
    hubs: Hubs, kube: KubeClient, namespace: str, unique
) -> None:
    example = Example()
    hub = await hubs.start(extensions=[example.install])
    name = unique("edge-ext")
    agent = hubs.agent(name)
    await agent.wait_for(lambda: agent.synced, DEADLINE)
    assert example.connected == [name]

    # per-node objects arrive, and only at their node
    body = configmap("for-me", namespace, {"k": "v"})
    body["metadata"]["labels"] = {NODE_LABEL: name}
    mine = await kube.create(CONFIGMAPS, body)
    other = configmap("for-other", namespace, {"k": "v"})
    other["metadata"]["labels"] = {NODE_LABEL: unique("someone-else")}
    await kube.create(CONFIGMAPS, other)
    await agent.wait_for(lambda: mine["metadata"]["uid"] in agent.store, DEADLINE)
    assert [ref.name for ref, _, _ in agent.store.values()] == ["for-me"]

    # a sync handler acks once done; a refusal is answered
    agent.send(MetricsBatch(node_name=name, samples={"t": [1.0], "cpu_millicores": [120]}))
    agent.send(MetricsBatch(node_name="not-me", samples={"t": [2.0]}))
    await agent.wait_for(lambda: agent.all_acked, DEADLINE)
    assert example.batches == [(name, {"t": [1.0], "cpu_millicores": [120]})]
    assert [e.code for e in agent.errors] == [ErrorCode.FORBIDDEN]

    # an async handler: the message is acked only once it returns
    ref = agent.store[mine["metadata"]["uid"]][0]
    agent.send(TwinReported(ref=ref, property="p", value=1, version=1, timestamp=time.time()))
    await agent.wait_for(lambda: bool(agent.unacked), DEADLINE)
    await eventually(_async(lambda: bool(hub.registry.get(name).acks.in_progress)), "in progress")
    assert agent.unacked
    example.release.set()
    await agent.wait_for(lambda: agent.all_acked, DEADLINE)

    # a peer check refuses a node (as certificate revocation will)
    revoked = hubs.agent(unique("revoked-node"), start=False)
    try:
        await revoked.dial()
    except SessionRejected as exc:
        assert exc.code is CloseCode.UNAUTHORIZED and "revoked" in exc.reason
    else:  # pragma: no cover
        raise AssertionError("a revoked node was accepted")

    # Node deletion reaches the hook; the disconnect hook says the session was current
    await eventually(lambda: _exists(kube, name), "the Node")
    await kube.delete(NODES, name)
    await eventually(_async(lambda: example.deleted == [name]), "the deletion hook")
    await agent.wait_for(lambda: not agent.connected or agent.sessions > 1, DEADLINE)
    await eventually(_async(lambda: (name, True) in example.disconnected), "the disconnect hook")


async def _exists(kube: KubeClient, name: str) -> bool:
    from cloudhub.errors import KubeNotFound

    try:
        await kube.get(NODES, name)
    except KubeNotFound:
        return False
    return True


def _async(check):
    async def wrapped() -> bool:
        return check()

    return wrapped
