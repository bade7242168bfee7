"""The metrics_batch body codec: round trips, compactness, and every malformed input."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.codec import FrameDecoder, encode
from protocol.errors import DecodeError, InvalidMessage
from protocol.messages import MetricsBatch
from protocol.metrics_codec import (
    FORMAT_VERSION,
    METRICS,
    Batch,
    LabelKind,
    Metric,
    MetricKind,
    MetricsBodyError,
    Sample,
    container_key,
    decode_batch,
    decode_sample,
    encode_batch,
    encode_sample,
    from_samples_field,
    metric_kind,
    to_samples_field,
)
from tests.bench.bench_metrics import typical_node_samples

M = Metric
T0 = 1_700_000_000_000


def roundtrip(samples, stream=0xDEADBEEF, seq=42):
    body = encode_batch(Batch(stream, seq, tuple(samples)))
    decoded = decode_batch(body)
    assert decoded.stream_id == stream
    assert decoded.batch_seq == seq
    assert decoded.samples == tuple(samples)
    return body


def test_typical_batch_round_trips_and_is_compact() -> None:
    samples = typical_node_samples(4)
    body = roundtrip(samples)
    # Four samples of a node with five containers: the figure behind the uplink goal
    # (bench_metrics: idle uplink <= 0.1 kbit/s needs the body below ~250 bytes).
    assert len(body) < 250, len(body)
    assert len(body) < len(encode_sample(samples[0])) * 2


def test_partial_series_gaps_and_labels_round_trip() -> None:
    a = container_key("ns", "pod-a", "app")
    b = container_key("ns", "pod-b", "app")
    samples = [
        Sample(
            T0, 0, {(M.NODE_UPTIME_SECONDS, None): 100, (M.CONTAINER_MEMORY_WORKING_SET_KIB, a): 5}
        ),
        Sample(
            T0 + 15_000,
            15_000,
            {
                (M.NODE_UPTIME_SECONDS, None): 115,
                (M.NODE_CPU_USAGE_MS, None): 300,
                (M.CONTAINER_CPU_USAGE_MS, b): 7,  # b appears mid-batch
                (M.NODE_TEMPERATURE_DECICELSIUS, "cpu-thermal"): -123,
                (M.NODE_TEMPERATURE_DECICELSIUS, "Tboard \u00b0C"): 455,
            },
        ),
        Sample(  # a comes back after a gap: two runs of the same series
            T0 + 29_000,
            14_990,
            {(M.CONTAINER_MEMORY_WORKING_SET_KIB, a): 6, (M.CONTAINER_CPU_USAGE_MS, b): 9},
        ),
        Sample(T0 + 60_000, 31_000, {}),  # a sample with no values at all
    ]
    roundtrip(samples)


def test_extreme_values_and_single_sample_round_trip() -> None:
    values = {
        (M.NODE_LOAD1_CENTI, None): -(2**63),
        (M.NODE_LOAD5_CENTI, None): 2**63 - 1,
        (M.NODE_LOAD15_CENTI, None): 0,
        (M.CONTAINER_CPU_USAGE_MS, 2**32 - 1): 1,
        (M.CONTAINER_CPU_USAGE_MS, 0): 2,
    }
    roundtrip([Sample(0, 0, values)], stream=0, seq=0)
    roundtrip([Sample(2**62, 2**40, values)], stream=2**32 - 1, seq=2**60)
    assert decode_sample(encode_sample(Sample(T0, 1, values))) == Sample(T0, 1, values)


def test_equal_series_are_sent_once() -> None:
    """The state directory on the root filesystem: the copy costs two bytes, not its values."""
    base = {(M.NODE_FS_ROOT_AVAILABLE_KIB, None): 0, (M.NODE_FS_ROOT_USED_KIB, None): 0}
    rows = []
    for i in range(8):
        v = {k: 1_000_000 + i * 1000 + n for n, k in enumerate(base)}
        rows.append(Sample(T0 + i * 15_000, 15_000, v))
    alone = len(encode_batch(Batch(1, 1, tuple(rows))))
    with_copy = [
        Sample(
            s.t_ms,
            s.window_ms,
            {
                **s.values,
                (M.NODE_FS_STATE_AVAILABLE_KIB, None): s.values[
                    (M.NODE_FS_ROOT_AVAILABLE_KIB, None)
                ],
            },
        )
        for s in rows
    ]
    body = roundtrip(with_copy)
    assert len(body) - alone <= 3


def test_unknown_metric_ids_survive_a_round_trip() -> None:
    sample = Sample(T0, 15_000, {(900, None): 5, (901, "x"): -1, (70_000, 12345): 3})
    roundtrip([sample])
    assert metric_kind(900) is MetricKind.GAUGE


def test_registry_is_consistent() -> None:
    for metric in Metric:
        spec = METRICS[int(metric)]
        assert spec.name == metric.name.lower()
        if metric.name.startswith("CONTAINER_"):
            assert spec.label is LabelKind.CONTAINER
    counters = {m for m, s in METRICS.items() if s.kind is MetricKind.COUNTER}
    assert counters == {
        M.NODE_CPU_USAGE_MS,
        M.NODE_NETWORK_RECEIVE_BYTES,
        M.NODE_NETWORK_TRANSMIT_BYTES,
        M.CONTAINER_CPU_USAGE_MS,
    }


def test_container_key_is_a_stable_32_bit_hash() -> None:
    key = container_key("default", "web-0", "nginx")
    assert key == container_key("default", "web-0", "nginx")
    assert 0 <= key < 2**32
    # The separator keeps ("a", "bc", ...) apart from ("ab", "c", ...).
    assert container_key("a", "bc", "d") != container_key("ab", "c", "d")
    assert container_key("default", "web-0", "nginx") != container_key("default", "web-1", "nginx")


label_st = st.one_of(st.none(), st.text(max_size=20), st.integers(min_value=0, max_value=2**32 - 1))


@st.composite
def batches(draw):
    n = draw(st.integers(min_value=1, max_value=8))
    t = draw(st.integers(min_value=0, max_value=2**45))
    samples = []
    for _ in range(n):
        window = draw(st.integers(min_value=0, max_value=10**7))
        t = max(0, t + draw(st.integers(min_value=-(10**6), max_value=10**7)))
        keys = draw(
            st.dictionaries(
                st.tuples(st.integers(min_value=100, max_value=5000), label_st),
                st.integers(min_value=-(2**63), max_value=2**63 - 1),
                max_size=8,
            )
        )
        samples.append(Sample(t, window, keys))
    return Batch(draw(st.integers(0, 2**32 - 1)), draw(st.integers(0, 2**40)), tuple(samples))


@settings(max_examples=60, deadline=None)
@given(batches())
def test_any_batch_round_trips(batch: Batch) -> None:
    assert decode_batch(encode_batch(batch)) == batch


# --- bad input: a clear MetricsBodyError, never another exception -----------------------


@pytest.mark.parametrize(
    ("batch", "field"),
    [
        (Batch(1, 1, ()), "samples"),
        (Batch(2**32, 1, (Sample(T0, 0, {}),)), "stream_id"),
        (Batch(1, -1, (Sample(T0, 0, {}),)), "batch_seq"),
        (Batch(1, 1, (Sample(T0, 0, {(M.NODE_UPTIME_SECONDS, None): 1.5}),)), "series 17/None"),
        (Batch(1, 1, (Sample(T0, 0, {(M.NODE_UPTIME_SECONDS, None): True}),)), "series 17/None"),
        (Batch(1, 1, (Sample(T0, 0, {(M.NODE_UPTIME_SECONDS, None): 2**63}),)), "series 17/None"),
        (Batch(1, 1, (Sample(T0, 0, {(M.NODE_UPTIME_SECONDS, "x"): 1}),)), "labels"),
        (Batch(1, 1, (Sample(T0, 0, {(M.CONTAINER_CPU_USAGE_MS, "x"): 1}),)), "labels"),
        (Batch(1, 1, (Sample(T0, 0, {(M.NODE_TEMPERATURE_DECICELSIUS, 5): 1}),)), "labels"),
        (Batch(1, 1, (Sample(T0, 0, {(900, 2**32): 1}),)), "labels"),
        (Batch(1, 1, (Sample(T0, 0, {(900, "x" * 257): 1}),)), "labels"),
        (Batch(1, 1, (Sample(T0, 0, {(-1, None): 1}),)), "series"),
    ],
)
def test_encoding_invalid_batches_raises(batch: Batch, field: str) -> None:
    with pytest.raises(InvalidMessage) as info:
        encode_batch(batch)
    assert info.value.field == field


def test_invalid_samples_are_refused_on_construction() -> None:
    with pytest.raises(InvalidMessage, match="t_ms"):
        Sample(-1, 0, {})
    with pytest.raises(InvalidMessage, match="window_ms"):
        Sample(0, -5, {})


def test_every_truncation_of_a_body_is_rejected_cleanly() -> None:
    body = encode_batch(Batch(7, 9, tuple(typical_node_samples(4))))
    for cut in range(len(body)):
        with pytest.raises(MetricsBodyError):
            decode_batch(body[:cut])


def test_trailing_bytes_version_and_type_are_rejected() -> None:
    body = encode_batch(Batch(7, 9, tuple(typical_node_samples(2))))
    with pytest.raises(MetricsBodyError, match="trailing"):
        decode_batch(body + b"\x00")
    with pytest.raises(MetricsBodyError, match="version"):
        decode_batch(bytes([FORMAT_VERSION + 1]) + body[1:])
    with pytest.raises(MetricsBodyError, match="expected bytes"):
        decode_batch("not bytes")  # type: ignore[arg-type]
    with pytest.raises(MetricsBodyError, match="one sample"):
        decode_sample(body)


def _header(n: int) -> bytearray:
    out = bytearray([FORMAT_VERSION, 0, 0, 0, 1, 1, n, 1, 0])  # stream 1, seq 1, t 1, w 0
    out += bytes([0] * (2 * (n - 1)))
    return out


@pytest.mark.parametrize(
    ("tail", "match"),
    [
        (bytes([0, 0, 1, 0x04, 0]), "label index"),  # labelled, index 0 of no labels
        (bytes([0, 0, 1, 0xE0]), "next-label"),  # next-label without labelled flag
        (bytes([0, 0, 1, 0x08, 0, 0]), "run"),  # partial run of count 0
        (bytes([0, 0, 1, 0x08, 1, 1]), "run"),  # partial run past the end (1 sample)
        (bytes([0, 0, 1, 0x03, 0]), "copy"),  # COPY of itself
        (bytes([0, 0, 1, 0xF0]), "truncated"),  # absolute metric id missing
        (bytes([0, 0, 1, 0xF0] + [0xFF] * 11), "varint"),  # over-long varint
        (bytes([0, 1, 1, 0x30, 0, 1]), "truncated"),  # a key cut short
        (bytes([1, 2, 0xFF, 0xFE]), "UTF-8"),
    ],
)
def test_malformed_series_are_rejected(tail: bytes, match: str) -> None:
    with pytest.raises(MetricsBodyError, match=match):
        decode_batch(bytes(_header(1)) + tail)


def test_counts_over_the_limits_are_rejected_before_allocating() -> None:
    with pytest.raises(MetricsBodyError, match="sample count"):
        decode_batch(bytes([FORMAT_VERSION, 0, 0, 0, 1, 1, 0]))  # zero samples
    huge = bytearray([FORMAT_VERSION, 0, 0, 0, 1, 1]) + bytes([0xFF, 0xFF, 0xFF, 0x7F])
    with pytest.raises(MetricsBodyError, match="sample count"):
        decode_batch(bytes(huge))
    too_many_series = _header(1) + bytes([0, 0, 0xFF, 0xFF, 0xFF, 0x7F])
    with pytest.raises(MetricsBodyError, match="series"):
        decode_batch(bytes(too_many_series))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_never_raise_anything_but_a_codec_error(data: bytes) -> None:
    try:
        decode_batch(bytes([FORMAT_VERSION]) + data)
    except MetricsBodyError:
        pass


def test_body_travels_in_a_real_metrics_batch_frame() -> None:
    body = encode_batch(Batch(5, 6, tuple(typical_node_samples(4))))
    frame = encode(MetricsBatch(node_name="edge-1", samples=to_samples_field(body)), seq=9)
    decoder = FrameDecoder()
    decoder.feed(frame)
    ((seq, message),) = list(decoder)
    assert seq == 9
    assert isinstance(message, MetricsBatch)
    assert from_samples_field(message.samples) == body
    assert len(frame) - len(body) < 70  # envelope, node name and the one-key map


@pytest.mark.parametrize(
    "field",
    [{}, {"p": []}, {"p": [b"a", b"b"]}, {"p": ["text"]}, {"other": [b"x"]}, []],
)
def test_samples_field_of_the_wrong_shape(field) -> None:
    with pytest.raises(MetricsBodyError) as info:
        from_samples_field(field)
    assert isinstance(info.value, DecodeError)
    assert info.value.field == "b.samples.p"
    assert info.value.kind == "metrics_batch"
