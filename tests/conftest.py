"""Suite-wide fixtures and hooks.

- Every test runs under a guard that fails it when it leaves asyncio tasks behind: each
  background task must have an owner that awaits or cancels it (STYLE.md §8).
- Under ``CI=true`` a skip fails the test unless it is marked not applicable
  (:mod:`tests.environment`): a CI machine that lacks podman, network namespaces, a tmpfs,
  cgroups or the reference kube-apiserver must not pass without testing what needs them.
- The run ends with the list of skips and their reasons.
- The interpreter's directory leads ``PATH``, so the project's console scripts
  (``lint-imports``, ``cloudhub``, ``edgeagent``) are the venv's even when pytest is run
  as ``.venv/bin/python -m pytest`` without activating it.
- ``small_fs``: a small tmpfs to fill (1 MiB; another size by indirect parametrization).
- ``pki_ca``: the one test CA of the run with its hub, node and bad credentials
  (:mod:`tests.testpki`), made with ``cryptography`` once per session.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import sys

import pytest

from tests.disk import mount_small_tmpfs
from tests.environment import NOT_APPLICABLE, in_ci, skip_reason
from tests.testpki import TestPKI, make_test_pki

_SKIPS: list[tuple[str, str]] = []


def pytest_configure(config: pytest.Config) -> None:
    bindir = str(pathlib.Path(sys.executable).parent)
    if os.environ.get("PATH", "").split(os.pathsep)[0] != bindir:
        os.environ["PATH"] = os.pathsep.join([bindir, os.environ.get("PATH", "")])


@pytest.fixture(scope="session")
def pki_ca() -> TestPKI:
    """The test CA and the TLS credentials made from it, shared by the whole run (no keys
    are checked in; a new CA every run)."""
    return make_test_pki()


@pytest.fixture
def small_fs(tmp_path: pathlib.Path, request: pytest.FixtureRequest):
    """A tmpfs to fill up at ``tmp_path / "small"``: 1 MiB, or the size given by
    ``@pytest.mark.parametrize("small_fs", ["2m"], indirect=True)`` (root only)."""
    with mount_small_tmpfs(tmp_path / "small", getattr(request, "param", "1m")) as mount:
        yield mount


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


def _judge_skip(report: pytest.TestReport | pytest.CollectReport) -> None:
    if not report.skipped or hasattr(report, "wasxfail"):
        return  # an expected failure is a known bug, listed by -rx, not a missing dependency
    reason = skip_reason(report.longrepr)
    _SKIPS.append((report.nodeid, reason))
    if in_ci() and not reason.startswith(NOT_APPLICABLE):
        report.outcome = "failed"
        report.longrepr = (
            f"CI=true: skipped for a missing dependency, which fails under CI: {reason}"
        )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    _judge_skip(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector):
    outcome = yield
    _judge_skip(outcome.get_result())


def pytest_terminal_summary(terminalreporter) -> None:
    by_design = [s for s in _SKIPS if s[1].startswith(NOT_APPLICABLE)]
    environment = [s for s in _SKIPS if not s[1].startswith(NOT_APPLICABLE)]
    terminalreporter.section("skips")
    if not _SKIPS:
        terminalreporter.write_line("no test was skipped")
        return
    if environment:
        verdict = "failed (CI=true)" if in_ci() else "skipped"
        terminalreporter.write_line(
            f"{len(environment)} {verdict} for a missing dependency on this machine:"
        )
        for nodeid, reason in environment:
            terminalreporter.write_line(f"  {nodeid}: {reason}")
    else:
        terminalreporter.write_line("no environment skip")
    if by_design:
        terminalreporter.write_line(f"{len(by_design)} not applicable by design:")
        reasons: dict[str, int] = {}
        for _, reason in by_design:
            reasons[reason] = reasons.get(reason, 0) + 1
        for reason, count in sorted(reasons.items()):
            terminalreporter.write_line(f"  {count}x {reason.removeprefix(NOT_APPLICABLE)}")
