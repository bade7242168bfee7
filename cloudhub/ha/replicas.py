"""Replica liveness: each hub replica holds a ``coordination.k8s.io`` Lease of its own.

A replica renews ``edgefleet-hub-<identity>`` in the hub's namespace every
``ha.replica_renew_interval`` seconds (2 s) with ``leaseDurationSeconds`` =
``ha.replica_lease_duration`` (6 s), and watches the other replicas' Leases (label
``edgefleet.io/hub-replica``). Three replicas cost 1.5 writes/s however many nodes they
serve: node ownership (:mod:`cloudhub.ha.ownership`) names a replica, and a replica's
death is decided once, on its own Lease, not once per node.

**Who is alive.** As client-go's leader election does, a replica judges another by when
*it* saw that replica's Lease change (its resourceVersion), on its own monotonic clock, not
by the ``renewTime`` written there: clocks of two machines need not agree, their rates do
(closely enough over seconds). A Lease not seen to change for ``leaseDurationSeconds`` is
dead; a deleted Lease (a replica that stopped in order) or one with an empty
``holderIdentity`` is dead at once. Leases present when this replica starts count as just
renewed, so a restart never takes a live replica's nodes. A replica that restarts under the
same identity (a pod's container restarted) writes a new ``acquireTime``: a node Lease it
last renewed before that is not served by it any more (:meth:`ReplicaLeases.started_after`).

**Fencing.** A replica counts its own Lease as valid until the *start* of its last
successful renewal plus ``leaseDurationSeconds`` minus half a renewal interval. Any other
replica saw that renewal after it started, so it cannot see the Lease expire before this
replica has stopped: when renewals fail (the API is cut off), the replica's
:attr:`ReplicaLeases.on_fenced` hooks run at that instant (the hub closes every session and
stops writing for every node), and the others take the nodes over afterwards.

**Renewals apart from serving.** Given a :class:`~cloudhub.ha.keeper.LoopThread`, the
renewals run on that thread's loop with a client of their own, so that a serving loop
that is merely late (a reconnect storm on a loaded machine) does not fence the replica
(:mod:`cloudhub.ha.keeper`). Each renewal first posts a probe to the serving loop; when
the serving loop has not run a probe for ``ha.loop_stall_max`` seconds, it is hung, not
late, and the renewals stop (logged) until it runs again: the Lease then expires and the
others take the nodes over, as from a replica cut off from the API.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import re
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any

from cloudhub.errors import KubeAPIError, KubeConflict, KubeNotFound
from cloudhub.ha.keeper import LoopThread
from cloudhub.ha.settings import HASettings
from cloudhub.kube import LEASES, KubeClient, micro_time, parse_time

__all__ = ["PEER_ADDRESS_ANNOTATION", "REPLICA_LABEL", "ReplicaLeases", "replica_lease_name"]

log = logging.getLogger(__name__)

REPLICA_LABEL = "edgefleet.io/hub-replica"
"""Label on every replica Lease (value ``"true"``): what replicas watch."""

PEER_ADDRESS_ANNOTATION = "edgefleet.io/peer-address"
"""Annotation on a replica Lease: ``host:port`` where the other replicas reach this one over
mutual TLS (stream relay, :mod:`cloudhub.kubelet.relay`); absent when it has none."""

_NOT_NAME = re.compile(r"[^a-z0-9-]+")
_LEASE_PREFIX = "edgefleet-hub-"
_NAME_MAX = 63  # a DNS-1123 label: Lease names are subdomains, kept to one label here
_SUFFIX_HEX = 8  # characters of the SHA-256 suffix (32 bits: collisions need ~65,000 names)


def replica_lease_name(identity: str) -> str:
    """The name of a replica's own Lease: ``edgefleet-hub-<identity>``, a lowercase
    DNS-1123 label of at most 63 characters.

    An identity that is already a lowercase DNS-1123 label fitting the 63 characters is
    used as it is (a pod name is). Otherwise it is lowercased, every run of characters a
    label cannot hold becomes ``-``, it is cut to fit, and ``-`` plus the first 8 hex
    digits of the SHA-256 of the *original* identity are appended, so that two identities
    that clean to the same text (``Hub_0`` and ``hub.0``) still get two Leases.

    Raises:
        ValueError: the identity has no letter or digit.
    """
    cleaned = _NOT_NAME.sub("-", identity.lower()).strip("-")
    if not cleaned:
        raise ValueError(f"replica identity {identity!r} has no letter or digit")
    name = _LEASE_PREFIX + cleaned
    if cleaned == identity and len(name) <= _NAME_MAX:
        return name
    digest = hashlib.sha256(identity.encode("utf-8", "surrogatepass")).hexdigest()
    room = _NAME_MAX - len(_LEASE_PREFIX) - 1 - _SUFFIX_HEX
    return f"{_LEASE_PREFIX}{cleaned[:room].rstrip('-')}-{digest[:_SUFFIX_HEX]}"


class _Seen:
    __slots__ = ("acquired", "at", "duration", "version")

    def __init__(self, version: str, at: float, duration: float, acquired: float | None) -> None:
        self.version = version
        self.at = at
        self.duration = duration
        self.acquired = acquired


class ReplicaLeases:
    """This replica's Lease (renewed) and the other replicas' (observed).

    Args:
        client: the API client.
        settings: the ``ha`` settings.
        identity: this replica's name (``holderIdentity`` of its Lease, the value node
            Leases' owner annotation names).
        clock: wall clock, seconds since the epoch (``renewTime``).
        monotonic: seconds on a clock that never jumps (liveness and fencing).
        address: ``host:port`` published as :data:`PEER_ADDRESS_ANNOTATION` (``""``: none).
        thread: where the renewals run (``client`` must belong to its loop), or ``None``:
            on the caller's loop, with ``client``.
        reader: the client of the caller's loop for this replica's reads
            (:meth:`confirm_alive`); default ``client`` (required with ``thread``).
    """

    def __init__(
        self,
        client: KubeClient,
        settings: HASettings,
        identity: str,
        *,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        address: str = "",
        thread: LoopThread | None = None,
        reader: KubeClient | None = None,
    ) -> None:
        if thread is not None and reader is None:
            raise ValueError("a renewal thread needs a reader client of the serving loop")
        self.client = client
        self.reader = reader if reader is not None else client
        self._thread = thread
        self._serving: asyncio.AbstractEventLoop | None = None  # the caller's loop
        self._lock = threading.Lock()  # _valid_until and _released, across the two loops
        self._probed_at = float("-inf")  # the serving loop last ran a probe (monotonic)
        self.address = address
        self._addresses: dict[str, str] = {}
        self.settings = settings
        self.identity = identity
        self.lease_name = replica_lease_name(identity)
        self._clock = clock
        self._monotonic = monotonic
        self._valid_until = float("-inf")
        self._expiry: asyncio.TimerHandle | None = None
        self._fenced = False  # the Lease ran out (logged); the next renewal says it is back
        self._seen: dict[str, _Seen] = {}
        self._released = False
        self._writes: asyncio.Lock | None = None  # one write of this Lease at a time
        self.on_dead: list[Callable[[str], None]] = []
        """``hook(identity)``: another replica's Lease was deleted or given up (an orderly
        stop): it serves nothing any more. (A Lease that expires raises no event: see
        :meth:`seconds_left`.)"""
        self.on_fenced: list[Callable[[str], None]] = []
        """``hook(reason)``: this replica's Lease ran out before it could renew it; stop
        serving and writing for every node now."""

    # -- this replica ----------------------------------------------------------------------

    def valid(self) -> bool:
        """Whether this replica may serve and write for its nodes now (its own Lease is
        renewed, by the fencing rule of the module docstring)."""
        return self._monotonic() < self._valid_until

    async def _there(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """Run ``coro`` where the renewals run (the thread's loop, or here)."""
        if self._serving is None:
            self._serving = asyncio.get_running_loop()
            self._probed_at = self._monotonic()
        if self._thread is None:
            return await coro
        return await self._thread.call(coro)

    async def start(self) -> None:
        """Create or renew this replica's Lease once, before the hub serves, with a new
        ``acquireTime``: this process is a new incarnation, holding no node yet, so node
        Leases that name this identity but were last renewed before it are free.

        Raises:
            KubeAPIError: the API refused or failed.
        """
        await self._there(self._renew(acquire=True))

    async def run(self) -> None:
        """Renew every ``replica_renew_interval`` seconds until cancelled (the interval is
        the pace of the renewals, not a wait for a condition)."""
        await self._there(self._renewals())

    def _probed(self) -> None:
        self._probed_at = self._monotonic()

    def _stalled(self) -> float:
        """Seconds the serving loop has not run a probe for, when that is longer than
        ``ha.loop_stall_max`` (it is hung, not late), else 0; posts the next probe."""
        if self._thread is None or self._serving is None:
            return 0.0
        with contextlib.suppress(RuntimeError):  # the serving loop closed: the hub stops
            self._serving.call_soon_threadsafe(self._probed)
        stalled = self._monotonic() - self._probed_at
        return stalled if stalled > self.settings.loop_stall_max else 0.0

    async def _renewals(self) -> None:
        s = self.settings
        while not self._released:
            await asyncio.sleep(s.replica_renew_interval)
            if self._released:
                return
            stalled = self._stalled()
            if stalled:
                log.error(
                    "the hub's event loop has not run for %.1f s (ha.loop_stall_max %.1f s): "
                    "not renewing this replica's Lease %s/%s, so that the other replicas "
                    "take its nodes over",
                    stalled,
                    s.loop_stall_max,
                    s.namespace,
                    self.lease_name,
                )
                continue
            try:
                await self._renew()
            except KubeAPIError as exc:
                left = self._valid_until - self._monotonic()
                log.warning(
                    "cannot renew this replica's Lease %s/%s (%s); %s",
                    s.namespace,
                    self.lease_name,
                    exc,
                    f"still valid for {left:.1f} s" if left > 0 else "fenced",
                )

    def _one_write(self) -> asyncio.Lock:
        """The lock that orders this replica's writes of its own Lease (made on the loop
        that writes it: the renewal thread's, or the serving loop without one): a renewal
        in flight when :meth:`release` runs ends before the DELETE is sent, so that its
        404 cannot make it create the Lease again after the DELETE."""
        if self._writes is None:
            self._writes = asyncio.Lock()
        return self._writes

    async def _renew(self, *, acquire: bool = False) -> None:
        async with self._one_write():
            if not self._released:
                await self._write(acquire=acquire)

    async def _write(self, *, acquire: bool) -> None:
        s = self.settings
        started = self._monotonic()
        now = self._clock()
        spec = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": s.replica_lease_duration,
            "renewTime": micro_time(now),
        }
        patch: dict = {"spec": spec}
        if acquire:
            spec["acquireTime"] = micro_time(now)
            # a new incarnation may listen elsewhere (a new pod IP): publish, or clear
            patch["metadata"] = {"annotations": {PEER_ADDRESS_ANNOTATION: self.address or None}}
        try:
            await self.client.patch(LEASES, self.lease_name, patch, s.namespace)
        except KubeNotFound:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {
                    "name": self.lease_name,
                    "namespace": s.namespace,
                    "labels": {REPLICA_LABEL: "true"},
                    **(
                        {"annotations": {PEER_ADDRESS_ANNOTATION: self.address}}
                        if self.address
                        else {}
                    ),
                },
                "spec": {"acquireTime": micro_time(now), **spec},
            }
            try:
                await self.client.create(LEASES, body, s.namespace)
            except KubeConflict:  # created meanwhile (an earlier attempt's lost answer)
                await self.client.patch(LEASES, self.lease_name, patch, s.namespace)
            log.info("replica Lease %s/%s created", s.namespace, self.lease_name)
        with self._lock:
            if self._released:
                return
            self._valid_until = started + s.replica_lease_duration - s.replica_renew_interval / 2
        if self._thread is None or self._serving is None:
            self._renewed()
        else:
            with contextlib.suppress(RuntimeError):  # the serving loop closed: the hub stops
                self._serving.call_soon_threadsafe(self._renewed)

    def _renewed(self) -> None:
        """On the serving loop, after a renewal: say so if it ends a fencing, re-arm."""
        if self._released:
            return
        if self._fenced and self.valid():
            self._fenced = False
            log.warning("this replica's Lease is renewed again: serving nodes again")
        self._arm_expiry()

    def _arm_expiry(self) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
        loop = asyncio.get_running_loop()
        delay = max(0.0, self._valid_until - self._monotonic())
        self._expiry = loop.call_later(delay, self._expired)

    def _expired(self) -> None:
        self._expiry = None
        if self._released or self.valid():
            return
        s = self.settings
        self._fenced = True
        reason = (
            f"this hub replica could not renew its Lease {s.namespace}/{self.lease_name} for "
            f"{s.replica_lease_duration - s.replica_renew_interval / 2:.1f} s (API unreachable?); "
            "other replicas take its nodes over"
        )
        log.error("fenced: %s", reason)
        for hook in self.on_fenced:
            try:
                hook(reason)
            except Exception:
                log.exception("on_fenced hook failed")

    async def release(self) -> None:
        """Stop renewing, stop counting this replica valid, and delete its Lease, so that
        the others take its nodes over at once (a rolling update's handover: one write for
        every node the replica held). Idempotent; API errors are logged, not raised (the
        Lease then expires by itself)."""
        with self._lock:
            self._released = True
            self._valid_until = float("-inf")
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
        s = self.settings

        async def delete() -> None:
            async with self._one_write():
                await self.client.delete(LEASES, self.lease_name, s.namespace)

        try:
            await self._there(delete())
        except KubeNotFound:
            pass
        except KubeAPIError as exc:
            log.warning("could not delete this replica's Lease (%s): it expires by itself", exc)
            return
        log.info("released this replica's Lease %s/%s", s.namespace, self.lease_name)

    def close(self) -> None:
        """Cancel the expiry timer (the hub is closing)."""
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None

    # -- the others ------------------------------------------------------------------------

    def observe(self, event: str, lease: dict, old: dict | None = None) -> None:
        """Informer handler for the replica Leases (``ADDED``/``MODIFIED``/``DELETED``)."""
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        previous = (old or {}).get("spec") or {}
        if previous.get("holderIdentity") and previous.get("holderIdentity") != holder:
            self._forget(previous["holderIdentity"])
        if not holder or holder == self.identity:
            return
        if event == "DELETED":
            self._forget(holder)
            return
        annotations = (lease.get("metadata") or {}).get("annotations") or {}
        address = annotations.get(PEER_ADDRESS_ANNOTATION)
        if isinstance(address, str) and address:
            self._addresses[holder] = address
        else:
            self._addresses.pop(holder, None)
        version = (lease.get("metadata") or {}).get("resourceVersion") or ""
        duration = float(spec.get("leaseDurationSeconds") or self.settings.replica_lease_duration)
        seen = self._seen.get(holder)
        if seen is None or seen.version != version:
            acquired = parse_time(spec.get("acquireTime"))
            self._seen[holder] = _Seen(version, self._monotonic(), duration, acquired)

    def _forget(self, identity: str) -> None:
        self._seen.pop(identity, None)
        self._addresses.pop(identity, None)
        if identity == self.identity:
            return
        for hook in self.on_dead:
            try:
                hook(identity)
            except Exception:
                log.exception("on_dead hook failed")

    def seconds_left(self, identity: str) -> float:
        """Seconds until replica ``identity`` counts as dead here (0 when it already does;
        this replica's own remaining validity for its own identity)."""
        if identity == self.identity:
            return max(0.0, self._valid_until - self._monotonic())
        seen = self._seen.get(identity)
        if seen is None:
            return 0.0
        return max(0.0, seen.at + seen.duration - self._monotonic())

    def started_after(self, identity: str, renewed: float | None) -> bool:
        """Whether replica ``identity``'s current incarnation started (its Lease's
        ``acquireTime``) after ``renewed`` (a node Lease's ``renewTime``, epoch seconds),
        so that it cannot be the one serving that node: both times come from that
        replica's own clock."""
        seen = self._seen.get(identity)
        if seen is None or seen.acquired is None or renewed is None:
            return False
        return seen.acquired > renewed

    def peer_address(self, identity: str) -> str:
        """``host:port`` that live replica ``identity`` published for its peers, ``""`` when
        it published none or counts as dead here."""
        if not self.alive(identity):
            return ""
        return self._addresses.get(identity, "")

    def alive(self, identity: str) -> bool:
        """Whether replica ``identity`` counts as alive (see the module docstring)."""
        return self.seconds_left(identity) > 0

    async def confirm_alive(self, identity: str) -> bool:
        """:meth:`alive`, checked against the API when the watch says alive: a replica that
        has just released its Lease (a rolling update) is dead before its deletion reaches
        this replica's watch. One read, only when a node another replica owns connects.

        Raises:
            KubeAPIError: the read failed.
        """
        if not self.alive(identity):
            return False
        name = replica_lease_name(identity)
        try:
            lease = await self.reader.get(LEASES, name, self.settings.namespace)
        except KubeNotFound:
            self._seen.pop(identity, None)
            return False
        holder = (lease.get("spec") or {}).get("holderIdentity") or ""
        if holder != identity:
            self._seen.pop(identity, None)
            return False
        return True
