"""The send scheduler on its own (sans-I/O): priority order, the bulk reserve, batch sizes,
idle sources skipped until a wake-up, bad settings refused."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from edgeagent.uplink.scheduler import Priority, SendScheduler


@dataclass(eq=False)
class Src:
    name: str
    priority: Priority


def test_sources_are_picked_by_priority_then_in_the_order_added() -> None:
    scheduler: SendScheduler[Src] = SendScheduler()
    bulk, status, control, status2 = (
        Src("metrics", Priority.BULK),
        Src("outbox", Priority.STATUS),
        Src("renewal", Priority.CONTROL),
        Src("twins", Priority.STATUS),
    )
    for source in (bulk, status, control, status2):
        scheduler.add(source)
    assert [s.name for s in scheduler.sources] == ["renewal", "outbox", "twins", "metrics"]
    order = []
    while (pick := scheduler.next(256, 256)) is not None:
        order.append(pick)
        scheduler.idle(pick[0])
    assert order == [(control, 64), (status, 64), (status2, 64), (bulk, 8)]


def test_a_woken_status_source_goes_before_the_rest_of_a_bulk_backlog() -> None:
    scheduler: SendScheduler[Src] = SendScheduler()
    status, bulk = Src("outbox", Priority.STATUS), Src("metrics", Priority.BULK)
    scheduler.add(bulk)
    scheduler.add(status)
    scheduler.idle(status)  # nothing to send right now
    assert scheduler.next(256, 256) == (bulk, 8)  # bulk drains in small batches
    scheduler.wake()  # a status change appended while bulk is being sent
    assert scheduler.next(248, 256) == (status, 64)


def test_bulk_never_takes_the_last_eighth_of_the_window() -> None:
    scheduler: SendScheduler[Src] = SendScheduler()
    status, bulk = Src("outbox", Priority.STATUS), Src("metrics", Priority.BULK)
    scheduler.add(status)
    scheduler.add(bulk)
    scheduler.idle(status)
    assert scheduler.next(36, 256) == (bulk, 4)  # 36 free, 32 reserved
    assert scheduler.next(32, 256) is None  # only the reserve is left: bulk waits
    scheduler.wake()
    assert scheduler.next(32, 256) == (status, 32)  # status may use it
    assert scheduler.next(0, 256) is None  # a full window: wait for an ack


def test_removed_and_empty_schedulers_pick_nothing() -> None:
    scheduler: SendScheduler[Src] = SendScheduler()
    assert scheduler.next(256, 256) is None
    source = Src("outbox", Priority.STATUS)
    scheduler.add(source)
    scheduler.remove(source)
    scheduler.remove(source)  # twice: no error
    assert scheduler.next(256, 256) is None


def test_batch_sizes_can_be_set_per_class() -> None:
    scheduler: SendScheduler[Src] = SendScheduler(batch={Priority.BULK: 2}, reserve_fraction=0)
    bulk = Src("metrics", Priority.BULK)
    scheduler.add(bulk)
    assert scheduler.next(1, 256) == (bulk, 1)
    assert scheduler.next(256, 256) == (bulk, 2)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"batch": {Priority.BULK: 0}},
        {"batch": {Priority.STATUS: -1}},
        {"reserve_fraction": 1.0},
        {"reserve_fraction": -0.1},
    ],
)
def test_bad_settings_are_refused(kwargs) -> None:
    with pytest.raises(ValueError):
        SendScheduler(**kwargs)
