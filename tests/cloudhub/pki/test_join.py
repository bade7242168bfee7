"""``edgeagent join`` against the hub's join endpoint, over real TLS on loopback: the
whole discovery (CA fetched untrusted, pinned by hash, then trusted), each refusal with
its own message, the serving certificate's names, and what join leaves on disk and in
the API."""

from __future__ import annotations

import asyncio
import os
import pathlib
import stat
import subprocess
import time
from typing import Any

import pytest
import yaml

from cloudhub.kube import NODES
from edgeagent.certs import CertPaths, JoinFailed
from edgeagent.errors import UsageError
from edgeagent.join import run_join
from edgeagent.settings import load_settings
from protocol import pki
from tests.clock import ManualClock
from tests.cloudhub.pki.conftest import PYTHON, Cluster, join_address, python_env


class Node:
    """One edge node's directories, joining with ``run_join`` in a thread."""

    def __init__(self, root: pathlib.Path, name: str) -> None:
        self.name = name
        self.state_dir = root / name / "state"
        self.config = root / name / "config.yaml"
        self.config.parent.mkdir(parents=True)
        self.config.write_text(f"state_dir: {self.state_dir}\nruntime:\n  kind: process\n")

    async def join(self, hub: str, token: str, pin: str, **kwargs: Any) -> dict[str, Any]:
        args: dict[str, Any] = {
            "hub": hub,
            "token": token,
            "ca_cert_hash": pin,
            "node_name": self.name,
            "labels": None,
            "renew": False,
            "config": self.config,
            "state_dir": None,
            "timeout": 10.0,
            "env": {},
            "echo": lambda line: None,
        }
        args.update(kwargs)
        return await asyncio.to_thread(run_join, **args)

    @property
    def paths(self) -> CertPaths:
        return CertPaths.from_settings(load_settings(self.config, env={}))


@pytest.fixture
def node(tmp_path: pathlib.Path):
    return lambda name="pi-1": Node(tmp_path, name)


async def test_full_join_over_tls(start_hub, cluster: Cluster, node) -> None:
    hub = await start_hub()
    token, _ = await hub.tokens.create(ttl=3600, labels={"site": "north"})
    pi = node()
    started = time.monotonic()
    result = await pi.join(join_address(hub), token, hub.ca.ca_hash, labels={"shelf": "3"})
    elapsed = time.monotonic() - started
    print(f"join took {elapsed * 1000:.0f} ms")  # reported figure (-s)
    assert elapsed < 10
    assert result["nodeName"] == "pi-1"
    assert result["labels"] == {"site": "north", "shelf": "3"}

    paths = pi.paths
    assert stat.S_IMODE(os.stat(paths.key).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(paths.directory).st_mode) == 0o700
    assert not paths.pending_key.exists()
    credentials = paths.load()
    cert = credentials.chain[0]
    assert pki.verify_node_certificate(cert, cas=credentials.cas, now=time.time()) == "pi-1"
    assert credentials.cas == (hub.ca.authority.certificate,)
    lifetime = cert.not_valid_after_utc.timestamp() - time.time()
    assert abs(lifetime - hub.settings.node_cert_lifetime) < 60
    # The key never left the node: the hub only ever saw its public half.
    recorded = await hub.registry.certificates("pi-1")
    assert [r.serial for r in recorded] == [cert.serial_number]

    config = yaml.safe_load(pi.config.read_text())
    assert config["node_name"] == "pi-1"
    assert config["hub"]["url"] == f"quic://localhost:{hub.settings.session_port}"
    assert config["runtime"] == {"kind": "process"}  # other settings kept
    settings = load_settings(pi.config, env={})  # the agent reads what join wrote
    assert settings.node_name == "pi-1" and settings.hub.url.startswith("quic://")

    node_obj = await cluster.client.get(NODES, "pi-1")
    assert node_obj["metadata"]["labels"] == {
        "site": "north",
        "shelf": "3",
        "node-role.kubernetes.io/edge": "",  # an edge node from birth, as the hub expects
    }


