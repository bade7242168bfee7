"""``edgeagent join``: get this node's first certificate from the hub (or a new one with
``--renew`` after it expired), as ``kubeadm join`` does with a bootstrap token.

1. Fetch the hub's CA without trusting it; accept it only if its public-key hash equals
   ``--ca-cert-hash`` (kubeadm's discovery).
2. Make an ECDSA P-256 key here (it never leaves the node; kept as ``node.key.pending``
   until the join is done, so a retry after a lost answer uses the same key).
3. Send a CSR and the token over TLS trusting only that CA, checking the hub's name.
4. Store key (0600), certificate and CA under ``<state_dir>/pki``, the join record beside
   them, and write ``node_name`` and ``hub.url`` into the config file (other keys kept).

``--renew`` re-joins an already joined node (typically: its certificate expired while it was
offline) with a new token, keeping its node name, labels (the hub keeps them on the Node)
and store; ``--hub`` and ``--ca-cert-hash`` default to those of the last join.

What to do next depends on whether the agent runs (it holds its store's lock, which the
kernel drops with the process, so a crashed agent never counts): a running agent watches
its certificate files and dials again within a second of the join writing them (no
signal, pid file or restart: the files are the interface, so a copy by hand or by a
configuration tool wakes it too), and ``--renew`` waits up to ``--wait`` seconds for it to
report the new session; an agent that is not running must be started; one that runs
without the session address the join just wrote (a first join, or a new ``--hub``) must be
restarted to read it.

Exit codes: 0 joined; 1 the join failed (the message says why and what to do); 2 bad
usage or settings.
"""

from __future__ import annotations

import os
import pathlib
import random
import sys
import time
from typing import Any

import click

from edgeagent.certs.errors import CertificateFilesError, JoinFailed, NotJoined
from edgeagent.errors import AgentError, ConfigError, UsageError

__all__ = ["join", "run_join"]


def _labels(text: str) -> dict[str, str]:
    labels: dict[str, str] = {}
    for item in (p.strip() for p in text.split(",")):
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{item!r} is not key=value", param_hint="--labels")
        labels[key.strip()] = value.strip()
    return labels


def _write_config(path: pathlib.Path, node_name: str, hub_url: str) -> None:
    import yaml

    from edgeagent.certs.files import atomic_write

    data: dict[str, Any] = {}
    if path.exists():
        try:
            loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"cannot update {path}: {exc}", source=str(path)) from exc
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"cannot update {path}: it does not hold a mapping")
        data = loaded or {}
    data["node_name"] = node_name
    hub = data.get("hub") if isinstance(data.get("hub"), dict) else {}
    data["hub"] = {**hub, "url": hub_url}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, yaml.safe_dump(data, sort_keys=False).encode(), 0o644)
    except OSError as exc:
        raise ConfigError(
            f"cannot write {path}: {exc} (run as root, or pass --config)", source=str(path)
        ) from exc


