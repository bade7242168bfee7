"""``cloudhub token …`` and ``cloudhub node revoke``: operator commands that talk to the
Kubernetes API directly (no running hub needed, except that ``token create`` prints the
join address and CA pin the hub published at its last start).

The hub's click group attaches them::

    from cloudhub.pki.cli import node, token
    main.add_command(token)
    main.add_command(node)

API access: :mod:`cloudhub.kube.access` (``--kubeconfig``, ``$KUBECONFIG``, the embedded
API's kubeconfig, in-cluster), as every operator command. Exit codes: 0 done, 1 the API
failed or refused, 2 bad usage.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import shlex
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import click

from cloudhub.errors import ConfigError, HubError, KubeAPIError, KubeNotFound
from cloudhub.kube import NAMESPACES, KubeClient
from cloudhub.kube.access import EMBEDDED_KUBECONFIGS
from cloudhub.kube.access import connect as _client
from cloudhub.kube.access import kubeconfig_path as _kubeconfig_path
from cloudhub.pki.ca import HUB_INFO_CONFIGMAP, read_hub_info
from cloudhub.pki.errors import TokenError
from cloudhub.pki.labels import parse_labels
from cloudhub.pki.records import CertificateRegistry
from cloudhub.pki.tokens import BootstrapToken, TokenStore, format_time
from protocol import pki

__all__ = ["EMBEDDED_KUBECONFIGS", "cli", "node", "parse_duration", "token"]

_DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)([smhd])")
MAX_DURATION = 100 * 365 * 86400
"""The longest duration taken (seconds, 100 years): beyond it an expiry does not fit a
``time_t`` date (400 nines and ``s`` was infinite, ``token create`` an OverflowError)."""
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> float | None:
    """Seconds in ``90s``, ``30m``, ``24h``, ``7d``, ``1h30m``; ``0`` means "never" (None).

    Raises:
        ValueError: not a duration, or over :data:`MAX_DURATION`.
    """
    text = text.strip().lower()
    if text in ("0", "0s"):
        return None
    pos, total = 0, 0.0
    for match in _DURATION.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNIT[match.group(2)]
        pos = match.end()
    if pos != len(text) or not text:
        raise ValueError(f"{text!r} is not a duration such as 90s, 30m, 24h or 7d")
    if total > MAX_DURATION:
        raise ValueError(f"{text!r} is over 100 years; use 0 for a token that never expires")
    return total


class _Duration(click.ParamType):
    name = "duration"

    def convert(self, value: Any, param: Any, ctx: Any) -> float | None:
        try:
            return parse_duration(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


_HUB_ADDRESS = re.compile(r"(?P<host>\[[0-9A-Fa-f:.]+\]|[^\s/:\[\]]+)(?::(?P<port>[0-9]{1,5}))?")


def check_hub_address(text: str) -> str:
    """``text`` if it is a join address an agent can dial: ``host``, ``host:port``, ``v6``,
    ``[v6]`` or ``[v6]:port`` (port 1..65535), as ``edgeagent join --hub`` parses it.

    Raises:
        ValueError: anything else, naming the form.
    """
    try:
        if ipaddress.ip_address(text).version == 6:
            return text  # a bare IPv6 address: the agent's default port
    except ValueError:
        pass
    match = _HUB_ADDRESS.fullmatch(text)
    port = match["port"] if match else None
    if match is None or (port is not None and not 0 < int(port) <= 65535):
        raise ValueError(f"{text!r} is not host[:port] (port 1-65535; IPv6 as [addr]:port)")
    return text


class _HubAddress(click.ParamType):
    name = "host[:port]"

    def convert(self, value: Any, param: Any, ctx: Any) -> str:
        try:
            return check_hub_address(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


class _Labels(click.ParamType):
    name = "k=v,..."

    def convert(self, value: Any, param: Any, ctx: Any) -> dict[str, str]:
        if isinstance(value, dict):
            return value
        try:
            return parse_labels(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


def _kube_options(func: Callable) -> Callable:
    func = click.option(
        "--namespace",
        "-n",
        default="edgefleet",
        show_default=True,
        envvar="CLOUDHUB_NAMESPACE",
        help="The hub's namespace.",
    )(func)
    return click.option(
        "--kubeconfig",
        type=click.Path(dir_okay=False),
        default=None,
        envvar="KUBECONFIG",
        help="Kubeconfig of the cluster (default: the embedded API's, then in-cluster).",
    )(func)


async def _no_hub_in(client: KubeClient, namespace: str) -> str | None:
    """Why ``namespace`` holds no hub (it does not exist; no hub ever started there), or
    ``None`` when a hub published its ``edgefleet-hub-info`` there.

    Without this, ``token list -n wrong`` printed an empty table and ``node revoke`` said
    the node had nothing to revoke: both true of a namespace with no hub, and misleading.
    """
    try:
        # rbac: operator's credentials
        await client.get(NAMESPACES, namespace)
    except KubeNotFound:
        return (
            f"namespace {namespace!r} does not exist: give the hub's namespace with -n or "
            "$CLOUDHUB_NAMESPACE (default: edgefleet)"
        )
    except KubeAPIError as exc:
        if exc.status != 403:  # may not read Namespaces: the ConfigMap still tells
            raise
    if await read_hub_info(client, namespace) is None:
        return (
            f"no hub in namespace {namespace!r}: no hub has published its ConfigMap "
            f"{HUB_INFO_CONFIGMAP} there (start the hub first, or give its namespace with -n)"
        )
    return None


def _run(kubeconfig: str | None, work: Callable[[KubeClient], Awaitable[int]]) -> None:
    path = _kubeconfig_path(kubeconfig)

    async def main() -> int:
        client = await _client(path)
        async with client:
            return await work(client)

    try:
        code = asyncio.run(main())
    except ConfigError as exc:
        click.echo(f"cloudhub: {exc}", err=True)
        sys.exit(2)
    except TokenError as exc:
        click.echo(f"cloudhub: {exc.message}", err=True)
        sys.exit(1)
    except (KubeAPIError, HubError) as exc:
        click.echo(f"cloudhub: the Kubernetes API failed: {exc}", err=True)
        sys.exit(1)
    sys.exit(code)


# -- token ---------------------------------------------------------------------------------


@click.group()
def token() -> None:
    """Create, list and delete bootstrap tokens (what a new node joins with)."""


@token.command("create")
@_kube_options
@click.option(
    "--ttl",
    type=_Duration(),
    default="24h",
    show_default=True,
    help="Lifetime (90s, 30m, 24h, 7d); 0 for a token that never expires.",
)
@click.option("--single-use", is_flag=True, help="The first successful join consumes it.")
@click.option("--labels", type=_Labels(), default="", help="Labels for the Node: k=v,k2=v2.")
@click.option("--node-name", default=None, help="Only this node name may join with it.")
@click.option("--description", default="", help="Free text shown by 'token list'.")
@click.option(
    "--hub",
    "hub_address",
    type=_HubAddress(),
    default=None,
    help="Address nodes join (host or host:port); default: what the hub published.",
)
def token_create(
    kubeconfig: str | None,
    namespace: str,
    ttl: float | None,
    single_use: bool,
    labels: dict[str, str],
    node_name: str | None,
    description: str,
    hub_address: str | None,
) -> None:
    """Create a token and print the join command to run on the new node.

    The command goes to standard output (alone, ready to paste or capture); details go to
    standard error. The token's secret is shown only here: it is stored hashed.
    """
    if node_name is not None:
        try:
            pki.build_node_csr(node_name, pki.generate_private_key())
        except pki.PKIError as exc:
            raise click.BadParameter(str(exc), param_hint="--node-name") from exc

    async def work(client: KubeClient) -> int:
        problem = await _no_hub_in(client, namespace)
        if problem is not None:
            click.echo(f"cloudhub: {problem}", err=True)
            return 1
        info = await read_hub_info(client, namespace) or {}
        address = hub_address or info.get("joinAddress")
        pin = info.get("caCertHash")
        if not address or not pin:
            click.echo(
                f"cloudhub: no hub has published its join address and CA in namespace "
                f"{namespace!r} yet (ConfigMap edgefleet-hub-info): start the hub first"
                + ("" if address else ", or pass --hub"),
                err=True,
            )
            return 1
        secret, stored = await TokenStore(client, namespace, retention=0).create(
            ttl=ttl,
            single_use=single_use,
            labels=labels,
            node_name=node_name,
            description=description,
        )
        expiry = (
            "never expires"
            if stored.expires_at is None
            else (f"expires {format_time(stored.expires_at)}")
        )
        usage = "single use" if single_use else "reusable until it expires"
        click.echo(f"Bootstrap token {stored.token_id}: {expiry}, {usage}.", err=True)
        click.echo("Run this on the new node:", err=True)
        command = ["edgeagent", "join", "--hub", address, "--token", secret, "--ca-cert-hash", pin]
        if node_name:
            command += ["--node-name", node_name]
        click.echo(shlex.join(command))
        return 0

    _run(kubeconfig, work)


def _describe(t: BootstrapToken, now: float) -> list[str]:
    if t.expires_at is None:
        expires = "never"
    else:
        left = t.expires_at - now
        expires = format_time(t.expires_at) + (f" ({_ago(-left)} ago)" if left <= 0 else "")
    state = t.state(now)
    if state == "used":
        state = f"used by {t.used_by}"
    labels = ",".join(f"{k}={v}" for k, v in sorted(t.labels.items())) or "-"
    return [
        t.token_id,
        state,
        expires,
        "single" if t.single_use else "multi",
        t.node_name or "-",
        labels,
        t.description or "-",
    ]


def _ago(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


@token.command("list")
@_kube_options
@click.option("--all", "show_all", is_flag=True, help="Also expired, deleted and used tokens.")
def token_list(kubeconfig: str | None, namespace: str, show_all: bool) -> None:
    """List bootstrap tokens (ids only: secrets are never stored in clear)."""

    async def work(client: KubeClient) -> int:
        problem = await _no_hub_in(client, namespace)
        if problem is not None:
            click.echo(f"cloudhub: {problem}", err=True)
            return 1
        tokens = await TokenStore(client, namespace, retention=0).list(include_inactive=show_all)
        now = time.time()
        rows = [["TOKEN ID", "STATE", "EXPIRES", "USE", "NODE NAME", "LABELS", "DESCRIPTION"]]
        rows += [_describe(t, now) for t in tokens]
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        for row in rows:
            click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
        return 0

    _run(kubeconfig, work)


@token.command("delete")
@_kube_options
@click.argument("tokens", nargs=-1, required=True)
def token_delete(kubeconfig: str | None, namespace: str, tokens: tuple[str, ...]) -> None:
    """Delete tokens (by id or whole token): joins with them are refused from now on."""

    async def work(client: KubeClient) -> int:
        problem = await _no_hub_in(client, namespace)
        if problem is not None:
            click.echo(f"cloudhub: {problem}", err=True)
            return 1
        store = TokenStore(client, namespace, retention=0)
        failed = 0
        for item in tokens:
            try:
                stored = await store.delete(item)
            except TokenError as exc:
                click.echo(f"cloudhub: {exc.message}", err=True)
                failed += 1
                continue
            click.echo(f"bootstrap token {stored.token_id} deleted")
        return 1 if failed else 0

    _run(kubeconfig, work)


# -- node ----------------------------------------------------------------------------------


@click.group()
def node() -> None:
    """Node certificate operations."""


@node.command("revoke")
@_kube_options
@click.argument("name")
@click.option("--reason", default="revoked by operator", show_default=True)
def node_revoke(kubeconfig: str | None, namespace: str, name: str, reason: str) -> None:
    """Revoke every certificate of node NAME: the hub closes its session within a second
    and refuses it until the node joins again with a new token."""

    async def work(client: KubeClient) -> int:
        problem = await _no_hub_in(client, namespace)
        if problem is not None:
            click.echo(f"cloudhub: {problem}", err=True)
            return 1
        serials = await CertificateRegistry(client, namespace).revoke(name, reason)
        if not serials:
            click.echo(f"node {name} has no valid certificate to revoke", err=True)
            return 0
        listed = ", ".join(f"{s:x}" for s in serials)
        click.echo(f"revoked {len(serials)} certificate(s) of node {name}: {listed}")
        return 0

    _run(kubeconfig, work)


# -- standalone use ------------------------------------------------------------------------


cli = click.Group(
    "cloudhub", commands={"token": token, "node": node}, help="EdgeFleet hub PKI commands."
)
"""The commands on their own (``python -m cloudhub.pki.cli``), until they are attached to
the hub's command group."""

if __name__ == "__main__":
    cli()
