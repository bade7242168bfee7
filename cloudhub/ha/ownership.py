"""Node ownership: which hub replica serves a node, recorded on the node's own Lease.

The owner is the annotation ``edgefleet.io/hub-replica`` on the node's Lease in
``kube-node-lease`` (the Lease the hub renews as the node's kubelet would), naming a
replica's identity (:mod:`cloudhub.ha.replicas`). Putting it there costs no write of its
own: the claim is the first renewal, every renewal carries the owner's fencing (the
resourceVersion the owner last wrote, as a merge-patch precondition), and a release is
one write at disconnect. Per-node ownership Leases would double the fleet's steady write
rate (10,000 nodes: +1,000 writes/s at a 10 s renewal); shards of nodes would need a
redirect to the shard's replica, which agents behind one Service address cannot follow.

Rules (docs/hub.md, "High availability"):

- A node connecting to replica B is served (``claim`` writes B as owner) when its Lease
  names no owner, names B, or names a replica that is dead (its own Lease expired or was
  deleted) or restarted since it last renewed the node's Lease. Otherwise B refuses the
  session with ``GOING_AWAY`` and a ``retry_after`` of the owner's remaining validity plus
  full jitter: a second agent with the same
  certificate, or an agent whose old connection the owner has not yet seen die, never
  makes two replicas write one node (no split-brain).
- Every renewal by the owner is ``PATCH`` with ``metadata.resourceVersion`` = the version
  of its own last write. A 409 means someone else wrote the Lease: if the annotation still
  names this replica (a label added by hand) the renewal is retried on the new version;
  otherwise the node was taken over or the Lease edited by hand, and this replica stops
  serving the node (``on_lost``: the hub closes its session), with a log line saying so.
- :meth:`NodeOwnership.holds` is what every other write for a node checks (Node status,
  heartbeats): only a held node of a valid (unfenced) replica is written.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from cloudhub.errors import KubeAPIError, KubeConflict, KubeNotFound
from cloudhub.ha.replicas import ReplicaLeases
from cloudhub.kube import LEASES, KubeClient, micro_time, parse_time
from cloudhub.kube.retry import retrying

__all__ = ["OWNER_ANNOTATION", "Claim", "NodeOwnership", "owner_of"]

log = logging.getLogger(__name__)

OWNER_ANNOTATION = "edgefleet.io/hub-replica"
"""Annotation on a node's Lease: the identity of the hub replica that serves the node."""

_ATTEMPTS = 4  # reads and writes of one claim racing other writers of the Lease
_RELEASE_ATTEMPTS = 5  # a release's PATCH, backing off 1..10 s (full jitter) between


def owner_of(lease: dict | None) -> str:
    """The replica a node Lease names as owner, ``""`` for none."""
    annotations = ((lease or {}).get("metadata") or {}).get("annotations") or {}
    owner = annotations.get(OWNER_ANNOTATION)
    return owner if isinstance(owner, str) else ""


def _version(obj: dict) -> str:
    return (obj.get("metadata") or {}).get("resourceVersion") or ""


@dataclass(frozen=True, slots=True)
class Claim:
    """The answer to :meth:`NodeOwnership.claim`.

    Attributes:
        granted: this replica owns the node now and may serve it.
        owner: when refused, the replica that owns it (``""`` if none).
        retry_after: when refused, seconds the agent should wait (jittered).
        reason: when refused, why, in words (the close reason the agent logs).
    """

    granted: bool
    owner: str = ""
    retry_after: float = 0.0
    reason: str = ""


