"""``cloudhub``: the hub's command line (click). Other parts attach their groups to ``main``.

``cloudhub serve`` takes every setting as a flag (``--listen-quic-port 7443``), from a
YAML file (``--config``) or from the environment (``CLOUDHUB_LISTEN__QUIC_PORT``); flags
win over the environment, which wins over the file. Only this module decides the exit
code: 0 after a clean stop (SIGTERM, SIGINT), 1 when the hub fails, 2 for bad settings.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import signal
import sys
from typing import Any

import click

from cloudhub.errors import HubError
from cloudhub.settings import ENV_PREFIX, HubSettings, load_hub_settings
from protocol.errors import ProtocolError, SettingsError
from protocol.settings import SettingInfo, describe

__all__ = ["main"]

log = logging.getLogger("cloudhub")


def _flag(info: SettingInfo) -> str:
    return "--" + info.key.replace(".", "-").replace("_", "-")


def _default_text(info: SettingInfo) -> str:
    default = info.default
    if default is dataclasses.MISSING:
        return "required"
    if default is None:
        return "unset"
    if isinstance(default, bool):
        return "true" if default else "false"
    return str(default)


def _help(info: SettingInfo) -> str:
    unit = f" [{info.unit}]" if info.unit else ""
    return (
        f"{info.help}{unit}. Default: {_default_text(info)}; "
        f"environment: {info.env_var(ENV_PREFIX)}."
    )


def _settings_options(command: Any) -> Any:
    """Add one ``--group-name VALUE`` option per hub setting."""
    for info in reversed(describe(HubSettings)):
        command = click.option(
            _flag(info),
            info.key.replace(".", "__"),
            metavar=info.type.upper().replace(" ", "_") if " " not in info.type else "VALUE",
            default=None,
            help=_help(info),
        )(command)
    return command


@click.group()
def main() -> None:
    """EdgeFleet cloud hub."""


@main.command()
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="YAML file of settings (nested groups, e.g. listen: {quic_port: 7443}); "
    "environment variables and flags override it.",
)
@_settings_options
def serve(config_path: str | None, **flags: str | None) -> None:
    """Serve edge agents over QUIC and WebSocket and bridge them to Kubernetes.

    Kubernetes access: --kube-kubeconfig, or --kube-in-cluster true, or neither for the
    embedded API server (state in --kube-embedded-data-dir). TLS: by default the hub runs
    its own CA (--pki-*: the CA in a Secret, bootstrap-token join on --pki-join-port,
    certificate renewal) and issues its own serving certificate; give all three of
    --tls-ca-file, --tls-cert-file and --tls-key-file only to serve with certificates of an
    outside CA instead (the hub's CA, join and renewal are then off; the files are re-read
    when they change on disk). Durations are in seconds.
    """
    overrides = {key.replace("__", "."): value for key, value in flags.items() if value is not None}
    try:
        settings = load_hub_settings(config_path, environ=os.environ, overrides=overrides)
    except SettingsError as exc:
        raise click.UsageError(str(exc)) from exc
    from cloudhub.observability.logs import setup_logging

    setup_logging(settings.observability.log_format, settings.observability.log_level)
    sys.exit(asyncio.run(_serve(settings)))


async def _serve(settings: HubSettings) -> int:
    from cloudhub.devices.extension import devices_extension
    from cloudhub.hub import Hub
    from cloudhub.kubelet.extension import kubelet_extension
    from cloudhub.metrics.extension import metrics_extension
    from cloudhub.pki.extension import pki_extension
    from cloudhub.placement.extension import placement_extension
    from cloudhub.upgrade.extension import upgrade_extension
    from cloudhub.upgrade.prepull import prepull_extension

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    extensions = []
    peer_ca: Any = None  # signs this replica's peer certificate (the stream relay)
    tls = settings.tls
    if tls.ca_file or tls.cert_file or tls.key_file:
        missing = [f"tls.{k}" for k in ("ca_file", "cert_file", "key_file") if not getattr(tls, k)]
        if missing:
            log.error(
                "cannot start: an outside CA needs all three tls.* files; set %s too, or "
                "none of them to use the hub's own CA",
                ", ".join(missing),
            )
            return 1
        # Certificates from an outside CA: the hub's own CA, join endpoint and renewal are off.
        log.info(
            "serving with the TLS files given (tls.*): the hub CA, bootstrap-token join and "
            "certificate renewal are off; nodes need certificates from that CA"
        )
    else:
        pki = pki_extension(settings.pki)
        extensions.append(pki)

        def hub_ca() -> Any:
            assert pki.pki is not None, "the PKI extension installs before the kubelet's"
            return pki.pki.ca.authority

        peer_ca = hub_ca
    extensions.append(devices_extension(settings.devices))
    extensions.append(metrics_extension(settings.metrics))
    extensions.append(placement_extension(settings.placement))
    extensions.append(kubelet_extension(settings.kubelet, peer_ca=peer_ca))
    extensions.append(upgrade_extension(settings.upgrade))
    extensions.append(prepull_extension(settings.upgrade))
    hub = Hub(settings, extensions=extensions)
    # Starting waits for the informers' first lists, for as long as the API is unreachable:
    # a signal meanwhile stops the hub as it would a serving one.
    starting = asyncio.ensure_future(hub.start())
    stopped = asyncio.ensure_future(stop.wait())
    await asyncio.wait({starting, stopped}, return_when=asyncio.FIRST_COMPLETED)
    if not starting.done():
        log.info("stopping before the hub started serving")
        starting.cancel()
        await asyncio.gather(starting, return_exceptions=True)
        await hub.aclose()
        return 0
    if starting.exception() is not None:
        stopped.cancel()
        await asyncio.gather(stopped, return_exceptions=True)
        await hub.aclose()
        exc = starting.exception()
        if not isinstance(exc, (HubError, ProtocolError)):
            raise exc  # a bug: the traceback says where
        log.error("cannot start: %s", exc)
        return 1
    failed = asyncio.ensure_future(hub.serve_forever())
    try:
        await asyncio.wait({failed, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (failed, stopped):
            task.cancel()
        await asyncio.gather(failed, stopped, return_exceptions=True)
        log.info("stopping")
        await hub.aclose()
    if failed.done() and not failed.cancelled() and failed.exception() is not None:
        log.error("the hub failed: %s", failed.exception())
        return 1
    return 0


from cloudhub.pki.cli import node, token  # noqa: E402  token and node commands

main.add_command(token)
main.add_command(node)

from cloudhub.demo.cli import demo  # noqa: E402  the whole fleet on one machine (issue 10)

main.add_command(demo)

from cloudhub.placement.cli import placement  # noqa: E402  import, explain

main.add_command(placement)

from cloudhub.devices.cli import devices  # noqa: E402  KubeEdge device manifests: convert, validate

main.add_command(devices)

from cloudhub.upgrade.cli import upgrade  # noqa: E402  staged agent upgrades: status

main.add_command(upgrade)

if __name__ == "__main__":  # pragma: no cover
    main()
