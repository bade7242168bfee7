"""The compact body of the ``metrics_batch`` message: metric registry, samples, codec.

A ``metrics_batch`` carries ``node_name`` and ``samples``; ``samples`` is the ``bytes``
produced by :func:`encode_batch`. Both halves import this module: the agent encodes, the hub
decodes. It is pure (no I/O, no clock).

Data model
----------
A :class:`Sample` is what the agent measured at one instant ``t_ms`` (milliseconds since the
Unix epoch, the end of the sample's window) as a mapping *series key → integer*. A series key
is ``(metric_id, label)``: ``label`` is ``None`` for node-wide series, a ``str`` for node
series with a label (thermal zone, GPU name), and a 32-bit ``int`` for container series
(:func:`container_key` of namespace, pod and container name; the hub maps it back to names
from the pods it bound to the node, so that names never travel with every batch).

Two kinds of metric (:class:`MetricKind`):

- ``GAUGE``: the value read at ``t_ms``.
- ``COUNTER``: the *increment* of a cumulative counter over the sample's window
  ``(t_ms - window_ms, t_ms]``, never the cumulative value. Increments sum exactly when
  samples are merged (down-sampling keeps the mean rate), are small numbers on the wire, and
  a counter reset on the edge (container restart) never reaches the hub. The first sample
  after the agent starts has ``window_ms == 0`` and no counters.

Units are integers in the unit the registry names (``ms`` of CPU time, ``KiB``, ``bytes``,
hundredths, tenths of a degree Celsius, per mille, MHz, seconds): chosen so that the
values are exact (memory is page-granular, ``/proc/meminfo`` and ``statfs`` give KiB) or far
finer than the sensor (temperature), and small on the wire.

Wire format (version 1)
-----------------------
The message's ``samples`` field is ``{"p": [body]}`` ("packed") (:func:`to_samples_field`); ``body``
is this:

Integers are LEB128 varints: ``uvar`` unsigned, ``svar`` zigzag-signed. ::

    byte    format version (1)
    4 bytes stream id, big-endian        } the batch's identity: the hub drops a batch whose
    uvar    batch seq                    } seq is <= the highest it accepted for the stream
    uvar    n, number of samples (>= 1)
    uvar    t_ms of sample 0;  uvar window_ms of sample 0
    n-1 x   svar (window_i - window_{i-1}); svar ((t_i - t_{i-1}) - window_i)
    uvar    number of text labels; each uvar length + UTF-8 text
    uvar    number of container keys; each 4 bytes big-endian
            (label index: the texts first, then the keys)
    uvar    number of series entries, sorted by metric id; each:
              byte    high nibble: 0-13 metric id = previous entry's + this;
                               14 same metric, label index = previous + 1;
                               15 a uvar metric id follows
                      low nibble: bits 0-1 mode, bit 2 labelled, bit 3 partial
              [uvar metric id]                if high nibble 15
              [uvar label index]              if labelled and high nibble != 14
              [uvar start, uvar count]        if partial (else the entry spans all n samples)
              values:  RAW   count x svar
                       DELTA svar first, then count-1 x svar differences
                       CONST one svar, repeated count times
                       COPY  uvar index of an earlier entry whose values are repeated

Sample times and windows cost one byte each when sampling is regular; a constant series
(capacity) costs three; a series equal to another (the state directory on the root
filesystem) two. The encoder picks RAW or DELTA per entry, whichever is shorter. A series
absent from some samples (a container that started mid-batch) is split into entries that
each cover a contiguous run. Unknown metric ids decode (their values are skipped by the
hub), so new metrics need no new format version.
"""

from __future__ import annotations

import enum
import hashlib
import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from protocol.errors import DecodeError, InvalidMessage

__all__ = [
    "FORMAT_VERSION",
    "METRICS",
    "SAMPLES_KEY",
    "Batch",
    "LabelKind",
    "Metric",
    "MetricKind",
    "MetricSpec",
    "MetricsBodyError",
    "Sample",
    "SeriesKey",
    "container_key",
    "decode_batch",
    "decode_sample",
    "encode_batch",
    "encode_sample",
    "from_samples_field",
    "metric_kind",
    "to_samples_field",
]

