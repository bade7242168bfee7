"""The upgrade extension in a real hub: simulated agents over real WebSocket/TLS receive
their order in batches, fetch the artifact in chunks over the session, report progress,
come back with the new version (the hub's health gate), and a rollback pauses the rest."""

from __future__ import annotations

import hashlib
import pathlib

import yaml

from cloudhub.kube import CRDS, NODES, KubeClient
from cloudhub.upgrade.cli import EDGEUPGRADES
from cloudhub.upgrade.extension import CRD_PATH, UpgradeExtension
from cloudhub.upgrade.model import HOSTNAME_LABEL
from cloudhub.upgrade.settings import UpgradeSettings
from protocol.upgrade import (
    ArtifactChunk,
    ArtifactRequest,
    UpgradeOrder,
    UpgradeProgress,
)
from tests.cloudhub.hub.conftest import DEADLINE, Hubs, eventually
from tests.sim.agent import default_node_info

REPO = pathlib.Path(__file__).resolve().parents[3]
WHEEL = "edgefleet-0.5.0-py3-none-any.whl"


def orders(agent) -> list[UpgradeOrder]:
    return [m for m in agent.others if isinstance(m, UpgradeOrder)]


def chunks(agent) -> list[ArtifactChunk]:
    return [m for m in agent.others if isinstance(m, ArtifactChunk)]


async def test_a_rollout_over_real_sessions(
    hubs: Hubs, kube: KubeClient, unique, tmp_path: pathlib.Path
) -> None:
    assert (REPO / "deploy/crds/edgeupgrades.apps.edgefleet.io.yaml").read_text() == (
        CRD_PATH.read_text()
    )
    await kube.create(CRDS, yaml.safe_load(CRD_PATH.read_text()))
    artifact = bytes(range(256)) * 1000  # 256,000 bytes
    (tmp_path / WHEEL).write_bytes(artifact)
    digest = hashlib.sha256(artifact).hexdigest()
    extension = UpgradeExtension(
        UpgradeSettings(artifact_dir=str(tmp_path), interval=0.1, install_crd=False)
    )
    await hubs.start(extensions=[extension])
    site = unique("site")
    info = default_node_info("x")
    info["labels"] = {"edgefleet.io/site": site}
    names = [unique(f"pi-{i}") for i in range(3)]
    agents = {n: hubs.agent(n, agent_version="0.4.0", node_info=info) for n in names}
    for agent in agents.values():
        await agent.wait_for(lambda a=agent: a.synced, DEADLINE)
    name = unique("agent")
    await kube.create(
        EDGEUPGRADES,
        {
            "apiVersion": "apps.edgefleet.io/v1alpha1",
            "kind": "EdgeUpgrade",
            "metadata": {"name": name},
            "spec": {
                "version": "0.5.0",
                "artifact": {"sha256": digest, "name": WHEEL, "size": len(artifact)},
                "nodeSelector": {"matchLabels": {"edgefleet.io/site": site}},
                "maxUnavailable": 1,
                "healthGate": {"timeoutSeconds": 120},
            },
        },
    )
    first, second, third = (agents[n] for n in sorted(names))
    await first.wait_for(lambda: bool(orders(first)), DEADLINE)
    order = orders(first)[0]
    assert (order.version, order.sha256, order.artifact) == ("0.5.0", digest, WHEEL)
    assert not orders(second) and not orders(third)  # batches of one

    # A node that was not ordered gets nothing.
    second.send(ArtifactRequest(digest, 0, 65536))
    await second.wait_for(lambda: bool(chunks(second)), DEADLINE)
    assert chunks(second)[0].error == "NotOrdered" and chunks(second)[0].data == b""

    # The ordered one downloads it in chunks over its session.
    received = b""
    while len(received) < len(artifact):
        count = len(chunks(first))
        first.send(ArtifactRequest(digest, len(received), 100_000))
        await first.wait_for(lambda c=count: len(chunks(first)) > c, DEADLINE)
        chunk = chunks(first)[-1]
        assert chunk.error == "" and chunk.total == len(artifact)
        received += chunk.data
    assert received == artifact
    for phase in ("Downloading", "Downloaded", "Installing"):
        first.send(UpgradeProgress(name, order.uid, phase, "0.4.0", 1.0))

    async def node_phase(node: str, phase: str) -> bool:
        obj = await kube.get(EDGEUPGRADES, name)
        entries = {e["name"]: e for e in (obj.get("status") or {}).get("nodes") or ()}
        return entries.get(node, {}).get("phase") == phase

    await eventually(lambda: node_phase(first.name, "Installing"), "Installing recorded")
    # The agent restarts on the new version: the hub's gate passes, the next batch starts.
    await first.stop()
    restarted = first.restarted(agent_version="0.5.0")
    restarted.start()
    hubs_agents = [restarted]
    try:
        await eventually(lambda: node_phase(first.name, "Healthy"), "the first node Healthy")
        await second.wait_for(lambda: bool(orders(second)), DEADLINE)
        second.send(UpgradeProgress(name, order.uid, "Installing", "0.4.0", 2.0))
        second.send(
            UpgradeProgress(name, order.uid, "RolledBack", "0.4.0", 3.0, "CrashedAtStart", "x")
        )
        await eventually(lambda: node_phase(second.name, "RolledBack"), "the rollback recorded")

        async def paused() -> bool:
            status = (await kube.get(EDGEUPGRADES, name)).get("status") or {}
            return (status.get("phase"), status.get("reason")) == (
                "Paused",
                "FailureBudgetExceeded",
            )

        await eventually(paused, "the rollout paused")
        status = (await kube.get(EDGEUPGRADES, name))["status"]
        assert (status["healthy"], status["failed"], status["batch"]) == (1, 1, 2)
        assert not orders(third)
        entry = next(e for e in status["nodes"] if e["name"] == second.name)
        assert entry["reason"] == "CrashedAtStart"
    finally:
        for agent in hubs_agents:
            await agent.stop()


