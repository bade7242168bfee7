"""The loop of passes and the Invalid status the two upgrade controllers share
(``cloudhub.upgrade.passes``)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from cloudhub.errors import KubeAPIError
from cloudhub.upgrade.errors import InvalidUpgrade
from cloudhub.upgrade.passes import invalid_status, run_passes
from tests.waiting import eventually


async def test_a_missing_crd_is_said_once_and_other_errors_each_time(caplog) -> None:
    log = logging.getLogger("tests.passes")
    answers = [404, 404, 404, 500, 500, None, 404]
    calls = 0

    async def tick() -> None:
        nonlocal calls
        status = answers[min(calls, len(answers) - 1)]
        calls += 1
        if status is not None:
            raise KubeAPIError(status, "", "boom")

    caplog.set_level(logging.INFO, logger="tests.passes")
    task = asyncio.ensure_future(
        run_passes(tick, 0.001, kind="EdgeThing", name="thing", off="things are off", log=log)
    )
    try:
        await eventually(lambda: calls >= len(answers), "every answer given")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    # three 404s in a row: one line; a success in between: said again
    assert infos == ["no EdgeThing CRD on this API: things are off until it is"] * 2
    assert warnings == ["thing pass failed: 500: boom"] * 2


def test_invalid_status_is_written_once_per_reason() -> None:
    exc = InvalidUpgrade("spec.version", "not a version")
    body = invalid_status({"status": {"phase": "Active"}}, exc)
    assert body == {"status": {"phase": "Invalid", "reason": exc.path, "message": str(exc)}}
    assert invalid_status(body, exc) is None  # already says so
    other = InvalidUpgrade("spec.artifact", "no sha256")
    assert invalid_status(body, other) is not None


@pytest.mark.parametrize("status", [{}, {"phase": "Invalid", "message": "old"}])
def test_invalid_status_replaces_a_status_without_this_reason(status) -> None:
    exc = InvalidUpgrade("spec.version", "not a version")
    assert invalid_status({"status": status}, exc) is not None
