"""Progress reports a (compromised or broken) agent makes up, over a real session: the
hub bounds what it copies from them into the resources' status, so that one node cannot
make a status too large to write for every other node of the rollout."""

from __future__ import annotations

import hashlib
import pathlib

import yaml

from cloudhub.kube import CRDS, KubeClient
from cloudhub.placement.prepull import PREPULL_CRD_PATH, PREPULLS
from cloudhub.upgrade.cli import EDGEUPGRADES
from cloudhub.upgrade.extension import CRD_PATH, UpgradeExtension
from cloudhub.upgrade.prepull import PrePullExtension
from cloudhub.upgrade.settings import UpgradeSettings
from protocol.prepull import ImagePullOrder, ImagePullProgress
from protocol.upgrade import UpgradeOrder, UpgradeProgress
from tests.cloudhub.hub.conftest import DEADLINE, Hubs, eventually
from tests.sim.agent import default_node_info

WHEEL = "edgefleet-0.5.0-py3-none-any.whl"
HUGE = 1024 * 1024  # a report's message near the frame limit


def _agent(hubs: Hubs, unique, site: str):
    info = default_node_info("x")
    info["labels"] = {"edgefleet.io/site": site}
    return hubs.agent(unique("pi"), agent_version="0.4.0", node_info=info)


async def test_an_upgrade_report_s_reason_and_message_are_bounded_in_the_status(
    hubs: Hubs, kube: KubeClient, unique, tmp_path: pathlib.Path
) -> None:
    await kube.create(CRDS, yaml.safe_load(CRD_PATH.read_text()))
    (tmp_path / WHEEL).write_bytes(b"wheel bytes")
    digest = hashlib.sha256(b"wheel bytes").hexdigest()
    settings = UpgradeSettings(artifact_dir=str(tmp_path), interval=0.1, install_crd=False)
    await hubs.start(extensions=[UpgradeExtension(settings)])
    site = unique("site")
    agent = _agent(hubs, unique, site)
    await agent.wait_for(lambda: agent.synced, DEADLINE)
    name = unique("hostile")
    spec = {
        "version": "0.5.0",
        "artifact": {"sha256": digest, "name": WHEEL},
        "nodeSelector": {"matchLabels": {"edgefleet.io/site": site}},
    }
    body = {"apiVersion": "apps.edgefleet.io/v1alpha1", "kind": "EdgeUpgrade"}
    await kube.create(EDGEUPGRADES, {**body, "metadata": {"name": name}, "spec": spec})
    await agent.wait_for(lambda: any(isinstance(m, UpgradeOrder) for m in agent.others))
    orders = [m for m in agent.others if isinstance(m, UpgradeOrder)]
    agent.send(
        UpgradeProgress(name, orders[0].uid, "Failed", "0.4.0", 1.0, "R" * 50_000, "m" * HUGE)
    )

    async def entry() -> dict:
        status = (await kube.get(EDGEUPGRADES, name)).get("status") or {}
        return next((e for e in status.get("nodes") or () if e.get("phase") == "Failed"), {})

    failed = await eventually(entry, "the Failed report in the status")
    assert len(failed["reason"]) <= 128 and failed["reason"].startswith("RRR")
    assert len(failed["message"]) <= 1000 and failed["message"].startswith("mmm")


async def test_an_image_pull_report_s_fields_are_bounded_in_the_status(
    hubs: Hubs, kube: KubeClient, unique, namespace: str
) -> None:
    await kube.create(CRDS, yaml.safe_load(PREPULL_CRD_PATH.read_text()))
    await hubs.start(extensions=[PrePullExtension(UpgradeSettings(interval=0.1))])
    site = unique("site")
    agent = _agent(hubs, unique, site)
    await agent.wait_for(lambda: agent.synced, DEADLINE)
    name = unique("pull")
    await kube.create(
        PREPULLS,
        {
            "apiVersion": "apps.edgefleet.io/v1alpha1",
            "kind": "EdgeImagePrePull",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "images": ["registry.local:5000/a:1"],
                "nodeSelector": {"matchLabels": {"edgefleet.io/site": site}},
            },
        },
        namespace,
    )
    await agent.wait_for(lambda: any(isinstance(m, ImagePullOrder) for m in agent.others))
    order = next(m for m in agent.others if isinstance(m, ImagePullOrder))
    agent.send(
        ImagePullProgress(
            name,
            namespace,
            order.uid,
            order.generation,
            "Failed",
            10**12,
            1.0,
            "R" * 50_000,
            "m" * HUGE,
        )
    )

    async def entry() -> dict:
        status = (await kube.get(PREPULLS, name, namespace)).get("status") or {}
        return next((e for e in status.get("nodes") or () if e.get("phase") == "Failed"), {})

    failed = await eventually(entry, "the Failed report in the status")
    assert len(failed["reason"]) <= 128 and failed["reason"].startswith("RRR")
    assert len(failed["message"]) <= 1000 and failed["message"].startswith("mmm")
    assert failed["images"] <= 1  # at most the images ordered


async def test_an_edgeimageprepull_whose_status_cannot_be_written_does_not_stop_the_others(
    hubs: Hubs, kube: KubeClient, unique, namespace: str
) -> None:
    """Found by breakit5: as for EdgeUpgrades, one EdgeImagePrePull whose Invalid status
    the API refuses (stored before the schema refused its image) ended the
    controller's pass, and every pre-pull listed after it stalled."""
    crd = yaml.safe_load(PREPULL_CRD_PATH.read_text())
    images = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "properties"
    ]["images"]
    pattern = images["items"].pop("pattern")  # a CRD that let this image through
    await kube.create(CRDS, crd)
    site = unique("site")

    def body(name: str, refs: list[str]) -> dict:
        return {
            "apiVersion": "apps.edgefleet.io/v1alpha1",
            "kind": "EdgeImagePrePull",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"images": refs, "nodeSelector": {"matchLabels": {"edgefleet.io/site": site}}},
        }

    await kube.create(PREPULLS, body("a-legacy", ["Registry.Local/A:1"]), namespace)
    current = await kube.get(CRDS, crd["metadata"]["name"])
    current["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"][
        "images"
    ]["items"]["pattern"] = pattern
    await kube.replace(CRDS, current)
    await hubs.start(extensions=[PrePullExtension(UpgradeSettings(interval=0.1))])
    agent = _agent(hubs, unique, site)
    await agent.wait_for(lambda: agent.synced, DEADLINE)
    await kube.create(PREPULLS, body("b-good", ["registry.local/a:1"]), namespace)
    await agent.wait_for(lambda: any(isinstance(m, ImagePullOrder) for m in agent.others))
