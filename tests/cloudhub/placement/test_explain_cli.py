"""``explain`` (why each node was chosen or rejected) and the ``placement`` click commands."""

from __future__ import annotations

import pathlib
import time

import yaml
from click.testing import CliRunner

from cloudhub.placement import PlacementKey
from cloudhub.placement.cli import placement
from cloudhub.placement.explain import explain
from cloudhub.placement.nodes import offline_since, offline_since_with_lease
from tests.cloudhub.placement.fleet import Fleet, node, placement_obj, stamp, template
from tests.cloudhub.placement.test_import import KARMADA_OVERRIDE, KARMADA_PROBE, MANIFESTS

KEY = PlacementKey("EdgePlacement", "default", "web")


def _fleet() -> Fleet:
    fleet = Fleet()
    fleet.add_node("ok-1", {"site": "a", "tier": "edge"}, cpu="1")
    fleet.add_node("ok-2", {"site": "a", "tier": "edge"}, cpu="1")
    fleet.add_node("spare", {"site": "a", "tier": "edge"}, cpu="1")
    fleet.add_node("core", {"site": "a", "tier": "core"})
    fleet.add_node("nosite", {"tier": "edge"})
    fleet.add_node(
        "tainted",
        {"site": "a", "tier": "edge"},
        taints=[{"key": "dedicated", "value": "db", "effect": "NoSchedule"}],
    )
    fleet.add_node("cordoned", {"site": "a", "tier": "edge"}, unschedulable=True)
    fleet.add_node("small", {"site": "a", "tier": "edge"}, cpu="100m")
    fleet.apply(
        "web",
        {
            "template": template(cpu="400m"),
            "replicas": 2,
            "nodeSelector": {"matchLabels": {"tier": "edge"}},
            "groups": {"byLabel": "site"},
        },
    )
    fleet.converge()
    return fleet


def test_explain_gives_a_reason_for_every_node() -> None:
    fleet = _fleet()
    by_node = {e.node: e for e in explain(fleet.planner, KEY, fleet.now)}
    assert set(by_node) == set(fleet.nodes)
    chosen = {n for n, e in by_node.items() if e.chosen}
    assert len(chosen) == 2 and chosen <= {"ok-1", "ok-2", "spare"}
    for name in chosen:
        assert by_node[name].reasons[0] == "runs 1 replica of group a"
        assert by_node[name].reasons[1] == "1 of 1 Ready"
    assert "nodeSelector tier In [edge] not met (node has tier=core)" in by_node["core"].reasons
    assert by_node["nosite"].reasons == ("no label site: in no group",)
    assert by_node["tainted"].reasons == ("taint dedicated=db:NoSchedule not tolerated",)
    assert by_node["cordoned"].reasons == ("cordoned (unschedulable): no new replicas",)
    assert by_node["small"].reasons[0].startswith("insufficient cpu: requests 400m, 100m free")
    (idle,) = {"ok-1", "ok-2", "spare"} - chosen
    assert by_node[idle].reasons[0].startswith("eligible, not needed: group a wants 2")
    assert str(by_node["tainted"]) == (
        "tainted: rejected: taint dedicated=db:NoSchedule not tolerated"
    )


def test_explain_offline_nodes() -> None:
    fleet = _fleet()
    busy = next(e.node for e in explain(fleet.planner, KEY, fleet.now) if e.chosen)
    fleet.go_offline(busy)
    fleet.step(advance=60)
    by_node = {e.node: e for e in explain(fleet.planner, KEY, fleet.now)}
    assert by_node[busy].reasons[1] == "offline for 60 s (within the tolerance: kept)"
    fleet.step(advance=400)
    by_node = {e.node: e for e in explain(fleet.planner, KEY, fleet.now)}
    assert "past the 300 s tolerance" in by_node[busy].reasons[1]
    assert explain(fleet.planner, PlacementKey("EdgePlacement", "default", "nope"), 0) == []


def test_cli_import_writes_placements_and_reports(tmp_path: pathlib.Path) -> None:
    labels = tmp_path / "clusters.yaml"
    labels.write_text(
        yaml.safe_dump({"member1": {"location": "us"}, "member2": {"location": "cn"}})
    )
    result = CliRunner().invoke(
        placement,
        ["import", str(KARMADA_PROBE), str(KARMADA_OVERRIDE), "--cluster-labels", str(labels)],
    )
    assert result.exit_code == 0, result.output
    (obj,) = list(yaml.safe_load_all(result.stdout))
    assert obj["kind"] == "EdgePlacement" and obj["spec"]["replicas"] == 6
    assert {o["image"] for o in obj["spec"]["overrides"]} == {
        "fictional.registry.us/cmontemuino/http-probe-test-app:v0.5.0",
        "fictional.registry.cn/cmontemuino/http-probe-test-app:v0.5.0",
    }
    assert "not translated: resourceSelectors[1] selects Service" in result.stderr


def test_cli_import_rejects_broken_input(tmp_path: pathlib.Path) -> None:
    broken = MANIFESTS / (
        "kubeedge/mappers-go/mappers/device-v1beta1/mqtt-mapper/resource/mqttdevice-instance.yaml"
    )
    result = CliRunner().invoke(placement, ["import", str(broken)])
    assert result.exit_code == 1 and "not valid YAML" in result.stderr
    bad_labels = tmp_path / "labels.yaml"
    bad_labels.write_text("- just\n- a list\n")
    result = CliRunner().invoke(
        placement, ["import", str(KARMADA_PROBE), "--cluster-labels", str(bad_labels)]
    )
    assert result.exit_code == 1 and "must map cluster names" in result.stderr


