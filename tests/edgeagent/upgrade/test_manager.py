"""edgeagent.upgrade.manager against the hub's halves in process: the hub's
ArtifactServer serves the chunks and its Rollout plays the health gate.

Real venvs, real pip, the real guard; the session between them is a direct call here
(the wiring over QUIC/WebSocket is not part of this test).
"""

from __future__ import annotations

import dataclasses
import filecmp
import pathlib

import pytest

from cloudhub.upgrade import NodeFacts, NodePhase, Rollout, parse_spec
from cloudhub.upgrade.artifacts import ArtifactServer
from edgeagent.upgrade import CHUNK_BYTES, ArtifactCache, Layout, UpgradeManager, guard, hold
from protocol.upgrade import ArtifactChunk, UpgradeOrder, UpgradeProgress, UpgradeRollback
from tests.clock import ManualClock
from tests.edgeagent.upgrade.wheels import make_wheel, sha256

NODE = "edge-1"


@dataclasses.dataclass
class Node:
    """One node: its venvs, its state, the hub's halves, and what it reported."""

    tmp: pathlib.Path
    prefix: pathlib.Path
    clock: ManualClock
    server: ArtifactServer
    reports: list[UpgradeProgress] = dataclasses.field(default_factory=list)
    restarts: int = 0
    drop_after: int | None = None
    tamper: bool = False
    requests: int = 0

    @property
    def state(self) -> pathlib.Path:
        return self.tmp / "state"

    @property
    def layout(self) -> Layout:
        return Layout(self.prefix)

    async def fetch(self, digest: str, offset: int, length: int) -> ArtifactChunk:
        from protocol.upgrade import ArtifactRequest

        self.requests += 1
        if self.drop_after is not None and self.requests > self.drop_after:
            self.drop_after = None
            raise ConnectionResetError("the link dropped")
        chunk = self.server.answer(NODE, ArtifactRequest(digest, offset, length))
        if self.tamper and chunk.data:
            chunk = dataclasses.replace(chunk, data=b"E" + chunk.data[1:])
        return chunk

    async def report(self, progress: UpgradeProgress) -> None:
        self.reports.append(progress)

    async def restart(self) -> None:
        self.restarts += 1

    def agent(self, **kwargs) -> UpgradeManager:
        """The agent process now running (its version read from the running venv)."""
        return UpgradeManager(
            self.state,
            self.layout,
            ArtifactCache(self.state / "upgrade" / "artifacts", budget=8 << 20),
            running_version=self.layout.version(),
            fetch=self.fetch,
            report=self.report,
            restart=self.restart,
            clock=self.clock,
            **kwargs,
        )

    def phases(self) -> list[str]:
        return [r.phase for r in self.reports]


@pytest.fixture
def node(tmp_path: pathlib.Path, prefix: pathlib.Path) -> Node:
    (tmp_path / "artifacts").mkdir()
    return Node(
        tmp_path, prefix, ManualClock(1_700_000_000.0), ArtifactServer(tmp_path / "artifacts")
    )


def publish(node: Node, version: str, **kwargs) -> UpgradeOrder:
    """The hub's operator puts a wheel in artifact_dir; the hub orders it to the node."""
    wheel = make_wheel(node.tmp / "artifacts", version, **kwargs)
    digest = sha256(wheel)
    node.server.allow(NODE, digest, wheel.name)
    return UpgradeOrder(
        upgrade="agent",
        uid="u-1",
        version=version,
        sha256=digest,
        artifact=wheel.name,
        size=wheel.stat().st_size,
        gate_s=120.0,
    )


async def test_an_order_over_a_flaky_link_resumes_installs_switches_and_is_healthy(
    node: Node,
) -> None:
    order = publish(node, "0.5.0", padding=3 * CHUNK_BYTES)
    rollout = Rollout(
        parse_spec(
            {"version": "0.5.0", "artifact": {"sha256": order.sha256, "name": order.artifact}}
        )
    )
    rollout.step({NODE: NodeFacts(NODE, True, "0.4.0")}, node.clock())
    old = node.agent()
    node.drop_after = 2
    with pytest.raises(ConnectionResetError):
        await old.handle_order(order)  # the session ends; the hub sends the order again
    assert old.cache.offset(order.sha256) == 2 * CHUNK_BYTES
    assert node.layout.version() == "0.4.0"
    assert await old.handle_order(order) == "restarting"
    # Every byte crossed once: the second attempt resumed at the offset.
    assert node.server.bytes_served == order.size
    assert node.phases() == ["Downloading", "Downloading", "Downloaded", "Installing"]
    for report in node.reports:
        rollout.report(NODE, NodePhase(report.phase), report.observed_at)
    assert node.restarts == 1 and node.layout.version() == "0.5.0"
    assert guard.probation(node.state)["previous_version"] == "0.4.0"
    assert filecmp.cmp(node.state / "upgrade" / "guard.py", guard.__file__, shallow=False)

    # The process manager starts the new agent: the guard lets it, the hub welcomes it.
    assert guard.on_start(node.state, node.clock()) == "probation"
    new = node.agent()
    assert new.running_version == "0.5.0"
    await new.on_connected()
    assert node.reports[-1].phase == "Restarted" and node.reports[-1].version == "0.5.0"
    assert guard.probation(node.state) is None
    rollout.step({NODE: NodeFacts(NODE, True, "0.5.0")}, node.clock())
    assert rollout.nodes[NODE].phase is NodePhase.HEALTHY
    # The same order again (a reconnect) is a no-op now.
    assert await new.handle_order(order) == "current"


