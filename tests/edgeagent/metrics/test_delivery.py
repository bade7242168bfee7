"""Store-and-forward end to end, agent buffer to hub store, with the time injected.

The link is simulated at the level the session gives the metrics code: a batch handed
over while online reaches the hub's ``EdgeMetricsStore.ingest``; acknowledgements can be
lost (the connection drops after the hub took the batch), and batches are resent after
the reconnect. Checks: the buffer never exceeds its budget; after the reconnect the hub
gets every sample oldest first, each once; CPU time (a counter) is conserved exactly even
through down-sampling.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from cloudhub.metrics import EdgeMetricsStore
from edgeagent.metrics import MemoryMetricsStorage, MetricsForwarder, MetricsSettings
from protocol.metrics_codec import Metric, Sample
from tests.bench.bench_metrics import typical_node_samples

CPU = (Metric.NODE_CPU_USAGE_MS, None)
PER_BATCH = 4  # 60 s batches of 15 s samples


@dataclass
class Run:
    """What the hub accepted, and what the buffer looked like on the way."""

    hub: EdgeMetricsStore = field(default_factory=EdgeMetricsStore)
    accepted: list[Sample] = field(default_factory=list)
    batch_seqs: list[int] = field(default_factory=list)
    duplicates: int = 0
    max_size: int = 0


def deliver(forwarder: MetricsForwarder, run: Run, *, lose_first_ack: bool = False) -> None:
    """One flush while online: resend the unacked, seal the backlog, ingest, ack."""
    pending = forwarder.unacked()
    while (batch := forwarder.seal()) is not None:
        pending.append(batch)
    for batch in pending:
        result = run.hub.ingest("edge-1", batch.body, now=0.0)
        if result.accepted:
            run.accepted.extend(result.batch.samples)
            run.batch_seqs.append(result.batch.batch_seq)
        else:
            run.duplicates += 1
        if lose_first_ack:
            return  # the connection dropped before the ack came back
        forwarder.acked(batch.batch_seq)
        while (batch2 := forwarder.seal()) is not None:  # room in flight again
            pending.append(batch2)


def simulate(settings: MetricsSettings, online_before: int, offline: int, online_after: int):
    storage = MemoryMetricsStorage()
    forwarder = MetricsForwarder(storage, settings)
    samples = typical_node_samples(online_before + offline + online_after)
    run = Run()
    for i, sample in enumerate(samples):
        forwarder.add(sample)
        run.max_size = max(run.max_size, storage.size_bytes())
        online = i < online_before or i >= online_before + offline
        if online and (i + 1) % PER_BATCH == 0:
            first_after_outage = i + 1 == online_before + offline + PER_BATCH
            deliver(forwarder, run, lose_first_ack=first_after_outage)
    deliver(forwarder, run)
    return samples, run, forwarder


def check_in_order_once_and_conserved(samples: list[Sample], run: Run) -> None:
    times = [s.t_ms for s in run.accepted]
    assert times == sorted(times) and len(set(times)) == len(times)
    assert run.batch_seqs == sorted(run.batch_seqs)
    assert run.accepted[-1] == samples[-1]
    assert sum(s.values[CPU] for s in run.accepted) == sum(s.values[CPU] for s in samples)
    covered = sum(s.window_ms for s in run.accepted)
    assert covered == sum(s.window_ms for s in samples)


def test_offline_hour_at_default_settings() -> None:
    settings = MetricsSettings()
    samples, run, forwarder = simulate(settings, online_before=40, offline=240, online_after=40)
    assert run.max_size <= settings.budget_bytes
    assert forwarder.stats.merged_samples == 0  # an hour fits in 2 MiB at full resolution
    check_in_order_once_and_conserved(samples, run)
    assert run.accepted == samples  # nothing was lost or merged
    assert run.duplicates >= 1  # the batch whose ack was lost came again, and was dropped
    assert run.hub.stats.duplicate == run.duplicates
    assert forwarder.unacked() == [] and forwarder.backlog() == 0


def test_offline_hour_within_a_tight_budget_is_down_sampled() -> None:
    settings = MetricsSettings(budget_bytes=16 * 1024)
    samples, run, forwarder = simulate(settings, online_before=8, offline=240, online_after=8)
    assert run.max_size <= settings.budget_bytes
    assert forwarder.stats.merged_samples > 0
    assert forwarder.stats.dropped_samples == 0
    check_in_order_once_and_conserved(samples, run)
    assert len(run.accepted) < len(samples)
    windows = [s.window_ms for s in run.accepted]
    # The oldest part of the outage is the coarsest; the newest samples are at full resolution.
    outage_start = next(i for i, s in enumerate(run.accepted) if s.t_ms > samples[7].t_ms)
    assert max(windows[outage_start:]) == windows[outage_start]
    assert all(w < 15_010 for w in windows[-8:])


@pytest.mark.slow
def test_three_offline_days_at_the_default_budget() -> None:
    settings = MetricsSettings()
    days = 3 * 24 * 240
    samples, run, forwarder = simulate(settings, online_before=4, offline=days, online_after=4)
    assert run.max_size <= settings.budget_bytes
    assert forwarder.stats.merged_samples > 0
    check_in_order_once_and_conserved(samples, run)
    assert max(s.window_ms for s in run.accepted) <= settings.max_window_s * 1000
