"""``edgeagent`` command line: ``run`` (the daemon) and ``status`` (offline report).

Only ``__main__`` reads the process environment and decides the exit code:
0 after SIGTERM/SIGINT, 1 on a fatal error, 2 on bad settings or usage, and for ``run``
when a hub is configured but this node has not joined it ("not joined", with the join
command to run).
"""

from __future__ import annotations

import asyncio
import logging
import os
import pathlib
import signal
import sys
from typing import Any

import click

from edgeagent.errors import AgentError, ConfigError
from edgeagent.settings import AgentSettings, load_settings

__all__ = ["main"]


def _load(
    config: str | None, state_dir: str | None, sets: tuple[str, ...], **flags: Any
) -> AgentSettings:
    overrides: dict[str, Any] = {}
    for item in sets:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--set expects KEY=VALUE, got {item!r}", source="flag")
        overrides[key.strip()] = value
    if state_dir:
        overrides["state_dir"] = state_dir
    for key, value in flags.items():
        if value is not None:
            overrides[key] = value
    return load_settings(
        pathlib.Path(config) if config else None,
        env=os.environ,
        overrides=overrides,
        require_file=config is not None,
    )


_common = [
    click.option(
        "--config",
        "-c",
        type=click.Path(dir_okay=False),
        default=None,
        help="Config file (default /etc/edgeagent/config.yaml).",
    ),
    click.option(
        "--state-dir",
        type=click.Path(file_okay=False),
        default=None,
        help="State directory (default /var/lib/edgeagent).",
    ),
    click.option(
        "--set",
        "sets",
        multiple=True,
        metavar="KEY=VALUE",
        help="Override any setting, e.g. --set pods.backoff_initial=5.",
    ),
]


def common(func: Any) -> Any:
    for option in reversed(_common):
        func = option(func)
    return func


@click.group()
def main() -> None:
    """EdgeFleet edge agent."""


def _settings_epilog() -> str:
    """The hub and node settings, one per line, for ``edgeagent run --help``."""
    from edgeagent.settings import ENV_PREFIX, HubSettings, NodeSettings
    from protocol.settings import describe

    lines = [
        "Hub connection: runs when hub.url is set (edgeagent join sets it and writes the "
        "node's certificate to <state-dir>/pki). Pods keep running, and READY=1 is sent, "
        "whether or not the hub answers. Set these in the config file (hub: {url: ...}), "
        f"the environment ({ENV_PREFIX}HUB__URL=...) or with --set hub.url=...:",
        "",
        "\b",
    ]
    for group, cls in (("hub", HubSettings), ("node", NodeSettings)):
        for info in describe(cls):
            default = info.default
            if isinstance(default, tuple):
                default = ",".join(default)
            elif isinstance(default, dict):
                default = ",".join(f"{k}={v}" for k, v in default.items())
            shown = f"{default}" if default not in ("", None) else "unset"
            unit = f" [{info.unit}]" if info.unit else ""
            lines.append(f"  {group}.{info.key}{unit} (default {shown})")
            lines.append(f"      {info.help}")
    return "\n".join(lines)


def _not_joined(settings: AgentSettings) -> pathlib.Path | None:
    """The first missing credential file when a hub is configured (``hub.url``) but this
    node has not joined it (``edgeagent join`` writes all three), else ``None``. With no
    ``hub.url`` the agent runs on its own and needs none."""
    if not settings.hub.url:
        return None
    from edgeagent.credentials import credential_paths

    ca, cert, key = credential_paths(settings)
    return next((path for path in (cert, key, ca) if not path.exists()), None)


def _not_joined_message(missing: pathlib.Path, config: str | None, state_dir: str | None) -> str:
    """What ``edgeagent run`` prints on a node that has not joined: why, and the join to
    run (the line ``cloudhub token create`` prints, with this run's --config/--state-dir)."""
    where = "".join(
        f" {flag} {value}"
        for flag, value in (("--config", config), ("--state-dir", state_dir))
        if value
    )
    return (
        f"not joined: this node has no {missing} (hub.url is set, but the node has not "
        "joined the hub). Join it with the command 'cloudhub token create' prints on the "
        f"hub:\n  edgeagent join --hub HUB --token TOKEN --ca-cert-hash sha256:HASH{where}\n"
        "then start the agent again."
    )


