"""PKI figures: join latency over real TLS, revocation latency to a closed session, and
the hub's cost per renewal.

- ``join``: ``edgeagent join`` (``run_join``: CA fetched and pinned, key made, CSR sent,
  files written) against a ``HubPKI`` join endpoint on the embedded API, one node after
  another; milliseconds per join as the agent sees it.
- ``revocation``: nodes connected over WebSocket to a session server wired to ``HubPKI``;
  each is revoked from *another* API client (as ``cloudhub node revoke`` or another
  replica does) and the time until the agent's session is closed is measured.
- ``renewal``: ``HubPKI.renew`` for a fresh CSR (sign and record), milliseconds each
  (called without the peer certificate, so the "too early" rule does not apply).
- ``session renewal``: the agent's side, over a live WebSocket session to a session server
  wired to ``HubPKI`` (certificates of 4 s, renewed once past half of it): the
  ``CertificateRenewer`` makes a key and CSR, sends ``cert_renew_request``, takes the
  answer, checks it and replaces its files atomically; milliseconds from the request made
  to the files installed.
"""

from __future__ import annotations

import asyncio
import pathlib
import statistics
import tempfile
import time

from cloudhub.kube import NAMESPACES, KubeClient
from cloudhub.pki import CertificateRegistry, HubPKI, PKISettings
from cloudhub.standalone import APIServerSettings, EmbeddedAPIServer
from edgeagent.certs import CertificateRenewer
from protocol.events import Closed, MessageReceived
from protocol.messages import CertRenewResponse
from protocol.transport import connect_websocket
from tests.cloudhub.pki.sessionhub import SessionHub, hello
from tests.cloudhub.pki.test_join import Node


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _main(quick: bool) -> dict:
    joins = 8 if quick else 60
    revocations = 4 if quick else 20
    renewals = 10 if quick else 100
    session_renewals = 5 if quick else 30
    async with EmbeddedAPIServer(APIServerSettings(port=0)) as api:
        admin = await KubeClient.from_kubeconfig(str(api.kubeconfig_path))
        other = await KubeClient.from_kubeconfig(str(api.kubeconfig_path))
        async with admin, other:
            await admin.create(
                NAMESPACES,
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "edgefleet"}},
            )
            settings = PKISettings(
                namespace="edgefleet",
                join_host="127.0.0.1",
                join_port=0,
                server_names=("localhost",),
            )
            hub_pki = HubPKI(admin, settings)
            await hub_pki.start()
            hub = await SessionHub(hub_pki).start()
            try:
                with tempfile.TemporaryDirectory() as tmp:
                    out = await _measure(
                        hub_pki, hub, other, pathlib.Path(tmp), joins, revocations, renewals
                    )
            finally:
                await hub.close()
                await hub_pki.close()
            await admin.create(
                NAMESPACES,
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "edgefleet-short"}},
            )
            short = HubPKI(
                admin,
                PKISettings(
                    namespace="edgefleet-short",
                    join_host="127.0.0.1",
                    join_port=0,
                    server_names=("localhost",),
                    node_cert_lifetime=4.0,
                ),
            )
            await short.start()
            hub = await SessionHub(short).start()
            try:
                with tempfile.TemporaryDirectory() as tmp:
                    ms = await _session_renewals(short, hub, pathlib.Path(tmp), session_renewals)
            finally:
                await hub.close()
                await short.close()
    results = out["results"]
    results["session_renewals"] = session_renewals
    results["session_renewal_ms_p50"] = round(statistics.median(ms), 1)
    results["session_renewal_ms_max"] = round(max(ms), 1)
    out["goals"].append(
        {
            "id": "session_renewal_max",
            "value": results["session_renewal_ms_max"],
            "target": 1000,
            "unit": "ms",
            "op": "<=",
        }
    )
    return out


