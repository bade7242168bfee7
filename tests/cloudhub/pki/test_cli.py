"""``cloudhub token create|list|delete`` and ``cloudhub node revoke`` as an operator runs
them: separate processes talking to the API with a kubeconfig."""

from __future__ import annotations

import asyncio
import re
import shlex
import subprocess

import pytest
from click.testing import CliRunner

from cloudhub.kube import NAMESPACES
from cloudhub.pki import TokenDeleted, TokenStore
from cloudhub.pki.cli import check_hub_address, cli, parse_duration
from tests.cloudhub.pki.conftest import NAMESPACE, PYTHON, Cluster, join_address, python_env
from tests.cloudhub.pki.test_join import Node


async def cloudhub_process(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the commands as an operator does: a separate process."""
    proc = await asyncio.create_subprocess_exec(
        PYTHON,
        "-m",
        "cloudhub.pki.cli",
        *args,
        "--kubeconfig",
        cluster.kubeconfig,
        env=python_env(),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return subprocess.CompletedProcess(args, proc.returncode or 0, out.decode(), err.decode())


async def cloudhub(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the commands in this process (click's runner, in a thread: they start their own
    event loop), which is quicker than a process per command."""
    runner = CliRunner()
    result = await asyncio.to_thread(
        runner.invoke, cli, [*args, "--kubeconfig", cluster.kubeconfig], catch_exceptions=False
    )
    return subprocess.CompletedProcess(args, result.exit_code, result.stdout, result.stderr)


async def test_token_create_prints_a_join_command_that_works(
    start_hub, cluster: Cluster, tmp_path
) -> None:
    hub = await start_hub(public_address="")
    created = await cloudhub_process(
        cluster, "token", "create", "--ttl", "2h", "--single-use", "--labels", "site=north,row=4"
    )
    assert created.returncode == 0, created.stderr
    command = shlex.split(created.stdout.strip())
    assert command[:2] == ["edgeagent", "join"]
    args = dict(zip(command[2::2], command[3::2], strict=True))
    assert args["--hub"] == hub.settings.join_address
    assert re.fullmatch(r"[a-z0-9]{6}\.[a-z0-9]{16}", args["--token"])
    assert args["--ca-cert-hash"] == hub.ca.ca_hash
    assert "single use" in created.stderr and "expires" in created.stderr

    # Paste it (with the test's port, as the published address is the configured one).
    node = Node(tmp_path, "pi-cli")
    result = await node.join(join_address(hub), args["--token"], args["--ca-cert-hash"])
    assert result["labels"] == {"site": "north", "row": "4"}

    listed = await cloudhub(cluster, "token", "list", "--all")
    assert listed.returncode == 0
    token_id = args["--token"].split(".")[0]
    line = next(line for line in listed.stdout.splitlines() if line.startswith(token_id))
    assert "used by pi-cli" in line and "single" in line and "row=4,site=north" in line
    assert args["--token"].split(".")[1] not in listed.stdout  # secrets never listed


async def test_token_create_with_node_name_and_no_expiry(start_hub, cluster: Cluster) -> None:
    await start_hub()
    created = await cloudhub(cluster, "token", "create", "--ttl", "0", "--node-name", "gate-1")
    assert created.returncode == 0, created.stderr
    assert created.stdout.strip().endswith("--node-name gate-1")
    assert "never expires" in created.stderr


async def test_token_delete(start_hub, cluster: Cluster) -> None:
    await start_hub()
    store = TokenStore(cluster.client, NAMESPACE, retention=3600)
    token, stored = await store.create(ttl=3600)
    deleted = await cloudhub(cluster, "token", "delete", stored.token_id)
    assert deleted.returncode == 0 and f"{stored.token_id} deleted" in deleted.stdout
    with pytest.raises(TokenDeleted):
        await store.validate(token)
    listed = await cloudhub(cluster, "token", "list")
    assert stored.token_id not in listed.stdout  # only usable tokens without --all
    missing = await cloudhub(cluster, "token", "delete", "zzzzzz")
    assert missing.returncode == 1 and "not known to this hub" in missing.stderr


async def test_bad_usage_and_no_hub(cluster: Cluster) -> None:
    bad_ttl = await cloudhub(cluster, "token", "create", "--ttl", "soon")
    assert bad_ttl.returncode == 2 and "not a duration" in bad_ttl.stderr
    bad_labels = await cloudhub(cluster, "token", "create", "--labels", "a=b=c=")
    assert bad_labels.returncode == 2 and "label" in bad_labels.stderr
    bad_name = await cloudhub(cluster, "token", "create", "--node-name", "Not_A_Name")
    assert bad_name.returncode == 2 and "DNS-1123" in bad_name.stderr
    no_hub = await cloudhub(cluster, "token", "create")
    assert no_hub.returncode == 1 and "start the hub first" in no_hub.stderr


async def test_a_namespace_with_no_hub_is_named_not_listed_as_empty(
    start_hub, cluster: Cluster
) -> None:
    await start_hub()
    await cluster.client.create(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "apps"}}
    )
    for args in (
        ("token", "list"),
        ("token", "list", "--all"),
        ("token", "delete", "abcdef"),
        ("token", "create"),
        ("node", "revoke", "pi-1"),
    ):
        wrong = await cloudhub(cluster, *args, "-n", "wrong")
        assert wrong.returncode == 1, (args, wrong.stdout)
        assert "namespace 'wrong' does not exist" in wrong.stderr, (args, wrong.stderr)
        assert "TOKEN ID" not in wrong.stdout
        other = await cloudhub(cluster, *args, "-n", "apps")
        assert other.returncode == 1, (args, other.stdout)
        assert "no hub in namespace 'apps'" in other.stderr, (args, other.stderr)
    right = await cloudhub(cluster, "token", "list", "-n", NAMESPACE)
    assert right.returncode == 0 and right.stdout.startswith("TOKEN ID"), right.stderr