async def start_hub(hubs: Hubs, kube: KubeClient, tmp_path: pathlib.Path) -> str:
    """A hub with the extension, the CRD installed, one artifact; returns its digest."""
    await kube.create(CRDS, yaml.safe_load(CRD_PATH.read_text()))
    (tmp_path / WHEEL).write_bytes(b"wheel bytes")
    extension = UpgradeExtension(
        UpgradeSettings(artifact_dir=str(tmp_path), interval=0.1, install_crd=False)
    )
    await hubs.start(extensions=[extension])
    return hashlib.sha256(b"wheel bytes").hexdigest()


def edgeupgrade(name: str, digest: str, site: str, **spec) -> dict:
    return {
        "apiVersion": "apps.edgefleet.io/v1alpha1",
        "kind": "EdgeUpgrade",
        "metadata": {"name": name},
        "spec": {
            "version": "0.5.0",
            "artifact": {"sha256": digest, "name": WHEEL},
            "nodeSelector": {"matchLabels": {"edgefleet.io/site": site}},
            "maxUnavailable": 1,
            **spec,
        },
    }


async def test_a_node_offline_during_its_batch_is_upgraded_when_it_returns(
    hubs: Hubs, kube: KubeClient, unique, tmp_path: pathlib.Path
) -> None:
    digest = await start_hub(hubs, kube, tmp_path)
    site = unique("site")
    info = default_node_info("x")
    info["labels"] = {"edgefleet.io/site": site}
    early, late = unique("a-node"), unique("b-node")
    a = hubs.agent(early, agent_version="0.4.0", node_info=info)
    b = hubs.agent(late, agent_version="0.4.0", node_info=info)
    for agent in (a, b):
        await agent.wait_for(lambda x=agent: x.synced, DEADLINE)
    await b.stop()  # offline before the rollout starts: its Node stays
    name = unique("offline")
    await kube.create(EDGEUPGRADES, edgeupgrade(name, digest, site))
    await a.wait_for(lambda: bool(orders(a)), DEADLINE)

    async def entry(node: str) -> dict:
        status = (await kube.get(EDGEUPGRADES, name)).get("status") or {}
        return {e["name"]: e for e in status.get("nodes") or ()}.get(node, {})

    async def waiting_offline() -> bool:
        return (await entry(late)).get("reason") == "NodeOffline"

    await a.stop()
    a2 = a.restarted(agent_version="0.5.0")
    a2.start()
    b2 = None
    try:
        await eventually(lambda: _phase(entry, early, "Healthy"), "the online node Healthy")
        await eventually(waiting_offline, "the offline node waiting")
        status = (await kube.get(EDGEUPGRADES, name))["status"]
        assert status["phase"] == "Progressing" and status["healthy"] == 1
        b2 = b.restarted(agent_version="0.4.0")
        b2.start()
        await b2.wait_for(lambda: bool(orders(b2)), DEADLINE)
        assert orders(b2)[0].sha256 == digest
        await b2.stop()
        b2 = b2.restarted(agent_version="0.5.0")
        b2.start()
        await eventually(lambda: _phase(entry, late, "Healthy"), "the returned node Healthy")

        async def completed() -> bool:
            return ((await kube.get(EDGEUPGRADES, name)).get("status") or {}).get(
                "phase"
            ) == "Completed"

        await eventually(completed, "the rollout Completed")
    finally:
        await a2.stop()
        if b2 is not None:
            await b2.stop()