def run_join(
    *,
    hub: str | None,
    token: str,
    ca_cert_hash: str | None,
    node_name: str | None,
    labels: dict[str, str] | None,
    renew: bool,
    config: pathlib.Path | None,
    state_dir: str | None,
    timeout: float,
    env: dict[str, str],
    attempts: int = 4,
    echo=print,
) -> dict[str, Any]:
    """Join (see the module docstring).

    Args:
        hub: join address (``host[:port]``); with ``renew``, defaults to the last join's.
        token: the bootstrap token.
        ca_cert_hash: ``sha256:<hex>``; with ``renew``, defaults to the last join's.
        node_name: this node's name; default: the config's ``node_name``, else the host
            name; with ``renew``, the name of the current certificate.
        labels: labels the node asks for; with ``renew``, default: the last join's.
        renew: re-join a node that already has a certificate.
        config: the config file to update (default ``/etc/edgeagent/config.yaml``).
        state_dir: overrides the config's ``state_dir``.
        timeout: seconds per HTTPS request.
        attempts: tries while the hub is unreachable or busy (back-off with full jitter,
            up to 2, 4, 8 … seconds between tries).
        env: the environment (for ``EDGEAGENT_*`` settings).
        echo: prints progress lines.

    Returns:
        The join record written (``nodeName``, ``hub``, ``labels``, ``notAfter``, …).

    Raises:
        JoinFailed: the hub or the network refused (``reason`` says which).
        UsageError / ConfigError: bad options or settings, already joined without ``renew``.
        CertificateFilesError: the files could not be written.
    """
    from edgeagent.certs.clock import check_clock_skew
    from edgeagent.certs.files import CertPaths, keys_match
    from edgeagent.certs.joinclient import HubAddress, fetch_ca, pin_ca, post_join
    from edgeagent.settings import DEFAULT_CONFIG_FILE, load_settings
    from protocol import pki

    config_path = config or DEFAULT_CONFIG_FILE
    overrides = {"state_dir": state_dir} if state_dir else {}
    settings = load_settings(config_path, env=env, overrides=overrides)
    paths = CertPaths.from_settings(settings)
    record = paths.read_join_record()
    current_name: str | None = None
    if paths.joined():
        try:
            current_name = pki.node_name_from_cert(
                pki.load_certificate_pem(paths.cert.read_bytes())
            )
        except (OSError, pki.PKIError):
            current_name = None
    if paths.joined() and not renew:
        raise UsageError(
            f"this node already joined as {current_name or record.get('nodeName', '?')} "
            f"(certificate {paths.cert}). To get a new certificate keeping the node's name, "
            "labels and store, run 'edgeagent join --renew --token NEW_TOKEN'"
        )
    if renew:
        name = current_name or record.get("nodeName") or settings.node_name
        if node_name and node_name != name:
            raise UsageError(
                f"--renew keeps the node's name {name!r}; --node-name {node_name!r} differs "
                "(to join under another name, remove the state directory first)"
            )
        node_name = name
        hub = hub or record.get("hub")
        ca_cert_hash = ca_cert_hash or record.get("caCertHash")
        if labels is None:
            labels = dict(record.get("labels") or {})
    node_name = node_name or settings.node_name
    if not hub:
        raise UsageError("--hub is required (the address printed by 'cloudhub token create')")
    if not ca_cert_hash:
        raise UsageError(
            "--ca-cert-hash is required: joining without pinning the hub's CA would trust "
            "whoever answers (copy it from 'cloudhub token create')"
        )
    try:
        address = HubAddress.parse(hub)
    except ValueError as exc:
        raise UsageError(f"--hub: {exc}") from exc
    try:
        key = pki.generate_private_key()
        csr = pki.build_node_csr(node_name, key)  # checks the name before anything is sent
    except pki.PKIError as exc:
        raise UsageError(f"{exc}; pass --node-name with a valid Kubernetes node name") from exc
    paths.ensure_directory()
    if paths.pending_key.exists():
        try:
            key = pki.load_private_key_pem(paths.pending_key.read_bytes())
            csr = pki.build_node_csr(node_name, key)
        except (OSError, pki.PKIError):
            pass  # unusable leftover: use the fresh key
    from edgeagent.certs.files import atomic_write

    atomic_write(paths.pending_key, pki.dump_private_key_pem(key), 0o600)

    started = time.monotonic()
    echo(f"fetching the hub CA from {address} ...")
    answer: dict[str, Any] = {}
    for attempt in range(1, max(1, attempts) + 1):
        try:
            bundle, served, hub_time = fetch_ca(address, timeout=timeout)
            ca_pem = pin_ca(address, bundle, ca_cert_hash)
            if attempt == 1:
                echo(f"the hub CA matches {ca_cert_hash}; sending the join request as {node_name}")
            answer = post_join(
                address,
                ca_pem,
                {"token": token, "csr": pki.dump_csr_pem(csr).decode(), "labels": labels or {}},
                timeout=timeout,
                served_der=served,
                hub_time=hub_time,
            )
            break
        except JoinFailed as exc:
            if not exc.retryable or attempt >= attempts:
                raise
            delay = random.uniform(0, 2.0**attempt)
            echo(f"{exc} (retrying in {delay:.1f} s)")
            time.sleep(delay)
    try:
        cert = pki.load_certificate_pem(str(answer.get("certificate", "")).encode())
        got = pki.verify_node_certificate(
            cert, cas=pki.load_certificates_pem(ca_pem), now=time.time()
        )
    except pki.PKIError as exc:
        raise JoinFailed("BadAnswer", f"the hub's certificate is unusable: {exc}") from exc
    if got != node_name or not keys_match(cert, key):
        raise JoinFailed(
            "BadAnswer", f"the hub answered with a certificate for {got!r} or for another key"
        )
    if isinstance(answer.get("hubTime"), (int, float)):
        check_clock_skew(float(answer["hubTime"]), time.time())
    paths.install(
        key_pem=pki.dump_private_key_pem(key),
        cert_pem=pki.dump_certificate_pem(cert),
        ca_pem=ca_pem,
    )
    paths.pending_key.unlink(missing_ok=True)
    session_port = int(answer.get("sessionPort") or 7443)
    host = f"[{address.host}]" if ":" in address.host else address.host
    new_record = {
        "nodeName": node_name,
        "hub": str(address),
        "caCertHash": ca_cert_hash.strip().lower(),
        "labels": dict(answer.get("labels") or {}),
        "sessionUrl": f"quic://{host}:{session_port}",
        "joinedAt": time.time(),
        "notAfter": cert.not_valid_after_utc.timestamp(),
        "seconds": round(time.monotonic() - started, 3),
    }
    paths.write_join_record(new_record)
    _write_config(config_path, node_name, new_record["sessionUrl"])
    return new_record


