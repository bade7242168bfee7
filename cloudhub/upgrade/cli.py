"""``cloudhub upgrade status NAME``: an EdgeUpgrade's progress, once or live (rich).

::

    cloudhub upgrade status agent-0-5            # follow it until it completes (Ctrl-C ends)
    cloudhub upgrade status agent-0-5 --once     # print it once
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Mapping
from typing import Any

import click
from rich.console import Console, Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from cloudhub.errors import ConfigError, KubeAPIError, KubeNotFound
from cloudhub.kube import ResourceType
from cloudhub.kube.access import connect, kubeconfig_path
from cloudhub.upgrade.model import API_GROUP, KIND, PLURAL

__all__ = ["EDGEUPGRADES", "render", "upgrade"]

EDGEUPGRADES = ResourceType(API_GROUP, "v1alpha1", PLURAL, KIND, False)
"""The EdgeUpgrade resource type (cluster-scoped)."""

_STYLE = {
    "Healthy": "green",
    "RolledBack": "yellow",
    "Failed": "red",
    "Skipped": "dim",
    "Pending": "",
}


def render(obj: Mapping[str, Any]) -> Group:
    """The progress view of one EdgeUpgrade object: a summary line, a bar of healthy
    nodes, and one row per node that is not Pending (upgrading, finished, or waiting
    with a reason)."""
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    total, healthy = int(status.get("nodeCount", 0)), int(status.get("healthy", 0))
    phase = status.get("phase", "Pending")
    reason = f" ({status['reason']})" if status.get("reason") else ""
    head = Text.assemble(
        (obj.get("metadata", {}).get("name", "?"), "bold"),
        f" -> {spec.get('version', '?')}: {phase}{reason}, ",
        f"{healthy}/{total} healthy, {status.get('upgrading', 0)} upgrading, ",
        f"{status.get('failed', 0)} failed, batch {status.get('batch', 0)}",
    )
    why = Text(str(status.get("message", "")), style="red" if phase == "Invalid" else "")
    bar = ProgressBar(total=max(total, 1), completed=healthy, width=60)
    table = Table("node", "phase", "batch", "from", "reason", "message", box=None)
    for node in status.get("nodes") or ():
        if node.get("phase") == "Pending" and not node.get("reason") and not node.get("batch"):
            continue
        table.add_row(
            str(node.get("name", "")),
            Text(str(node.get("phase", "")), style=_STYLE.get(node.get("phase", ""), "cyan")),
            str(node.get("batch") or ""),
            str(node.get("fromVersion", "")),
            str(node.get("reason", "")),
            str(node.get("message", "")),
        )
    return Group(head, *([why] if status.get("message") else []), bar, table)


async def _get(kubeconfig: str | None, name: str) -> dict[str, Any]:
    client = await connect(kubeconfig)
    try:
        # rbac: operator's credentials (get edgeupgrades)
        return await client.get(EDGEUPGRADES, name)
    finally:
        await client.close()


_FINAL = ("Completed", "Invalid")
"""Phases the live view stops at: nothing changes until the spec does."""


def _finite(value: float) -> float:
    if value != value:  # NaN passes FloatRange's comparisons
        raise click.BadParameter("must be a number of seconds (0.1 to 3600)")
    return value


@click.group()
def upgrade() -> None:
    """Staged agent upgrades over the fleet (EdgeUpgrade, docs/upgrade.md)."""


@upgrade.command("status")
@click.argument("name")
@click.option("--kubeconfig", default=None, help="Kubeconfig (default $KUBECONFIG).")
@click.option("--once", is_flag=True, help="Print the progress once and exit.")
@click.option(
    "--interval",
    type=click.FloatRange(min=0.1, max=3600.0),
    callback=lambda ctx, param, value: _finite(value),
    default=2.0,
    show_default=True,
    help="Seconds between refreshes (live view).",
)
def status(name: str, kubeconfig: str | None, once: bool, interval: float) -> None:
    """Show an EdgeUpgrade's progress, live until it completes (or once with --once).

    The live view ends when the EdgeUpgrade is Completed, or Invalid (the hub refused
    its spec: the message names the field; exit 1). Exits 2 when there is no
    EdgeUpgrade NAME (or it was deleted while followed), 1 when the API cannot be
    used, 130 on Ctrl-C."""
    path = kubeconfig_path(kubeconfig)
    console = Console()
    try:
        obj = asyncio.run(_get(path, name))
        if once:
            console.print(render(obj))
            return
        with Live(render(obj), console=console, refresh_per_second=4) as live:
            while (obj.get("status") or {}).get("phase") not in _FINAL:
                time.sleep(interval)
                obj = asyncio.run(_get(path, name))
                live.update(render(obj))
        if obj["status"]["phase"] == "Invalid":
            sys.exit(1)  # it cannot progress until its spec is fixed (the message says how)
    except KubeNotFound:
        click.echo(
            f"cloudhub upgrade status: there is no EdgeUpgrade named {name!r} "
            "(`kubectl get edgeupgrades` lists them; is the EdgeUpgrade CRD applied?)",
            err=True,
        )
        sys.exit(2)
    except (ConfigError, KubeAPIError) as exc:
        click.echo(f"cloudhub upgrade status: {exc}", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
