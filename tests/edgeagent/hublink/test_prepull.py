"""Image pre-pull end to end: an EdgeImagePrePull has real agents pull through their
runtime (the docker runtime: podman's Docker API pulling from a local registry, Debian's
docker-registry on a free port; the process runtime: not applicable, said so), per-node
status; an EdgePlacement with ``updateStrategy.prePull`` replaces its pod only once the
node pulled the new image. Real hub (placement and pre-pull extensions) on the embedded
API, agents as processes over real QUIC with real certificates."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from cloudhub.devtools.engine import EngineUnavailable, start_engine, stop_engine
from cloudhub.kube import CRDS, PODS, KubeClient
from cloudhub.placement import LABEL_PLACEMENT
from cloudhub.placement.controller import CRD_PATH, EDGEPLACEMENTS
from cloudhub.placement.extension import placement_extension
from cloudhub.placement.prepull import PREPULL_CRD_PATH, PREPULLS
from cloudhub.upgrade.prepull import PrePullExtension
from tests.edgeagent.hublink.fleet import eventually
from tests.environment import missing
from tests.registry import LocalRegistry

IDLE = "trap 'exit 0' TERM; while true; do sleep 1; done"


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRegistry]:
    try:
        reg = LocalRegistry(tmp_path_factory.mktemp("registry"))
    except FileNotFoundError:
        missing("docker-registry", "scripts/setup.sh test installs Debian's docker-registry")
    try:
        yield reg
    finally:
        reg.stop()


@pytest.fixture(scope="module")
def podman(tmp_path_factory: pytest.TempPathFactory, registry: LocalRegistry) -> Iterator[Any]:
    """The agents' engine (overrides the shared one): it may pull from the local registry
    over plain HTTP (its own registries.conf)."""
    try:
        engine = start_engine(
            tmp_path_factory.mktemp("podman"), insecure_registries=(registry.address,)
        )
    except EngineUnavailable as exc:
        missing(str(exc), "scripts/setup.sh test installs podman")
    try:
        yield engine
    finally:
        stop_engine(engine)


def push(engine: Any, registry: LocalRegistry, name: str) -> str:
    """Push the engine's busybox to the registry as ``name`` and forget it locally."""
    ref = f"{registry.address}/edge/{name}"
    engine.podman("tag", engine.image, ref)
    engine.podman("push", ref)
    engine.podman("rmi", ref)
    return ref


def present(engine: Any, ref: str) -> bool:
    return bool(engine.podman("images", "-q", ref, check=False).strip())


@pytest.fixture
async def hub(fleet, kube: KubeClient) -> dict[str, Any]:
    """The fleet's hub again, with placement and pre-pull installed as ``cloudhub serve``
    installs them (failed pulls retried after 1 s)."""
    made: dict[str, Any] = {}

    def extensions(settings: Any) -> list[Any]:
        made["placement"] = placement_extension(settings.placement)
        made["prepull"] = PrePullExtension(settings.upgrade, retry_failed_s=1.0)
        return [made["placement"], made["prepull"]]

    for path in (CRD_PATH, PREPULL_CRD_PATH):  # a cluster gets them from deploy/crds
        await kube.create(CRDS, yaml.safe_load(path.read_text()))
    await fleet.hub.stop()
    fleet.hub.extensions = extensions
    await fleet.hub.start(**{"upgrade.interval": 0.2})
    return made


def prepull(name: str, namespace: str, images: list[str], nodes: list[str]) -> dict:
    return {
        "apiVersion": "apps.edgefleet.io/v1alpha1",
        "kind": "EdgeImagePrePull",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "images": images,
            "nodeSelector": {
                "matchExpressions": [
                    {"key": "kubernetes.io/hostname", "operator": "In", "values": nodes}
                ]
            },
        },
    }


def entries(kube: KubeClient, name: str, namespace: str):
    async def read() -> dict[str, dict]:
        status = (await kube.get(PREPULLS, name, namespace)).get("status") or {}
        return {e["name"]: e for e in status.get("nodes") or ()}

    return read


