"""Bootstrap tokens: kubeadm's shape, stored hashed, each way of being unusable refused
with its own error, single use guarded against races, purged after retention."""

from __future__ import annotations

import asyncio
import base64
import re
import time

import pytest

from cloudhub.kube import SECRETS
from cloudhub.pki import (
    TokenDeleted,
    TokenExpired,
    TokenMalformed,
    TokenNotFound,
    TokenStore,
    TokenUsed,
    TokenWrong,
)
from tests.clock import ManualClock
from tests.cloudhub.pki.conftest import NAMESPACE, Cluster

PIN_A = "sha256:" + "a" * 64
PIN_B = "sha256:" + "b" * 64


@pytest.fixture
def store(cluster: Cluster) -> TokenStore:
    return TokenStore(cluster.client, NAMESPACE, retention=3600)


async def test_create_has_kubeadm_shape_and_is_stored_hashed(
    store: TokenStore, cluster: Cluster
) -> None:
    token, stored = await store.create(
        ttl=3600, labels={"site": "north"}, node_name="pi-1", description="north shelf"
    )
    assert re.fullmatch(r"[a-z0-9]{6}\.[a-z0-9]{16}", token)
    assert stored.token_id == token.split(".")[0]
    secret = await cluster.client.get(SECRETS, f"bootstrap-token-{stored.token_id}", NAMESPACE)
    assert secret["type"] == "edgefleet.io/bootstrap-token"
    decoded = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    secret_part = token.split(".")[1]
    assert all(secret_part not in v for v in decoded.values())  # never in clear
    assert decoded["labels"] == '{"site": "north"}'
    assert decoded["node-name"] == "pi-1"
    valid = await store.validate(token)
    assert valid.labels == {"site": "north"}
    assert valid.node_name == "pi-1"
    assert valid.expires_at is not None and 3500 < valid.expires_at - time.time() <= 3600


async def test_list_and_delete(store: TokenStore) -> None:
    t1, s1 = await store.create(ttl=3600)
    _, s2 = await store.create(ttl=None, single_use=True)
    listed = await store.list(include_inactive=False)
    assert {t.token_id for t in listed} == {s1.token_id, s2.token_id}
    assert next(t for t in listed if t.token_id == s2.token_id).expires_at is None
    await store.delete(t1)  # by whole token
    await store.delete(s2.token_id)  # by id
    assert await store.list(include_inactive=False) == []
    assert {t.state(time.time()) for t in await store.list()} == {"deleted"}
    with pytest.raises(TokenNotFound):
        await store.delete("zzzzzz")


@pytest.mark.parametrize(
    "token",
    ["", "abcdef", "abcdef.0123456789abcde", "ABCDEF.0123456789abcdef", "abcdef-0123456789abcdef"],
)
async def test_malformed(store: TokenStore, token: str) -> None:
    with pytest.raises(TokenMalformed, match="malformed"):
        await store.validate(token)


async def test_each_unusable_token_has_its_own_error(store: TokenStore) -> None:
    with pytest.raises(TokenNotFound, match="not known to this hub"):
        await store.validate("abcdef.0123456789abcdef")

    token, _ = await store.create(ttl=3600)
    wrong = token[:-1] + ("a" if token[-1] != "a" else "b")
    with pytest.raises(TokenWrong, match="secret part is wrong"):
        await store.validate(wrong)

    deleted, _ = await store.create(ttl=3600)
    await store.delete(deleted)
    with pytest.raises(TokenDeleted, match="was deleted at"):
        await store.validate(deleted)
    with pytest.raises(TokenWrong):  # a wrong secret learns nothing about the state
        await store.validate(deleted[:-1] + ("a" if deleted[-1] != "a" else "b"))

    clock = ManualClock()
    timed = TokenStore(store.client, NAMESPACE, retention=3600, clock=clock)
    expiring, stored = await timed.create(ttl=60)
    assert stored.expires_at == pytest.approx(clock.now + 60, abs=1)  # whole seconds
    assert (await timed.validate(expiring)).token_id == stored.token_id
    clock.advance(60.01)  # the clock passes it
    with pytest.raises(TokenExpired, match="expired at"):
        await timed.validate(expiring)

    single, stored = await store.create(ttl=3600, single_use=True)
    await store.consume(await store.validate(single), node_name="pi-1", key_pin=PIN_A)
    with pytest.raises(TokenUsed, match="already used by node 'pi-1'"):
        await store.validate(single, node_name="pi-2", key_pin=PIN_B)
    with pytest.raises(TokenUsed):  # same name, another key: another machine
        await store.validate(single, node_name="pi-1", key_pin=PIN_B)
    # The same node and key may present it again (its first answer was lost).
    again = await store.validate(single, node_name="pi-1", key_pin=PIN_A)
    await store.consume(again, node_name="pi-1", key_pin=PIN_A)


async def test_single_use_race_has_one_winner(cluster: Cluster) -> None:
    stores = [TokenStore(cluster.client, NAMESPACE, retention=0) for _ in range(4)]
    token, _ = await stores[0].create(ttl=3600, single_use=True)
    stored = await stores[0].validate(token)
    results = await asyncio.gather(
        *(
            s.consume(stored, node_name=f"pi-{i}", key_pin=f"sha256:{i:064x}")
            for i, s in enumerate(stores)
        ),
        return_exceptions=True,
    )
    assert sum(r is None for r in results) == 1, results
    assert all(isinstance(r, TokenUsed) for r in results if r is not None)


async def test_prune_keeps_usable_tokens_and_recent_refusals(cluster: Cluster) -> None:
    store = TokenStore(cluster.client, NAMESPACE, retention=3600)
    usable, _ = await store.create(ttl=3600)
    recent, _ = await store.create(ttl=3600)
    await store.delete(recent)
    assert await store.prune() == []
    eager = TokenStore(cluster.client, NAMESPACE, retention=0)
    gone = await eager.prune()
    assert gone == [recent.split(".")[0]]
    assert [t.token_id for t in await store.list()] == [usable.split(".")[0]]
    with pytest.raises(TokenNotFound):
        await store.validate(recent)


async def test_ttl_must_be_positive(store: TokenStore) -> None:
    with pytest.raises(ValueError, match="ttl"):
        await store.create(ttl=0)
