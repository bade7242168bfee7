"""Down-sampling: merge adjacent samples into one with a window twice as long.

Pure functions on :class:`~protocol.metrics_codec.Sample` s. Counters are increments, so
a merged sample's counter is the sum of the two and the mean rate over the merged window
is exact; gauges become the window-weighted mean of the two readings. A series present in
only one of the two keeps that one's value.
"""

from __future__ import annotations

from collections.abc import Sequence

from protocol.metrics_codec import MetricKind, Sample, SeriesKey, metric_kind

__all__ = ["merge_samples", "pairs_to_merge"]


def merge_samples(older: Sample, newer: Sample) -> Sample:
    """Merge two consecutive samples into one covering both windows.

    Args:
        older: the earlier sample.
        newer: the later one; the result takes its timestamp.

    Returns:
        A sample with ``t_ms = newer.t_ms``, ``window_ms = older.window_ms +
        newer.window_ms``, counters summed and gauges averaged with the windows as
        weights (a sample with a zero window, the first after a restart, weighs 1 ms).
    """
    wa = older.window_ms or 1
    wb = newer.window_ms or 1
    values: dict[SeriesKey, int] = dict(older.values)
    for key, vb in newer.values.items():
        va = values.get(key)
        if va is None:
            values[key] = vb
        elif metric_kind(key[0]) is MetricKind.COUNTER:
            values[key] = va + vb
        else:
            values[key] = round((va * wa + vb * wb) / (wa + wb))
    return Sample(newer.t_ms, older.window_ms + newer.window_ms, values)


def pairs_to_merge(windows_ms: Sequence[int], max_window_ms: int) -> list[int]:
    """Choose which adjacent samples to merge to halve the resolution of the oldest half.

    Walks from the oldest sample and picks non-overlapping pairs ``(i, i + 1)`` whose
    merged window stays within ``max_window_ms``, until a quarter of the samples (half of
    the oldest half) are paired. Samples already at the coarsest window are stepped over,
    so repeated passes make old data coarser while recent data keeps full resolution.

    Args:
        windows_ms: the samples' windows, oldest first.
        max_window_ms: the longest window a merge may produce.

    Returns:
        The index ``i`` of each pair's older sample, ascending; empty when no adjacent
        pair fits (everything is as coarse as allowed).
    """
    target = max(1, len(windows_ms) // 4)
    chosen: list[int] = []
    i = 0
    while i + 1 < len(windows_ms) and len(chosen) < target:
        if windows_ms[i] + windows_ms[i + 1] <= max_window_ms:
            chosen.append(i)
            i += 2
        else:
            i += 1
    return chosen