FORMAT_VERSION = 1

# Decoder limits: a batch holds at most a few hours of samples, a node a few dozen series
# per sample; these bound the work a malformed or hostile body can cause.
MAX_SAMPLES = 100_000
MAX_SERIES = 100_000
MAX_LABELS = 10_000
MAX_LABEL_BYTES = 256
_INT64 = 1 << 63


class MetricsBodyError(DecodeError):
    """A ``metrics_batch`` body that does not decode (the peer misbehaved).

    A :class:`protocol.errors.DecodeError` whose ``field`` is ``"b.samples.<where>"``.

    Attributes:
        where: the part of the body at fault (``"header"``, ``"labels"``, ``"series[3]"``).
    """

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(f"b.samples.{where}", reason, kind="metrics_batch")
        self.where = where


class MetricKind(enum.Enum):
    """How a metric's values behave over time and merge when down-sampled."""

    GAUGE = "gauge"
    """A reading at the sample's time; merged samples keep the window-weighted mean."""
    COUNTER = "counter"
    """An increment over the sample's window; merged samples keep the sum."""


class LabelKind(enum.Enum):
    """What the label of a metric's series is."""

    NONE = "none"
    """Node-wide: the series key's label is ``None``."""
    TEXT = "text"
    """A short string naming a part of the node (thermal zone type, GPU name)."""
    CONTAINER = "container"
    """A 32-bit :func:`container_key`."""


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One entry of the metric registry.

    Attributes:
        id: the wire id (never reused with another meaning).
        name: a short snake_case name for logs and tests.
        kind: gauge or counter.
        unit: the integer unit on the wire.
        label: what the series label is.
    """

    id: int
    name: str
    kind: MetricKind
    unit: str
    label: LabelKind


class Metric(enum.IntEnum):
    """Wire ids of the metrics the agent samples. Values never change meaning."""

    NODE_CPU_USAGE_MS = 1
    """CPU time used by the whole node over the window, all cores (ms; counter)."""
    NODE_CPU_CAPACITY_MILLICORES = 2
    """Online CPUs x 1000."""
    NODE_MEMORY_WORKING_SET_KIB = 3
    """Memory in use that cannot be reclaimed cheaply (KiB). Left out when it is capacity -
    available (the agent's definition): the hub derives it then, saving a series."""
    NODE_MEMORY_AVAILABLE_KIB = 4
    """``MemAvailable`` of ``/proc/meminfo`` (KiB)."""
    NODE_MEMORY_CAPACITY_KIB = 5
    """``MemTotal`` (KiB)."""
    NODE_FS_ROOT_CAPACITY_KIB = 6
    """Size of the filesystem holding ``/`` (KiB)."""
    NODE_FS_ROOT_AVAILABLE_KIB = 7
    """Space available to unprivileged users on it (KiB)."""
    NODE_FS_ROOT_USED_KIB = 8
    """Space used on it (KiB)."""
    NODE_FS_STATE_CAPACITY_KIB = 9
    """Size of the filesystem holding the agent's state directory (KiB)."""
    NODE_FS_STATE_AVAILABLE_KIB = 10
    """Space available on it (KiB)."""
    NODE_FS_STATE_USED_KIB = 11
    """Space used on it (KiB)."""
    NODE_NETWORK_RECEIVE_BYTES = 12
    """Bytes received on the node's interfaces over the window (counter)."""
    NODE_NETWORK_TRANSMIT_BYTES = 13
    """Bytes sent on the node's interfaces over the window (counter)."""
    NODE_LOAD1_CENTI = 14
    """1-minute load average x 100."""
    NODE_LOAD5_CENTI = 15
    """5-minute load average x 100."""
    NODE_LOAD15_CENTI = 16
    """15-minute load average x 100."""
    NODE_UPTIME_SECONDS = 17
    """Seconds since the node booted."""
    NODE_TEMPERATURE_DECICELSIUS = 32
    """Thermal zone temperature, tenths of a degree Celsius; label: zone type."""
    NODE_GPU_UTILIZATION_PERMILLE = 33
    """GPU busy fraction x 1000; label: GPU name."""
    NODE_GPU_MEMORY_USED_KIB = 34
    """GPU memory in use (KiB); label: GPU name."""
    NODE_GPU_MEMORY_CAPACITY_KIB = 35
    """GPU memory size (KiB); label: GPU name. Absent for unified-memory GPUs (Jetson)."""
    NODE_GPU_FREQUENCY_MHZ = 36
    """GPU clock (MHz); label: GPU name."""
    CONTAINER_CPU_USAGE_MS = 64
    """CPU time used by the container over the window (ms; counter); label: container key."""
    CONTAINER_MEMORY_WORKING_SET_KIB = 65
    """Container memory usage minus inactive file pages, as cAdvisor (KiB)."""


def _spec(metric: Metric, kind: MetricKind, unit: str, label: LabelKind) -> MetricSpec:
    return MetricSpec(int(metric), metric.name.lower(), kind, unit, label)


_G, _C = MetricKind.GAUGE, MetricKind.COUNTER
_N, _T, _K = LabelKind.NONE, LabelKind.TEXT, LabelKind.CONTAINER
METRICS: Mapping[int, MetricSpec] = {
    s.id: s
    for s in (
        _spec(Metric.NODE_CPU_USAGE_MS, _C, "ms", _N),
        _spec(Metric.NODE_CPU_CAPACITY_MILLICORES, _G, "millicores", _N),
        _spec(Metric.NODE_MEMORY_WORKING_SET_KIB, _G, "KiB", _N),
        _spec(Metric.NODE_MEMORY_AVAILABLE_KIB, _G, "KiB", _N),
        _spec(Metric.NODE_MEMORY_CAPACITY_KIB, _G, "KiB", _N),
        _spec(Metric.NODE_FS_ROOT_CAPACITY_KIB, _G, "KiB", _N),
        _spec(Metric.NODE_FS_ROOT_AVAILABLE_KIB, _G, "KiB", _N),
        _spec(Metric.NODE_FS_ROOT_USED_KIB, _G, "KiB", _N),
        _spec(Metric.NODE_FS_STATE_CAPACITY_KIB, _G, "KiB", _N),
        _spec(Metric.NODE_FS_STATE_AVAILABLE_KIB, _G, "KiB", _N),
        _spec(Metric.NODE_FS_STATE_USED_KIB, _G, "KiB", _N),
        _spec(Metric.NODE_NETWORK_RECEIVE_BYTES, _C, "bytes", _N),
        _spec(Metric.NODE_NETWORK_TRANSMIT_BYTES, _C, "bytes", _N),
        _spec(Metric.NODE_LOAD1_CENTI, _G, "hundredths", _N),
        _spec(Metric.NODE_LOAD5_CENTI, _G, "hundredths", _N),
        _spec(Metric.NODE_LOAD15_CENTI, _G, "hundredths", _N),
        _spec(Metric.NODE_UPTIME_SECONDS, _G, "seconds", _N),
        _spec(Metric.NODE_TEMPERATURE_DECICELSIUS, _G, "decicelsius", _T),
        _spec(Metric.NODE_GPU_UTILIZATION_PERMILLE, _G, "permille", _T),
        _spec(Metric.NODE_GPU_MEMORY_USED_KIB, _G, "KiB", _T),
        _spec(Metric.NODE_GPU_MEMORY_CAPACITY_KIB, _G, "KiB", _T),
        _spec(Metric.NODE_GPU_FREQUENCY_MHZ, _G, "MHz", _T),
        _spec(Metric.CONTAINER_CPU_USAGE_MS, _C, "ms", _K),
        _spec(Metric.CONTAINER_MEMORY_WORKING_SET_KIB, _G, "KiB", _K),
    )
}
"""The registry: wire id → :class:`MetricSpec`."""


def metric_kind(metric_id: int) -> MetricKind:
    """Return how ``metric_id`` merges; unknown ids (from a newer agent) count as gauges."""
    spec = METRICS.get(metric_id)
    return spec.kind if spec is not None else MetricKind.GAUGE


SeriesKey = tuple[int, "str | int | None"]
"""``(metric_id, label)``: label ``None``, a text, or a 32-bit container key."""


def container_key(namespace: str, pod: str, container: str) -> int:
    """Return the 32-bit key that names a container's series on the wire.

    Both halves compute it: the agent from the pod it runs, the hub from the pods bound to
    the node. 32 bits make a collision between the few dozen containers of one node
    negligible (about 1 in 10 million for 30 containers).

    Args:
        namespace: the pod's namespace.
        pod: the pod's name.
        container: the container's name in the pod spec.

    Returns:
        An int in ``[0, 2**32)``.
    """
    text = f"{namespace}\x00{pod}\x00{container}".encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=4).digest(), "big")