async def test_wrong_ca_hash_is_refused_before_anything_is_sent(start_hub, node) -> None:
    hub = await start_hub()
    token, _ = await hub.tokens.create(ttl=3600, single_use=True)
    pi = node()
    with pytest.raises(JoinFailed) as caught:
        await pi.join(join_address(hub), token, "sha256:" + "0" * 64)
    assert caught.value.reason == "CAHashMismatch"
    assert hub.ca.ca_hash in str(caught.value)  # names what it saw
    assert "copy --ca-cert-hash again" in str(caught.value)
    assert (await hub.tokens.validate(token)).used_by is None  # token not spent
    assert not pi.paths.cert.exists()


async def test_refusals_each_say_which_and_what_next(start_hub, node) -> None:
    clock = ManualClock()
    hub = await start_hub(clock=clock)
    pin = hub.ca.ca_hash
    address = join_address(hub)
    messages: dict[str, str] = {}

    async def refused(token: str, name: str) -> JoinFailed:
        with pytest.raises(JoinFailed) as caught:
            await node(name).join(address, token, pin)
        messages[caught.value.reason] = str(caught.value)
        return caught.value

    expired, _ = await hub.tokens.create(ttl=60)
    clock.advance(60.01)  # the hub's clock passes the token's expiry
    assert (await refused(expired, "n-expired")).reason == "TokenExpired"

    deleted, _ = await hub.tokens.create(ttl=3600)
    await hub.tokens.delete(deleted)
    assert (await refused(deleted, "n-deleted")).reason == "TokenDeleted"

    single, _ = await hub.tokens.create(ttl=3600, single_use=True)
    await node("n-first").join(address, single, pin)
    assert (await refused(single, "n-second")).reason == "TokenUsed"

    wrong = single[:-1] + ("y" if single.endswith("x") else "x")  # a different secret
    assert (await refused(wrong, "n-wrong")).reason == "TokenWrong"
    assert (await refused("abcdef.0123456789abcdef", "n-unknown")).reason == "TokenNotFound"

    assert "expired at" in messages["TokenExpired"]
    assert "was deleted at" in messages["TokenDeleted"]
    assert "already used by node 'n-first'" in messages["TokenUsed"]
    assert "secret part is wrong" in messages["TokenWrong"]
    assert len(set(messages.values())) == len(messages)  # five different messages
    for reason in ("TokenExpired", "TokenDeleted", "TokenUsed", "TokenWrong"):
        assert "cloudhub token create" in messages[reason]  # ... and what to do next


async def test_a_name_missing_from_the_serving_certificate_is_named(start_hub, node) -> None:
    hub = await start_hub(server_names=("localhost", "hub.example.com"))
    token, _ = await hub.tokens.create(ttl=3600, single_use=True)
    pi = node()
    with pytest.raises(JoinFailed) as caught:
        await pi.join(join_address(hub, "127.0.0.1"), token, hub.ca.ca_hash)
    error = caught.value
    assert error.reason == "ServerNameMismatch"
    assert "does not cover '127.0.0.1'" in str(error)
    assert "localhost, hub.example.com" in str(error)  # the names it does cover
    assert "pki.server_names" in error.hint
    assert (await hub.tokens.validate(token)).used_by is None
    await pi.join(join_address(hub, "localhost"), token, hub.ca.ca_hash)  # a covered name


async def test_token_bound_to_a_node_name(start_hub, node) -> None:
    hub = await start_hub()
    token, _ = await hub.tokens.create(ttl=3600, node_name="gate-7")
    with pytest.raises(JoinFailed) as caught:
        await node("gate-8").join(join_address(hub), token, hub.ca.ca_hash)
    assert caught.value.reason == "NodeNameRefused"
    assert "--node-name gate-7" in str(caught.value)
    await node("gate-7").join(join_address(hub), token, hub.ca.ca_hash)


async def test_reserved_labels_only_through_the_token(start_hub, node) -> None:
    hub = await start_hub()
    token, _ = await hub.tokens.create(ttl=3600, labels={"edgefleet.io/zone": "a"})
    with pytest.raises(JoinFailed) as caught:
        await node("pi-1").join(
            join_address(hub), token, hub.ca.ca_hash, labels={"node-role.kubernetes.io/x": ""}
        )
    assert caught.value.reason == "NodeNameRefused"
    assert "may only be set by the operator" in str(caught.value)
    result = await node("pi-2").join(
        join_address(hub), token, hub.ca.ca_hash, labels={"edgefleet.io/zone": "a"}
    )
    assert result["labels"] == {"edgefleet.io/zone": "a"}


