"""The start guard: a new agent on probation goes back by itself when it cannot start.

Standard library only, and runnable as a script (``python3 guard.py STATE_DIR``), so
that it works when the new venv is broken: the agent that orders the switch copies this
file to ``<state_dir>/upgrade/guard.py`` and the unit runs it before every start
(``ExecStartPre=-/usr/bin/python3 /var/lib/edgeagent/upgrade/guard.py /var/lib/edgeagent``;
the process manager of the tests does the same).

Files under ``<state_dir>/upgrade/``:

- ``probation.json``: written just before the switch: ``{"upgrade", "uid", "version",
  "previous_version", "prefix", "deadline" (epoch s), "attempts", "max_attempts"}``.
- ``last.json``: the last confirmed switch (the probation as written): a rollback the hub
  orders later for that upgrade (its failure policy) undoes it, and only that one.
- ``result.json``: written by a rollback: ``{"upgrade", "uid", "phase": "RolledBack",
  "reason", "message", "version" (the one running again), "at" (epoch s)}``; the agent
  that runs next reports it to the hub and deletes it.

Each start counts an attempt. A start beyond ``max_attempts`` (the new agent crashed or
hung until systemd's start timeout killed it, every time) or after ``deadline`` (it
started but never confirmed: it could not reach the hub) rolls back: ``<prefix>`` becomes
``<prefix>.failed`` and ``<prefix>.previous`` becomes ``<prefix>``. The new agent
confirms (``confirm``) once the hub welcomed it; that ends the probation.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import sys
import time

__all__ = [
    "confirm",
    "forget_last_switch",
    "last_switch",
    "on_start",
    "probation",
    "read_result",
    "roll_back",
    "swap_back",
    "switch_in",
    "write_probation",
    "write_result",
]

PROBATION = "probation.json"
RESULT = "result.json"
LAST = "last.json"


def _dir(state_dir: pathlib.Path) -> pathlib.Path:
    return pathlib.Path(state_dir) / "upgrade"


def _write(path: pathlib.Path, data: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, sort_keys=True))
    os.replace(tmp, path)


def _read(path: pathlib.Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_probation(state_dir: pathlib.Path, probation: dict) -> None:
    """Start a probation (the caller switches the venvs next)."""
    _dir(state_dir).mkdir(parents=True, exist_ok=True)
    _write(_dir(state_dir) / PROBATION, {"attempts": 0, **probation})


def swap_back(prefix: pathlib.Path) -> None:
    """``<prefix>.previous`` -> ``<prefix>``, the current one -> ``<prefix>.failed``.

    Raises:
        FileNotFoundError: there is no previous venv.
    """
    prefix = pathlib.Path(prefix)
    previous = prefix.with_name(prefix.name + ".previous")
    failed = prefix.with_name(prefix.name + ".failed")
    if not (previous / "bin").is_dir():
        raise FileNotFoundError(f"no {previous} to go back to")
    shutil.rmtree(failed, ignore_errors=True)
    if prefix.exists():
        os.rename(prefix, failed)
    os.rename(previous, prefix)


def switch_in(prefix: pathlib.Path) -> None:
    """``<prefix>.new`` -> ``<prefix>``, the current one -> ``<prefix>.previous`` (an
    older ``.previous`` is deleted). Between the two renames there is no ``<prefix>``:
    ``Layout.recover`` finishes a switch a power cut interrupted.

    Raises:
        FileNotFoundError: there is no ``<prefix>.new`` (with a ``bin``).
        OSError: a rename failed.
    """
    prefix = pathlib.Path(prefix)
    staging = prefix.with_name(prefix.name + ".new")
    previous = prefix.with_name(prefix.name + ".previous")
    if not (staging / "bin").is_dir():
        raise FileNotFoundError(f"no {staging} to switch to")
    shutil.rmtree(previous, ignore_errors=True)
    if prefix.exists():
        os.rename(prefix, previous)
    os.rename(staging, prefix)


def write_result(state_dir: pathlib.Path, result: dict) -> None:
    """Record a rollback's result for the agent that runs next to report."""
    _dir(state_dir).mkdir(parents=True, exist_ok=True)
    _write(_dir(state_dir) / RESULT, result)