class NodeOwnership:
    """Claims, renews (fenced) and releases node Leases for this replica.

    Args:
        client: the API client.
        replicas: this replica's Lease and its view of the others.
        lease_namespace: namespace of the node Leases (``kube-node-lease``).
        lease_duration: ``leaseDurationSeconds`` written in node Leases.
        clock: wall clock, seconds since the epoch (``renewTime``).
        jitter: ``() -> [0, 1)``, the full jitter of refusals' ``retry_after``.
    """

    def __init__(
        self,
        client: KubeClient,
        replicas: ReplicaLeases,
        *,
        lease_namespace: str,
        lease_duration: int,
        clock: Callable[[], float] = time.time,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        self.client = client
        self.replicas = replicas
        self.identity = replicas.identity
        self.lease_namespace = lease_namespace
        self.lease_duration = lease_duration
        self._clock = clock
        self._jitter = jitter
        self._held: dict[str, str] = {}  # node -> the Lease's resourceVersion we wrote
        self._claiming: dict[str, int] = {}  # node -> claims of it in flight here
        self._unanswered: set[str] = set()  # a claim's write failed: it may have landed
        self.on_lost: list[Callable[[str, str], None]] = []
        """``hook(node, reason)``: this replica no longer owns ``node`` (taken over, or its
        Lease edited by hand): close its session now."""
        replicas.on_fenced.append(self._fenced)

    def __len__(self) -> int:
        return len(self._held)

    def holds(self, node: str) -> bool:
        """Whether this replica may write for ``node`` now: it owns the node's Lease and
        its own replica Lease is valid."""
        return node in self._held and self.replicas.valid()

    async def owner(self, node: str) -> str:
        """The *other* live replica that serves ``node`` now, from its Lease (one read);
        ``""`` when this replica holds it, nobody does, or the named owner is dead.

        Raises:
            KubeAPIError: the read failed.
        """
        if node in self._held:
            return ""
        try:
            lease = await self.client.get(LEASES, node, self.lease_namespace)
        except KubeNotFound:
            return ""
        owner = owner_of(lease)
        if not owner or owner == self.identity or not self.replicas.alive(owner):
            return ""
        return owner

    def _spec(self, node: str) -> dict:
        return {
            "holderIdentity": node,
            "leaseDurationSeconds": self.lease_duration,
            "renewTime": micro_time(self._clock()),
        }

    def _refusal(self, owner: str, wait: float, reason: str) -> Claim:
        # Full jitter over one renewal interval on top of the owner's remaining validity:
        # a thousand nodes refused at once come back spread, not together.
        spread = self.replicas.settings.replica_renew_interval
        return Claim(False, owner, wait + self._jitter() * spread, reason)

    async def claim(self, node: str) -> Claim:
        """Become the owner of ``node`` if the rules allow (module docstring); the write is
        also the node's Lease renewal.

        Returns:
            The claim; refused ones carry the owner and a ``retry_after`` for the agent.

        Raises:
            KubeAPIError: the API failed (the caller refuses the session as overloaded).
        """
        self._claiming[node] = self._claiming.get(node, 0) + 1
        try:
            return await self._claim(node)
        finally:
            left = self._claiming.pop(node) - 1
            if left:
                self._claiming[node] = left

    async def _claim(self, node: str) -> Claim:
        if not self.replicas.valid():
            # Spread over a whole replica Lease: by then another replica has taken the
            # node or this one renews again. One renew interval (2 s) brought a fenced
            # replica's 10,000 agents back as a dial storm that kept it starved, fenced.
            settings = self.replicas.settings
            return Claim(
                False,
                "",
                self._jitter() * settings.replica_lease_duration,
                "this hub replica cannot renew its own Lease: the API is unreachable",
            )
        for _ in range(_ATTEMPTS):
            try:
                lease = await self.client.get(LEASES, node, self.lease_namespace)
            except KubeNotFound:
                lease = None
            if lease is None:
                body = {
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {
                        "name": node,
                        "namespace": self.lease_namespace,
                        "annotations": {OWNER_ANNOTATION: self.identity},
                    },
                    "spec": {**self._spec(node), "acquireTime": micro_time(self._clock())},
                }
                try:
                    created = await self._claim_write(
                        node, self.client.create(LEASES, body, self.lease_namespace)
                    )
                except KubeConflict:
                    continue  # another replica created it: decide again on what it wrote
                self._held[node] = _version(created)
                return Claim(True)
            owner = owner_of(lease)
            renewed = parse_time((lease.get("spec") or {}).get("renewTime"))
            if (
                owner
                and owner != self.identity
                and not self.replicas.started_after(owner, renewed)
                and await self.replicas.confirm_alive(owner)
            ):
                return self._refusal(
                    owner,
                    self.replicas.seconds_left(owner),
                    f"node {node} is served by hub replica {owner} (a second agent with this "
                    "node's certificate, or a connection there not yet seen to end)",
                )
            patch = {
                "metadata": {
                    "resourceVersion": _version(lease),
                    "annotations": {OWNER_ANNOTATION: self.identity},
                },
                "spec": self._spec(node),
            }
            try:
                updated = await self._claim_write(
                    node, self.client.patch(LEASES, node, patch, self.lease_namespace)
                )
            except (KubeConflict, KubeNotFound):
                continue  # written or deleted meanwhile: decide again
            if owner and owner != self.identity:
                log.warning(
                    "took node %s over from hub replica %s (its replica Lease expired or "
                    "was released, or it restarted since)",
                    node,
                    owner,
                    extra={"node": node},
                )
            self._held[node] = _version(updated)
            return Claim(True)
        return self._refusal("", 0.0, f"node {node}'s Lease kept changing during the claim")

    async def renew(self, node: str, node_uid: str = "") -> bool:
        """Renew a held node's Lease, fenced by the version this replica last wrote.

        Args:
            node: the node.
            node_uid: the Node's uid, to make the Node the Lease's owner (deleting the
                Node deletes the Lease, as kubelet's), or ``""`` when not known yet.

        Returns:
            ``True`` if renewed; ``False`` if this replica does not own the node (never
            did, released it, or just lost it: ``on_lost`` has run).

        Raises:
            KubeAPIError: the API failed (retry later; the fencing is unchanged).
        """
        version = self._held.get(node)
        if version is None or not self.replicas.valid():
            return False
        metadata: dict = {
            "resourceVersion": version,
            "annotations": {OWNER_ANNOTATION: self.identity},
        }
        if node_uid:
            metadata["ownerReferences"] = [
                {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid}
            ]
        for _ in range(2):
            try:
                updated = await self.client.patch(
                    LEASES,
                    node,
                    {"metadata": metadata, "spec": self._spec(node)},
                    self.lease_namespace,
                )
            except KubeConflict:
                try:
                    current = await self.client.get(LEASES, node, self.lease_namespace)
                except KubeNotFound:
                    current = None
                owner = owner_of(current)
                if current is not None and owner == self.identity and node in self._held:
                    metadata["resourceVersion"] = _version(current)  # edited, still ours
                    continue
                self._lose(node, current, owner)
                return False
            except KubeNotFound:
                self._lose(node, None, "")
                return False
            if node not in self._held:  # released or lost while the write was in flight
                return False
            self._held[node] = _version(updated)
            return True
        return False

    def _lose(self, node: str, lease: dict | None, owner: str) -> None:
        if self._held.pop(node, None) is None:
            return
        where = f"{self.lease_namespace}/{node}"
        if lease is None:
            reason = f"its Lease {where} was deleted (by hand?)"
        elif owner:
            reason = f"its Lease {where} names hub replica {owner} now (taken over, or edited)"
        else:
            reason = f"its Lease {where} names no hub replica now (edited by hand?)"
        log.error(
            "stopping serving node %s: %s; its agent reconnects to whichever replica may serve it",
            node,
            reason,
            extra={"node": node},
        )
        for hook in self.on_lost:
            try:
                hook(node, f"this hub replica no longer owns the node: {reason}")
            except Exception:
                log.exception("on_lost hook failed", extra={"node": node})

    def release(self, node: str) -> Coroutine[Any, Any, None] | None:
        """Give up ``node`` (its session ended): from this call on the replica no longer
        holds it; the returned coroutine (``None`` if it was not held) clears the owner
        annotation, fenced by this replica's last write, so that another replica may claim
        the node at once. Run it as a task: on a conflict it re-reads the Lease and clears
        it at the new version while the annotation still names this replica (a renewal
        landed meanwhile), and leaves it alone once another replica's claim or a claim here
        again wrote since; API errors are retried with back-off, then logged (the node
        then moves once this replica's own Lease expires)."""
        version = self._held.pop(node, None)
        if version is None:
            return None
        return self._clear(node, version)

    async def _claim_write(self, node: str, write: Coroutine[Any, Any, dict]) -> dict:
        try:
            return await write
        except (KubeConflict, KubeNotFound):
            raise
        except KubeAPIError:
            self._unanswered.add(node)
            raise

    def disown(self, node: str) -> Coroutine[Any, Any, None] | None:
        """After a claim of ``node`` failed with an API error: if the error came from its
        write (not its read), the write may have landed with its answer lost (no answer
        within the request timeout), leaving the Lease naming this replica, which does
        not serve the node (every other replica would turn its agent away). The returned
        coroutine (``None`` when no write failed) reads the Lease and clears the
        annotation if it names this replica while the node is neither held nor being
        claimed here, as :meth:`release` does; run it as a task."""
        if node not in self._unanswered:
            return None
        self._unanswered.discard(node)
        return self._clear(node, None)

    def _mine(self, node: str) -> bool:
        """Held here, or a claim of it is in flight here: its write is the newer one."""
        return node in self._held or node in self._claiming

    async def _clear(self, node: str, version: str | None) -> None:
        async def attempt() -> None:
            nonlocal version
            for _ in range(_ATTEMPTS):
                if self._mine(node):  # claimed here again since: that claim is the newer write
                    return
                if version is None:
                    current = await self.client.get(LEASES, node, self.lease_namespace)
                    if owner_of(current) != self.identity or self._mine(node):
                        return
                    version = _version(current)
                patch = {
                    "metadata": {
                        "resourceVersion": version,
                        "annotations": {OWNER_ANNOTATION: None},
                    }
                }
                try:
                    await self.client.patch(LEASES, node, patch, self.lease_namespace)
                    return
                except KubeConflict:
                    # Written since: a renewal in flight when the session ended, or the
                    # PATCH of an earlier attempt that landed unanswered. While the
                    # annotation still names this replica and no claim of the node is in
                    # flight here, no claim wrote it since (a claim writes its own name):
                    # clear it at the version read; otherwise leave the claim alone.
                    version = None

        try:
            # Retried (5xx, 429, no answer): a release lost leaves the node held here with
            # no session, its agent turned away by every other replica until this
            # replica's own Lease expires.
            await retrying(
                attempt,
                attempts=_RELEASE_ATTEMPTS,
                base=1.0,
                cap=10.0,
                what=f"releasing node {node}'s Lease",
            )
        except KubeNotFound:
            return
        except KubeAPIError as exc:
            log.warning(
                "could not release node %s's Lease after %d attempts (it moves to another "
                "replica once this one's own Lease expires): %s",
                node,
                _RELEASE_ATTEMPTS,
                exc,
                extra={"node": node},
            )

    def drop_all(self) -> None:
        """Hold no node any more, with no write (the replica is stopping and deletes its
        own Lease instead, which releases every node at once)."""
        self._held.clear()

    def _fenced(self, reason: str) -> None:
        nodes = list(self._held)
        self._held.clear()
        for node in nodes:
            for hook in self.on_lost:
                try:
                    hook(node, reason)
                except Exception:
                    log.exception("on_lost hook failed", extra={"node": node})
