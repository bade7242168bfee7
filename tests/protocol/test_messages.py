"""Messages: every kind round-trips, validation on construction, semantics match the doc."""

from __future__ import annotations

import pathlib
import re

import pytest

from protocol import (
    REGISTRY,
    Close,
    CloseCode,
    Error,
    ErrorCode,
    Hello,
    InvalidMessage,
    KubeEvent,
    MetricsBatch,
    ObjectDelete,
    ObjectRef,
    ObjectUpsert,
    PodDeleted,
    PodStatus,
    TwinDesired,
    TwinReported,
    Welcome,
    decode_payload,
    encode,
)
from tests.protocol.helpers import DEVICE, POD, sample_messages, status

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "protocol.md"


def _doc_rows() -> dict[str, tuple[str, str]]:
    """kind -> (direction, needs_ack) from the messages table of docs/protocol.md."""
    rows = {}
    for line in DOC.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 5 or not cells[0].startswith("`"):
            continue
        kinds = re.findall(r"`([a-z_]+)`", cells[0].split("(class")[0])
        for kind in kinds:
            rows[kind] = (cells[1], cells[2])
    return rows


def test_every_kind_has_a_sample_and_round_trips() -> None:
    samples = sample_messages()
    assert {m.kind for m in samples} == set(REGISTRY)
    for message in samples:
        seq = 9 if message.needs_ack else None
        frame = encode(message, seq)
        assert int.from_bytes(frame[:4], "big") == len(frame) - 4
        assert decode_payload(frame[4:]) == (seq, message)


def test_the_doc_table_lists_every_kind_with_the_declared_semantics() -> None:
    rows = _doc_rows()
    assert set(rows) == set(REGISTRY)
    directions = {"edge→hub": (True, False), "hub→edge": (False, True), "both": (True, True)}
    for kind, cls in REGISTRY.items():
        direction, needs_ack = rows[kind]
        assert (cls.from_edge, cls.from_hub) == directions[direction], kind
        assert cls.needs_ack == (needs_ack == "yes"), kind


def test_messages_are_frozen_and_slotted() -> None:
    message = status()
    with pytest.raises(AttributeError):
        message.observed_at = 2.0  # type: ignore[misc]
    assert not hasattr(message, "__dict__")
    assert not hasattr(POD, "__dict__")


def test_coalesce_keys_declare_latest_wins() -> None:
    assert status(1).coalesce_key() == status(2).coalesce_key() == POD.uid
    assert PodDeleted(POD).coalesce_key() == POD.uid  # a deletion replaces an unsent status
    a = TwinReported(DEVICE, "temperature", 1, 1, 1.0)
    b = TwinReported(DEVICE, "humidity", 1, 1, 1.0)
    assert a.coalesce_key() == (DEVICE.uid, "temperature") != b.coalesce_key()
    assert MetricsBatch("edge-1", {}).coalesce_key() is None
    assert KubeEvent(POD, "Normal", "Pulled", "", 1.0).coalesce_key() is None


def test_twin_desired_never_replaces_the_device_upsert() -> None:
    """A hub outbox holds the Device's upsert and its desired state at once: both go out."""
    upsert = ObjectUpsert(DEVICE, "1", {"metadata": {"uid": DEVICE.uid}})
    first = TwinDesired(DEVICE, 1, {"setpoint": 21.0})
    second = TwinDesired(DEVICE, 2, {"setpoint": 22.0})
    assert first.coalesce_key() == second.coalesce_key() != upsert.coalesce_key()
    assert ObjectDelete(DEVICE, "2").coalesce_key() == upsert.coalesce_key()


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: ObjectRef("Pod", "ns", "name", ""), "uid"),
        (lambda: ObjectRef("Pod", "ns", 3, "u"), "name"),  # type: ignore[arg-type]
        (lambda: PodStatus(POD, {"phase": "Running"}, float("nan")), "observed_at"),
        (lambda: PodStatus(POD, {1: "x"}, 1.0), "status"),  # type: ignore[dict-item]
        (lambda: PodStatus(DEVICE, {}, 1.0), "ref.kind"),
        (lambda: PodStatus("default/web-0", {}, 1.0), "ref"),  # type: ignore[arg-type]
        (lambda: Hello(1, 1, "Edge_1", "0.1"), "node_name"),
        (lambda: Hello(2, 1, "edge-1", "0.1"), "max_version"),
        (lambda: Hello(0, 1, "edge-1", "0.1"), "min_version"),
        (lambda: Hello(1, 1, "edge-1", "0.1", capabilities=["x"]), "capabilities"),  # type: ignore[arg-type]
        (lambda: Hello(1, 1, "edge-1", "0.1", inventory={"uid": 5}), "inventory"),  # type: ignore[dict-item]
        (lambda: Welcome(1, 0.0, "s", -1, 20.0), "received_up_to"),
        (lambda: Welcome(1, 0.0, "s", 0, 0.0), "heartbeat_interval"),
        (lambda: Welcome(True, 0.0, "s", 0, 1.0), "version"),  # type: ignore[arg-type]
        (lambda: KubeEvent(POD, "Fatal", "X", "", 1.0), "type"),
        (lambda: KubeEvent(POD, "Normal", "X", "", 1.0, count=0), "count"),
        (lambda: MetricsBatch("edge-1", {"t": (1, 2)}), "samples"),  # type: ignore[dict-item]
        (lambda: Error(3, "x"), "code"),  # type: ignore[arg-type]
        (lambda: Error(ErrorCode.INTERNAL, "x", in_reply_to=0), "in_reply_to"),
        (lambda: Close(CloseCode.NORMAL, "", retry_after=-1.0), "retry_after"),
        (lambda: TwinReported(DEVICE, "", 1, 1, 1.0), "property"),
        (lambda: TwinReported(DEVICE, "p", 1, 2**64, 1.0), "version"),
    ],
)
def test_construction_validates_and_names_the_field(build, field: str) -> None:
    with pytest.raises(InvalidMessage) as info:
        build()
    assert info.value.field == field
    assert isinstance(info.value, ValueError)


def test_cert_renew_response_is_a_certificate_or_an_error() -> None:
    from protocol import CertRenewResponse

    with pytest.raises(InvalidMessage, match="exactly one"):
        CertRenewResponse(request_id="r", certificate_pem=b"c", ca_pem=b"a", error="no")
    with pytest.raises(InvalidMessage, match="exactly one"):
        CertRenewResponse(request_id="r", certificate_pem=b"c")  # no CA
    assert CertRenewResponse(request_id="r", error="no").certificate_pem is None


def test_ints_are_accepted_where_seconds_are_expected_but_not_bools() -> None:
    assert PodStatus(POD, {}, 3).observed_at == 3
    with pytest.raises(InvalidMessage):
        PodStatus(POD, {}, True)