@dataclass(frozen=True, slots=True)
class Sample:
    """What the agent measured at one instant.

    Attributes:
        t_ms: end of the window, milliseconds since the Unix epoch (the agent's clock).
        window_ms: length of the window the counter increments cover (ms); 0 when the
            sample has no counters (the first one after the agent started).
        values: series key → integer in the metric's unit (see :class:`Metric`).
    """

    t_ms: int
    window_ms: int
    values: Mapping[SeriesKey, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.t_ms, int) or self.t_ms < 0:
            raise InvalidMessage("t_ms", f"must be an int >= 0, got {self.t_ms!r}")
        if not isinstance(self.window_ms, int) or self.window_ms < 0:
            raise InvalidMessage("window_ms", f"must be an int >= 0, got {self.window_ms!r}")


@dataclass(frozen=True, slots=True)
class Batch:
    """A decoded ``metrics_batch`` body.

    Attributes:
        stream_id: 32-bit id of the agent's metrics stream (random, kept in its store).
        batch_seq: position of the batch in the stream, from 1; with ``stream_id`` the
            batch's identity, the same on every resend.
        samples: oldest first.
    """

    stream_id: int
    batch_seq: int
    samples: tuple[Sample, ...]


# --- encoding -------------------------------------------------------------------------------

_RAW, _DELTA, _CONST, _COPY = 0, 1, 2, 3
_LABELLED, _PARTIAL = 4, 8
_NEXT_LABEL, _ABSOLUTE = 14, 15  # high nibble of an entry's header byte


