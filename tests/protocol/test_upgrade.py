"""protocol.upgrade: the version grammar and order, digests, artifact names."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.codec import decode_payload, encode
from protocol.errors import InvalidMessage
from protocol.upgrade import (
    MAX_ARTIFACT_CHUNK,
    ArtifactChunk,
    ArtifactError,
    ArtifactRequest,
    UpgradeOrder,
    UpgradeProgress,
    UpgradeRollback,
    check_artifact_name,
    check_sha256,
    parse_version,
)

ORDERED = [
    "0.9",
    "1.0.dev1",
    "1.0a1.dev1",
    "1.0a1",
    "1.0a2",
    "1.0b1",
    "1.0rc1",
    "1.0",
    "1.0.post1.dev1",
    "1.0.post1",
    "1.0.1",
    "1.1",
    "10.0",
]


def test_versions_sort_as_pep_440_does() -> None:
    parsed = [parse_version(text) for text in ORDERED]
    assert [str(v) for v in sorted(reversed(parsed))] == ORDERED
    for earlier, later in itertools.pairwise(parsed):
        assert earlier < later and later > earlier and earlier <= later and later >= earlier


def test_trailing_zeros_compare_equal() -> None:
    assert parse_version("1.0").key == parse_version("1.0.0.0").key


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "v1.0",
        "1.0+local",
        "1!1.0",
        "1.0 ",
        "1.0;rm -rf /",
        "../1.0",
        "1.0\n",
        "1.2.3.4.5",
        "1234567.0",
        "1.0-rc1",
        None,
        10,
    ],
)
def test_anything_outside_the_grammar_is_refused(bad: object) -> None:
    with pytest.raises(ArtifactError) as caught:
        parse_version(bad)
    assert caught.value.field == "version"


def test_a_digest_is_64_lowercase_hex_digits() -> None:
    good = "ab" * 32
    assert check_sha256(good) == good
    for bad in ("AB" * 32, "ab" * 31, "ab" * 33, "zz" * 32, None, "ab" * 32 + "\n"):
        with pytest.raises(ArtifactError):
            check_sha256(bad)


def test_an_artifact_is_a_bare_wheel_file_name() -> None:
    name = "edgefleet-0.5.0-py3-none-any.whl"
    assert check_artifact_name(name) == name
    for bad in (
        "../edgefleet-0.5.0-py3-none-any.whl",
        "/etc/passwd.whl",
        "dir/edgefleet.whl",
        "..whl",
        ".hidden.whl",
        "edgefleet-0.5.0.tar.gz",
        "edge fleet.whl",
        "edgefleet\x00.whl",
        "a..b.whl",
        "",
        None,
    ):
        with pytest.raises(ArtifactError):
            check_artifact_name(bad)


@given(st.text(max_size=40))
def test_parse_version_accepts_or_refuses_cleanly(text: str) -> None:
    try:
        version = parse_version(text)
    except ArtifactError:
        return
    assert version.text == text
    assert all(ch.isdigit() or ch in ".abrcpostdev" for ch in text)


@given(
    st.lists(st.integers(0, 999), min_size=1, max_size=4),
    st.lists(st.integers(0, 999), min_size=1, max_size=4),
)
def test_release_order_matches_tuple_order(a: list[int], b: list[int]) -> None:
    va = parse_version(".".join(map(str, a)))
    vb = parse_version(".".join(map(str, b)))
    pad = lambda xs: xs + [0] * (4 - len(xs))  # noqa: E731
    assert (va < vb) == (pad(a) < pad(b))
    assert (va.key == vb.key) == (pad(a) == pad(b))


DIGEST = "ab" * 32


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (
            lambda: UpgradeOrder("", "u", "0.5.0", DIGEST, artifact="a-1-py3-none-any.whl"),
            "upgrade",
        ),
        (lambda: UpgradeOrder("x", "u", "0.5.0", DIGEST), "artifact"),
        (
            lambda: UpgradeOrder(
                "x", "u", "0.5.0", DIGEST, artifact="a-1-py3-none-any.whl", url="https://x"
            ),
            "artifact",
        ),
        (
            lambda: UpgradeOrder("x", "u", "0.5.0", DIGEST, artifact="a.whl", gate_s=0.0),
            "size",
        ),
        (lambda: UpgradeProgress("x", "u", "Healthy", "0.5.0", 1.0), "phase"),
        (lambda: UpgradeRollback("x", "", "Because"), "upgrade"),
        (lambda: ArtifactRequest(DIGEST, -1, 10), "length"),
        (lambda: ArtifactRequest(DIGEST, 0, MAX_ARTIFACT_CHUNK + 1), "length"),
        (lambda: ArtifactRequest(DIGEST, 0, 0), "length"),
        (lambda: ArtifactChunk(DIGEST, 8, b"0123", total=10), "offset"),
    ],
)
def test_upgrade_messages_refuse_bad_fields(make, field: str) -> None:
    with pytest.raises(InvalidMessage) as caught:
        make()
    assert caught.value.field == field


def test_upgrade_messages_cross_the_codec_and_progress_is_latest_wins() -> None:
    order = UpgradeOrder("x", "u", "0.5.0", DIGEST, artifact="edgefleet-0.5.0-py3-none-any.whl")
    assert decode_payload(encode(order)[4:])[1] == order
    a = UpgradeProgress("x", "u", "Downloading", "0.4.0", 1.0)
    b = UpgradeProgress("x", "u", "Installing", "0.4.0", 2.0)
    assert a.coalesce_key() == b.coalesce_key() == ("upgrade", "u")
    assert UpgradeProgress.needs_ack and UpgradeProgress.from_edge
    assert UpgradeOrder.from_hub and not UpgradeOrder.from_edge


def test_the_session_tables_know_the_upgrade_kinds() -> None:
    # protocol.states builds them from the registry at import: protocol/__init__ imports
    # protocol.upgrade first, so an agent's session accepts an upgrade_order.
    from protocol.states import Role, kinds_in

    assert UpgradeOrder in kinds_in(Role.CLIENT) and ArtifactChunk in kinds_in(Role.CLIENT)
    assert UpgradeProgress in kinds_in(Role.SERVER) and ArtifactRequest in kinds_in(Role.SERVER)