async def test_a_new_agent_crashing_at_start_is_rolled_back_and_reported(node: Node) -> None:
    order = publish(node, "0.5.0")
    old = node.agent(max_attempts=2)
    assert await old.handle_order(order) == "restarting"
    for _ in range(2):  # it crashes at each start (systemd restarts it)
        assert guard.on_start(node.state, node.clock()) == "probation"
    assert guard.on_start(node.state, node.clock()) == "rolled-back"
    back = node.agent()
    assert back.running_version == "0.4.0"
    await back.on_connected()
    last = node.reports[-1]
    assert (last.phase, last.reason, last.version) == ("RolledBack", "CrashedAtStart", "0.4.0")
    assert guard.read_result(node.state) is None  # reported once


async def test_a_new_agent_that_cannot_reach_the_hub_goes_back_at_its_deadline(
    node: Node,
) -> None:
    order = publish(node, "0.5.0")
    await node.agent().handle_order(order)
    guard.on_start(node.state, node.clock())
    new = node.agent()
    assert await new.check_probation() is False
    node.clock.advance(order.gate_s + 1)
    assert await new.check_probation() is True
    assert node.restarts == 2 and node.layout.version() == "0.4.0"
    await node.agent().on_connected()
    assert (node.reports[-1].phase, node.reports[-1].reason) == ("RolledBack", "HubUnreachable")


async def test_the_hub_can_roll_a_healthy_node_back(node: Node) -> None:
    order = publish(node, "0.5.0")
    await node.agent().handle_order(order)
    new = node.agent()
    await new.on_connected()
    assert await new.handle_rollback(UpgradeRollback("agent", "u-1", "BatchRolledBack")) is True
    assert node.layout.version() == "0.4.0"
    await node.agent().on_connected()
    assert (node.reports[-1].phase, node.reports[-1].reason) == ("RolledBack", "BatchRolledBack")


async def test_a_tampered_artifact_is_refused_and_nothing_changes(node: Node) -> None:
    order = publish(node, "0.5.0")
    node.tamper = True
    assert await node.agent().handle_order(order) == "failed"
    last = node.reports[-1]
    assert (last.phase, last.reason) == ("Failed", "DigestMismatch")
    assert node.layout.version() == "0.4.0" and not node.layout.staging.exists()
    assert node.restarts == 0 and guard.probation(node.state) is None


async def test_an_artifact_that_installs_another_version_is_refused(node: Node) -> None:
    order = publish(node, "0.5.0")
    lying = dataclasses.replace(order, version="0.6.0")
    assert await node.agent().handle_order(lying) == "failed"
    assert node.reports[-1].reason == "VersionMismatch"
    assert node.layout.version() == "0.4.0" and not node.layout.staging.exists()


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"version": "0.3.0"}, "DowngradeRefused"),
        ({"version": "0.5.0; reboot"}, "InvalidOrder"),
        ({"artifact": "../../../etc/cron.d/evil.whl"}, "InvalidOrder"),
        ({"artifact": "edgefleet.whl/../x.whl"}, "InvalidOrder"),
        ({"sha256": "../" + "a" * 61}, "InvalidOrder"),
        ({"artifact": "", "url": "https://example.org/a.whl"}, "URLNotSupported"),
    ],
)
async def test_orders_breaking_a_rule_are_refused_before_anything_is_fetched(
    node: Node, change: dict, reason: str
) -> None:
    order = dataclasses.replace(publish(node, "0.5.0"), **change)
    assert await node.agent().handle_order(order) == "failed"
    assert [(r.phase, r.reason) for r in node.reports] == [("Failed", reason)]
    assert node.requests == 0 and node.layout.version() == "0.4.0"


async def test_a_downgrade_is_carried_out_when_allowed(node: Node) -> None:
    order = publish(node, "0.3.0")
    allowed = dataclasses.replace(order, allow_downgrade=True)
    assert await node.agent().handle_order(allowed) == "restarting"
    assert node.layout.version() == "0.3.0"


