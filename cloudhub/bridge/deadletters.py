"""The hub's dead letters: hub-to-edge messages that cannot be sent, kept and reported.

A message is dead when resending it cannot help: it encodes to more than the limits the
session agreed with the agent (``protocol.errors.MessageTooLarge``: an object over the
message size), or it does not encode at all. The outbox hands it here instead of sending
it, and goes on with what is behind it (one bad message never blocks the session). The hub
then says so where an operator looks: ``edgefleet_hub_dead_letters_total``, a Warning
Event on the object and on every pod of the node that uses it (so the pod says why its
ConfigMap is missing, not just that it is), and the table below (:meth:`DeadLetters.entries`).

The table is bounded (newest kept): the state of record is the API and its Events; this is
what the hub process saw since it started. An object's row goes when the object reaches the
node after all (:meth:`DeadLetters.delivered`: a later version that fits, or its delete),
so the table lists what is still missing on the edge.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

from protocol.messages import Message, ObjectDelete, ObjectRef, ObjectUpsert
from protocol.podrefs import reference_key, reference_keys
from protocol.undelivered import undelivered

__all__ = ["DeadLetter", "DeadLetters", "pods_using"]


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One message the hub could not send to a node."""

    node: str
    """The node it was for."""
    kind: str
    """The message kind (``object_upsert``)."""
    ref: ObjectRef | None
    """The object it carried, if any."""
    reason: str
    """Why, naming the sizes (bytes) when it was too large."""
    at: float
    """When (seconds since the Unix epoch)."""


class DeadLetters:
    """The bounded table of dead letters, one row per (node, object or kind), newest kept.

    Args:
        capacity: rows kept; the oldest goes first.
    """

    __slots__ = ("_rows", "capacity")

    def __init__(self, capacity: int = 1000) -> None:
        self.capacity = capacity
        self._rows: OrderedDict[tuple[str, str], DeadLetter] = OrderedDict()

    def __len__(self) -> int:
        return len(self._rows)

    def add(self, letter: DeadLetter) -> bool:
        """Record ``letter``; True if it is new (not a repeat of the same object's row)."""
        key = (letter.node, letter.ref.uid if letter.ref is not None else letter.kind)
        new = key not in self._rows
        self._rows.pop(key, None)
        self._rows[key] = letter
        while len(self._rows) > self.capacity:
            self._rows.popitem(last=False)
        return new

    def discard(self, node: str, uid: str) -> DeadLetter | None:
        """Forget an object's row (it was sent after all, e.g. a smaller version); the row
        removed, if there was one."""
        return self._rows.pop((node, uid), None)

    def delivered(self, node: str, message: Message) -> DeadLetter | None:
        """``message`` was handed to ``node``'s link: if it settles an object's row, remove
        the row and return it.

        It settles it when it is an ``object_upsert`` of the object that is not its
        placeholder (``protocol.undelivered``: the placeholder is sent *because* of the
        row), or its ``object_delete`` (the edge no longer needs it). Anything else, and
        every message while the table is empty, costs one check.
        """
        if not self._rows:
            return None
        if isinstance(message, ObjectUpsert):
            if undelivered(message.object) is not None:
                return None
            ref = message.ref
        elif isinstance(message, ObjectDelete):
            ref = message.ref
        else:
            return None
        return self._rows.pop((node, ref.uid), None)

    def entries(self, node: str | None = None) -> list[DeadLetter]:
        """The rows, oldest first; only ``node``'s if given."""
        return [row for row in self._rows.values() if node is None or row.node == node]


def pods_using(ref: ObjectRef, objects: Iterable[dict]) -> list[dict]:
    """The pods among ``objects`` (a node's desired set) that use ConfigMap or Secret ``ref``
    (``protocol.podrefs``: volumes, env, envFrom, imagePullSecrets)."""
    key = reference_key(ref.kind, ref.namespace, ref.name)
    return [obj for obj in objects if obj.get("kind") == "Pod" and key in reference_keys(obj)]
