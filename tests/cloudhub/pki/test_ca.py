"""The hub CA: created once however many replicas start together, loaded afterwards,
supplied by the operator (files or Secret), refused when damaged; the serving
certificate covers every configured name."""

from __future__ import annotations

import asyncio
import base64
import ipaddress
import time

import pytest
from cryptography import x509

from cloudhub.kube import SECRETS, KubeClient
from cloudhub.pki import CAConfigError, CAManager
from protocol import pki
from tests.cloudhub.pki.conftest import NAMESPACE, Cluster, pki_settings


async def test_replicas_starting_together_end_with_one_ca(cluster: Cluster) -> None:
    clients = [await cluster.new_client() for _ in range(5)]
    try:
        managers = [CAManager(c, pki_settings()) for c in clients]
        cas = await asyncio.gather(*(m.start() for m in managers))
        pins = {pki.ca_cert_hash(ca.certificate) for ca in cas}
        assert len(pins) == 1, pins
        assert sorted(m.origin for m in managers).count("created") == 1
        items, _ = await cluster.client.list(SECRETS, NAMESPACE)
        assert [s["metadata"]["name"] for s in items] == ["edgefleet-ca"]
        # A replica started later (or a restart) loads the same CA.
        later = CAManager(cluster.client, pki_settings())
        assert pki.ca_cert_hash((await later.start()).certificate) in pins
        assert later.origin == "loaded"
    finally:
        for c in clients:
            await c.close()


async def test_the_replica_that_loses_the_create_race_loads_the_winner(
    cluster: Cluster,
) -> None:
    # Make both replicas read "absent" before either creates: their API clients hold
    # the answers to the first GETs until both have been answered.
    both_read = asyncio.Event()
    reads = 0

    class GatedClient(KubeClient):
        async def get(self, rt, name, namespace=None, **kwargs):
            nonlocal reads
            try:
                return await super().get(rt, name, namespace, **kwargs)
            finally:
                if not both_read.is_set():
                    reads += 1
                    if reads == 2:
                        both_read.set()
                    await asyncio.wait_for(both_read.wait(), 10)

    clients = [
        await GatedClient.from_kubeconfig(cluster.kubeconfig),
        await GatedClient.from_kubeconfig(cluster.kubeconfig),
    ]
    try:
        a, b = (CAManager(c, pki_settings()) for c in clients)
        ca_a, ca_b = await asyncio.gather(a.start(), b.start())
    finally:
        for c in clients:
            await c.close()
    assert {a.origin, b.origin} == {"created", "loaded"}
    assert ca_a.certificate == ca_b.certificate
    assert pki.dump_private_key_pem(ca_a.private_key) == pki.dump_private_key_pem(ca_b.private_key)


async def test_operator_supplied_secret_is_used(cluster: Cluster) -> None:
    own = pki.generate_ca("operator-ca", lifetime=86400, now=time.time())
    await cluster.client.create(
        SECRETS,
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/tls",
            "metadata": {"name": "edgefleet-ca", "namespace": NAMESPACE},
            "data": {
                "tls.crt": base64.b64encode(pki.dump_certificate_pem(own.certificate)).decode(),
                "tls.key": base64.b64encode(pki.dump_private_key_pem(own.private_key)).decode(),
            },
        },
    )
    manager = CAManager(cluster.client, pki_settings())
    await manager.start()
    assert manager.origin == "loaded"
    assert manager.ca_hash == pki.ca_cert_hash(own.certificate)


async def test_operator_supplied_files_are_used(cluster: Cluster, tmp_path) -> None:
    own = pki.generate_ca("operator-ca", lifetime=86400, now=time.time())
    (tmp_path / "ca.crt").write_bytes(pki.dump_certificate_pem(own.certificate))
    (tmp_path / "ca.key").write_bytes(pki.dump_private_key_pem(own.private_key))
    settings = pki_settings(
        ca_cert_file=str(tmp_path / "ca.crt"), ca_key_file=str(tmp_path / "ca.key")
    )
    manager = CAManager(cluster.client, settings)
    await manager.start()
    assert manager.origin == "files"
    assert manager.ca_hash == pki.ca_cert_hash(own.certificate)
    items, _ = await cluster.client.list(SECRETS, NAMESPACE)
    assert items == []  # the key stays out of the API


async def test_a_damaged_ca_secret_is_refused_with_its_name(cluster: Cluster) -> None:
    one = pki.generate_ca("one", lifetime=86400, now=time.time())
    other = pki.generate_ca("other", lifetime=86400, now=time.time())
    await cluster.client.create(
        SECRETS,
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/tls",
            "metadata": {"name": "edgefleet-ca", "namespace": NAMESPACE},
            "data": {
                "tls.crt": base64.b64encode(pki.dump_certificate_pem(one.certificate)).decode(),
                "tls.key": base64.b64encode(pki.dump_private_key_pem(other.private_key)).decode(),
            },
        },
    )
    with pytest.raises(CAConfigError, match=r"edgefleet/edgefleet-ca.*does not belong"):
        await CAManager(cluster.client, pki_settings()).start()


async def test_a_leaf_certificate_is_not_accepted_as_ca(cluster: Cluster, tmp_path) -> None:
    ca = pki.generate_ca("ca", lifetime=86400, now=time.time())
    cert, key = pki.issue_server_certificate(ca, dns_names=["x"], lifetime=86400, now=time.time())
    (tmp_path / "c").write_bytes(pki.dump_certificate_pem(cert))
    (tmp_path / "k").write_bytes(pki.dump_private_key_pem(key))
    settings = pki_settings(ca_cert_file=str(tmp_path / "c"), ca_key_file=str(tmp_path / "k"))
    with pytest.raises(CAConfigError, match="not a CA"):
        await CAManager(cluster.client, settings).start()


async def test_serving_certificate_covers_every_listed_name(cluster: Cluster) -> None:
    names = ("hub.example.com", "edgefleet-hub.edgefleet.svc", "10.0.0.7", "fd00::7")
    manager = CAManager(cluster.client, pki_settings(server_names=names))
    await manager.start()
    credentials = manager.serving_credentials()
    assert manager.serving_credentials() is credentials  # issued once, not per call
    cert = credentials.chain[0]
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(sans.get_values_for_type(x509.DNSName)) == set(names[:2])
    assert set(sans.get_values_for_type(x509.IPAddress)) == {
        ipaddress.ip_address(names[2]),
        ipaddress.ip_address(names[3]),
    }
    assert credentials.cas == (manager.authority.certificate,)