def test_a_missing_kubeconfig_file_is_named(tmp_path) -> None:
    missing = tmp_path / "no-such-kubeconfig"
    result = CliRunner().invoke(cli, ["token", "list", "--kubeconfig", str(missing)])
    assert result.exit_code == 2
    assert f"kubeconfig '{missing}' does not exist" in result.stderr
    assert "current-context" not in result.stderr
    result = CliRunner().invoke(
        cli, ["token", "list"], env={"KUBECONFIG": f"{missing}:{tmp_path / 'neither'}"}
    )
    assert result.exit_code == 2 and "does not exist" in result.stderr, result.stderr


async def test_node_revoke_closes_the_session(start_hub, cluster: Cluster, tmp_path) -> None:
    from edgeagent.certs import CertificateRenewer
    from protocol.events import Closed
    from tests.cloudhub.pki.sessionhub import SessionHub
    from tests.cloudhub.pki.test_sessions import dial

    hub_pki = await start_hub()
    hub = await SessionHub(hub_pki).start()
    try:
        token, _ = await hub_pki.tokens.create(ttl=3600)
        node = Node(tmp_path, "pi-9")
        await node.join(join_address(hub_pki), token, hub_pki.ca.ca_hash)
        renewer = CertificateRenewer(node.paths, uniform=lambda a, b: a)
        link = await dial(hub, "quic", renewer, "pi-9")
        revoked = await cloudhub(cluster, "node", "revoke", "pi-9", "--reason", "stolen")
        assert revoked.returncode == 0, revoked.stderr
        serial = renewer.credentials().chain[0].serial_number
        assert f"revoked 1 certificate(s) of node pi-9: {serial:x}" in revoked.stdout
        events = [e async for e in link]
        await link.close()
        assert isinstance(events[-1], Closed) and "revoked" in events[-1].reason
        again = await cloudhub(cluster, "node", "revoke", "pi-9")
        assert again.returncode == 0 and "no valid certificate" in again.stderr
    finally:
        await hub.close()


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("30m", 1800), ("24h", 86400), ("7d", 604800), ("1h30m", 5400), ("0", None)],
)
def test_parse_duration(text: str, seconds: float | None) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "h", "5", "5x", "1h 30m", "-1h", "\u0665s"])
def test_parse_duration_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


@pytest.mark.parametrize("text", ["9" * 400 + "s", "99999999999999999999d", "36501d"])
def test_parse_duration_refuses_what_no_date_can_hold(text: str) -> None:
    """Regression (break1): ``--ttl 999…9s`` was infinite and ``token create`` failed
    with an OverflowError traceback formatting the expiry."""
    with pytest.raises(ValueError, match="over 100 years"):
        parse_duration(text)
    assert parse_duration("36500d") == 36500 * 86400


@pytest.mark.parametrize(
    "text", ["hub.example", "hub.example:7444", "10.0.0.1:1", "[fd00::1]", "[::1]:65535", "::1"]
)
def test_hub_addresses_an_agent_can_dial(text: str) -> None:
    assert check_hub_address(text) == text


@pytest.mark.parametrize(
    "text", ["host:99999", "host:0", "[::1", "1::2::3", "host:", "a b", "h/x:1", "host:\u0665"]
)
def test_hub_addresses_that_no_agent_can_dial_are_refused(text: str) -> None:
    """Regression (break1): ``token create --hub host:99999`` (or ``'[::1'``) made a token
    and printed a join command that could not work."""
    with pytest.raises(ValueError, match="is not host"):
        check_hub_address(text)
