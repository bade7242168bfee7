"""Image pre-pull messages both halves use (``EdgeImagePrePull``, docs/upgrade.md).

The hub orders a node to pull images (:class:`ImagePullOrder`, level-based: sent again
after every reconnect until the node reported an end for that generation); the node pulls
them through its container runtime and reports (:class:`ImagePullProgress`, at-least-once
through its outbox). Image references are checked here on both sides: nothing from the
resource reaches the runtime unless :func:`check_image` passed it (the Docker API takes it
as a query parameter; no command line sees it).

Pure (sans-I/O): no clock, no file system.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from protocol.errors import InvalidMessage

# Registering here (not in protocol.messages, near its size limit) is safe: the package's
# __init__ imports this module, so the registry the codec decodes with always has these.
from protocol.messages import Message, register_message

__all__ = [
    "MAX_IMAGES",
    "PULL_REPORTS",
    "ImagePullOrder",
    "ImagePullProgress",
    "check_image",
]

#: Images one EdgeImagePrePull may name.
MAX_IMAGES = 32
#: Phases a node reports (Pending is the hub's: ordered, nothing heard yet).
PULL_REPORTS = frozenset({"Pulling", "Pulled", "Failed"})

# registry[:port]/path[:tag][@sha256:digest], the Docker reference grammar's characters.
_IMAGE = re.compile(
    r"[a-z0-9][a-z0-9._-]*(?::[0-9]{1,5})?(?:/[a-z0-9][a-z0-9._-]*)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[0-9a-f]{64})?"
)


def check_image(value: object) -> str:
    """``value`` if it is a container image reference (``registry:5000/app/name:tag``,
    optionally ``@sha256:...``), at most 255 characters.

    Raises:
        InvalidMessage: not a string, empty, too long, upper case in the name, a space,
            a leading ``-`` or any character outside the reference grammar.
    """
    if isinstance(value, str) and len(value) > 255:  # quoted whole, a 1 MiB name would be
        raise InvalidMessage("images", f"{value[:40]!r}... ({len(value)} characters) is over 255")
    if not isinstance(value, str) or _IMAGE.fullmatch(value) is None:
        raise InvalidMessage("images", f"{value!r:.300} is not an image reference")
    return value


def _check_ids(prepull: str, namespace: str, uid: str, generation: int) -> None:
    if not prepull or not namespace or not uid:
        raise InvalidMessage("prepull", "prepull, namespace and uid must not be empty")
    if generation < 1:
        raise InvalidMessage("generation", "must be >= 1")


@register_message
@dataclass(frozen=True, slots=True)
class ImagePullOrder(Message):
    """The hub orders the edge to pull ``images`` (for one generation of one pre-pull)."""

    kind: ClassVar[str] = "image_pull_order"
    from_hub: ClassVar[bool] = True

    prepull: str
    """The EdgeImagePrePull's name."""
    namespace: str
    """Its namespace."""
    uid: str
    """Its uid (a recreated resource is a new pre-pull)."""
    generation: int
    """Its ``metadata.generation`` the images belong to."""
    images: tuple[str, ...]
    """The image references to pull, in order (each passes :func:`check_image`)."""

    def _check(self) -> None:
        _check_ids(self.prepull, self.namespace, self.uid, self.generation)
        if not self.images or len(self.images) > MAX_IMAGES:
            raise InvalidMessage("images", f"must name 1 to {MAX_IMAGES} images")
        for image in self.images:
            check_image(image)


@register_message
@dataclass(frozen=True, slots=True)
class ImagePullProgress(Message):
    """Where the node's pull of one order is (at-least-once, from the outbox)."""

    kind: ClassVar[str] = "image_pull_progress"
    needs_ack: ClassVar[bool] = True
    from_edge: ClassVar[bool] = True

    prepull: str
    """The EdgeImagePrePull's name."""
    namespace: str
    """Its namespace."""
    uid: str
    """Its uid."""
    generation: int
    """The generation of the order this answers."""
    phase: str
    """One of :data:`PULL_REPORTS`."""
    pulled: int
    """Images pulled (or already present) so far."""
    observed_at: float
    """Seconds since the Unix epoch."""
    reason: str = ""
    """A CamelCase cause (``"ErrImagePull"``, ``"NotApplicable"``...)."""
    message: str = ""
    """Words for humans (bounded by the frame size)."""

    def _check(self) -> None:
        _check_ids(self.prepull, self.namespace, self.uid, self.generation)
        if self.phase not in PULL_REPORTS:
            raise InvalidMessage("phase", f"must be one of {sorted(PULL_REPORTS)}")
        if self.pulled < 0:
            raise InvalidMessage("pulled", "must be >= 0")