async def test_another_key_cannot_take_a_live_node_name(start_hub, node) -> None:
    hub = await start_hub()
    token, _ = await hub.tokens.create(ttl=3600)
    await node("pi-1").join(join_address(hub), token, hub.ca.ca_hash)
    intruder = node("pi-1-again")
    with pytest.raises(JoinFailed) as caught:
        await intruder.join(join_address(hub), token, hub.ca.ca_hash, node_name="pi-1")
    assert caught.value.reason == "NodeAlreadyJoined"
    assert "cloudhub node revoke pi-1" in str(caught.value)
    await hub.registry.revoke("pi-1", "replaced")
    await intruder.join(join_address(hub), token, hub.ca.ca_hash, node_name="pi-1")


async def test_a_lost_answer_can_be_retried_with_a_single_use_token(start_hub, node) -> None:
    # The node sent its request, the hub consumed the token and signed, the answer was
    # lost: the node still holds node.key.pending, and the retry with the same key is
    # accepted while any other key is refused.
    hub = await start_hub()
    token, _ = await hub.tokens.create(ttl=3600, single_use=True)
    pi = node()
    await pi.join(join_address(hub), token, hub.ca.ca_hash)
    first = pi.paths.load()
    # Simulate the lost answer: the certificate files never arrived, the key is pending.
    paths = pi.paths
    paths.pending_key.write_bytes(paths.key.read_bytes())
    for path in (paths.cert, paths.key, paths.join_record):
        path.unlink()
    await pi.join(join_address(hub), token, hub.ca.ca_hash)
    second = paths.load()
    assert second.chain[0].public_key() == first.chain[0].public_key()
    assert second.chain[0].serial_number != first.chain[0].serial_number


async def test_already_joined_needs_renew(start_hub, node) -> None:
    hub = await start_hub()
    token, _ = await hub.tokens.create(ttl=3600)
    pi = node()
    await pi.join(join_address(hub), token, hub.ca.ca_hash)
    with pytest.raises(UsageError, match=r"already joined as pi-1.*--renew"):
        await pi.join(join_address(hub), token, hub.ca.ca_hash)


async def test_unreachable_hub_says_so(node) -> None:
    with pytest.raises(JoinFailed) as caught:
        await node().join(
            "127.0.0.1:1", "abcdef.0123456789abcdef", "sha256:" + "0" * 64, attempts=1
        )
    assert caught.value.reason == "HubUnreachable"
    assert "7444" in caught.value.hint


async def test_command_line_exit_codes_and_messages(start_hub, node) -> None:
    hub = await start_hub()
    token, _ = await hub.tokens.create(ttl=3600)
    pi = node()

    async def edgeagent(*args: str) -> subprocess.CompletedProcess[str]:
        proc = await asyncio.create_subprocess_exec(
            PYTHON,
            "-m",
            "edgeagent",
            "join",
            "--config",
            str(pi.config),
            *args,
            env=python_env(),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        return subprocess.CompletedProcess(args, proc.returncode or 0, out.decode(), err.decode())

    wrong = await edgeagent(
        "--hub", join_address(hub), "--token", token, "--ca-cert-hash", "sha256:" + "1" * 64
    )
    assert wrong.returncode == 1
    assert "does not match" in wrong.stderr or "not the pinned" in wrong.stderr
    missing = await edgeagent("--hub", join_address(hub), "--token", token)
    assert missing.returncode == 2 and "--ca-cert-hash is required" in missing.stderr
    ok = await edgeagent(
        "--hub",
        join_address(hub),
        "--token",
        token,
        "--ca-cert-hash",
        hub.ca.ca_hash,
        "--node-name",
        "pi-1",
    )
    assert ok.returncode == 0, ok.stderr
    assert "node pi-1 joined hub" in ok.stdout