@click.command()
@click.option("--hub", default=None, help="The hub's join address, host[:port] (port 7444).")
@click.option("--token", required=True, help="Bootstrap token from 'cloudhub token create'.")
@click.option("--ca-cert-hash", default=None, help="sha256:<hex> pin of the hub CA.")
@click.option("--node-name", default=None, help="This node's name (default: the host name).")
@click.option("--labels", default=None, help="Labels to ask for: k=v,k2=v2.")
@click.option("--renew", is_flag=True, help="Re-join, keeping the node's name, labels, store.")
@click.option(
    "--config",
    "-c",
    type=click.Path(dir_okay=False),
    default=None,
    help="Config file to update (default /etc/edgeagent/config.yaml).",
)
@click.option("--state-dir", type=click.Path(file_okay=False), default=None)
@click.option("--timeout", type=float, default=10.0, show_default=True, help="Seconds per request.")
@click.option(
    "--attempts",
    type=click.IntRange(1, 100),
    default=4,
    show_default=True,
    help="Tries while the hub is unreachable or busy.",
)
@click.option(
    "--wait",
    type=click.FloatRange(0, 600),
    default=30.0,
    show_default=True,
    help="Seconds to wait for a running agent to connect with the new certificate.",
)
def join(
    hub: str | None,
    token: str,
    ca_cert_hash: str | None,
    node_name: str | None,
    labels: str | None,
    renew: bool,
    config: str | None,
    state_dir: str | None,
    timeout: float,
    attempts: int,
    wait: float,
) -> None:
    """Join this node to a hub: make its key, get its certificate, write its config."""
    try:
        before = _agent_view(config, state_dir)
        result = run_join(
            hub=hub,
            token=token,
            ca_cert_hash=ca_cert_hash,
            node_name=node_name,
            labels=_labels(labels) if labels is not None else None,
            renew=renew,
            config=pathlib.Path(config) if config else None,
            state_dir=state_dir,
            timeout=timeout,
            attempts=attempts,
            env=dict(os.environ),
            echo=lambda line: click.echo(line, err=True),
        )
    except (UsageError, NotJoined) as exc:
        click.echo(f"edgeagent join: {exc}", err=True)
        sys.exit(2)
    except (JoinFailed, CertificateFilesError, AgentError) as exc:
        click.echo(f"edgeagent join: {exc}", err=True)
        sys.exit(1)
    labels_text = ",".join(f"{k}={v}" for k, v in sorted(result["labels"].items())) or "none"
    until = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(result["notAfter"]))
    click.echo(
        f"node {result['nodeName']} joined hub {result['hub']} in {result['seconds']:.2f} s "
        f"(certificate valid until {until}; labels: {labels_text})."
    )
    click.echo(next_step(before, result, wait=wait, echo=lambda line: click.echo(line, err=True)))


