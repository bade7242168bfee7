"""edgeagent.upgrade.artifact: resume, the byte budget, the digest checked first."""

from __future__ import annotations

import hashlib
import pathlib

import pytest

from edgeagent.upgrade import ArtifactCache, BudgetExceeded, DigestMismatch, OrderRefused

DATA = bytes(range(256)) * 40  # 10,240 bytes
DIGEST = hashlib.sha256(DATA).hexdigest()
NAME = "edgefleet-0.5.0-py3-none-any.whl"


def test_a_download_resumes_where_it_stopped_and_is_kept_once_verified(
    tmp_path: pathlib.Path,
) -> None:
    cache = ArtifactCache(tmp_path / "cache", budget=1 << 20)
    assert cache.offset(DIGEST) == 0 and cache.cached(DIGEST, NAME) is None
    assert cache.append(DIGEST, 0, DATA[:4000], len(DATA)) == 4000
    # The link drops; a new cache object (a restarted agent) resumes at the same offset.
    again = ArtifactCache(tmp_path / "cache", budget=1 << 20)
    assert again.offset(DIGEST) == 4000
    again.append(DIGEST, 4000, DATA[4000:], len(DATA))
    path = again.complete(DIGEST, NAME)
    assert path.read_bytes() == DATA and path.name == NAME
    assert again.cached(DIGEST, NAME) == path and again.offset(DIGEST) == 0


def test_a_chunk_at_the_wrong_offset_or_past_the_end_is_refused(tmp_path: pathlib.Path) -> None:
    cache = ArtifactCache(tmp_path, budget=1 << 20)
    cache.append(DIGEST, 0, DATA[:100], len(DATA))
    with pytest.raises(OrderRefused) as caught:
        cache.append(DIGEST, 0, DATA[:100], len(DATA))  # a duplicate of an older request
    assert caught.value.reason == "BadChunk"
    with pytest.raises(OrderRefused):
        cache.append(DIGEST, 100, DATA, len(DATA))  # runs past total
    assert cache.offset(DIGEST) == 100


def test_a_digest_mismatch_deletes_the_bytes_and_installs_nothing(tmp_path: pathlib.Path) -> None:
    cache = ArtifactCache(tmp_path, budget=1 << 20)
    tampered = DATA[:-1] + b"X"
    cache.append(DIGEST, 0, tampered, len(tampered))
    with pytest.raises(DigestMismatch) as caught:
        cache.complete(DIGEST, NAME)
    assert caught.value.expected == DIGEST
    assert caught.value.actual == hashlib.sha256(tampered).hexdigest()
    assert caught.value.reason == "DigestMismatch"
    assert cache.offset(DIGEST) == 0 and cache.cached(DIGEST, NAME) is None
    assert list(tmp_path.rglob("*.whl")) == []


def test_the_budget_evicts_older_artifacts_and_refuses_what_cannot_fit(
    tmp_path: pathlib.Path,
) -> None:
    cache = ArtifactCache(tmp_path, budget=15_000)
    cache.append(DIGEST, 0, DATA, len(DATA))
    cache.complete(DIGEST, NAME)
    other = b"y" * 8000
    other_digest = hashlib.sha256(other).hexdigest()
    cache.reserve(other_digest, len(other))  # evicts the first: 10,240 + 8,000 > 15,000
    assert cache.cached(DIGEST, NAME) is None
    cache.append(other_digest, 0, other, len(other))
    assert cache.used() == 8000
    with pytest.raises(BudgetExceeded) as caught:
        cache.reserve(hashlib.sha256(b"z").hexdigest(), 20_000)
    assert caught.value.reason == "ArtifactTooLarge"
    with pytest.raises(BudgetExceeded):
        cache.append(DIGEST, 0, DATA, len(DATA))  # 8,000 + 10,240 over the budget


@pytest.mark.parametrize(
    "name",
    ["../../etc/cron.d/evil.whl", "/etc/passwd", "a/b.whl", "..whl", ".x.whl", "x.tar.gz"],
)
def test_an_artifact_name_that_is_a_path_is_refused(tmp_path: pathlib.Path, name: str) -> None:
    cache = ArtifactCache(tmp_path / "cache", budget=1 << 20)
    cache.append(DIGEST, 0, DATA, len(DATA))
    with pytest.raises(OrderRefused) as caught:
        cache.complete(DIGEST, name)
    assert caught.value.reason == "InvalidArtifact"
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["cache", f"{DIGEST}.part"]


@pytest.mark.parametrize("digest", ["../" + DIGEST[3:], DIGEST.upper(), "", DIGEST[:-1]])
def test_a_digest_that_is_not_hex_is_refused(tmp_path: pathlib.Path, digest: str) -> None:
    cache = ArtifactCache(tmp_path, budget=1 << 20)
    with pytest.raises(OrderRefused) as caught:
        cache.append(digest, 0, b"x", 1)
    assert caught.value.reason == "InvalidDigest"
    assert list(tmp_path.iterdir()) == []
