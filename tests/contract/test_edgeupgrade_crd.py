"""The EdgeUpgrade CRD of deploy/crds on every API: the controller's status is kept
whole (nothing pruned), the API refuses what its schema can check, and the printer
columns show the progress."""

from __future__ import annotations

import asyncio
import os
import pathlib
import sys
from typing import Any

import pytest
import yaml
from kubernetes_asyncio.client.exceptions import ApiException

from cloudhub.upgrade import NodeFacts, NodePhase, Rollout, parse_upgrade
from tests.contract.conftest import Kube

REPO = pathlib.Path(__file__).resolve().parents[2]
CRD = REPO / "deploy/crds/edgeupgrades.apps.edgefleet.io.yaml"
GROUP, VERSION, PLURAL = "apps.edgefleet.io", "v1alpha1", "edgeupgrades"
DIGEST = "ab" * 32
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"


@pytest.fixture
async def edgeupgrades(kube: Kube) -> None:
    """The real CRD installed (or already there from another test of the session)."""
    body = yaml.safe_load(CRD.read_text())
    try:
        await kube.apiext.create_custom_resource_definition(body)
    except ApiException as exc:
        if exc.status != 409:
            raise
    else:
        name = body["metadata"]["name"]
        kube.cluster_scoped(lambda: kube.apiext.delete_custom_resource_definition(name))

    async def served() -> bool:
        status, _, _ = await kube.raw("GET", f"/apis/{GROUP}/{VERSION}/{PLURAL}")
        return status == 200

    await kube.eventually(served, "the EdgeUpgrade CRD to be served")


async def create(kube: Kube, name: str, **spec: Any) -> dict[str, Any]:
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "EdgeUpgrade",
        "metadata": {"name": name},
        "spec": {
            "version": "0.5.0",
            "artifact": {"sha256": DIGEST, "name": "edgefleet-0.5.0-py3-none-any.whl"},
            "maxUnavailable": "50%",
            **spec,
        },
    }
    made = await kube.custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, body)
    kube.cluster_scoped(
        lambda: kube.custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)
    )
    return made


async def test_the_rollouts_status_is_kept_whole_and_shown_in_columns(
    kube: Kube, edgeupgrades: None
) -> None:
    name = kube.unique("agent")
    made = await create(kube, name, failurePolicy="RollbackBatch")
    upgrade = parse_upgrade(made)
    assert upgrade.spec.batching.to_json() == "50%"
    rollout = Rollout(upgrade.spec)
    facts = {n: NodeFacts(n, connected=True, version="0.4.0") for n in ("a", "b", "c", "d")}
    rollout.step(facts, 1_700_000_000.0)
    rollout.report("a", rollout.nodes["a"].phase.DOWNLOADING, 1_700_000_005.0)
    status = rollout.to_status(upgrade.generation)
    after = await kube.custom.patch_cluster_custom_object_status(
        GROUP,
        VERSION,
        PLURAL,
        name,
        {"status": status},
        _content_type="application/merge-patch+json",
    )
    assert after["status"] == status  # nothing pruned, nothing added
    again = Rollout.from_status(upgrade.spec, after["status"])
    assert again.nodes == rollout.nodes and again.batch == 1

    code, table, _ = await kube.raw(
        "GET", f"/apis/{GROUP}/{VERSION}/{PLURAL}/{name}", headers={"Accept": TABLE}
    )
    assert code == 200, table
    columns = [c["name"] for c in table["columnDefinitions"]]
    assert columns[:8] == [
        "Name",
        "Version",
        "Phase",
        "Nodes",
        "Healthy",
        "Upgrading",
        "Failed",
        "Batch",
    ]
    assert table["rows"][0]["cells"][:8] == [name, "0.5.0", "Progressing", 4, 0, 2, 0, 1]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("version", "0.5.0; reboot"),
        ("version", "../0.5"),
        ("failurePolicy", "Ignore"),
        ("offlinePolicy", "Later"),
        ("maxFailures", -1),
        ("artifact", {"sha256": DIGEST.upper(), "name": "a-1-py3-none-any.whl"}),
        ("artifact", {"sha256": DIGEST, "name": "../../etc/cron.d/x.whl"}),
        ("artifact", {"sha256": DIGEST, "url": "http://plain.example/a.whl"}),
    ],
)
async def test_what_the_schema_can_check_is_refused_at_the_api(
    kube: Kube, edgeupgrades: None, field: str, value: Any
) -> None:
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "EdgeUpgrade",
        "metadata": {"name": kube.unique("bad")},
        "spec": {
            "version": "0.5.0",
            "artifact": {"sha256": DIGEST, "name": "edgefleet-0.5.0-py3-none-any.whl"},
            field: value,
        },
    }
    status, answer, _ = await kube.raw("POST", f"/apis/{GROUP}/{VERSION}/{PLURAL}", body)
    assert status == 422, answer
    fields = {c.get("field", "") for c in answer["details"]["causes"]}
    assert any(f.startswith(f"spec.{field}") for f in fields), answer


async def test_cloudhub_upgrade_status_shows_the_progress(kube: Kube, edgeupgrades: None) -> None:
    name = kube.unique("shown")
    made = await create(kube, name)
    rollout = Rollout(parse_upgrade(made).spec)
    facts = {
        "pi-1": NodeFacts("pi-1", connected=True, version="0.4.0"),
        "pi-2": NodeFacts("pi-2", connected=True, version="0.4.0"),
        "pi-3": NodeFacts("pi-3", connected=False, version="0.4.0"),
    }
    rollout.step(facts, 1_700_000_000.0)
    rollout.report("pi-1", NodePhase.INSTALLING, 1_700_000_010.0)
    rollout.report("pi-1", NodePhase.ROLLED_BACK, 1_700_000_050.0, "CrashedAtStart", "exit 1")
    await kube.custom.patch_cluster_custom_object_status(
        GROUP,
        VERSION,
        PLURAL,
        name,
        {"status": rollout.to_status(1)},
        _content_type="application/merge-patch+json",
    )
    proc = await asyncio.create_subprocess_exec(
        str(pathlib.Path(sys.executable).parent / "cloudhub"),
        "upgrade",
        "status",
        name,
        "--once",
        "--kubeconfig",
        str(kube.cluster.kubeconfig),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "COLUMNS": "200"},
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    text = out.decode()
    assert f"{name} -> 0.5.0: Paused (FailureBudgetExceeded), 0/3 healthy" in text
    rows = {line.split()[0]: line.split()[1:] for line in text.splitlines()[2:] if line.strip()}
    assert rows["pi-1"][:4] == ["RolledBack", "1", "0.4.0", "CrashedAtStart"]
    assert rows["pi-3"] == ["Pending", "NodeOffline"]


async def test_cloudhub_upgrade_status_of_a_missing_upgrade_fails_clearly(
    kube: Kube, edgeupgrades: None
) -> None:
    name = kube.unique("absent")
    proc = await asyncio.create_subprocess_exec(
        str(pathlib.Path(sys.executable).parent / "cloudhub"),
        "upgrade",
        "status",
        name,
        "--once",
        "--kubeconfig",
        str(kube.cluster.kubeconfig),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await proc.communicate()
    assert proc.returncode == 2
    assert f"there is no EdgeUpgrade named {name!r}" in err.decode()