def _agent_view(config: str | None, state_dir: str | None) -> tuple[pathlib.Path, str, bool]:
    """``(store path, hub.url, agent running)`` as the agent sees them before the join.

    Raises:
        ConfigError: the settings do not load (the join would fail the same way).
    """
    from edgeagent.settings import DEFAULT_CONFIG_FILE, load_settings
    from edgeagent.store import agent_running

    overrides = {"state_dir": state_dir} if state_dir else {}
    path = pathlib.Path(config) if config else DEFAULT_CONFIG_FILE
    settings = load_settings(path, env=dict(os.environ), overrides=overrides)
    try:
        running = agent_running(settings.store_path)
    except AgentError:
        running = False  # cannot tell: the advice for a stopped agent is the safe one
    return settings.store_path, settings.hub.url, running


def next_step(
    before: tuple[pathlib.Path, str, bool],
    record: dict[str, Any],
    *,
    wait: float,
    echo=print,
    monotonic=time.monotonic,
) -> str:
    """What the operator should do after a join (see the module docstring).

    Args:
        before: :func:`_agent_view` before the join.
        record: the join record :func:`run_join` returned.
        wait: seconds to wait for a running agent's new session (0: do not wait).
        echo: prints progress lines.
        monotonic: seconds (the wait's deadline).

    Returns:
        The advice line.
    """
    store_path, hub_url, running = before
    if not running:
        return "Start the agent: systemctl enable --now edgeagent"
    if hub_url != record["sessionUrl"]:
        return (
            f"The agent runs with {'no hub address' if not hub_url else hub_url}; restart it "
            f"to connect to {record['sessionUrl']}: systemctl restart edgeagent"
        )
    if wait <= 0:
        return "The running agent dials the hub with the new certificate within a second."
    import datetime

    from edgeagent.errors import StoreError
    from edgeagent.store import Store

    echo(f"the agent is running: waiting up to {wait:.0f} s for it to connect ...")
    joined = record["joinedAt"] - 1  # the session state's time has whole seconds
    deadline = monotonic() + wait
    session: dict[str, Any] = {}
    while True:
        try:
            store = Store.open_readonly(store_path)
            try:
                session = store.get_state("hub.session") or {}
            finally:
                store.close()
        except StoreError:
            session = {}
        try:
            since = datetime.datetime.fromisoformat(session.get("since", "")).timestamp()
        except (TypeError, ValueError):
            since = 0.0
        if session.get("state") == "connected" and since >= joined:
            return (
                f"The running agent connected to the hub with the new certificate over "
                f"{session.get('transport')} (session {session.get('session_id')})."
            )
        if monotonic() >= deadline:
            return (
                f"The running agent has not connected within {wait:.0f} s (hub session: "
                f"{session.get('state', 'unknown')}: {session.get('reason', '')}); see "
                "'edgeagent status' and 'journalctl -u edgeagent'."
            )
        time.sleep(0.2)  # the agent is another process: its store is polled