def _uvar(out: bytearray, value: int) -> None:
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _svar(out: bytearray, value: int) -> None:
    _uvar(out, value << 1 if value >= 0 else ((-value) << 1) - 1)


def _svar_len(value: int) -> int:
    z = value << 1 if value >= 0 else ((-value) << 1) - 1
    return max(1, (z.bit_length() + 6) // 7)


def _check_int(value: object, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidMessage(where, f"value must be an int, got {type(value).__name__}")
    if not -_INT64 <= value < _INT64:
        raise InvalidMessage(where, f"value {value} is outside the signed 64-bit range")
    return value


def _label_sort(label: str | int | None) -> tuple[int, str | int]:
    if label is None:
        return (0, 0)
    if isinstance(label, str):
        return (1, label)
    return (2, label)


def encode_batch(batch: Batch) -> bytes:
    """Encode a batch into the ``samples`` bytes of a ``metrics_batch`` message.

    Args:
        batch: at least one sample, oldest first.

    Returns:
        The encoded body (a few hundred bytes for four samples of a node with five
        containers).

    Raises:
        InvalidMessage: no samples, a stream id outside 32 bits, a negative sequence, a
            label of the wrong type for its metric, or a value that is not a 64-bit int
            (``field`` names the part).
    """
    samples = batch.samples
    if not samples:
        raise InvalidMessage("samples", "a batch needs at least one sample")
    if not 0 <= batch.stream_id < 1 << 32:
        raise InvalidMessage("stream_id", f"must fit in 32 bits, got {batch.stream_id}")
    if batch.batch_seq < 0:
        raise InvalidMessage("batch_seq", f"must be >= 0, got {batch.batch_seq}")
    out = bytearray((FORMAT_VERSION,))
    out += batch.stream_id.to_bytes(4, "big")
    _uvar(out, batch.batch_seq)
    n = len(samples)
    _uvar(out, n)
    _uvar(out, samples[0].t_ms)
    _uvar(out, samples[0].window_ms)
    for prev, cur in itertools.pairwise(samples):
        _svar(out, cur.window_ms - prev.window_ms)
        _svar(out, (cur.t_ms - prev.t_ms) - cur.window_ms)

    # Columns: series key -> list of (sample index, value), in sample order.
    columns: dict[SeriesKey, list[tuple[int, int]]] = {}
    for i, sample in enumerate(samples):
        for key, value in sample.values.items():
            columns.setdefault(key, []).append((i, value))

    keys = sorted(columns, key=lambda k: (k[0], _label_sort(k[1])))
    texts: dict[str, None] = {}
    container_keys: dict[int, None] = {}
    for metric_id, label in keys:
        if not isinstance(metric_id, int) or isinstance(metric_id, bool) or metric_id < 0:
            raise InvalidMessage("series", f"metric id must be an int >= 0, got {metric_id!r}")
        _check_label(metric_id, label)
        if isinstance(label, str):
            texts[label] = None
        elif label is not None:
            container_keys[label] = None
    labels = {label: i for i, label in enumerate([*texts, *container_keys])}
    _uvar(out, len(texts))
    for text in texts:
        raw = text.encode()
        _uvar(out, len(raw))
        out += raw
    _uvar(out, len(container_keys))
    for ckey in container_keys:
        out += ckey.to_bytes(4, "big")

    entries = bytearray()
    n_entries = 0
    prev_metric = 0
    prev_label = -1
    seen: dict[tuple[int, int, tuple[int, ...]], int] = {}
    for key in keys:
        metric_id, label = key
        label_index = labels[label] if label is not None else None
        for start, values in _runs(columns[key]):
            where = f"series {metric_id}/{label!r}"
            for v in values:
                _check_int(v, where)
            count = len(values)
            flags = 0 if label_index is None else _LABELLED
            partial = start != 0 or count != n
            if partial:
                flags |= _PARTIAL
            body = bytearray()
            mode = _encode_values(body, values)
            signature = (start, count, tuple(values))
            copy_of = seen.get(signature)
            if copy_of is not None and _uvar_len(copy_of) < len(body):
                mode = _COPY
                body = bytearray()
                _uvar(body, copy_of)
            elif copy_of is None:
                seen[signature] = n_entries
            flags |= mode
            explicit_id = explicit_label = False
            if (
                label_index is not None
                and metric_id == prev_metric
                and label_index == prev_label + 1
            ):
                entries.append((_NEXT_LABEL << 4) | flags)
            elif 0 <= metric_id - prev_metric < _NEXT_LABEL:
                entries.append(((metric_id - prev_metric) << 4) | flags)
                explicit_label = label_index is not None
            else:
                entries.append((_ABSOLUTE << 4) | flags)
                explicit_id = True
                explicit_label = label_index is not None
            if explicit_id:
                _uvar(entries, metric_id)
            if explicit_label:
                _uvar(entries, label_index)
            if partial:
                _uvar(entries, start)
                _uvar(entries, count)
            entries += body
            n_entries += 1
            prev_metric = metric_id
            if label_index is not None:
                prev_label = label_index
    _uvar(out, n_entries)
    out += entries
    return bytes(out)


def _encode_values(out: bytearray, values: list[int]) -> int:
    """Write ``values`` as CONST, DELTA or RAW, whichever is shortest; return the mode."""
    first = values[0]
    if all(v == first for v in values):
        _svar(out, first)
        return _CONST
    deltas = [first] + [b - a for a, b in itertools.pairwise(values)]
    if sum(map(_svar_len, deltas)) < sum(map(_svar_len, values)):
        for d in deltas:
            _svar(out, d)
        return _DELTA
    for v in values:
        _svar(out, v)
    return _RAW


def _uvar_len(value: int) -> int:
    return max(1, (value.bit_length() + 6) // 7)


def _check_label(metric_id: int, label: object) -> None:
    if label is None:
        kind = LabelKind.NONE
    elif isinstance(label, str):
        kind = LabelKind.TEXT
        if len(label.encode()) > MAX_LABEL_BYTES:
            raise InvalidMessage("labels", f"label longer than {MAX_LABEL_BYTES} bytes")
    elif isinstance(label, int) and not isinstance(label, bool) and 0 <= label < 1 << 32:
        kind = LabelKind.CONTAINER
    else:
        raise InvalidMessage("labels", f"a label is None, a str or a 32-bit int: {label!r}")
    spec = METRICS.get(metric_id)
    if spec is not None and spec.label is not kind:
        raise InvalidMessage(
            "labels", f"metric {spec.name} takes a {spec.label.value} label, got {label!r}"
        )


def _runs(column: list[tuple[int, int]]) -> Iterable[tuple[int, list[int]]]:
    """Split a column into runs of consecutive sample indexes."""
    start = column[0][0]
    values = [column[0][1]]
    prev = start
    for index, value in column[1:]:
        if index != prev + 1:
            yield start, values
            start, values = index, []
        values.append(value)
        prev = index
    yield start, values


SAMPLES_KEY = "p"
"""The one key of ``MetricsBatch.samples``: its value is ``[body]``, the encoded batch."""


def to_samples_field(body: bytes) -> dict[str, list]:
    """Wrap an encoded batch as the ``samples`` field of a ``MetricsBatch`` message.

    ``MetricsBatch.samples`` is a map of column name to list; the columns of this format
    are packed into one binary value (see the module docstring), so the map has one key.
    """
    return {SAMPLES_KEY: [bytes(body)]}


def from_samples_field(samples: Mapping[str, object]) -> bytes:
    """Return the encoded batch inside a ``MetricsBatch.samples`` field.

    Raises:
        MetricsBodyError: the field does not hold exactly one binary value under
            :data:`SAMPLES_KEY`.
    """
    value = samples.get(SAMPLES_KEY) if isinstance(samples, Mapping) else None
    if not (isinstance(value, list) and len(value) == 1 and isinstance(value[0], bytes)):
        raise MetricsBodyError(SAMPLES_KEY, "expected a list holding one binary value")
    return value[0]


def encode_sample(sample: Sample) -> bytes:
    """Encode one sample alone (for storage): a one-sample batch of stream 0, seq 0."""
    return encode_batch(Batch(0, 0, (sample,)))


# --- decoding -------------------------------------------------------------------------------


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def byte(self, where: str) -> int:
        if self.pos >= len(self.data):
            raise MetricsBodyError(where, "truncated")
        b = self.data[self.pos]
        self.pos += 1
        return b

    def take(self, n: int, where: str) -> bytes:
        if self.pos + n > len(self.data):
            raise MetricsBodyError(where, "truncated")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def uvar(self, where: str) -> int:
        data, pos = self.data, self.pos
        if pos < len(data) and data[pos] < 0x80:  # most values fit in one byte
            self.pos = pos + 1
            return data[pos]
        result = shift = 0
        while True:
            if pos >= len(data):
                raise MetricsBodyError(where, "truncated varint")
            b = data[pos]
            pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                break
            shift += 7
            if shift > 63:
                raise MetricsBodyError(where, "varint longer than 10 bytes")
        self.pos = pos
        return result

    def svar(self, where: str) -> int:
        z = self.uvar(where)
        return (z >> 1) if not z & 1 else -((z + 1) >> 1)


def decode_batch(data: bytes) -> Batch:
    """Decode the ``samples`` bytes of a ``metrics_batch`` message.

    Args:
        data: the bytes produced by :func:`encode_batch`.

    Returns:
        The batch, samples oldest first; series of unknown metric ids are kept.

    Raises:
        MetricsBodyError: wrong type, unknown format version, truncated or trailing
            bytes, a count over the decoder limits (``MAX_SAMPLES`` ...), a negative
            time or window, an invalid label, or a COPY of a later or mismatched entry.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise MetricsBodyError("body", f"expected bytes, got {type(data).__name__}")
    r = _Reader(bytes(data))
    version = r.byte("header")
    if version != FORMAT_VERSION:
        raise MetricsBodyError("header", f"unknown format version {version}")
    stream_id = int.from_bytes(r.take(4, "header"), "big")
    batch_seq = r.uvar("header")
    n = r.uvar("header")
    if not 1 <= n <= MAX_SAMPLES:
        raise MetricsBodyError("header", f"sample count {n} outside 1..{MAX_SAMPLES}")
    times = [r.uvar("times")]
    windows = [r.uvar("times")]
    for _ in range(n - 1):
        w = windows[-1] + r.svar("times")
        t = times[-1] + w + r.svar("times")
        if w < 0 or t < 0:
            raise MetricsBodyError("times", "negative window or time")
        windows.append(w)
        times.append(t)

    labels: list[str | int] = []
    n_texts = r.uvar("labels")
    if n_texts > MAX_LABELS:
        raise MetricsBodyError("labels", f"{n_texts} labels exceed {MAX_LABELS}")
    for _ in range(n_texts):
        size = r.uvar("labels")
        if size > MAX_LABEL_BYTES:
            raise MetricsBodyError("labels", f"label of {size} bytes")
        try:
            labels.append(r.take(size, "labels").decode())
        except UnicodeDecodeError as exc:
            raise MetricsBodyError("labels", "label is not UTF-8") from exc
    n_keys = r.uvar("labels")
    if n_texts + n_keys > MAX_LABELS:
        raise MetricsBodyError("labels", f"{n_texts + n_keys} labels exceed {MAX_LABELS}")
    for _ in range(n_keys):
        labels.append(int.from_bytes(r.take(4, "labels"), "big"))

    n_entries = r.uvar("series")
    if n_entries > MAX_SERIES:
        raise MetricsBodyError("series", f"{n_entries} series exceed {MAX_SERIES}")
    columns: list[dict[SeriesKey, int]] = [{} for _ in range(n)]
    decoded: list[tuple[int, list[int]]] = []
    metric_id = 0
    label_index = -1
    for e in range(n_entries):
        where = f"series[{e}]"
        head = r.byte(where)
        step, flags = head >> 4, head & 0x0F
        labelled = bool(flags & _LABELLED)
        if step == _NEXT_LABEL:
            if not labelled:
                raise MetricsBodyError(where, "next-label entry without the labelled flag")
            label_index += 1
        else:
            metric_id = r.uvar(where) if step == _ABSOLUTE else metric_id + step
            if labelled:
                label_index = r.uvar(where)
        label: str | int | None = None
        if labelled:
            if not 0 <= label_index < len(labels):
                raise MetricsBodyError(where, f"label index {label_index} out of range")
            label = labels[label_index]
        start, count = 0, n
        if flags & _PARTIAL:
            start, count = r.uvar(where), r.uvar(where)
            if count < 1 or start + count > n:
                raise MetricsBodyError(where, f"run {start}+{count} outside {n} samples")
        mode = flags & 3
        if mode == _RAW:
            values = [r.svar(where) for _ in range(count)]
        elif mode == _DELTA:
            values = []
            acc = 0
            for _ in range(count):
                acc += r.svar(where)
                values.append(acc)
        elif mode == _CONST:
            values = [r.svar(where)] * count
        else:
            ref = r.uvar(where)
            if ref >= e or decoded[ref][0] != count:
                raise MetricsBodyError(where, f"copy of entry {ref} is invalid")
            values = decoded[ref][1]
        decoded.append((count, values))
        key = (metric_id, label)
        for i, v in enumerate(values, start):
            if not -_INT64 <= v < _INT64:
                raise MetricsBodyError(where, "value outside the signed 64-bit range")
            columns[i][key] = v
    if r.pos != len(r.data):
        raise MetricsBodyError("body", f"{len(r.data) - r.pos} trailing bytes")
    samples = tuple(Sample(t, w, vals) for t, w, vals in zip(times, windows, columns, strict=True))
    return Batch(stream_id, batch_seq, samples)


def decode_sample(data: bytes) -> Sample:
    """Decode bytes made by :func:`encode_sample`.

    Raises:
        MetricsBodyError: as :func:`decode_batch`, or if the bytes hold more than one
            sample.
    """
    batch = decode_batch(data)
    if len(batch.samples) != 1:
        raise MetricsBodyError("body", f"expected one sample, got {len(batch.samples)}")
    return batch.samples[0]
