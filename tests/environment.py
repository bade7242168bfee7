"""What the suite needs from the machine, and what a test does when part of it is missing.

Outside CI a test whose dependency is missing (podman, network namespaces and iptables, a
tmpfs to fill, a cgroup filesystem, the reference kube-apiserver, systemd's tools) skips with
the reason. Under ``CI=true`` the same skip **fails** the test: ``tests/conftest.py`` turns
every skip into a failure except those made with :func:`not_applicable`, which mark a
combination the test does not cover by design (kubectl 1.20 against the embedded API only, a
feature a server version predates). The suite's last lines list every skip with its reason.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

__all__ = ["NOT_APPLICABLE", "in_ci", "missing", "not_applicable", "skip_reason"]

#: The prefix that marks a skip as by design, allowed under CI.
NOT_APPLICABLE = "not applicable: "


def in_ci() -> bool:
    """Whether the suite runs under CI (``CI`` set to anything but empty, 0 or false)."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def missing(what: str, how: str = "") -> NoReturn:
    """Skip the current test because ``what`` is missing here (fail it under CI).

    Args:
        what: the dependency and why it is missing, e.g. ``"podman cannot run here: …"``.
        how: what makes it available, e.g. ``"scripts/setup.sh test installs it"``.
    """
    message = f"{what} ({how})" if how else what
    if in_ci():
        pytest.fail(f"CI=true needs this: {message}", pytrace=False)
    pytest.skip(message)


def not_applicable(reason: str) -> NoReturn:
    """Skip a combination the test does not cover by design (allowed under CI)."""
    pytest.skip(NOT_APPLICABLE + reason)


def skip_reason(longrepr: object) -> str:
    """The reason of a skipped report's ``longrepr`` (``(path, line, "Skipped: …")``)."""
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        text = str(longrepr[2])
    else:
        text = str(longrepr)
    return text.removeprefix("Skipped: ")
