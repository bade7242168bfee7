"""Suite-wide fixtures.

Every test runs under a guard that fails it when it leaves asyncio tasks behind:
each background task must have an owner that awaits or cancels it (STYLE.md §8).
"""

from __future__ import annotations

import asyncio

import pytest


@pytest.fixture(autouse=True)
async def _no_leaked_tasks():
    """Fail a test that leaves asyncio tasks running when it ends."""
    before = set(asyncio.all_tasks())
    yield
    # Give tasks cancelled during teardown one loop iteration to finish.
    await asyncio.sleep(0)
    leaked = [
        t for t in asyncio.all_tasks() - before if not t.done() and t is not asyncio.current_task()
    ]
    if leaked:
        for task in leaked:
            task.cancel()
        await asyncio.gather(*leaked, return_exceptions=True)
        names = ", ".join(sorted(t.get_name() + ":" + repr(t.get_coro()) for t in leaked))
        pytest.fail(f"test left {len(leaked)} asyncio task(s) running: {names}")
