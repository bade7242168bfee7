"""The demo's live table and summary (rich renderables from a :class:`DemoState`)."""

from __future__ import annotations

import math
from collections import Counter

from rich.console import Group
from rich.table import Table
from rich.text import Text

from cloudhub.demo.run import DemoState

__all__ = ["live_view", "summary_view"]

_MARK = {"converged": "[green]✓[/]", "not converged": "[red]✗[/]", "pending": "[yellow]…[/]"}


def live_view(s: DemoState) -> Group:
    """Nodes (transport, link, Ready, pods, metrics), devices (desired/reported), checks."""
    nodes = Table(title=f"edge fleet — phase: {s.phase}", expand=False)
    for col in ("node", "transport", "link", "Ready", "pods (phase)", "cpu", "memory"):
        nodes.add_column(col)
    for name, v in s.nodes.items():
        phases = Counter(p["phase"] for p in s.pods if p["node"] == name)
        m = s.metrics.get(name, {})
        pct = m.get("cpu_percent")
        cpu = f"{pct:.0f} %" if pct is not None and not math.isnan(pct) else "-"
        mem = f"{m['memory_mib']:.0f} MiB" if "memory_mib" in m else "-"
        link = "[red]cut[/]" if v.get("link") == "cut" else "up"
        ready = v.get("ready", "-")
        ready = f"[green]{ready}[/]" if ready == "True" else f"[yellow]{ready}[/]"
        seen = v.get("seen_transport") or "-"
        nodes.add_row(
            name,
            f"{v['transport']} (seen: {seen})",
            link,
            ready,
            ", ".join(f"{n} {p}" for p, n in sorted(phases.items())) or "-",
            cpu,
            mem,
        )
    devices = Table(title="devices (desired → reported)", expand=False)
    for col in ("device", "node", "desired", "reported"):
        devices.add_column(col)
    for d in s.devices:
        devices.add_row(
            d["name"],
            d["node"],
            ", ".join(f"{k}={v}" for k, v in d["desired"].items()) or "-",
            ", ".join(f"{k}={v}" for k, v in d["reported"].items()) or "-",
        )
    checks = Table(title="convergence", expand=False, show_header=False)
    checks.add_column("")
    checks.add_column("check")
    checks.add_column("detail")
    for c in s.checks.values():
        took = f" ({c.seconds:.1f} s)" if c.seconds is not None and c.state == "converged" else ""
        checks.add_row(_MARK[c.state], c.what, (c.detail or "") + took)
    if s.upgrade is not None:  # --upgrade: the view of `cloudhub upgrade status NAME`
        from cloudhub.upgrade.cli import render

        return Group(nodes, devices, render(s.upgrade), checks)
    return Group(nodes, devices, checks)


def summary_view(s: DemoState) -> Group:
    """The closing summary: nodes, pods, twin round trips, convergence, what failed."""
    data = s.summary()
    lines = Table(title="summary", show_header=False, expand=False)
    lines.add_column("")
    lines.add_column("")
    by_transport: dict[str, list[str]] = {}
    for name, v in s.nodes.items():
        by_transport.setdefault(str(v.get("seen_transport") or v["transport"]), []).append(name)
    lines.add_row(
        "nodes",
        f"{data['nodes_ready']}/{len(s.nodes)} Ready, joined with bootstrap tokens; "
        + "; ".join(f"{t}: {', '.join(n)}" for t, n in sorted(by_transport.items())),
    )
    lines.add_row("runtime", f"{s.runtime}: {s.runtime_reason}")
    lines.add_row("pods running", f"{data['pods_running']}/{data['pods']}")
    trips = s.round_trips
    lines.add_row(
        "twin round trips",
        f"{len(trips)}" + (f" (max {max(trips):.2f} s)" if trips else ""),
    )
    conv = s.convergence_seconds
    outage = f"{s.cut_node or '-'}"
    if s.outage_length is not None:
        outage += f" cut off for {s.outage_length:.1f} s; "
        outage += (
            f"everything converged {conv:.1f} s after the link came back"
            if conv is not None
            else "some changes had not converged (below)"
        )
    lines.add_row("outage", outage)
    if s.upgrade is not None:
        status = s.upgrade.get("status") or {}
        versions = ", ".join(f"{n}: {v['version']}" for n, v in s.nodes.items() if "version" in v)
        lines.add_row(
            "upgrade",
            f"{s.upgrade['metadata']['name']} {status.get('phase', 'Pending')}; {versions or '-'}",
        )
    if data["converged"]:
        verdict = Text("everything converged", style="bold green")
    else:
        verdict = Text(
            "not converged:\n" + "\n".join(f"  - {x}" for x in data["not_converged"]),
            style="bold red",
        )
    return Group(lines, verdict)
