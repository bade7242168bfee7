"""Agent upgrade rules both halves apply: versions, digests and artifact names.

An agent upgrade (``EdgeUpgrade``, docs/upgrade.md) names a target version and an
artifact (a wheel) by its SHA-256. The hub checks these when it reads the resource,
the agent checks them again when the order arrives: nothing from the resource may
reach a command line or a path unless it passed these functions.

- :func:`parse_version` accepts a strict subset of PEP 440 (``1.2.3``, ``1.2.3rc1``,
  ``1.2.3.post1``, ``1.2.3.dev4``; at most four release numbers, each at most 6 digits)
  and orders them as PEP 440 does for that subset. No local labels (``+abc``), no
  epochs: nothing the project publishes uses them, and a smaller grammar is easier to
  trust.
- :func:`check_sha256` accepts exactly 64 lowercase hex digits.
- :func:`check_artifact_name` accepts a wheel file name (``name-version-tag.whl``) of
  letters, digits, ``.``, ``_``, ``-`` and ``+``: no separator, no ``..``, no leading dot.

Pure functions (sans-I/O): no clock, no file system.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from protocol.errors import ProtocolError

__all__ = [
    "AgentVersion",
    "ArtifactError",
    "check_artifact_name",
    "check_sha256",
    "parse_version",
]

_VERSION = re.compile(
    r"(?P<release>[0-9]{1,6}(?:\.[0-9]{1,6}){0,3})"
    r"(?:(?P<pre>a|b|rc)(?P<pre_n>[0-9]{1,6}))?"
    r"(?:\.post(?P<post>[0-9]{1,6}))?"
    r"(?:\.dev(?P<dev>[0-9]{1,6}))?"
)
_SHA256 = re.compile(r"[0-9a-f]{64}")
_WHEEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,200}\.whl")
_PRE_ORDER = {"a": 0, "b": 1, "rc": 2}


class ArtifactError(ProtocolError, ValueError):
    """A version, digest or artifact name that breaks the rules above.

    Attributes:
        field: what was checked (``"version"``, ``"sha256"``, ``"artifact"``).
        value: the offending value (its ``repr`` is safe to log).
    """

    def __init__(self, field: str, value: object, reason: str) -> None:
        super().__init__(f"{field} {value!r}: {reason}")
        self.field = field
        self.value = value
        self.reason = reason


@dataclass(frozen=True, slots=True, order=False)
class AgentVersion:
    """A parsed agent version, ordered as PEP 440 orders this subset.

    Attributes:
        text: the version as written (the canonical form, it is validated).
        key: the sort key: release (zero-padded to 4), then pre/post/dev ranks.
    """

    text: str
    key: tuple[int, ...]

    def __lt__(self, other: AgentVersion) -> bool:
        return self.key < other.key

    def __le__(self, other: AgentVersion) -> bool:
        return self.key <= other.key

    def __gt__(self, other: AgentVersion) -> bool:
        return self.key > other.key

    def __ge__(self, other: AgentVersion) -> bool:
        return self.key >= other.key

    def __str__(self) -> str:
        return self.text


def parse_version(value: object) -> AgentVersion:
    """Parse an agent version (``"0.5.0"``, ``"1.0rc2"``, ``"0.4.1.post1"``).

    Returns:
        The :class:`AgentVersion`; two that differ only by trailing zeros
        (``1.0`` and ``1.0.0``) compare equal by ``key``.

    Raises:
        ArtifactError: ``value`` is not a string of the accepted grammar.
    """
    if not isinstance(value, str):
        raise ArtifactError("version", value, "must be a string")
    match = _VERSION.fullmatch(value)
    if match is None:
        raise ArtifactError(
            "version", value, "must look like 1.2.3 (optionally a1/b1/rc1, .post1, .dev1)"
        )
    release = [int(part) for part in match["release"].split(".")]
    release += [0] * (4 - len(release))
    # PEP 440: 1.0.dev1 < 1.0a1 < 1.0 < 1.0.post1; a dev release of a pre-release
    # sorts before that pre-release.
    if match["pre"] is not None:
        pre = (_PRE_ORDER[match["pre"]], int(match["pre_n"]))
    elif match["dev"] is not None and match["post"] is None:
        pre = (-1, 0)
    else:
        pre = (3, 0)
    post = -1 if match["post"] is None else int(match["post"])
    dev = 1 << 30 if match["dev"] is None else int(match["dev"])
    return AgentVersion(value, (*release, *pre, post, dev))


def check_sha256(value: object) -> str:
    """``value`` if it is a SHA-256 in hex (64 lowercase digits).

    Raises:
        ArtifactError: anything else (upper case too: one spelling per digest).
    """
    if not isinstance(value, str) or _SHA256.fullmatch(value) is None:
        raise ArtifactError("sha256", value, "must be 64 lowercase hex digits")
    return value


def check_artifact_name(value: object) -> str:
    """``value`` if it is a bare wheel file name, safe as one path component.

    Raises:
        ArtifactError: not a string, a separator or ``..`` in it, a leading dot, or
            not ending in ``.whl``.
    """
    if not isinstance(value, str) or _WHEEL.fullmatch(value) is None or ".." in value:
        raise ArtifactError(
            "artifact", value, "must be a wheel file name (name-version-tags.whl), no path"
        )
    return value
