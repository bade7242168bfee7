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

Pure functions (sans-I/O): no clock, no file system. The messages of an upgrade
(:class:`UpgradeOrder`, :class:`UpgradeRollback`, :class:`UpgradeProgress`, and the
resumable artifact transfer :class:`ArtifactRequest` / :class:`ArtifactChunk`) are
registered with the codec here too.
"""

from __future__ import annotations

import re
from collections.abc import Hashable
from dataclasses import dataclass
from typing import ClassVar

from protocol.errors import InvalidMessage, ProtocolError

# Registering here (not in protocol.messages, near its size limit) is safe: the package's
# __init__ imports this module, so the registry the codec decodes with always has these.
from protocol.messages import Message, register_message

__all__ = [
    "MAX_ARTIFACT_CHUNK",
    "UPGRADE_REPORTS",
    "AgentVersion",
    "ArtifactChunk",
    "ArtifactError",
    "ArtifactRequest",
    "UpgradeOrder",
    "UpgradeProgress",
    "UpgradeRollback",
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


# --- agent upgrades (docs/upgrade.md) ----------------------------------------------------------

#: The phases an edge may report for its upgrade (Healthy and Skipped are the hub's).
#: "Deferred": the node holds upgrades (edgeagent hold, its maintenance window) and did
#: nothing; the hub asks again later.
UPGRADE_REPORTS = frozenset(
    {"Downloading", "Downloaded", "Installing", "Restarted", "RolledBack", "Failed", "Deferred"}
)
#: The largest artifact chunk (bytes) a request may ask for: well under the frame limit.
MAX_ARTIFACT_CHUNK = 1024 * 1024


def _check_upgrade_ids(upgrade: str, uid: str) -> None:
    if not upgrade or not uid:
        raise InvalidMessage("upgrade", "upgrade and uid must not be empty")


@register_message
@dataclass(frozen=True, slots=True)
class UpgradeOrder(Message):
    """The hub orders the edge to run agent ``version`` (level-based: sent again after
    every reconnect while the node's upgrade is in progress). The edge checks
    ``version`` and ``sha256`` with :mod:`protocol.upgrade` before using either."""

    kind: ClassVar[str] = "upgrade_order"
    from_hub: ClassVar[bool] = True

    upgrade: str
    """The EdgeUpgrade's name."""
    uid: str
    """The EdgeUpgrade's uid (a recreated resource is a new upgrade)."""
    version: str
    """The agent version to run."""
    sha256: str
    """The artifact's SHA-256 (hex): the edge installs only a file with this digest."""
    artifact: str = ""
    """A wheel file name the hub serves with ``artifact_chunk``, or ""."""
    url: str = ""
    """An https URL to fetch the artifact from instead, or ""."""
    size: int = 0
    """The artifact's size in bytes (0: unknown)."""
    allow_downgrade: bool = False
    """Whether an older version than the running one may be installed."""
    gate_s: float = 600.0
    """Seconds the new agent has to connect back before it rolls itself back."""

    def _check(self) -> None:
        _check_upgrade_ids(self.upgrade, self.uid)
        if bool(self.artifact) == bool(self.url):
            raise InvalidMessage("artifact", "exactly one of artifact or url must be set")
        if self.size < 0 or self.gate_s <= 0:
            raise InvalidMessage("size", "size must be >= 0 and gate_s > 0")


@register_message
@dataclass(frozen=True, slots=True)
class UpgradeRollback(Message):
    """The hub asks the edge to go back to its previous agent (failure policy)."""

    kind: ClassVar[str] = "upgrade_rollback"
    from_hub: ClassVar[bool] = True

    upgrade: str
    """The EdgeUpgrade's name."""
    uid: str
    """The EdgeUpgrade's uid."""
    reason: str
    """Why (``"BatchRolledBack"``, ``"HealthGateTimeout"``)."""

    def _check(self) -> None:
        _check_upgrade_ids(self.upgrade, self.uid)


@register_message
@dataclass(frozen=True, slots=True)
class UpgradeProgress(Message):
    """Where the edge's upgrade is (at-least-once, latest-wins per upgrade)."""

    kind: ClassVar[str] = "upgrade_progress"
    needs_ack: ClassVar[bool] = True
    from_edge: ClassVar[bool] = True

    upgrade: str
    """The EdgeUpgrade's name."""
    uid: str
    """The EdgeUpgrade's uid."""
    phase: str
    """One of :data:`UPGRADE_REPORTS`."""
    version: str
    """The agent version running when it was sent."""
    observed_at: float
    """Seconds since the Unix epoch."""
    reason: str = ""
    """A CamelCase cause (``"DigestMismatch"``, ``"CrashedAtStart"``...)."""
    message: str = ""
    """Words for humans (bounded by the frame size)."""

    def _check(self) -> None:
        _check_upgrade_ids(self.upgrade, self.uid)
        if self.phase not in UPGRADE_REPORTS:
            raise InvalidMessage("phase", f"must be one of {sorted(UPGRADE_REPORTS)}")

    def coalesce_key(self) -> Hashable | None:
        """The upgrade's uid: a newer phase replaces an unsent one."""
        return ("upgrade", self.uid)


@register_message
@dataclass(frozen=True, slots=True)
class ArtifactRequest(Message):
    """The edge asks for ``length`` bytes of an artifact from ``offset`` (resumable)."""

    kind: ClassVar[str] = "artifact_request"
    from_edge: ClassVar[bool] = True

    sha256: str
    """The artifact's digest, as the order named it."""
    offset: int
    """The first byte wanted (what the edge already has)."""
    length: int
    """Bytes wanted, 1..MAX_ARTIFACT_CHUNK."""

    def _check(self) -> None:
        if self.offset < 0 or not 0 < self.length <= MAX_ARTIFACT_CHUNK:
            raise InvalidMessage("length", f"offset >= 0, length 1..{MAX_ARTIFACT_CHUNK}")


@register_message
@dataclass(frozen=True, slots=True)
class ArtifactChunk(Message):
    """The hub's answer to an ``artifact_request``: bytes, or why there are none."""

    kind: ClassVar[str] = "artifact_chunk"
    from_hub: ClassVar[bool] = True

    sha256: str
    """The artifact's digest."""
    offset: int
    """Where ``data`` starts in the artifact."""
    data: bytes
    """The bytes (empty at the end or on error)."""
    total: int
    """The artifact's size in bytes."""
    error: str = ""
    """Why no data came (``"NotFound"``, ``"NotOrdered"``, ``"WrongDigest"``), or ""."""

    def _check(self) -> None:
        if self.offset < 0 or self.total < 0 or self.offset + len(self.data) > self.total:
            raise InvalidMessage("offset", "offset + len(data) must be within total")
        if len(self.data) > MAX_ARTIFACT_CHUNK:
            raise InvalidMessage("data", f"at most {MAX_ARTIFACT_CHUNK} bytes")