async def _phase(entry, node: str, phase: str) -> bool:
    return (await entry(node)).get("phase") == phase


async def test_a_node_relabelled_to_another_nodes_hostname_is_not_selected_by_it(
    hubs: Hubs, kube: KubeClient, unique, tmp_path: pathlib.Path
) -> None:
    # The admission webhook admits `kubernetes.io/hostname: <name>` once the creator may
    # get node <name>. The hub sets that label at registration and does not repair it
    # (a reconnect with the same facts writes nothing): a Node patched to carry another
    # node's hostname must not be selected under that name.
    digest = await start_hub(hubs, kube, tmp_path)
    site = unique("site")
    info = default_node_info("x")
    info["labels"] = {"edgefleet.io/site": site}
    seen, hidden = unique("a-seen"), unique("b-hidden")
    agents = [hubs.agent(n, agent_version="0.4.0", node_info=info) for n in (seen, hidden)]
    for agent in agents:
        await agent.wait_for(lambda x=agent: x.synced, DEADLINE)
    assert hubs.hub is not None
    nodes = hubs.hub.nodes

    async def registered() -> bool:
        return all(nodes is not None and nodes.get(n) is not None for n in (seen, hidden))

    await eventually(registered, "both Nodes registered")
    await kube.patch(NODES, hidden, {"metadata": {"labels": {HOSTNAME_LABEL: seen}}})

    async def cached() -> bool:
        node = nodes.get(hidden) if nodes is not None else None
        return ((node or {}).get("metadata") or {}).get("labels", {}).get(HOSTNAME_LABEL) == seen

    await eventually(cached, "the hub's cache holds the relabelled Node")
    name = unique("by-name")
    body = edgeupgrade(name, digest, site, maxUnavailable=2)
    body["spec"]["nodeSelector"] = {"matchLabels": {HOSTNAME_LABEL: seen}}
    await kube.create(EDGEUPGRADES, body)
    first = next(a for a in agents if a.name == seen)
    await first.wait_for(lambda: bool(orders(first)), DEADLINE)

    async def listed() -> list[str]:
        status = (await kube.get(EDGEUPGRADES, name)).get("status") or {}
        return sorted(e["name"] for e in status.get("nodes") or ())

    await eventually(lambda: _equals(listed, [seen]), "the status lists the named node")
    other = next(a for a in agents if a.name == hidden)
    assert not orders(other)
    assert (await listed()) == [seen]


async def _equals(read, want) -> bool:
    return (await read()) == want


