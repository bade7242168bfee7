"""A session outlives the certificate that opened it when that certificate is renewed over
it; once the node is revoked, that session must not get a new certificate, even though
its own (expired) certificate is not among the serials revoked."""

from __future__ import annotations

from cloudhub.pki import CertificateRegistry
from edgeagent.certs import CertificateRenewer
from protocol import pki
from tests.clock import ManualClock
from tests.cloudhub.pki.conftest import NAMESPACE, Cluster, join_address
from tests.cloudhub.pki.test_join import Node
from tests.waiting import eventually


async def test_a_session_whose_certificate_expired_gets_nothing_after_revocation(
    start_hub, cluster: Cluster, tmp_path
) -> None:
    clock = ManualClock()  # the hub's and the node's wall clock, moved by hand
    hub = await start_hub(node_cert_lifetime=600.0, clock=clock)
    token, _ = await hub.tokens.create(ttl=3600)
    pi = Node(tmp_path, "pi-long")
    await pi.join(join_address(hub), token, hub.ca.ca_hash)
    renewer = CertificateRenewer(pi.paths, uniform=lambda a, b: a, clock=clock)
    first = renewer.credentials().chain[0]  # the certificate the session was opened with
    issued = first.not_valid_before_utc.timestamp() + pki.CLOCK_SKEW
    clock.now = issued + 0.55 * 600.0  # past half its lifetime

    request = renewer.make_request()
    answer = await hub.renew("pi-long", request, first)
    assert answer.error is None, answer.error
    renewer.apply(answer)
    assert renewer.credentials().chain[0].serial_number != first.serial_number

    clock.now = first.not_valid_after_utc.timestamp() + 1.0  # the first one has expired
    other = await cluster.new_client()
    try:
        registry = CertificateRegistry(other, NAMESPACE, clock=clock)
        revoked = await registry.revoke("pi-long", "stolen")
    finally:
        await other.close()
    assert first.serial_number not in revoked  # it had expired: not revoked as such

    async def refused() -> str | None:  # this replica learns of the revocation by its watch
        request = renewer.make_request()
        answer = await hub.renew("pi-long", request, first)
        renewer.forget(request.request_id)
        return answer.error

    error = await eventually(refused, "the renewal refused", 10)
    assert "revoked" in error and "stolen" in error
