"""Certificate records and revocation.

Every node certificate the hub issues is recorded, before it is handed out, in a
ConfigMap of the hub's namespace, ``node-cert.<node name>`` (label
``edgefleet.io/certificate-record``), whose ``data.certificates`` is a JSON list of
``{serial, notAfter, issuedAt, keyPin, via, revokedAt, revokedWhy}`` (serial in hex,
times in seconds since the epoch). Entries are dropped a day after the certificate expires.

Revoking a node (its Node was deleted, or ``cloudhub node revoke``) marks every
unexpired certificate of the node revoked in its record and labels the record
``edgefleet.io/revoked=true``. Each hub replica watches the records so labelled and keeps
the revoked serial numbers in memory: :meth:`CertificateRegistry.check` on every session
accept is one dictionary lookup, and listeners are called so that the replica holding the
node's session closes it. The state of record is the API, so replicas agree, and a
restarted replica knows every revocation before it accepts a session.

Serial numbers, not node names, are revoked: the certificate a node gets from a later
join (new token) is a new serial and is accepted, while the old certificates stay refused
until they expire (unlike refusing the node name, which a re-join would have to lift for
every old certificate too).

Renewal and revocation of one node are serialised by the record's resourceVersion: a
renewal records its new certificate only if the certificate it renews is not revoked, and
a revocation revokes every certificate recorded so far, so a renewal racing with a
revocation can never leave the node with a valid certificate.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from cloudhub.errors import KubeAPIError, KubeConflict, KubeNotFound
from cloudhub.kube import CONFIGMAPS, NODES, Informer, KubeClient, retrying
from cloudhub.pki.errors import CertificateRevoked
from protocol import pki

__all__ = [
    "RECORD_LABEL",
    "REVOKED_LABEL",
    "CertificateRegistry",
    "IssuedCertificate",
    "RevocationListener",
    "key_pin",
    "record_name",
]

log = logging.getLogger(__name__)

RECORD_LABEL = "edgefleet.io/certificate-record"
"""Label (``"true"``) on every certificate record ConfigMap."""
REVOKED_LABEL = "edgefleet.io/revoked"
"""Label (``"true"``) on records holding at least one revoked, unexpired certificate."""

_KEEP_EXPIRED = 86400.0
"""Seconds an expired certificate stays in its record (for ``kubectl describe``)."""

#: ``listener(node_name, serials)``: these serials of this node were just revoked.
RevocationListener = Callable[[str, frozenset[int]], None]


def key_pin(public_key) -> str:
    """``sha256:<hex>`` of a public key's DER SubjectPublicKeyInfo (the same shape as
    the CA pin)."""
    der = public_key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return "sha256:" + hashlib.sha256(der).hexdigest()


def record_name(node_name: str) -> str:
    """The record ConfigMap's name for a node (hashed when the name is too long)."""
    name = f"node-cert.{node_name}"
    if len(name) <= 253:
        return name
    return "node-cert." + hashlib.sha256(node_name.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class IssuedCertificate:
    """One entry of a node's certificate record."""

    serial: int
    not_after: float
    """Seconds since the epoch."""
    issued_at: float
    key_pin: str
    """``sha256:<hex>`` of the certified public key."""
    via: str
    """``"join"`` or ``"renewal"``."""
    revoked_at: float | None = None
    revoked_why: str = ""

    def valid(self, now: float) -> bool:
        """Unexpired and not revoked."""
        return self.revoked_at is None and now < self.not_after

    def to_json(self) -> dict:
        out: dict = {
            "serial": f"{self.serial:x}",
            "notAfter": self.not_after,
            "issuedAt": self.issued_at,
            "keyPin": self.key_pin,
            "via": self.via,
        }
        if self.revoked_at is not None:
            out["revokedAt"] = self.revoked_at
            out["revokedWhy"] = self.revoked_why
        return out

    @classmethod
    def from_json(cls, data: dict) -> IssuedCertificate:
        return cls(
            serial=int(data["serial"], 16),
            not_after=float(data["notAfter"]),
            issued_at=float(data.get("issuedAt", 0.0)),
            key_pin=str(data.get("keyPin", "")),
            via=str(data.get("via", "")),
            revoked_at=float(data["revokedAt"]) if data.get("revokedAt") is not None else None,
            revoked_why=str(data.get("revokedWhy", "")),
        )


def _entries(record: dict | None) -> list[IssuedCertificate]:
    if not record:
        return []
    raw = (record.get("data") or {}).get("certificates") or "[]"
    try:
        return [IssuedCertificate.from_json(e) for e in json.loads(raw)]
    except (ValueError, KeyError, TypeError) as exc:
        name = (record.get("metadata") or {}).get("name")
        log.error("certificate record %s is unreadable (%s); treating it as empty", name, exc)
        return []


def _node_of(record: dict) -> str:
    return (record.get("data") or {}).get("node", "")


class CertificateRegistry:
    """Records issued node certificates, revokes them, and answers "is this revoked?".

    Args:
        client: the hub's API client.
        namespace: the hub's namespace (where records live).
        clock: the wall clock, seconds since the epoch (``time.time``; a test passes one it
            can move, so expiry is reached without waiting for it).
    """

    def __init__(
        self, client: KubeClient, namespace: str, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.client = client
        self._clock = clock
        self.namespace = namespace
        self._revoked: dict[int, tuple[str, float, str]] = {}
        self._revoked_by_node: dict[str, frozenset[int]] = {}
        self._listeners: list[RevocationListener] = []
        self._informer: Informer | None = None
        self._node_informer: Informer | None = None
        self._tasks: set[asyncio.Task] = set()
        self._runner: asyncio.Task | None = None

    # -- lifecycle -----------------------------------------------------------------------

    async def start(
        self,
        node_informer: Informer | None = None,
        *,
        watch_nodes: bool = True,
        sync_timeout: float = 30.0,
    ) -> None:
        """Load every revocation, then follow revocations (and Node deletions).

        Args:
            node_informer: a shared Node informer to take deletions from (if it is
                filtered by a selector, a Node leaving it looks deleted: each deletion is
                checked against the API before anything is revoked).
            watch_nodes: with no ``node_informer``, watch Nodes here; ``False`` when the
                caller reports deletions with :meth:`node_deleted` instead.
            sync_timeout: seconds to wait for the first lists.

        Raises:
            TimeoutError: the revocations could not be listed in time (the hub must not
                accept sessions before it knows them).
        """
        self._informer = Informer(
            self.client,
            CONFIGMAPS,
            namespace=self.namespace,
            label_selector=f"{RECORD_LABEL}=true,{REVOKED_LABEL}=true",
        )
        self._informer.add_handler(self._on_record)
        informers = [self._informer]
        if node_informer is None and watch_nodes:
            node_informer = Informer(self.client, NODES)
            informers.append(node_informer)
        waits = [self._informer.synced.wait()]
        if node_informer is not None:
            node_informer.add_handler(self._on_node)
            waits.append(node_informer.synced.wait())
        self._runner = asyncio.create_task(
            _run_all(informers), name="cloudhub.pki.certificate-registry"
        )
        try:
            await asyncio.wait_for(asyncio.gather(*waits), sync_timeout)
        except BaseException:
            await self.close()
            raise
        self._spawn(self._revoke_orphans(), "revoke certificates of deleted Nodes")

    async def close(self) -> None:
        """Stop watching; cancel revocations in flight."""
        tasks = list(self._tasks)
        if self._runner is not None:
            tasks.append(self._runner)
            self._runner = None
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()

    def _spawn(self, coro, what: str) -> None:
        task = asyncio.create_task(coro, name=f"cloudhub.pki: {what}")
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("%s failed: %s", task.get_name(), task.exception())

    # -- the fast check ------------------------------------------------------------------

    def add_listener(self, listener: RevocationListener) -> None:
        """Call ``listener(node_name, serials)`` whenever certificates are revoked (from
        this replica or another); the session server closes matching sessions."""
        self._listeners.append(listener)

    def is_revoked(self, certificate: x509.Certificate) -> bool:
        """True if this certificate was revoked (one dictionary lookup)."""
        return certificate.serial_number in self._revoked

    def check(self, certificate: x509.Certificate) -> None:
        """Refuse a revoked certificate (call on every session accept).

        Raises:
            CertificateRevoked: it was revoked.
        """
        hit = self._revoked.get(certificate.serial_number)
        if hit is not None:
            node, at, why = hit
            raise CertificateRevoked(node, certificate.serial_number, at, why)

    def _apply(self, node: str, entries: Iterable[IssuedCertificate]) -> None:
        now = self._clock()
        revoked = {e.serial: e for e in entries if e.revoked_at is not None and now < e.not_after}
        before = self._revoked_by_node.get(node, frozenset())
        for serial in before - revoked.keys():
            self._revoked.pop(serial, None)
        for serial, e in revoked.items():
            self._revoked[serial] = (node, e.revoked_at or now, e.revoked_why)
        after = frozenset(revoked)
        if after:
            self._revoked_by_node[node] = after
        else:
            self._revoked_by_node.pop(node, None)
        fresh = after - before
        if fresh:
            for listener in self._listeners:
                try:
                    listener(node, fresh)
                except Exception:
                    log.exception("revocation listener failed for node %s", node)

    def _on_record(self, kind: str, obj: dict, old: dict | None) -> None:
        node = _node_of(obj)
        if not node:
            return
        self._apply(node, [] if kind == "DELETED" else _entries(obj))

    def _on_node(self, kind: str, obj: dict, old: dict | None) -> None:
        if kind != "DELETED":
            return
        meta = obj.get("metadata") or {}
        if meta.get("name"):
            self.node_deleted(meta["name"], meta.get("uid", ""))

    def node_deleted(self, name: str, uid: str = "") -> None:
        """A Node was deleted: revoke its certificates (in the background, within
        milliseconds). Call it from the hub's Node-deletion hook.

        Args:
            name: the Node's name.
            uid: the deleted object's uid, if known. A Node that still exists with this
                uid (or, without a uid, exists and is not being deleted) only left a
                filtered informer's selector: nothing is revoked.
        """
        self._spawn(self._node_deleted(name, uid), f"revoke node {name}")

    async def _node_deleted(self, name: str, uid: str) -> None:
        try:
            current = await retrying(lambda: self.client.get(NODES, name), what="get Node")
        except KubeNotFound:
            current = None
        if current is not None:
            meta = current.get("metadata") or {}
            if (uid and meta.get("uid") == uid) or (not uid and not meta.get("deletionTimestamp")):
                return
        revoked = await self.revoke(name, "Node deleted")
        if revoked:
            log.warning("Node %s was deleted: revoked %d certificate(s)", name, len(revoked))

    async def _revoke_orphans(self) -> None:
        # Nodes deleted while no hub was running. Records are listed before Nodes: a
        # record is written after its Node is made (at join), so a record we see has
        # a Node in the later list unless that Node was really deleted.
        items, _ = await retrying(
            lambda: self.client.list(
                CONFIGMAPS, self.namespace, label_selector=f"{RECORD_LABEL}=true"
            ),
            what="list certificate records",
        )
        nodes, _ = await retrying(lambda: self.client.list(NODES), what="list Nodes")
        present = {(n.get("metadata") or {}).get("name") for n in nodes}
        now = self._clock()
        for record in items:
            node = _node_of(record)
            if node and node not in present and any(e.valid(now) for e in _entries(record)):
                await self.revoke(node, "Node deleted")
                log.warning("Node %s no longer exists: revoked its certificates", node)

    # -- records -------------------------------------------------------------------------

    async def certificates(self, node_name: str) -> list[IssuedCertificate]:
        """Every recorded certificate of a node (expired ones up to a day after expiry)."""
        try:
            record = await retrying(
                lambda: self.client.get(CONFIGMAPS, record_name(node_name), self.namespace),
                what="get certificate record",
            )
        except KubeNotFound:
            return []
        return _entries(record)

    async def record(
        self,
        node_name: str,
        certificate: x509.Certificate,
        *,
        via: str,
        renewing: x509.Certificate | None = None,
    ) -> None:
        """Record a certificate about to be handed to a node.

        Args:
            node_name: the node.
            certificate: the new certificate.
            via: ``"join"`` or ``"renewal"``.
            renewing: for a renewal, the certificate the node authenticated with; the
                renewal is refused if the node was revoked since that certificate was
                issued: it was revoked itself, or it expired while its session lived on
                and a certificate renewed from it was revoked (an expired certificate is
                not among the revoked, but its session must not get a new one).

        Raises:
            CertificateRevoked: the node was revoked since ``renewing`` was issued.
            KubeAPIError: the record could not be written (the certificate must then not
                be handed out).
        """
        entry = IssuedCertificate(
            serial=certificate.serial_number,
            not_after=certificate.not_valid_after_utc.timestamp(),
            issued_at=self._clock(),
            key_pin=key_pin(certificate.public_key()),
            via=via,
        )

        def mutate(entries: list[IssuedCertificate]) -> list[IssuedCertificate]:
            if renewing is not None:
                serial = renewing.serial_number
                since = next(
                    (e.issued_at for e in entries if e.serial == serial),
                    renewing.not_valid_before_utc.timestamp() + pki.CLOCK_SKEW,
                )
                for e in entries:
                    if e.revoked_at is not None and (e.serial == serial or e.revoked_at >= since):
                        raise CertificateRevoked(node_name, serial, e.revoked_at, e.revoked_why)
            return [*entries, entry]

        await self._update(node_name, mutate)

    async def revoke(self, node_name: str, why: str) -> list[int]:
        """Revoke every unexpired certificate of a node.

        The revocation takes effect on this replica at once and on the others as soon
        as their watch delivers the record (milliseconds).

        Returns:
            The serial numbers newly revoked (empty if none were valid).
        """
        now = self._clock()
        newly: list[int] = []

        def mutate(entries: list[IssuedCertificate]) -> list[IssuedCertificate] | None:
            newly.clear()
            out = []
            for e in entries:
                if e.valid(now):
                    newly.append(e.serial)
                    e = replace(e, revoked_at=now, revoked_why=why)
                out.append(e)
            return out if newly else None

        record = await self._update(node_name, mutate, create=False)
        if record is None:
            return []
        self._apply(node_name, _entries(record))
        return list(newly)

    async def _update(
        self,
        node_name: str,
        mutate: Callable[[list[IssuedCertificate]], list[IssuedCertificate] | None],
        *,
        create: bool = True,
    ) -> dict | None:
        name = record_name(node_name)
        for _ in range(16):
            try:
                current = await retrying(
                    lambda: self.client.get(CONFIGMAPS, name, self.namespace),
                    what="get certificate record",
                )
            except KubeNotFound:
                current = None
            if current is None and not create:
                return None
            entries = mutate(_entries(current))
            if entries is None:
                return None
            body = self._body(node_name, name, entries, current)
            try:
                if current is None:
                    return await retrying(
                        lambda b=body: self.client.create(CONFIGMAPS, b, self.namespace),
                        what="create certificate record",
                    )
                return await retrying(
                    lambda b=body: self.client.replace(CONFIGMAPS, b),
                    what="update certificate record",
                )
            except KubeConflict:
                continue  # someone else wrote it (or created it) first: read again
        raise KubeAPIError(409, "Conflict", f"certificate record {name}: too many write conflicts")

    def _body(
        self, node: str, name: str, entries: list[IssuedCertificate], current: dict | None
    ) -> dict:
        now = self._clock()
        kept = [e for e in entries if now < e.not_after + _KEEP_EXPIRED]
        revoked = any(e.revoked_at is not None and now < e.not_after for e in kept)
        labels = {RECORD_LABEL: "true", "app.kubernetes.io/managed-by": "cloudhub"}
        if revoked:
            labels[REVOKED_LABEL] = "true"
        metadata: dict = {"name": name, "namespace": self.namespace, "labels": labels}
        if current is not None:
            metadata["resourceVersion"] = (current.get("metadata") or {}).get("resourceVersion")
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": metadata,
            "data": {
                "node": node,
                "certificates": json.dumps([e.to_json() for e in kept], sort_keys=True),
            },
        }


async def _run_all(informers: list[Informer]) -> None:
    await asyncio.gather(*(i.run() for i in informers))
