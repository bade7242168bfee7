"""``cloudhub placement`` commands: import foreign placement documents, explain a placement.

The lead mounts :data:`placement` on the ``cloudhub`` command group::

    cloudhub placement import policy.yaml deployment.yaml > placements.yaml
    cloudhub placement explain web --fleet nodes.yaml --fleet placements.yaml
    KUBECONFIG=~/.kube/config cloudhub placement explain web -n factory
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

import click
import yaml

from cloudhub.errors import ConfigError, KubeAPIError
from cloudhub.kube import DAEMONSETS, DEPLOYMENTS, LEASES, NODES, PODS
from cloudhub.kube.access import connect, kubeconfig_path
from cloudhub.placement.errors import InvalidObject, InvalidSpec, TranslationError
from cloudhub.placement.explain import explain, format_explanations
from cloudhub.placement.importers import (
    GROUP_LABEL,
    ImportResult,
    import_files,
    load_documents,
)
from cloudhub.placement.model import KIND, PlacementKey, parse_placement
from cloudhub.placement.nodes import offline_since_with_lease
from cloudhub.placement.planner import Planner
from cloudhub.placement.workloads import placement_from_workload, targets_edge

__all__ = ["NODE_LEASE_NAMESPACE", "placement"]

NODE_LEASE_NAMESPACE = "kube-node-lease"
"""Where nodes' Leases are (Kubernetes' fixed namespace; the hub's ``nodes.lease_namespace``
default)."""


@click.group()
def placement() -> None:
    """Fleet-wide placement of workloads on edge nodes."""


@placement.command("import")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option(
    "--group-label",
    default=GROUP_LABEL,
    show_default=True,
    help="Node label naming a Karmada member cluster's group.",
)
@click.option(
    "--cluster-labels",
    type=click.Path(dir_okay=False),
    help="YAML mapping of Karmada cluster name to its labels.",
)
@click.option(
    "--namespace",
    default="default",
    show_default=True,
    help="Namespace of placements whose source has none.",
)
@click.option(
    "--lossy",
    is_flag=True,
    help="Write the placements even when a field left out changes where or what runs "
    "(each is still listed).",
)
def import_command(
    files: tuple[str, ...],
    group_label: str,
    cluster_labels: str | None,
    namespace: str,
    lossy: bool,
) -> None:
    """Translate Karmada, KubeEdge, OpenYurt and SuperEdge documents into EdgePlacements.

    The EdgePlacements are written to stdout as YAML; what each document could not
    translate is reported on stderr, "dropped" when leaving it out changes where or what
    runs (a wider or narrower placement, other replicas, another image), "not translated"
    when it does not (a Service the policy also propagates).

    Exit status: 0 when the placements are written; 1 when nothing is written: a field
    was dropped (unless --lossy), no document yields a placement, or a file cannot be
    read or parsed.
    """
    labels: dict[str, Any] = {}
    if cluster_labels:
        try:
            with open(cluster_labels) as f:
                labels = yaml.safe_load(f) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise click.ClickException(f"{cluster_labels}: {exc}") from exc
        if not isinstance(labels, dict):
            raise click.ClickException(f"{cluster_labels}: must map cluster names to labels")
    try:
        results = import_files(
            files, group_label=group_label, cluster_labels=labels, namespace=namespace
        )
    except TranslationError as exc:
        raise click.ClickException(str(exc)) from exc
    _report(results)
    placements = [p for r in results for p in r.placements]
    dropped = sum(len(r.lossy) for r in results)
    if not placements:
        raise click.ClickException(
            "nothing to import: no document given translates into an EdgePlacement"
        )
    if dropped and not lossy:
        raise click.ClickException(
            f"{dropped} field(s) dropped would change where or what runs (listed above as "
            '"dropped"); nothing written. Translate them by hand, or pass --lossy to write '
            "the placements without them."
        )
    click.echo(yaml.safe_dump_all(placements, sort_keys=False), nl=False)
    if dropped:
        click.echo(
            f"written with --lossy: {dropped} field(s) dropped change where or what runs",
            err=True,
        )


def _report(results: list[ImportResult]) -> None:
    """Per document on stderr: what it became, what was dropped (file, document, path)."""
    for result in results:
        made = ", ".join(p["metadata"]["name"] for p in result.placements) or "no placement"
        click.echo(f"{result.source}: {result.kind} {result.name} -> {made}", err=True)
        for item in result.dropped:
            if item.changes_meaning:
                where = f"{item.document} {item.path}" if item.document else item.path
                click.echo(f"  dropped: {where or '(the document)'}: {item.message}", err=True)
            else:
                click.echo(f"  not translated: {item.message}", err=True)
        for line in result.notes:
            click.echo(f"  note: {line}", err=True)


@placement.command("explain")
@click.argument("name")
@click.option("--namespace", "-n", default="default", show_default=True)
@click.option(
    "--kind",
    default=KIND,
    show_default=True,
    help="EdgePlacement, or Deployment/DaemonSet placed on the embedded API.",
)
@click.option(
    "--fleet",
    "fleet_files",
    multiple=True,
    type=click.Path(dir_okay=False),
    help="YAML/JSON files of Nodes, their Leases, Pods and placements "
    "(e.g. kubectl get -o yaml) instead of the API.",
)
@click.option(
    "--kubeconfig",
    type=click.Path(dir_okay=False),
    envvar="KUBECONFIG",
    help="Kubeconfig of the cluster to read Nodes, Leases, Pods and placements from "
    "(default: $KUBECONFIG, the embedded API's, then in-cluster).",
)
@click.pass_context
def explain_command(
    ctx: click.Context,
    name: str,
    namespace: str,
    kind: str,
    fleet_files: tuple[str, ...],
    kubeconfig: str | None,
) -> None:
    """For each node, why it was chosen or rejected for placement NAME.

    Without --fleet the cluster is read as the other operator commands reach it. A node
    is online while its Lease (kube-node-lease) or its Ready heartbeat is fresh, as the
    node lifecycle controller judges it; a replica is Ready as its Pod's status says.
    """
    given = ctx.get_parameter_source("kubeconfig") is click.core.ParameterSource.COMMANDLINE
    if fleet_files and given:
        raise click.UsageError("give either --fleet files or --kubeconfig, not both")
    now = time.time()
    try:
        if fleet_files:  # files win over $KUBECONFIG
            items = []
            for path in fleet_files:
                items.extend(_fleet_objects(path))
        else:
            items = asyncio.run(_from_api(kubeconfig_path(kubeconfig), kind))
        planner = _planner(items, now)
    except (
        OSError,
        TranslationError,
        InvalidSpec,
        InvalidObject,
        KubeAPIError,
        ConfigError,
    ) as exc:
        raise click.ClickException(str(exc)) from exc
    key = PlacementKey(kind, namespace, name)
    if planner.placement(key) is None:
        raise click.ClickException(f"no {kind} {namespace}/{name} found")
    planner.plan(now)
    click.echo(format_explanations(explain(planner, key, now)))
    status = planner.status(key)
    if status is not None:
        for condition in status.conditions:
            click.echo(
                f"{condition.type}={condition.status} ({condition.reason}): {condition.message}"
            )


def _fleet_objects(path: str) -> list[dict[str, Any]]:
    """The objects of a fleet file: its documents, and the items of its Lists.

    Raises:
        TranslationError: the file is not UTF-8 YAML, or an item is not an object.
    """
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError as exc:
        raise TranslationError(path, f"not UTF-8 text: {exc.reason}") from exc
    out: list[dict[str, Any]] = []
    for source, doc in load_documents(text, path):
        if not str(doc.get("kind", "")).endswith("List"):
            out.append(doc)
            continue
        items = doc.get("items") or []
        if not isinstance(items, list):
            raise TranslationError(source, "items must be a list")
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                raise TranslationError(f"{source} items[{i}]", "must be an object")
            out.append(item)
    return out


async def _from_api(kubeconfig: str | None, kind: str) -> list[dict[str, Any]]:
    """Nodes, their Leases, placements and Pods (and the workloads of ``kind``) as the
    API has them (``kubeconfig`` None: in-cluster)."""
    from cloudhub.placement.controller import EDGEPLACEMENTS

    client = await connect(kubeconfig)
    try:
        items: list[dict[str, Any]] = []
        resources = [NODES, EDGEPLACEMENTS, PODS]
        if kind != KIND:
            resources.append(DEPLOYMENTS if kind == "Deployment" else DAEMONSETS)
        for resource in resources:
            # rbac: operator's credentials
            found, _ = await client.list(resource)
            items.extend(found)
        try:
            # rbac: operator's credentials (leases in kube-node-lease)
            leases, _ = await client.list(LEASES, NODE_LEASE_NAMESPACE)
        except KubeAPIError as exc:
            if exc.status not in (403, 404):
                raise
            click.echo(
                f"note: cannot read Leases in {NODE_LEASE_NAMESPACE} ({exc}): connectivity "
                "from the Nodes' Ready heartbeat alone",
                err=True,
            )
            leases = []
        items.extend({**lease, "kind": "Lease"} for lease in leases)
        return items
    finally:
        await client.close()


def _planner(items: list[dict[str, Any]], now: float) -> Planner:
    """A planner holding the given objects, fed in the controller's order; a node's
    connectivity read from it and its Lease among the items."""
    planner = Planner()
    leases = {
        str((obj.get("metadata") or {}).get("name")): obj
        for obj in items
        if obj.get("kind") == "Lease"
        and (obj.get("metadata") or {}).get("namespace", NODE_LEASE_NAMESPACE)
        == NODE_LEASE_NAMESPACE
    }
    for obj in items:
        if obj.get("kind") == "Node":
            lease = leases.get(str((obj.get("metadata") or {}).get("name")))
            planner.upsert_node(obj, offline_since=offline_since_with_lease(obj, lease, now))
    for obj in items:
        if obj.get("kind") == KIND:
            planner.upsert_placement(parse_placement(obj))
        elif obj.get("kind") in ("Deployment", "DaemonSet") and targets_edge(
            (obj.get("spec") or {}).get("template") or {}
        ):
            planner.upsert_placement(placement_from_workload(obj))
    for obj in items:
        if obj.get("kind") == "Pod":
            planner.upsert_pod(obj)
    return planner


if __name__ == "__main__":  # pragma: no cover
    sys.exit(placement())
