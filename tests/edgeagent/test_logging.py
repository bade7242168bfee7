"""``edgeagent run``'s log (issue 15 item 14), as a process: SIGTERM while a mapper
long-polls the device API (and another connection is half-way through a request) exits
0 with no traceback; every line carries its UTC time outside journald, and none under it
(journald stamps lines itself), where lines start with the syslog priority instead."""

from __future__ import annotations

import io
import os
import pathlib
import re
import signal
import socket
import subprocess
import sys

import pytest

from edgeagent.logsetup import configure_logging, journald_stream
from edgeagent.store import Store
from tests.edgeagent.conftest import Ref
from tests.edgeagent.devices.helpers import THERMOSTAT_MODEL, device
from tests.waiting import eventually_sync

ROOT = pathlib.Path(__file__).resolve().parents[2]
STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (DEBUG|INFO|WARNING|ERROR) \S+: ")


def _seed_device(state: pathlib.Path) -> None:
    store = Store.open(state / "store.db")
    try:
        for obj in (THERMOSTAT_MODEL, device()):
            meta = obj["metadata"]
            ref = Ref(obj["kind"], meta["namespace"], meta["name"], meta["uid"])
            store.apply_upsert(ref, "1", obj)
    finally:
        store.close()


def _run_until_ready(state: pathlib.Path, log: pathlib.Path, env: dict) -> subprocess.Popen:
    args = [sys.executable, "-m", "edgeagent", "run", "--state-dir", str(state)]
    args += ["--runtime", "process", "--node-name", "edge-1", "--set", "node_ip=127.0.0.1"]
    with open(log, "w") as out:
        proc = subprocess.Popen(args, env=env, stdout=out, stderr=out, cwd=ROOT)
    eventually_sync(
        lambda: "device API on" in log.read_text() or proc.poll() is not None,
        "the agent's device API listening",
        60,
        state=log.read_text,
    )
    assert proc.poll() is None, log.read_text()
    return proc


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NOTIFY_SOCKET", "JOURNAL_STREAM")}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return {**env, **(extra or {})}


def test_sigterm_during_a_long_poll_is_quiet_and_lines_are_timestamped(tmp_path: pathlib.Path):
    state, log = tmp_path / "state", tmp_path / "agent.log"
    _seed_device(state)
    proc = _run_until_ready(state, log, _env())
    poll = socket.socket(socket.AF_UNIX)
    half = socket.socket(socket.AF_UNIX)
    try:
        poll.connect(str(state / "devices.sock"))
        poll.sendall(
            b"GET /v1/devices/default/thermo-1/desired?uid=u-1&after=1000000&wait=60 "
            b"HTTP/1.1\r\nHost: agent\r\n\r\n"
        )
        half.connect(str(state / "devices.sock"))
        half.sendall(b"GET /v1/dev")  # a mapper cut off mid-request
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        poll.close()
        half.close()
        if proc.poll() is None:
            proc.kill()
    text = log.read_text()
    assert "Traceback" not in text and "CancelledError" not in text, text
    lines = [line for line in text.splitlines() if line.strip()]
    assert lines and all(STAMP.match(line) for line in lines), text
    assert any("(1 device(s))" in line for line in lines), text  # the device was served


def test_under_journald_lines_carry_the_priority_not_a_time(tmp_path: pathlib.Path):
    state, log = tmp_path / "state", tmp_path / "agent.log"
    log.touch()
    st = os.stat(log)  # the agent's stderr is this file: as systemd's journal stream
    proc = _run_until_ready(state, log, _env({"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"}))
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    lines = [line for line in log.read_text().splitlines() if line.strip()]
    assert lines and all(re.match(r"^<[2-7]>(DEBUG|INFO|WARNING|ERROR) \S+: ", x) for x in lines)
    assert any(line.startswith("<6>INFO edgeagent.agent: edge agent ready") for line in lines)


@pytest.mark.parametrize(
    "value",
    ["", "garbage", "12:", ":34", "1:2"],  # unset, malformed, another stream
)
def test_a_journal_stream_that_is_not_stderr_is_not_trusted(tmp_path, value: str) -> None:
    with open(tmp_path / "err", "w") as stream:
        assert not journald_stream({"JOURNAL_STREAM": value}, stream)
        st = os.fstat(stream.fileno())
        assert journald_stream({"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"}, stream)
    assert not journald_stream({"JOURNAL_STREAM": "1:2"}, io.StringIO())  # no descriptor


def test_the_priority_follows_the_level(tmp_path: pathlib.Path) -> None:
    import logging

    with open(tmp_path / "err", "w") as stream:
        st = os.fstat(stream.fileno())
        root = logging.getLogger()
        saved = (list(root.handlers), root.level)
        try:
            configure_logging(
                "debug", env={"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"}, stream=stream
            )
            log = logging.getLogger("edgeagent.test")
            log.debug("d")
            log.warning("w")
            log.error("e")
            log.critical("c")
        finally:
            root.handlers[:] = saved[0]
            root.setLevel(saved[1])
    assert (tmp_path / "err").read_text().splitlines() == [
        "<7>DEBUG edgeagent.test: d",
        "<4>WARNING edgeagent.test: w",
        "<3>ERROR edgeagent.test: e",
        "<2>CRITICAL edgeagent.test: c",
    ]