async def test_nodes_pull_through_their_runtime_with_per_node_status(
    fleet, hub, kube: KubeClient, namespace: str, podman: Any, registry: LocalRegistry
) -> None:
    ref = push(podman, registry, "busybox:v1")
    assert not present(podman, ref)
    docker = fleet.agent("edge-pp-docker", kind="docker")
    process = fleet.agent("edge-pp-process")
    nodes = [docker.node, process.node]
    await eventually(
        lambda: all(a.hub_session().get("state") == "connected" for a in (docker, process)),
        "both agents connected",
    )
    await kube.create(PREPULLS, prepull("warm", namespace, [ref], nodes), namespace)
    read = entries(kube, "warm", namespace)

    async def both_ended() -> bool:
        got = await read()
        return all(got.get(n, {}).get("phase") == "Pulled" for n in nodes)

    await eventually(both_ended, "both nodes Pulled", timeout=90)
    got = await read()
    assert got[docker.node]["images"] == 1 and "reason" not in got[docker.node]
    assert got[process.node]["reason"] == "NotApplicable"
    assert "process runtime" in got[process.node]["message"]
    assert got[docker.node]["lastTransitionTime"]
    assert present(podman, ref)
    status = (await kube.get(PREPULLS, "warm", namespace))["status"]
    assert (status["phase"], status["nodeCount"], status["pulled"]) == ("Completed", 2, 2)

    # An image the registry does not have: Failed, with the runtime's reason, naming it.
    gone = f"{registry.address}/edge/nothing:v1"
    await kube.create(PREPULLS, prepull("absent", namespace, [gone], [docker.node]), namespace)
    read = entries(kube, "absent", namespace)

    async def failed() -> bool:
        return (await read()).get(docker.node, {}).get("phase") == "Failed"

    await eventually(failed, "the missing image Failed", timeout=90)
    entry = (await read())[docker.node]
    assert entry["reason"] == "ErrImagePull" and gone in entry["message"]
    assert (await kube.get(PREPULLS, "absent", namespace))["status"]["phase"] == "Failed"

    # A spec the hub refuses (the schema lets a duplicate through): Invalid, naming it.
    await kube.create(PREPULLS, prepull("twice", namespace, [ref, ref], nodes), namespace)

    async def invalid() -> dict:
        status = (await kube.get(PREPULLS, "twice", namespace)).get("status") or {}
        return status if status.get("phase") == "Invalid" else {}

    status = await eventually(invalid, "the duplicate refused")
    assert status["reason"] == "spec.images" and "twice" in status["message"]


def placement(namespace: str, node: str, image: str) -> dict:
    return {
        "apiVersion": "apps.edgefleet.io/v1alpha1",
        "kind": "EdgePlacement",
        "metadata": {"name": "web", "namespace": namespace},
        "spec": {
            "mode": "PerNode",
            "nodeSelector": {"matchLabels": {"kubernetes.io/hostname": node}},
            "updateStrategy": {"prePull": True, "maxUnavailable": 1, "maxSurge": 0},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "containers": [
                        {"name": "web", "image": image, "command": ["/bin/sh", "-c", IDLE]}
                    ]
                },
            },
        },
    }


async def test_a_rolling_update_waits_for_the_pre_pull(
    fleet, hub, kube: KubeClient, namespace: str, podman: Any, registry: LocalRegistry
) -> None:
    v1 = push(podman, registry, "web:v1")
    v2 = f"{registry.address}/edge/web:v2"  # pushed later: the pre-pull fails until then
    agent = fleet.agent("edge-pp-web", kind="docker")
    await kube.create(EDGEPLACEMENTS, placement(namespace, agent.node, v1), namespace)

    async def running(image: str) -> list[dict]:
        items, _ = await kube.list(PODS, namespace)
        pods = [
            p
            for p in items
            if (p["metadata"].get("labels") or {}).get(LABEL_PLACEMENT) == "web"
            and not p["metadata"].get("deletionTimestamp")
        ]
        ok = [
            p
            for p in pods
            if p["spec"]["containers"][0]["image"] == image
            and (p.get("status") or {}).get("phase") == "Running"
        ]
        return ok if len(ok) == len(pods) == 1 else []

    (old,) = await eventually(lambda: running(v1), "the v1 pod Running", timeout=120)
    read = entries(kube, "web", namespace)
    template = placement(namespace, agent.node, v2)["spec"]["template"]
    await kube.patch(EDGEPLACEMENTS, "web", {"spec": {"template": template}}, namespace)

    async def v2_failed() -> bool:
        prepulls = await kube.get(PREPULLS, "web", namespace)
        entry = (await read()).get(agent.node, {})
        return prepulls["spec"]["images"] == [v2] and entry.get("phase") == "Failed"

    await eventually(v2_failed, "the pre-pull of v2 Failed (not pushed yet)", timeout=90)
    controller = hub["placement"].controller
    plans = controller.plans
    await eventually(lambda: controller.plans >= plans + 2, "the controller planned again")
    (still,) = await running(v1)
    assert still["metadata"]["uid"] == old["metadata"]["uid"], "replaced before the pull"

    push(podman, registry, "web:v2")  # the next retry pulls it; then the update goes on
    (new,) = await eventually(lambda: running(v2), "the v2 pod Running", timeout=120)
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    assert (await read())[agent.node]["phase"] == "Pulled"
