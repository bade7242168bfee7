"""``cloudhub demo``: the command (click) and its live view (rich)."""

from __future__ import annotations

import asyncio
import json
import signal
import sys

import click

__all__ = ["demo"]

_EPILOG = """\b
What happens (about a minute):
  1. the hub starts on its embedded Kubernetes API (no cluster needed);
  2. each node gets its own single-use bootstrap token and joins: its key
     is made on the node, a CSR goes to the hub, the CA is pinned by hash;
  3. the agents start, each through a relay the demo controls, some over
     QUIC and some over WebSocket (--transport), with the simulated and
     thermal mappers on their local device API;
  4. real manifests (KubeEdge examples: ConfigMaps, a Secret, Deployments,
     DeviceModels and Devices) are applied; images become a local busybox;
  5. the table shows nodes, pods, device twins and metrics converging;
  6. outage: one node's link drops every packet; meanwhile a ConfigMap and
     a desired setpoint change in the cloud and a value is reported on the
     edge; its pods keep running; the link returns; convergence is timed;
  7. day 2: one `kubectl logs` and one `kubectl exec` (the real kubectl)
     on an edge pod, through the hub to the node's agent;
  8. with --upgrade (a few minutes more): the first node's agent is
     installed by deploy/install.sh from a wheel of this tree and, at the
     end, an EdgeUpgrade upgrades it to the next version (0.1.0 -> 0.1.1,
     also built here); the live view shows its progress as `cloudhub
     upgrade status NAME` does; the check `upgrade` converges when the node
     is Healthy on the new version and none of its pods restarted.

\b
Exit code: 0 when everything converged; 1 when something did not (the
summary lists what); 2 for bad options. Nothing is left running and no
file is left behind, unless --keep.

\b
Afterwards, with --keep:
  export KUBECONFIG=<printed path>; kubectl get nodes,pods,devices -o wide
  and the printed kubectl logs / kubectl exec commands on an edge pod
"""


@click.command(epilog=_EPILOG)
@click.option(
    "--nodes",
    type=click.IntRange(1, 10),
    default=3,
    show_default=True,
    help="Edge nodes to run (each an agent process with its own state directory).",
)
@click.option(
    "--transport",
    type=click.Choice(["mixed", "quic", "websocket"]),
    default="mixed",
    show_default=True,
    help="mixed: odd nodes on QUIC (UDP), even nodes on WebSocket (TCP).",
)
@click.option(
    "--runtime",
    type=click.Choice(["auto", "docker", "process"]),
    default="auto",
    show_default=True,
    help="auto: podman's Docker API when podman runs here, else plain processes.",
)
@click.option(
    "--keep",
    is_flag=True,
    help="Keep the fleet running after the summary (Ctrl-C stops it) and its directory, "
    "and print a kubeconfig for kubectl.",
)
@click.option(
    "--summary-json",
    type=click.Path(dir_okay=False, writable=True),
    default=None,
    help="Also write the summary as JSON to this file.",
)
@click.option(
    "--kubectl",
    "kubectl",
    default=None,
    metavar="PATH",
    help="The kubectl for the day-2 checks (default: kubectl on PATH).",
)
@click.option(
    "--upgrade",
    is_flag=True,
    help="Also upgrade one agent by an EdgeUpgrade: the first node runs an agent installed "
    "by deploy/install.sh, upgraded to the next version (built from this tree) at the end, "
    "with the upgrade's progress view (needs a source tree and systemctl; a few minutes).",
)
def demo(
    nodes: int,
    transport: str,
    runtime: str,
    keep: bool,
    summary_json: str | None,
    kubectl: str | None,
    upgrade: bool,
) -> None:
    """Run a whole edge fleet on this machine, cut one node off, and show it converge.

    No cluster, registry or manual step needed: the hub, N agents and their mappers run
    as local processes, joined with real bootstrap tokens and mutual TLS.
    """
    from rich.console import Console
    from rich.live import Live

    from cloudhub.demo.run import Demo, DemoOptions
    from cloudhub.demo.view import live_view, summary_view

    console = Console()
    options = DemoOptions(
        nodes=nodes,
        transport=transport,
        runtime=runtime,
        keep=keep,
        kubectl=kubectl,
        upgrade=upgrade,
    )
    runner = Demo(options, on_event=lambda line: console.print(line, highlight=False))

    async def wait_for_stop() -> None:
        console.print(summary_view(runner.state))
        console.print(
            f"\nThe fleet keeps running. kubectl:\n  export KUBECONFIG={runner.state.kubeconfig}\n"
            "  kubectl get nodes,pods -o wide; kubectl get devices -o yaml\n"
            + "".join(f"  {command}\n" for command in runner.day2_commands())
            + f"Files: {runner.state.directory}\nPress Ctrl-C to stop it."
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()

    async def main() -> int:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        interrupted: list[int] = []

        def interrupt() -> None:  # stop early (once): the demo still cleans up
            if not interrupted:
                interrupted.append(1)
                task.cancel()

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, interrupt)
        live = Live(
            live_view(runner.state),
            console=console,
            refresh_per_second=2,
            transient=False,
            auto_refresh=False,
        )

        async def refresh() -> None:
            while True:
                live.update(live_view(runner.state), refresh=True)
                await asyncio.sleep(0.5)

        with live:
            refresher = asyncio.ensure_future(refresh())
            try:
                code = await runner.run(keep_running=wait_for_stop if keep else None)
            except asyncio.CancelledError:
                runner.state.check("interrupted", "the demo ran to the end").fail("interrupted")
                code = 1
            finally:
                refresher.cancel()
                live.update(live_view(runner.state), refresh=True)
        return code

    code = asyncio.run(main())
    if not keep:
        console.print(summary_view(runner.state))
    if summary_json:
        with open(summary_json, "w", encoding="utf-8") as f:
            json.dump(runner.state.summary(), f, indent=2)
    sys.exit(code)
