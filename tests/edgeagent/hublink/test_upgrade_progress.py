"""Upgrade progress on a real session: the hub acknowledges every ``upgrade_progress``
(an unacknowledged one held every later cumulative ack of the session), and the agent's
reports go through its store's outbox, so that one queued before a restart reaches the
EdgeUpgrade's status from the agent that runs next. Real hub with the upgrade extension on
the embedded API, real agents in this process, real QUIC and WebSocket with real
certificates."""

from __future__ import annotations

import asyncio
import pathlib
import time

import pytest

from cloudhub.kube import KubeClient
from cloudhub.upgrade.cli import EDGEUPGRADES
from edgeagent.agent import Agent
from edgeagent.sdnotify import Notifier
from edgeagent.settings import AgentSettings, HubSettings, RuntimeSettings, StoreSettings
from edgeagent.store import Store
from edgeagent.upgrade.hold import hold
from edgeagent.upgrade.service import upgrade_service
from edgeagent.upgrade.settings import UpgradeSettings
from edgeagent.uplink.session import HubLink
from protocol.upgrade import UpgradeOrder
from tests.edgeagent.hublink.fleet import HubRunner, eventually, free_port, write_node_pki

DIGEST = "ab" * 32


def agent_settings(
    state: pathlib.Path, node: str, url: str, transport: str = "quic"
) -> AgentSettings:
    return AgentSettings(
        node_name=node,
        state_dir=state,
        node_ip="127.0.0.1",
        runtime=RuntimeSettings(kind="process"),
        store=StoreSettings(commit_delay=0.05),
        hub=HubSettings(
            url=url, transports=(transport,), backoff_base=0.1, backoff_cap=0.5, healthy_after=0.5
        ),
        upgrade=UpgradeSettings(enabled=True, prefix=str(state / "venv")),
    )


class Running:
    """One in-process agent (with or without the upgrade service) until ``stop()``."""

    def __init__(self, settings: AgentSettings, *, upgrades: bool) -> None:
        self.stop_event = asyncio.Event()
        self.link = HubLink()
        self.service = upgrade_service(settings, self.link, self.stop_event) if upgrades else None
        services = [self.link] + ([self.service] if self.service else [])
        self.agent = Agent(settings, notifier=Notifier.from_env({}), services=services)
        self.task = asyncio.create_task(self.agent.run(self.stop_event), name="test-agent")

    def store(self) -> Store:
        return self.agent.context.store

    async def stop(self) -> None:
        self.stop_event.set()
        await asyncio.wait_for(self.task, 30)


def upgrade_body(name: str, node: str) -> dict:
    return {
        "apiVersion": "apps.edgefleet.io/v1alpha1",
        "kind": "EdgeUpgrade",
        "metadata": {"name": name},
        "spec": {
            "version": "99.0.0",
            "artifact": {"sha256": DIGEST, "name": "edgefleet-99.0.0-py3-none-any.whl"},
            "nodeSelector": {"matchLabels": {"kubernetes.io/hostname": node}},
        },
    }


def node_entry(kube: KubeClient, name: str, node: str):
    async def entry() -> dict:
        status = (await kube.get(EDGEUPGRADES, name)).get("status") or {}
        return {e["name"]: e for e in status.get("nodes") or ()}.get(node, {})

    return entry


@pytest.mark.parametrize("transport", ["quic", "websocket"])
async def test_the_hub_acknowledges_progress_and_the_acks_behind_it(
    upgrade_hub: HubRunner, kube: KubeClient, pki_ca, tmp_path: pathlib.Path, transport: str
) -> None:
    node = f"edge-progress-{transport}"
    state = tmp_path / node
    write_node_pki(state / "pki", pki_ca.ca, node)
    hold(state, "ShiftChange", time.time())  # the order is answered Deferred
    agent = Running(agent_settings(state, node, upgrade_hub.url, transport), upgrades=True)
    try:
        await eventually(lambda: agent.link.connection_id() is not None, "hub session open")
        await kube.create(EDGEUPGRADES, upgrade_body(f"progress-{transport}", node))
        entry = node_entry(kube, f"progress-{transport}", node)

        async def deferred() -> bool:
            return "deferredUntil" in await entry()

        await eventually(deferred, "the node's Deferred in the EdgeUpgrade's status")
        assert (await entry())["reason"] == "Held"
        store = agent.store()
        await eventually(lambda: store.outbox_depth() == 0, "every progress report acked")
        # The cumulative ack goes on past it: an event queued afterwards is acked too.
        store.outbox_append(
            "event",
            {
                "ref": {"kind": "Node", "namespace": "", "name": node, "uid": node},
                "type": "Normal",
                "reason": "AfterProgress",
                "message": "queued after an upgrade_progress",
                "timestamp": time.time(),
                "count": 1,
            },
        )
        await eventually(lambda: store.outbox_depth() == 0, "the event behind it acked")
        assert agent.service is not None and agent.service.reports_pending() == 0
    finally:
        await agent.stop()


async def test_progress_queued_before_a_restart_reaches_the_status_afterwards(
    upgrade_hub: HubRunner, kube: KubeClient, pki_ca, tmp_path: pathlib.Path
) -> None:
    node = "edge-progress-restart"
    name = "progress-restart"
    state = tmp_path / node
    write_node_pki(state / "pki", pki_ca.ca, node)
    # 1. The node connects (an agent without upgrades: it ignores the order) and is ordered.
    first = Running(agent_settings(state, node, upgrade_hub.url), upgrades=False)
    try:
        await eventually(lambda: first.link.connection_id() is not None, "hub session open")
        created = await kube.create(EDGEUPGRADES, upgrade_body(name, node))
        entry = node_entry(kube, name, node)

        async def ordered() -> bool:
            return (await entry()).get("batch", 0) > 0

        await eventually(ordered, "the node ordered in the EdgeUpgrade's status")
    finally:
        await first.stop()
    # 2. Offline (nothing listens on the hub address), the agent gets that order (as the
    #    hub sent it) while held: the Deferred report waits in the outbox; it stops.
    hold(state, "ShiftChange", time.time())
    offline = Running(agent_settings(state, node, f"quic://127.0.0.1:{free_port()}"), upgrades=True)
    try:
        await eventually(lambda: offline.agent.context is not None, "the agent running")
        assert offline.service is not None
        order = UpgradeOrder(
            upgrade=name,
            uid=created["metadata"]["uid"],
            version="99.0.0",
            sha256=DIGEST,
            artifact="edgefleet-99.0.0-py3-none-any.whl",
        )
        assert await offline.service.manager.handle_order(order) == "deferred"
        assert offline.service.reports_pending() == 1
    finally:
        await offline.stop()
    assert "deferredUntil" not in await entry()
    kept = Store.open_readonly(state / "store.db")
    try:
        assert "upgrade_progress" in [e.kind for e in kept.outbox_unsent()]
    finally:
        kept.close()
    # 3. The next agent (again without upgrades: only the outbox can carry the report).
    after = Running(agent_settings(state, node, upgrade_hub.url), upgrades=False)
    try:

        async def deferred() -> bool:
            return "deferredUntil" in await entry()

        await eventually(deferred, "the Deferred from before the restart in the status")
        assert (await entry())["reason"] == "Held"
        await eventually(lambda: after.store().outbox_depth() == 0, "the report acked")
    finally:
        await after.stop()