def test_cli_explain_from_files(tmp_path: pathlib.Path) -> None:
    now = time.time()
    nodes = [
        node("n1", {"site": "a"}),
        node("n2", {"site": "b"}, taints=[{"key": "x", "effect": "NoExecute"}]),
    ]
    for n in nodes:
        n["status"]["conditions"] = [
            {"type": "Ready", "status": "True", "lastHeartbeatTime": stamp(now)}
        ]
    fleet_file = tmp_path / "fleet.yaml"
    fleet_file.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": nodes}))
    placements = tmp_path / "placements.yaml"
    placements.write_text(
        yaml.safe_dump(placement_obj("web", {"template": template(), "replicas": 1}))
    )
    result = CliRunner().invoke(
        placement, ["explain", "web", "--fleet", str(fleet_file), "--fleet", str(placements)]
    )
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("n1: chosen (1 replica)")
    assert lines[1] == "n2: rejected: taint x:NoExecute not tolerated"
    assert any(line.startswith("Placed=True") for line in lines)
    missing = CliRunner().invoke(placement, ["explain", "other", "--fleet", str(fleet_file)])
    assert missing.exit_code == 1 and "no EdgePlacement default/other found" in missing.stderr


def test_cli_explain_rejects_broken_fleet_files(tmp_path: pathlib.Path) -> None:
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfe\x00kind: List")
    result = CliRunner().invoke(placement, ["explain", "web", "--fleet", str(binary)])
    assert result.exit_code == 1 and "not UTF-8" in result.stderr
    not_list = tmp_path / "items.yaml"
    not_list.write_text("apiVersion: v1\nkind: List\nitems: {a: 1}\n")
    result = CliRunner().invoke(placement, ["explain", "web", "--fleet", str(not_list)])
    assert result.exit_code == 1 and "items must be a list" in result.stderr
    scalar_item = tmp_path / "scalar.yaml"
    scalar_item.write_text("apiVersion: v1\nkind: List\nitems: [3]\n")
    result = CliRunner().invoke(placement, ["explain", "web", "--fleet", str(scalar_item)])
    assert result.exit_code == 1 and "items[0]" in result.stderr


def _lease(name: str, renewed: object, duration: object = 40) -> dict:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": "kube-node-lease"},
        "spec": {"holderIdentity": name, "leaseDurationSeconds": duration, "renewTime": renewed},
    }


def _ready_node(name: str, heartbeat: float) -> dict:
    obj = node(name, {"site": "a"})
    obj["status"]["conditions"] = [
        {"type": "Ready", "status": "True", "lastHeartbeatTime": stamp(heartbeat)}
    ]
    return obj


def test_a_fresh_lease_or_a_fresh_heartbeat_keeps_a_node_online() -> None:
    now = 1_700_000_000.0
    stale = _ready_node("n", now - 55)
    assert offline_since(stale, now) == now - 55  # the Node alone: offline
    assert offline_since_with_lease(stale, _lease("n", stamp(now - 5)), now) is None
    assert offline_since_with_lease(stale, None, now) == now - 55
    fresh = _ready_node("n", now - 5)
    assert offline_since_with_lease(fresh, _lease("n", stamp(now - 300)), now) is None
    # Both stale: offline since the later of the last renewal and the Node's word.
    assert offline_since_with_lease(stale, _lease("n", stamp(now - 50)), now) == now - 50
    # A Lease's own duration decides; a missing or nonsense one is kubelet's 40 s.
    assert offline_since_with_lease(stale, _lease("n", stamp(now - 50), 60), now) is None
    for duration in (None, "40", True, -3, 0):
        assert offline_since_with_lease(stale, _lease("n", stamp(now - 30), duration), now) is None
        assert offline_since_with_lease(stale, _lease("n", stamp(now - 45), duration), now) == (
            now - 45
        )
    # A Lease that says nothing usable leaves the Node's word.
    for renewed in (None, "yesterday", 17):
        assert offline_since_with_lease(stale, _lease("n", renewed), now) == now - 55
    assert offline_since_with_lease(stale, {"spec": ["x"]}, now) == now - 55


def test_cli_explain_reads_leases_among_fleet_files_and_files_win_over_kubeconfig(
    tmp_path: pathlib.Path,
) -> None:
    now = time.time()
    items = [_ready_node("n1", now - 55), _lease("n1", stamp(now - 2))]
    fleet_file = tmp_path / "fleet.yaml"
    fleet_file.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    placements = tmp_path / "placements.yaml"
    placements.write_text(
        yaml.safe_dump(placement_obj("web", {"template": template(), "replicas": 1}))
    )
    args = ["explain", "web", "--fleet", str(fleet_file), "--fleet", str(placements)]
    # $KUBECONFIG names a cluster, but the files were asked for.
    result = CliRunner().invoke(placement, args, env={"KUBECONFIG": str(tmp_path / "nope")})
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0].startswith("n1: chosen (1 replica)")
    assert "offline" not in result.stdout
    both = CliRunner().invoke(placement, [*args, "--kubeconfig", str(tmp_path / "k")])
    assert both.exit_code == 2 and "not both" in both.stderr