async def _session_renewals(hub_pki, hub, tmp, count: int) -> list[float]:
    token, _ = await hub_pki.tokens.create(ttl=3600)
    node = Node(tmp, "bench-renew")
    await node.join(f"localhost:{hub_pki.join_server.port}", token, hub_pki.ca.ca_hash)
    renewer = CertificateRenewer(node.paths, uniform=lambda a, b: a)
    link = await connect_websocket(
        "127.0.0.1",
        hub.websocket_port,
        credentials=renewer.credentials(),
        hello=hello(node.name),
        server_name="localhost",
        timeout=10.0,
    )

    async def read() -> None:
        async for event in link:
            if isinstance(event, MessageReceived) and isinstance(event.message, CertRenewResponse):
                renewer.handle(event.message)

    reader = asyncio.create_task(read())
    ms: list[float] = []
    try:
        # The hub renews only past half the lifetime of the certificate the session
        # was opened with.
        issued = renewer.credentials().chain[0].not_valid_before_utc.timestamp() + 300
        await asyncio.sleep(max(0.0, issued + 2.2 - time.time()))
        for _ in range(count):
            started = time.perf_counter()
            await renewer.renew_once(link.send)
            ms.append((time.perf_counter() - started) * 1000)
    finally:
        await link.close()
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)
    return ms


async def _measure(hub_pki, hub, other, tmp, joins, revocations, renewals) -> dict:
    token, _ = await hub_pki.tokens.create(ttl=3600)
    address = f"localhost:{hub_pki.join_server.port}"
    join_ms: list[float] = []
    nodes: list[Node] = []
    for i in range(joins):
        node = Node(tmp, f"bench-{i}")
        started = time.perf_counter()
        await node.join(address, token, hub_pki.ca.ca_hash)
        join_ms.append((time.perf_counter() - started) * 1000)
        nodes.append(node)

    revoke_ms: list[float] = []
    registry = CertificateRegistry(other, "edgefleet")
    for node in nodes[:revocations]:
        renewer = CertificateRenewer(node.paths, uniform=lambda a, b: a)
        link = await connect_websocket(
            "127.0.0.1",
            hub.websocket_port,
            credentials=renewer.credentials(),
            hello=hello(node.name),
            server_name="localhost",
            timeout=10.0,
        )
        await hub.wait_for(lambda n=node.name: n in hub.links)
        started = time.perf_counter()
        await registry.revoke(node.name, "benchmark")
        async for event in link:
            if isinstance(event, Closed):
                break
        revoke_ms.append((time.perf_counter() - started) * 1000)
        await link.close()

    renew_ms: list[float] = []
    renewer = CertificateRenewer(nodes[-1].paths, uniform=lambda a, b: a)
    for _ in range(renewals):
        request = renewer.make_request()
        started = time.perf_counter()
        response = await hub_pki.renew(nodes[-1].name, request)
        renew_ms.append((time.perf_counter() - started) * 1000)
        assert response.error is None, response.error
        renewer.forget(request.request_id)

    results = {
        "joins": joins,
        "join_ms_p50": round(statistics.median(join_ms), 1),
        "join_ms_p95": round(_p(join_ms, 0.95), 1),
        "revocations": revocations,
        "revocation_ms_p50": round(statistics.median(revoke_ms), 1),
        "revocation_ms_max": round(max(revoke_ms), 1),
        "renewals": renewals,
        "renewal_ms_p50": round(statistics.median(renew_ms), 2),
        "renewal_ms_p95": round(_p(renew_ms, 0.95), 2),
    }
    return {
        "results": results,
        "goals": [
            {
                "id": "join_p95",
                "value": results["join_ms_p95"],
                "target": 500,
                "unit": "ms",
                "op": "<=",
            },
            {
                "id": "revocation_max",
                "value": results["revocation_ms_max"],
                "target": 1000,
                "unit": "ms",
                "op": "<=",
            },
            {
                "id": "renewal_p95",
                "value": results["renewal_ms_p95"],
                "target": 100,
                "unit": "ms",
                "op": "<=",
            },
        ],
    }


def run(quick: bool) -> dict:
    return asyncio.run(_main(quick))