async def test_the_hub_serves_only_ordered_artifacts_with_the_ordered_digest(node: Node) -> None:
    order = publish(node, "0.5.0")
    node.server.revoke(NODE)
    assert await node.agent().handle_order(order) == "failed"
    assert node.reports[-1].reason == "ArtifactUnavailable"
    assert "NotOrdered" in node.reports[-1].message
    node.server.allow(NODE, order.sha256, order.artifact)
    (node.tmp / "artifacts" / order.artifact).write_bytes(b"swapped on the hub's disk")
    node.reports.clear()
    assert await node.agent().handle_order(order) == "failed"
    assert "WrongDigest" in node.reports[-1].message


async def test_an_unavailable_artifact_is_reported_in_words_an_operator_can_act_on(
    node: Node,
) -> None:
    """Found by breakit5: a wheel whose digest is not the EdgeUpgrade's (a typo in
    spec.artifact.sha256, the wrong file copied) and a wheel missing from the hub were
    both reported as "the hub has no artifact: NotFound", though the file was there."""
    order = publish(node, "0.5.0")
    (node.tmp / "artifacts" / order.artifact).write_bytes(b"another wheel")
    assert await node.agent().handle_order(order) == "failed"
    said = node.reports[-1].message
    assert "WrongDigest" in said and "does not hash to the ordered sha256" in said
    assert "spec.artifact.sha256" in said
    (node.tmp / "artifacts" / order.artifact).unlink()
    assert await node.agent().handle_order(order) == "failed"
    said = node.reports[-1].message
    assert "NotFound" in said and f"no {order.artifact} in its upgrade.artifact_dir" in said


async def test_a_held_node_defers_until_unheld(node: Node) -> None:
    order = publish(node, "0.5.0")
    hold(node.state, "line 4 is producing", node.clock())
    agent = node.agent()
    assert agent.deferred() == "Held: line 4 is producing"
    assert await agent.handle_order(order) == "deferred"
    assert [(r.phase, r.reason, r.message) for r in node.reports] == [
        ("Deferred", "Held", "Held: line 4 is producing")
    ]
    assert node.requests == 0 and node.layout.version() == "0.4.0"
    from edgeagent.upgrade import unhold

    assert unhold(node.state) is True
    assert await agent.handle_order(order) == "restarting"


async def test_a_rollback_order_touches_only_the_switch_its_upgrade_made(node: Node) -> None:
    order = publish(node, "0.5.0")
    agent = node.agent()
    # Never switched for it (here: held): the order leaves every venv alone.
    assert (
        await agent.handle_rollback(UpgradeRollback("agent", "u-1", "HealthGateTimeout")) is False
    )
    await agent.handle_order(order)
    new = node.agent()
    await new.on_connected()  # confirmed: remembered as the last switch
    other = UpgradeRollback("another", "u-2", "BatchRolledBack")
    assert await new.handle_rollback(other) is False and node.layout.version() == "0.5.0"
    assert await new.handle_rollback(UpgradeRollback("agent", "u-1", "BatchRolledBack")) is True
    assert node.layout.version() == "0.4.0"
    back = node.agent()
    # The same order again (a resend) must not undo an older switch.
    assert await back.handle_rollback(UpgradeRollback("agent", "u-1", "BatchRolledBack")) is False
    assert node.layout.version() == "0.4.0" and node.restarts == 2


async def test_a_resumed_download_with_damaged_partial_bytes_starts_over_once(
    node: Node,
) -> None:
    """Found by breakit5: a power cut while the partial download was written can leave
    zeros at its end (delayed allocation); the resumed download then failed the node
    with DigestMismatch (a failure the rollout counts: maxFailures 0 paused it) although
    nothing was wrong with the artifact. A resumed download that does not verify is
    fetched once more from the start; only a fresh one that does not is a mismatch."""
    order = publish(node, "0.5.0", padding=3 * CHUNK_BYTES)
    agent = node.agent()
    node.drop_after = 2
    with pytest.raises(ConnectionResetError):
        await agent.handle_order(order)
    part = node.state / "upgrade" / "artifacts" / f"{order.sha256}.part"
    damaged = bytearray(part.read_bytes())
    damaged[-4096:] = bytes(4096)
    part.write_bytes(bytes(damaged))
    assert await agent.handle_order(order) == "restarting"
    assert "Failed" not in node.phases() and node.layout.version() == "0.5.0"

    # A fresh download that does not verify is still refused at once.
    tampered = publish(node, "0.6.0")
    node.tamper = True
    assert await node.agent().handle_order(dataclasses.replace(tampered, uid="u-2")) == "failed"
    assert node.reports[-1].reason == "DigestMismatch"