def roll_back(state_dir: pathlib.Path, reason: str, message: str, now: float) -> dict | None:
    """End the probation by going back to the previous venv.

    Returns:
        The result written (``result.json``), or None when no probation was running.
    """
    probation = _read(_dir(state_dir) / PROBATION)
    if probation is None:
        return None
    swap_back(pathlib.Path(probation["prefix"]))
    result = {
        "upgrade": probation.get("upgrade", ""),
        "uid": probation.get("uid", ""),
        "phase": "RolledBack",
        "reason": reason,
        "message": message,
        "version": probation.get("previous_version", ""),
        "at": now,
    }
    write_result(state_dir, result)
    (_dir(state_dir) / PROBATION).unlink(missing_ok=True)
    return result


def on_start(state_dir: pathlib.Path, now: float) -> str:
    """Count a start; roll back when the probation is used up.

    Returns:
        ``"none"`` (no probation), ``"probation"`` (start the new agent), or
        ``"rolled-back"`` (start again: the previous agent is in place).
    """
    path = _dir(state_dir) / PROBATION
    probation = _read(path)
    if probation is None:
        return "none"
    attempts = int(probation.get("attempts", 0)) + 1
    if attempts > int(probation.get("max_attempts", 3)):
        roll_back(
            state_dir,
            "CrashedAtStart",
            f"agent {probation.get('version')} did not start {attempts - 1} times",
            now,
        )
        return "rolled-back"
    if now > float(probation.get("deadline", 0)):
        roll_back(
            state_dir,
            "HubUnreachable",
            f"agent {probation.get('version')} did not reach the hub before its deadline",
            now,
        )
        return "rolled-back"
    _write(path, {**probation, "attempts": attempts})
    return "probation"


def probation(state_dir: pathlib.Path) -> dict | None:
    """The running probation, or None."""
    return _read(_dir(state_dir) / PROBATION)


def confirm(state_dir: pathlib.Path) -> dict | None:
    """The new agent reached the hub: end the probation, and remember it as the last
    switch (``last.json``: what a later rollback order of the same upgrade undoes).
    Returns it, or None."""
    path = _dir(state_dir) / PROBATION
    found = _read(path)
    if found is not None:
        _write(_dir(state_dir) / LAST, found)
    path.unlink(missing_ok=True)
    return found


def last_switch(state_dir: pathlib.Path) -> dict | None:
    """The last confirmed switch (its probation as written), or None."""
    return _read(_dir(state_dir) / LAST)


def forget_last_switch(state_dir: pathlib.Path) -> None:
    """The last switch was undone: a second rollback order must not undo an older one."""
    (_dir(state_dir) / LAST).unlink(missing_ok=True)


def read_result(state_dir: pathlib.Path, *, consume: bool = False) -> dict | None:
    """The last rollback's result, or None; ``consume`` deletes it (once reported)."""
    path = _dir(state_dir) / RESULT
    found = _read(path)
    if consume:
        path.unlink(missing_ok=True)
    return found


_USAGE = "usage: guard.py STATE_DIR | guard.py --switch PREFIX | guard.py --rollback PREFIX"


def _layout_step(step: str, prefix: str) -> int:
    """``--switch`` / ``--rollback`` (deploy/install.sh's steps): exit 0 done, 1 failed."""
    try:
        (switch_in if step == "--switch" else swap_back)(pathlib.Path(prefix))
    except OSError as exc:
        print(f"edgeagent upgrade guard: {exc}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str]) -> int:
    """``guard.py STATE_DIR``, the start guard: exit 0 always (a guard must never keep
    the agent down). ``guard.py --switch PREFIX`` / ``--rollback PREFIX``: the layout's
    two moves (``switch_in``, ``swap_back``), the ones install.sh makes; exit 0 done,
    1 failed (the message on stderr), 2 bad usage."""
    if len(argv) == 3 and argv[1] in ("--switch", "--rollback"):
        return _layout_step(argv[1], argv[2])
    if len(argv) != 2 or argv[1].startswith("-"):
        print(_USAGE, file=sys.stderr)
        return 2 if len(argv) > 1 and argv[1].startswith("-") else 0
    try:
        outcome = on_start(pathlib.Path(argv[1]), time.time())
    except OSError as exc:
        print(f"edgeagent upgrade guard: {exc}", file=sys.stderr)
        return 0
    if outcome == "rolled-back":
        print("edgeagent upgrade guard: rolled back to the previous agent", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