async def test_a_node_written_into_the_status_is_not_ordered_after_a_hub_restart(
    hubs: Hubs, kube: KubeClient, unique, tmp_path: pathlib.Path
) -> None:
    # edgeupgrades/status passes no admission check; the hub rebuilds a rollout from the
    # status when it starts. An "upgrading" entry for a node the spec does not select was
    # ordered when that node connected, and held the batch from the selected ones.
    await kube.create(CRDS, yaml.safe_load(CRD_PATH.read_text()))
    (tmp_path / WHEEL).write_bytes(b"wheel bytes")
    digest = hashlib.sha256(b"wheel bytes").hexdigest()
    site = unique("site")
    hidden, seen = unique("b-hidden"), unique("a-seen")
    name = unique("restored")
    await kube.create(EDGEUPGRADES, edgeupgrade(name, digest, site))
    injected = {"batch": 1, "nodes": [{"name": hidden, "phase": "Downloading", "batch": 1}]}
    await kube.patch(EDGEUPGRADES, name, {"status": injected}, subresource="status")
    extension = UpgradeExtension(
        UpgradeSettings(artifact_dir=str(tmp_path), interval=0.1, install_crd=False)
    )
    await hubs.start(extensions=[extension])
    info = default_node_info("x")
    info["labels"] = {"edgefleet.io/site": site}
    mine = hubs.agent(seen, agent_version="0.4.0", node_info=info)
    await mine.wait_for(lambda: bool(orders(mine)), DEADLINE)
    other = hubs.agent(hidden, agent_version="0.4.0", node_info=default_node_info("x"))
    await other.wait_for(lambda: other.synced, DEADLINE)

    async def listed() -> list[str]:
        status = (await kube.get(EDGEUPGRADES, name)).get("status") or {}
        return sorted(e["name"] for e in status.get("nodes") or ())

    await eventually(lambda: _equals(listed, [seen]), "the status lists the selected node")
    assert not orders(other)


async def test_an_invalid_edgeupgrade_is_marked_invalid_naming_the_field(
    hubs: Hubs, kube: KubeClient, unique, tmp_path: pathlib.Path
) -> None:
    digest = await start_hub(hubs, kube, tmp_path)
    name = unique("invalid")
    # Valid for the schema, refused by the hub: soakSeconds must stay below the timeout.
    body = edgeupgrade(name, digest, "s", healthGate={"soakSeconds": 60, "timeoutSeconds": 30})
    await kube.create(EDGEUPGRADES, body)

    async def invalid() -> bool:
        status = (await kube.get(EDGEUPGRADES, name)).get("status") or {}
        return status.get("phase") == "Invalid"

    await eventually(invalid, "the EdgeUpgrade marked Invalid")
    status = (await kube.get(EDGEUPGRADES, name))["status"]
    assert status["reason"] == "spec.healthGate.soakSeconds"
    assert "below timeoutSeconds" in status["message"]


async def test_deleting_the_last_edgeupgrade_mid_rollout_stops_its_orders(
    hubs: Hubs, kube: KubeClient, unique, tmp_path: pathlib.Path
) -> None:
    await kube.create(CRDS, yaml.safe_load(CRD_PATH.read_text()))
    (tmp_path / WHEEL).write_bytes(b"wheel bytes")
    digest = hashlib.sha256(b"wheel bytes").hexdigest()
    extension = UpgradeExtension(
        UpgradeSettings(artifact_dir=str(tmp_path), interval=0.1, install_crd=False)
    )
    await hubs.start(extensions=[extension])
    site = unique("site")
    info = default_node_info("x")
    info["labels"] = {"edgefleet.io/site": site}
    agent = hubs.agent(unique("pi"), agent_version="0.4.0", node_info=info)
    await agent.wait_for(lambda: agent.synced, DEADLINE)
    name = unique("deleted")
    await kube.create(EDGEUPGRADES, edgeupgrade(name, digest, site))
    await agent.wait_for(lambda: bool(orders(agent)), DEADLINE)
    agent.send(UpgradeProgress(name, orders(agent)[0].uid, "Downloading", "0.4.0", 1.0))
    await kube.delete(EDGEUPGRADES, name)
    await eventually(lambda: not extension.rollouts, "the deleted rollout forgotten", 10)
    await agent.stop()
    again = agent.restarted(agent_version="0.4.0")
    again.start()
    try:
        await again.wait_for(lambda: again.synced, DEADLINE)
        # The chunk answers a request sent after the sync: an order of the reconnect
        # (sent right after the sync) would have come before it.
        again.send(ArtifactRequest(digest, 0, 1024))
        await again.wait_for(lambda: bool(chunks(again)), DEADLINE)
        assert orders(again) == []
        assert chunks(again)[0].error == "NotOrdered"
    finally:
        await again.stop()


