"""``protocol.tasks.TaskScope``: the one task owner of the hub and the agent."""

from __future__ import annotations

import asyncio

import pytest

from edgeagent.tasks import TaskSet
from protocol.tasks import TaskScope


async def _fail(after: asyncio.Event, message: str) -> None:
    await after.wait()
    raise RuntimeError(message)


async def test_first_failure_cancels_the_siblings_and_is_reported_once() -> None:
    failures: list[tuple[str, str]] = []
    scope = TaskScope(lambda t, e: failures.append((t.get_name(), str(e))), name="conn")
    go = asyncio.Event()
    sibling = scope.create_task(asyncio.Event().wait(), name="reader")
    failing = scope.create_task(_fail(go, "boom"), name="writer")
    go.set()
    await asyncio.gather(failing, sibling, return_exceptions=True)
    assert sibling.cancelled()
    assert failures == [("conn:writer", "boom")]
    assert str(scope.failure) == "boom"
    assert len(scope) == 0
    await scope.aclose()


async def test_without_cancel_siblings_every_failure_is_reported_and_the_rest_run() -> None:
    failures: list[str] = []
    scope = TaskScope(lambda t, e: failures.append(str(e)), cancel_siblings=False)
    go = asyncio.Event()
    survivor = scope.create_task(asyncio.Event().wait())
    first = scope.create_task(_fail(go, "one"))
    second = scope.create_task(_fail(go, "two"))
    go.set()
    await asyncio.gather(first, second, return_exceptions=True)
    assert sorted(failures) == ["one", "two"]
    assert not survivor.done()
    assert len(scope) == 1
    await scope.aclose()
    assert survivor.cancelled()


async def test_cancel_all_keeps_the_scope_open_and_aclose_refuses_new_tasks() -> None:
    scope = TaskScope()
    first = scope.create_task(asyncio.Event().wait())
    await scope.cancel_all()
    assert first.cancelled()
    second = scope.create_task(asyncio.Event().wait())
    await scope.aclose()
    assert second.cancelled()
    coro = asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="closed"):
        scope.create_task(coro)
    assert coro.cr_frame is None  # closed, not left to warn "never awaited"


async def test_aclose_from_inside_one_of_its_own_tasks_does_not_await_itself() -> None:
    scope = TaskScope()
    other = scope.create_task(asyncio.Event().wait())

    async def closer() -> str:
        await scope.aclose()
        return "closed"

    assert await asyncio.wait_for(scope.create_task(closer()), 5) == "closed"
    assert other.cancelled()


async def test_the_agents_task_set_logs_a_failure_and_is_usable_after_close(caplog) -> None:
    tasks = TaskSet("pods")
    go = asyncio.Event()
    survivor = tasks.spawn(asyncio.Event().wait(), "relist")
    failing = tasks.spawn(_fail(go, "worker bug"), "1a2b3c4d")
    go.set()
    with caplog.at_level("ERROR", logger="edgeagent.tasks"):
        await asyncio.gather(failing, return_exceptions=True)
    assert "task pods:1a2b3c4d failed" in caplog.text
    assert not survivor.done()
    await tasks.close()
    assert survivor.cancelled() and len(tasks) == 0
    again = tasks.spawn(asyncio.Event().wait(), "prober")
    assert again.get_name() == "pods:prober"
    await tasks.close()
    assert again.cancelled()