@main.command(epilog=_settings_epilog())
@common
@click.option("--node-name", default=None, help="This node's name (default: host name).")
@click.option("--runtime", "runtime_kind", type=click.Choice(["docker", "process"]), default=None)
@click.option("--docker-url", default=None, help="Engine API endpoint.")
@click.option(
    "--hub",
    "hub_url",
    default=None,
    metavar="URL",
    help="The hub's session address, quic://HOST:PORT (same as --set hub.url=...).",
)
@click.option("--log-level", default=None, help="DEBUG, INFO, WARNING, ERROR.")
def run(
    config: str | None,
    state_dir: str | None,
    sets: tuple[str, ...],
    node_name: str | None,
    runtime_kind: str | None,
    docker_url: str | None,
    hub_url: str | None,
    log_level: str | None,
) -> None:
    """Run the agent (under systemd: Type=notify, WatchdogSec=)."""
    try:
        settings = _load(
            config,
            state_dir,
            sets,
            node_name=node_name,
            **{
                "runtime.kind": runtime_kind,
                "runtime.docker.url": docker_url,
                "hub.url": hub_url,
                "log_level": log_level,
            },
        )
    except ConfigError as exc:
        click.echo(f"edgeagent: {exc}", err=True)
        sys.exit(2)
    missing = _not_joined(settings)
    if missing is not None:
        click.echo(f"edgeagent: {_not_joined_message(missing, config, state_dir)}", err=True)
        sys.exit(2)
    from edgeagent.logsetup import configure_logging

    configure_logging(settings.log_level, env=os.environ, stream=sys.stderr)
    # aioquic logs every connection's version and ALPN at INFO: noise on a device log.
    logging.getLogger("quic").setLevel(logging.WARNING)
    from edgeagent.agent import Agent
    from edgeagent.sdnotify import Notifier

    stop = asyncio.Event()
    services: list = []
    if settings.hub.url:
        from edgeagent.day2 import Day2
        from edgeagent.uplink.session import HubLink  # imported only when a hub is configured

        hub_link = HubLink()
        from edgeagent.upgrade.prepull import ImagePuller

        # Day-2 streams and image pre-pull orders ride the hub link.
        services += [hub_link, Day2(hub_link), ImagePuller(hub_link)]
        if settings.upgrade.enabled:
            from edgeagent.upgrade.service import upgrade_service

            services.append(upgrade_service(settings, hub_link, stop))
    agent = Agent(settings, notifier=Notifier.from_env(os.environ), services=services)

    async def serve() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await agent.run(stop)

    try:
        asyncio.run(serve())
    except AgentError as exc:
        logging.getLogger("edgeagent").error("fatal: %s", exc)
        sys.exit(1)


@main.command()
@common
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def status(config: str | None, state_dir: str | None, sets: tuple[str, ...], as_json: bool) -> None:
    """Print node, hub session, certificate, outbox, devices, metrics backlog and pods from
    the local store (works with the agent stopped and the hub unreachable)."""
    try:
        settings = _load(config, state_dir, sets)
        from edgeagent.statusreport import collect, render

        report = collect(settings)
    except AgentError as exc:
        click.echo(f"edgeagent: {exc}", err=True)
        sys.exit(2 if isinstance(exc, ConfigError) else 1)
    if as_json:
        import json

        click.echo(json.dumps(report, indent=2))
    else:
        click.echo(render(report))


@main.command("hold")
@common
@click.option("--reason", default="", help="Why (shown in the node's upgrade status).")
def hold_cmd(config: str | None, state_dir: str | None, sets: tuple[str, ...], reason: str) -> None:
    """Defer agent upgrades on this node until ``edgeagent unhold`` (docs/upgrade.md)."""
    import time

    from edgeagent.upgrade.hold import hold

    try:
        settings = _load(config, state_dir, sets)
        if not pathlib.Path(settings.state_dir).is_dir():  # a typo would hold nothing
            click.echo(
                f"edgeagent: the state directory {settings.state_dir} does not exist: nothing "
                "there to hold (give the agent's own --state-dir, or the --config it runs with)",
                err=True,
            )
            sys.exit(1)
        hold(settings.state_dir, reason, time.time())
    except (AgentError, OSError) as exc:
        click.echo(f"edgeagent: {exc}", err=True)
        sys.exit(1)
    click.echo(f"upgrades held on this node{': ' + reason if reason else ''}")


@main.command("unhold")
@common
def unhold_cmd(config: str | None, state_dir: str | None, sets: tuple[str, ...]) -> None:
    """Release ``edgeagent hold``: upgrades ordered by the hub go ahead again."""
    from edgeagent.upgrade.hold import unhold

    try:
        settings = _load(config, state_dir, sets)
        released = unhold(settings.state_dir)
    except (AgentError, OSError) as exc:
        click.echo(f"edgeagent: {exc}", err=True)
        sys.exit(1)
    click.echo("upgrades released" if released else "upgrades were not held")


from edgeagent.join import join  # noqa: E402

main.add_command(join)

if __name__ == "__main__":
    main()