async def test_a_fixed_edgeupgrade_loses_the_invalid_message(
    hubs: Hubs, kube: KubeClient, unique, tmp_path: pathlib.Path
) -> None:
    """Found by breakit5: the status is merge-patched and a valid rollout's status had no
    ``message``, so the Invalid's message stayed after the spec was fixed."""
    digest = await start_hub(hubs, kube, tmp_path)
    name = unique("fixed")
    gate = {"soakSeconds": 60, "timeoutSeconds": 30}  # the schema cannot compare the two
    body = edgeupgrade(name, digest, unique("s"), healthGate=gate)
    await kube.create(EDGEUPGRADES, body)

    async def status() -> dict:
        return (await kube.get(EDGEUPGRADES, name)).get("status") or {}

    await eventually(lambda: _is(status, "phase", "Invalid"), "the EdgeUpgrade marked Invalid")
    await kube.patch(EDGEUPGRADES, name, {"spec": {"healthGate": {"timeoutSeconds": 600}}})
    await eventually(lambda: _is(status, "reason", "NoMatchingNodes"), "the fixed one progressing")
    assert "below timeoutSeconds" not in (await status())["message"]


async def _is(status, key: str, value: str) -> bool:
    return (await status()).get(key) == value


async def test_a_held_node_shows_the_reason_given_to_edgeagent_hold(
    hubs: Hubs, kube: KubeClient, unique, tmp_path: pathlib.Path
) -> None:
    """Found by breakit5: ``edgeagent hold --reason TEXT`` says the text is "shown in the
    node's upgrade status", but the hub kept only ``Held`` (the report's reason) and
    dropped the message that carries it."""
    digest = await start_hub(hubs, kube, tmp_path)
    site = unique("site")
    info = default_node_info("x")
    info["labels"] = {"edgefleet.io/site": site}
    agent = hubs.agent(unique("pi"), agent_version="0.4.0", node_info=info)
    await agent.wait_for(lambda: agent.synced, DEADLINE)
    name = unique("held")
    await kube.create(EDGEUPGRADES, edgeupgrade(name, digest, site))
    await agent.wait_for(lambda: bool(orders(agent)), DEADLINE)
    uid = orders(agent)[0].uid
    agent.send(UpgradeProgress(name, uid, "Deferred", "0.4.0", 1.0, "Held", "Held: SD card swap"))

    async def entry() -> dict:
        status = (await kube.get(EDGEUPGRADES, name)).get("status") or {}
        return next((e for e in status.get("nodes") or () if e.get("deferredUntil")), {})

    held = await eventually(entry, "the node deferred")
    assert (held["reason"], held.get("message")) == ("Held", "Held: SD card swap")


async def test_an_edgeupgrade_whose_status_cannot_be_written_does_not_stop_the_others(
    hubs: Hubs, kube: KubeClient, unique, tmp_path: pathlib.Path
) -> None:
    """Found by breakit5: one EdgeUpgrade whose Invalid status write failed (stored before
    the schema refused its maxUnavailable, so the API refuses every write of it now; or
    deleted between the list and the write: a 404 read as "no CRD") ended the controller's
    pass, and every EdgeUpgrade listed after it stalled."""
    crd = yaml.safe_load(CRD_PATH.read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    batch = schema["properties"]["spec"]["properties"]["maxUnavailable"]
    strict = dict(batch)
    batch.pop("minimum"), batch.pop("pattern")  # the CRD as it was before
    await kube.create(CRDS, crd)
    (tmp_path / WHEEL).write_bytes(b"wheel bytes")
    digest = hashlib.sha256(b"wheel bytes").hexdigest()
    site = unique("site")
    await kube.create(
        EDGEUPGRADES, edgeupgrade(f"a-{unique('legacy')}", digest, site, maxUnavailable=-1)
    )
    current = await kube.get(CRDS, crd["metadata"]["name"])
    current["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"][
        "maxUnavailable"
    ] = strict
    await kube.replace(CRDS, current)
    extension = UpgradeExtension(
        UpgradeSettings(artifact_dir=str(tmp_path), interval=0.1, install_crd=False)
    )
    await hubs.start(extensions=[extension])
    info = default_node_info("x")
    info["labels"] = {"edgefleet.io/site": site}
    agent = hubs.agent(unique("pi"), agent_version="0.4.0", node_info=info)
    await agent.wait_for(lambda: agent.synced, DEADLINE)
    await kube.create(EDGEUPGRADES, edgeupgrade(f"b-{unique('good')}", digest, site))
    await agent.wait_for(lambda: bool(orders(agent)), DEADLINE)
