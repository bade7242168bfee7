"""Back-off for replicas that keep failing on a node, as Kubernetes' controllers do.

A pod an agent refuses (``UnsupportedPodSpec``: a privileged container, ``hostPID``...) or
that fails at once ends ``Failed``; the planner replaces a finished replica at once, so
such a pod was deleted and created again about 20 times a second (579 pods and 738
Events in 30 s for one DaemonSet on one node). Kubernetes avoids that loop: the DaemonSet
controller backs off re-creating a daemon pod that failed on a node (its
``failedPodsBackoff``: 1 s, doubling, up to 15 minutes), kubelet backs off restarting a
crashing container (``CrashLoopBackOff``, reset after it ran well).

:class:`FailureBackoff` does the same for every placement and placed workload, per
*(owner, node, template hash)*: each failed pod (counted once per pod uid) doubles the
delay before the next replica of that owner may be created on that node, from ``base_s``
up to ``cap_s``, with "equal jitter" (a delay is drawn in ``[ceiling/2, ceiling]``, so it
never collapses to zero, and replicas failing together spread out). A replica that turns
Ready resets it; a new template (a fix) is a new key, so it is tried at once.

The controller asks :meth:`FailureBackoff.wait` before creating a replica and holds it
until then (the planner already counts it as placed, so it plans nothing more), and shows
:meth:`FailureBackoff.failing` on the owner's status and in one Warning Event.
"""

from __future__ import annotations

import random
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from cloudhub.placement.model import LABEL_TEMPLATE_HASH, PlacementKey
from protocol.backoff import backoff

__all__ = ["Failure", "FailureBackoff", "failure_of", "owner_key"]

#: (owner, node, template hash)
Key = tuple[PlacementKey, str, str]

MANAGED = frozenset({"EdgePlacement", "Deployment", "DaemonSet"})


def owner_key(pod: Mapping[str, Any]) -> PlacementKey | None:
    """The placement or workload that controls ``pod`` (its controller ownerReference),
    or ``None`` for a pod placement does not manage."""
    meta = pod.get("metadata") or {}
    for ref in meta.get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("controller") and ref.get("kind") in MANAGED:
            return PlacementKey(
                str(ref["kind"]), str(meta.get("namespace") or "default"), str(ref.get("name"))
            )
    return None


def failure_of(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(reason, message)`` when ``pod`` has failed (phase ``Failed``), else ``None``.

    The pod's own reason and message (``UnsupportedPodSpec`` from an agent, ``Evicted``...),
    else its first terminated container's (``Error``, exit code).
    """
    status = pod.get("status") or {}
    if status.get("phase") != "Failed":
        return None
    reason, message = str(status.get("reason") or ""), str(status.get("message") or "")
    if not reason:
        for c in status.get("containerStatuses") or []:
            term = ((c or {}).get("state") or {}).get("terminated") or {}
            if term:
                reason = str(term.get("reason") or "Error")
                message = message or f"container {c.get('name')} exited {term.get('exitCode')}"
                break
    return reason or "Failed", message or "the pod failed"


@dataclass(slots=True)
class Failure:
    """The back-off of one (owner, node, template hash).

    Attributes:
        node: the node.
        count: failed pods seen.
        reason, message: the latest failure's.
        not_before: monotonic seconds before which no replica is created.
        delay: the latest delay drawn, seconds.
    """

    node: str
    count: int
    reason: str
    message: str
    not_before: float
    delay: float
    delays: Iterator[float] = field(repr=False)
    pods: set[str] = field(default_factory=set, repr=False)


class FailureBackoff:
    """Per (owner, node, template hash) back-off for failing replicas.

    Args:
        base_s: the first delay's ceiling (the DaemonSet controller's 1 s).
        cap_s: the largest ceiling (its 15 minutes).
        uniform: the random draw, ``uniform(a, b)``.
        clock: monotonic seconds.
        max_keys: failing keys remembered (the oldest forgotten first).
    """

    def __init__(
        self,
        *,
        base_s: float = 1.0,
        cap_s: float = 900.0,
        uniform: Callable[[float, float], float] = random.uniform,
        clock: Callable[[], float] = time.monotonic,
        max_keys: int = 10_000,
    ) -> None:
        self.base_s = base_s
        self.cap_s = cap_s
        self._uniform = uniform
        self._clock = clock
        self.max_keys = max_keys
        self._failures: OrderedDict[Key, Failure] = OrderedDict()

    def _equal_jitter(self, low: float, high: float) -> float:
        return self._uniform(high / 2, high)

    def failed(self, pod: Mapping[str, Any]) -> Failure | None:
        """Record a pod's failure (once per pod uid); returns the key's back-off when this
        is a new failure of a managed pod, else ``None``."""
        owner = owner_key(pod)
        failed = failure_of(pod)
        if owner is None or failed is None:
            return None
        meta = pod.get("metadata") or {}
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        key = (owner, node, str((meta.get("labels") or {}).get(LABEL_TEMPLATE_HASH, "")))
        uid = str(meta.get("uid") or meta.get("name"))
        entry = self._failures.get(key)
        if entry is None:
            delays = backoff(uniform=self._equal_jitter, base=self.base_s, cap=self.cap_s)
            entry = Failure(node, 0, "", "", 0.0, 0.0, delays)
            self._failures[key] = entry
            while len(self._failures) > self.max_keys:
                self._failures.popitem(last=False)
        elif uid in entry.pods:
            return None
        self._failures.move_to_end(key)
        entry.pods.add(uid)
        entry.count += 1
        entry.reason, entry.message = failed
        entry.delay = next(entry.delays)
        entry.not_before = self._clock() + entry.delay
        return entry

    def recovered(self, pod: Mapping[str, Any]) -> bool:
        """A replica of the key turned Ready: forget its back-off. Returns whether there
        was one."""
        owner = owner_key(pod)
        if owner is None:
            return False
        meta = pod.get("metadata") or {}
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        key = (owner, node, str((meta.get("labels") or {}).get(LABEL_TEMPLATE_HASH, "")))
        return self._failures.pop(key, None) is not None

    def wait(self, owner: PlacementKey, node: str, template_hash: str) -> float:
        """Seconds before a replica of ``owner`` may be created on ``node`` (0: now)."""
        entry = self._failures.get((owner, node, template_hash))
        if entry is None:
            return 0.0
        return max(entry.not_before - self._clock(), 0.0)

    def failing(self, owner: PlacementKey) -> list[Failure]:
        """The back-offs of ``owner`` (any node, any template), by node."""
        return sorted((f for k, f in self._failures.items() if k[0] == owner), key=lambda f: f.node)

    def forget(self, owner: PlacementKey, *, keep_template: str | None = None) -> None:
        """The owner is gone: drop its back-offs; with ``keep_template``, only those of
        other templates (a new template is a new try)."""
        for key in [k for k in self._failures if k[0] == owner and k[2] != keep_template]:
            del self._failures[key]
