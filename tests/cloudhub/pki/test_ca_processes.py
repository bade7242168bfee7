"""One CA under races, across processes: several hub replicas, each a process with its own
API connection, start at the same instant against an API with no CA Secret; exactly one
creates it, every other loads the winner's, and all end with the same CA pin. Run against
the embedded API and the reference kube-apiserver."""

from __future__ import annotations

import asyncio
import base64
import json
import pathlib
import sys
import uuid
from collections.abc import AsyncIterator

import pytest

from cloudhub.kube import NAMESPACES, SECRETS, KubeClient
from cloudhub.standalone import APIServerSettings, EmbeddedAPIServer
from protocol import pki
from tests.k8s.fixtures import kube_apiserver  # noqa: F401  (session fixture)

REPO = pathlib.Path(__file__).resolve().parents[3]
REPLICAS = 4
DEADLINE_S = 60.0
BOTH = ["embedded", pytest.param("kube-apiserver", marks=pytest.mark.kubeapiserver)]


@pytest.fixture(params=BOTH)
async def kubeconfig(request: pytest.FixtureRequest) -> AsyncIterator[str]:
    if request.param == "kube-apiserver":
        yield str(request.getfixturevalue("kube_apiserver").kubeconfig)
        return
    async with EmbeddedAPIServer(APIServerSettings(data_dir=None, port=0)) as api:
        yield str(api.kubeconfig_path)


async def _start_child(kubeconfig: str, namespace: str) -> asyncio.subprocess.Process:
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.cloudhub.pki.ca_child",
        kubeconfig,
        namespace,
        "edgefleet-ca",
        cwd=REPO,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert child.stdout is not None
    line = await asyncio.wait_for(child.stdout.readline(), DEADLINE_S)
    assert json.loads(line or b"null") == {"ready": True}, line
    return child


async def test_replica_processes_starting_at_once_create_exactly_one_ca(kubeconfig: str) -> None:
    namespace = f"ca-race-{uuid.uuid4().hex[:6]}"
    kube = await KubeClient.from_kubeconfig(kubeconfig)
    async with kube:
        await kube.create(
            NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
        )
        children = await asyncio.gather(
            *(_start_child(kubeconfig, namespace) for _ in range(REPLICAS))
        )
        try:
            for child in children:  # every replica connected: release them together
                assert child.stdin is not None
                child.stdin.write(b"go\n")
            await asyncio.gather(*(c.stdin.drain() for c in children if c.stdin))
            outputs = await asyncio.wait_for(
                asyncio.gather(*(c.communicate() for c in children)), DEADLINE_S
            )
        finally:
            for child in children:
                if child.returncode is None:
                    child.kill()
                    await child.wait()
        answers = []
        for child, (out, err) in zip(children, outputs, strict=True):
            assert child.returncode == 0, err.decode()
            answers.append(json.loads(out.splitlines()[-1]))
        assert sorted(a["origin"] for a in answers) == ["created"] + ["loaded"] * (REPLICAS - 1)
        pins = {a["pin"] for a in answers}
        assert len(pins) == 1, pins
        secrets, _ = await kube.list(SECRETS, namespace)
        assert [s["metadata"]["name"] for s in secrets] == ["edgefleet-ca"]
        stored = pki.load_certificate_pem(base64.b64decode(secrets[0]["data"]["tls.crt"]))
        assert pki.ca_cert_hash(stored) in pins
