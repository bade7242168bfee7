"""The embedded Kubernetes-compatible API in a process of its own, as a benchmark's
cluster API (``python -m cloudhub.standalone --in-memory``): its CPU is not the measured
process's, as a real cluster's API would not be."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pathlib
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import psutil

__all__ = ["ROOT", "api_process", "cancel_on_sigterm", "popen", "start_api", "stop_api"]

ROOT = pathlib.Path(__file__).resolve().parents[2]


def popen(args: list[str], **kwargs: Any) -> subprocess.Popen:
    """A child process in a session of its own, with the repository on its path."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(args, env=env, cwd=ROOT, start_new_session=True, **kwargs)


def cancel_on_sigterm() -> None:
    """Make SIGTERM (a CI timeout, an impatient operator) cancel the running task, so its
    clean-up stops the children :func:`popen` started: they run in sessions of their own
    and would outlive this process. Call it from the benchmark's main task."""
    main = asyncio.current_task()
    assert main is not None, "call it from a task"
    loop = asyncio.get_running_loop()

    def once() -> None:
        # a second SIGTERM (``timeout`` forwards its own; an operator's pkill of both)
        # would cancel the clean-up itself and leave the children running
        loop.add_signal_handler(signal.SIGTERM, lambda: None)
        main.cancel()

    loop.add_signal_handler(signal.SIGTERM, once)


async def start_api(root: pathlib.Path) -> tuple[subprocess.Popen, pathlib.Path]:
    """Start the API; its process and the kubeconfig it wrote (``root/kubeconfig``), once
    it serves. Its log is ``root/api.log``.

    Raises:
        RuntimeError: the API exited before it served (the log's text in the message).
    """
    kubeconfig = root / "kubeconfig"
    log = (root / "api.log").open("wb")
    proc = popen(
        [
            sys.executable,
            "-m",
            "cloudhub.standalone",
            "--in-memory",
            "--port",
            "0",
            "--kubeconfig-out",
            str(kubeconfig),
        ],
        stdout=subprocess.PIPE,
        stderr=log,
    )
    log.close()  # the child holds its own descriptor
    assert proc.stdout is not None
    while True:
        line = await asyncio.to_thread(proc.stdout.readline)
        if not line:
            raise RuntimeError("the API exited: " + (root / "api.log").read_text())
        if line.startswith(b"kubeconfig "):
            return proc, kubeconfig


async def stop_api(proc: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL after 30 s."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        await asyncio.to_thread(proc.wait, 30)
    except subprocess.TimeoutExpired:
        proc.kill()
        await asyncio.to_thread(proc.wait)


@contextlib.asynccontextmanager
async def api_process(root: pathlib.Path) -> AsyncIterator[tuple[psutil.Process, pathlib.Path]]:
    """:func:`start_api` … :func:`stop_api` as a context: the API process (psutil, for its
    CPU seconds) and its kubeconfig."""
    proc, kubeconfig = await start_api(root)
    try:
        yield psutil.Process(proc.pid), kubeconfig
    finally:
        await stop_api(proc)
