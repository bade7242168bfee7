"""The agent's local store: SQLite in WAL mode through sqlite-utils.

What lives here:

- **objects** received from the hub (Pods, ConfigMaps, Secrets, later devices), each with
  its uid and resourceVersion; :meth:`Store.inventory` is what the hello carries.
- **pod_status**: the last status the agent computed per pod (restart counts survive an
  agent restart or a reboot).
- **outbox**: up-going messages (``pod_status``, ``pod_deleted``, ``event``,
  ``twin_reported``, ``metrics_batch``), kept until the hub acknowledges them. A message is
  appended unsent (``id`` gives the order); the uplink hands unsent messages to the
  session, whose ``send()`` numbers them, and records that seq (``outbox_mark_sent``);
  ``ack(up_to)`` (cumulative) removes every message with a seq up to it. At the next
  ``Session.connect`` the sent-but-unacknowledged ones are the ``pending`` resent with their
  seqs. A message with a coalescing key replaces an *unsent* one with the same key (latest
  wins, as the protocol says); one already sent stays until acknowledged.
- **sequence numbers**: the wire seqs are persistent and ever-increasing across restarts:
  ``next_seq()`` (for ``Session(next_seq=…)``) is above every seq that may have left the
  node, in this life or an earlier one.
- **state**: small agent facts (node name, hub session, sequence reservation).
- **device twins** and the **metrics buffer**: :meth:`Store.twins` and :meth:`Store.metrics`
  give the ``TwinStore`` and ``MetricsStorage`` the device and metrics packages define
  (:mod:`edgeagent.store.twins`, :mod:`edgeagent.store.metrics`).

Durability and SD cards. Object changes from the hub are committed before they take
effect (listeners are told after the commit). Everything else (status, outbox, state) is
written into one open transaction that is committed at most ``commit_delay`` seconds
later by :meth:`Store.flush` (the agent runs the flusher), so a burst of changes costs one
commit and an idle agent commits nothing. Writes that nothing waits for (metrics samples,
delivery marks) are *background* writes: they wait up to ``background_commit_delay``
(5 min) or ride along with an earlier commit. Whoever must not answer before its write is
durable (the device API before it acknowledges a report) awaits :meth:`Store.wait_committed`;
whatever must be durable before it leaves the node (a sealed metrics batch) commits at once.
A SIGKILL or power cut loses at most the uncommitted tail; the database itself stays
consistent (WAL). Sequence numbers are reserved in committed blocks kept at least
``SEQ_MARGIN`` ahead of the last one used (more than a session's unacknowledged window),
so a seq sent just before a crash, whose ``outbox_mark_sent`` was not committed yet, is
never used again.

Only this package touches SQLite (an import-linter contract enforces it).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import fcntl
import json
import logging
import os
import pathlib
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

from edgeagent.errors import (
    StoreClosedError,
    StoreCorruptError,
    StoreError,
    StoreFullError,
    StoreLockedError,
)
from edgeagent.settings import StoreSettings
from edgeagent.store._sqlite import Database, sqlite3
from edgeagent.store.migrations import MIGRATION_SET, MIGRATIONS, migration_number

if TYPE_CHECKING:
    from edgeagent.store.metrics import SQLiteMetricsStorage
    from edgeagent.store.twins import SQLiteTwinStore

__all__ = [
    "SEQ_BLOCK",
    "SEQ_MARGIN",
    "ObjectChange",
    "OutboxEntry",
    "RefLike",
    "Store",
    "StoredObject",
]

log = logging.getLogger(__name__)

SEQ_BLOCK = 1024
"""Sequence numbers reserved per committed block (one small commit per ~512 messages)."""
SEQ_MARGIN = 512
"""The committed reservation stays this far above the next seq: more than the session
window (256) of messages that may be sent before their seqs are recorded."""

_SQLITE_FULL = 13
_SQLITE_CORRUPT = 11
_SQLITE_NOTADB = 26


class RefLike(Protocol):
    """Anything with the four fields of ``protocol.messages.ObjectRef``."""

    kind: str
    namespace: str
    name: str
    uid: str


@dataclasses.dataclass(frozen=True, slots=True)
class StoredObject:
    """One object from the hub as stored.

    Attributes:
        uid: metadata.uid.
        kind: ``"Pod"``, ``"ConfigMap"``, ``"Secret"`` …
        namespace: ``""`` for cluster-scoped objects.
        name: metadata.name.
        resource_version: the API resourceVersion (opaque; compared for equality only).
        body: the raw API JSON as a dict.
    """

    uid: str
    kind: str
    namespace: str
    name: str
    resource_version: str
    body: dict[str, Any]


@dataclasses.dataclass(frozen=True, slots=True)
class ObjectChange:
    """What a store listener is told after an object change was committed.

    Attributes:
        op: ``"upsert"`` or ``"delete"``.
        kind, namespace, name, uid: the object's identity.
        resource_version: the new (upsert) or last (delete) resourceVersion.
    """

    op: str
    kind: str
    namespace: str
    name: str
    uid: str
    resource_version: str


@dataclasses.dataclass(frozen=True, slots=True)
class OutboxEntry:
    """One up-going message not yet acknowledged.

    Attributes:
        id: local append order (send unsent messages in this order); never reused while
            the agent runs, so it names one message (the token of a send in flight).
        seq: the wire sequence number the session gave it, or ``None`` while unsent.
        kind: the message kind tag (``"pod_status"``, ``"event"`` …).
        body: the message fields by name, as the protocol dataclass has them.
        coalesce_key: latest-wins key, or ``None``.
        created_at: wall-clock seconds since the epoch when it was appended.
    """

    id: int
    seq: int | None
    kind: str
    body: dict[str, Any]
    coalesce_key: str | None
    created_at: float


def ref_dict(ref: RefLike) -> dict[str, str]:
    """An object reference as the wire body carries it."""
    return {"kind": ref.kind, "namespace": ref.namespace, "name": ref.name, "uid": ref.uid}


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def _errcode(exc: BaseException) -> int | None:
    code = getattr(exc, "sqlite_errorcode", None)  # Python 3.11+
    if code is not None:
        return int(code) & 0xFF
    text = str(exc).lower()  # Python 3.10: only the message tells
    if "disk is full" in text or "database or disk is full" in text:
        return _SQLITE_FULL
    if "malformed" in text or "corrupt" in text:
        return _SQLITE_CORRUPT
    if "not a database" in text:
        return _SQLITE_NOTADB
    return None


def _is_corruption(exc: BaseException) -> bool:
    return _errcode(exc) in (_SQLITE_CORRUPT, _SQLITE_NOTADB)


class _SchemaTooNew(Exception):
    pass


class Store:
    """The agent's SQLite store. Not thread-safe: use it from the event loop thread.

    Open with :meth:`Store.open` (the daemon) or :meth:`Store.open_readonly`
    (``edgeagent status``).
    """

    def __init__(
        self,
        db: Any,
        path: pathlib.Path,
        settings: StoreSettings,
        *,
        lock_fd: int | None,
        readonly: bool,
        wall_clock: Callable[[], float],
        monotonic: Callable[[], float],
    ) -> None:
        self._db = db
        self._conn: sqlite3.Connection = db.conn
        self.path = path
        self.settings = settings
        self._lock_fd = lock_fd
        self._readonly = readonly
        self._wall = wall_clock
        self._mono = monotonic
        self._closed = False
        self._dirty_since: float | None = None
        self._background_since: float | None = None
        self._commit_waiters: list[Any] = []  # asyncio futures resolved by flush()
        self._twins: Any = None
        self._metrics: Any = None
        self._listeners: list[Callable[[ObjectChange], None]] = []
        self._lost_listeners: list[Callable[[], None]] = []
        self._dirty_hooks: list[Callable[[], None]] = []
        self._outbox_hooks: list[Callable[[], None]] = []
        self._sync_listeners: list[Callable[[], None]] = []
        self._appends_since_trim = 0
        self._last_outbox_id = 0
        self._next_seq = 0
        self._reserved = 0
        self.recovered_from: pathlib.Path | None = None
        """Where a damaged database was moved at open, or ``None``."""
        self.damaged: StoreCorruptError | None = None
        """Set when SQLite reported the file damaged while running: the agent exits so
        that the next start moves it aside (no crash loop: that start succeeds)."""

    # --- opening ------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        path: pathlib.Path,
        settings: StoreSettings | None = None,
        *,
        wall_clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> Store:
        """Open (creating if needed) the store for the agent daemon.

        Takes an exclusive lock on ``<path>.lock`` so that two agents never share a state
        directory. A damaged file — or one written by a newer agent — is moved aside to
        ``<path>.corrupt-<UTC time>`` with an ERROR log line, and a fresh store is created:
        the agent then resyncs everything from the hub instead of crash-looping.

        Args:
            path: the database file (its directory is created 0700).
            settings: store settings; defaults if ``None``.
            wall_clock: seconds since the epoch (outbox timestamps, fresh seq origin).
            monotonic: seconds, monotonic (commit scheduling).

        Raises:
            StoreLockedError: another process holds the lock.
            StoreFullError: the disk is full while creating or migrating.
            StoreError: the file cannot be opened for another reason (permissions …).
        """
        settings = settings or StoreSettings()
        path = pathlib.Path(path)
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        lock_fd = _lock(path)
        try:
            try:
                db = cls._connect(path, settings, readonly=False)
                store = cls(
                    db,
                    path,
                    settings,
                    lock_fd=lock_fd,
                    readonly=False,
                    wall_clock=wall_clock,
                    monotonic=monotonic,
                )
                store._check_and_migrate()
            except (sqlite3.DatabaseError, _SchemaTooNew) as exc:
                if isinstance(exc, sqlite3.DatabaseError) and not _is_corruption(exc):
                    raise _translate(exc, path) from exc
                with contextlib.suppress(Exception):
                    db.close()
                aside = _move_aside(path, exc)
                db = cls._connect(path, settings, readonly=False)
                store = cls(
                    db,
                    path,
                    settings,
                    lock_fd=lock_fd,
                    readonly=False,
                    wall_clock=wall_clock,
                    monotonic=monotonic,
                )
                store._check_and_migrate()
                store.recovered_from = aside
            store._init_seq()
            return store
        except BaseException:
            os.close(lock_fd)
            raise

    @classmethod
    def open_readonly(cls, path: pathlib.Path, settings: StoreSettings | None = None) -> Store:
        """Open an existing store read-only, without the daemon lock (``edgeagent status``).

        Raises:
            StoreError: the file does not exist or cannot be read.
            StoreCorruptError: the file is damaged.
        """
        settings = settings or StoreSettings()
        path = pathlib.Path(path)
        if not path.exists():
            raise StoreError(f"no store at {path} (has the agent run yet?)", path=str(path))
        try:
            db = cls._connect(path, settings, readonly=True)
            return cls(
                db,
                path,
                settings,
                lock_fd=None,
                readonly=True,
                wall_clock=time.time,
                monotonic=time.monotonic,
            )
        except sqlite3.Error as exc:
            raise _translate(exc, path) from exc

    @staticmethod
    def _connect(path: pathlib.Path, settings: StoreSettings, *, readonly: bool) -> Any:
        if readonly:
            conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        else:
            old = os.umask(0o077)  # the store holds Secrets: 0600, and so do -wal/-shm
            try:
                conn = sqlite3.connect(str(path))
            finally:
                os.umask(old)
        conn.execute(f"PRAGMA busy_timeout = {int(settings.busy_timeout * 1000)}")
        # execute_plugins=False: loading sqlite-utils plugins scans every installed
        # distribution's entry points at start-up; the agent uses none.
        db = Database(conn, execute_plugins=False)
        if not readonly:
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StoreError(f"cannot put {path} in WAL mode (got {mode})", path=str(path))
            conn.execute(f"PRAGMA synchronous = {settings.synchronous.upper()}")
        return db

    def _check_and_migrate(self) -> None:
        result = [r[0] for r in self._conn.execute("PRAGMA quick_check(5)").fetchall()]
        if result != ["ok"]:
            raise sqlite3.DatabaseError("database disk image is malformed: " + "; ".join(result))
        known = {m.name for m in MIGRATIONS._migrations}
        applied = {m.name for m in MIGRATIONS.applied(self._db)}
        unknown = applied - known
        if unknown:
            raise _SchemaTooNew(
                f"schema has migrations this agent does not know: {', '.join(sorted(unknown))}"
            )
        MIGRATIONS.apply(self._db)
        self._conn.commit()

    def _init_seq(self) -> None:
        self._last_outbox_id = self._conn.execute("SELECT MAX(id) FROM outbox").fetchone()[0] or 0
        reserved = self._get_state_raw("seq.reserved")
        top = self._conn.execute("SELECT MAX(seq) FROM outbox").fetchone()[0] or 0
        if reserved is None:
            # A fresh store starts at the wall clock in microseconds, so that a store
            # recreated after damage still counts above what the hub has seen from this
            # node (the uplink also calls advance_seq() with the hub's received_up_to,
            # for clocks that start at 1970 before NTP).
            start = max(int(self._wall() * 1_000_000), 1)
        else:
            start = int(reserved)
        self._next_seq = max(start, top + 1)
        self._reserve(self._next_seq + SEQ_BLOCK)
        self.flush()

    # --- closing ------------------------------------------------------------------------

    def close(self) -> None:
        """Commit what is pending and close. Safe to call twice.

        Raises:
            StoreFullError: the final commit failed for lack of space (the file is still
                closed; the uncommitted tail is lost).
        """
        if self._closed:
            return
        try:
            if not self._readonly:
                self.flush()
        finally:
            self._closed = True
            self._release_waiters(StoreClosedError("store closed before the commit"))
            with contextlib.suppress(sqlite3.Error):
                self._conn.close()
            if self._lock_fd is not None:
                os.close(self._lock_fd)
                self._lock_fd = None

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- batching -----------------------------------------------------------------------

    def add_dirty_hook(self, hook: Callable[[], None]) -> None:
        """Call ``hook()`` when a write opens a batch that needs a :meth:`flush` later
        (the agent's flusher waits on it)."""
        self._dirty_hooks.append(hook)

    def add_outbox_hook(self, hook: Callable[[], None]) -> Callable[[], None]:
        """Call ``hook()`` after every message appended to the outbox (a status change, an
        event), so that the hub connection sends it at once instead of on a timer. The
        append is not committed yet when the hook runs (that is fine: see the module
        docstring on sequence numbers).

        Returns:
            A function that removes the hook.
        """
        self._outbox_hooks.append(hook)
        return lambda: self._outbox_hooks.remove(hook)

    def add_lost_writes_listener(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` when a commit failed and its batch was rolled back (disk
        full): whoever wrote status should write it again later."""
        self._lost_listeners.append(listener)

    @property
    def dirty_since(self) -> float | None:
        """Monotonic time of the oldest uncommitted write (background writes aside), or
        ``None``."""
        return self._dirty_since

    def flush_due(self) -> float | None:
        """Monotonic time at which :meth:`flush` should run, or ``None`` if clean."""
        due = None
        if self._dirty_since is not None:
            due = self._dirty_since + self.settings.commit_delay
        if self._background_since is not None:
            background = self._background_since + self.settings.background_commit_delay
            due = background if due is None else min(due, background)
        return due

    async def wait_committed(self) -> None:
        """Return once everything written before the call is committed.

        The commit is the flusher's (the agent's housekeeping, within ``commit_delay``),
        so concurrent callers share one commit (group commit). Background writes pending
        alone are brought forward to ``commit_delay``.

        Raises:
            StoreFullError: that commit failed for lack of space: the writes were rolled
                back (not kept).
            StoreError: that commit failed for another reason, or the store was closed
                before it.
        """
        import asyncio  # the store is sync; only this waiter needs the event loop

        self._check_open()
        if not self._conn.in_transaction:
            return
        if self._dirty_since is None:
            self._dirty_since = self._mono()
            for hook in self._dirty_hooks:
                hook()
        waiter = asyncio.get_running_loop().create_future()
        self._commit_waiters.append(waiter)
        await waiter

    def _release_waiters(self, error: BaseException | None) -> None:
        waiters, self._commit_waiters = self._commit_waiters, []
        for waiter in waiters:
            if waiter.done():
                continue
            if error is None:
                waiter.set_result(None)
            else:
                waiter.set_exception(error)

    def flush(self) -> None:
        """Commit the open batch now (no-op when clean).

        Raises:
            StoreFullError: no space; the batch was rolled back and the lost-writes
                listeners were called.
            StoreError: any other SQLite failure (same rollback).
        """
        self._check_open()
        if not self._conn.in_transaction:
            self._dirty_since = self._background_since = None
            self._release_waiters(None)
            return
        try:
            self._conn.commit()
        except sqlite3.Error as exc:
            error = self._note(_translate(exc, self.path))
            self._rollback_after_failure(error)
            raise error from exc
        self._dirty_since = self._background_since = None
        self._release_waiters(None)

    def _rollback_after_failure(self, error: StoreError) -> None:
        self._release_waiters(error)
        with contextlib.suppress(sqlite3.Error):
            if self._conn.in_transaction:
                self._conn.rollback()
        self._dirty_since = self._background_since = None
        self._reload_seq_after_rollback()
        for listener in list(self._lost_listeners):
            try:
                listener()
            except Exception:  # a listener's bug must not mask the store error
                log.exception("lost-writes listener failed")

    def _reload_seq_after_rollback(self) -> None:
        # Seqs handed out in the rolled-back batch may have been sent: never reuse them.
        # The committed reservation is above all of them, so restart from it.
        reserved = self._get_state_raw("seq.reserved")
        if reserved is not None:
            self._reserved = int(reserved)
            self._next_seq = max(self._next_seq, self._reserved)

    def _touch(self, background: bool = False) -> None:
        if background:
            if self._background_since is not None:
                return
            self._background_since = self._mono()
        elif self._dirty_since is None:
            self._dirty_since = self._mono()
        else:
            return
        for hook in self._dirty_hooks:
            hook()

    @contextlib.contextmanager
    def _write(self, *, background: bool = False) -> Iterator[sqlite3.Connection]:
        """One batched write: joins the open transaction (a savepoint keeps it atomic).

        Args:
            background: nothing waits for this write: commit it within
                ``background_commit_delay`` instead of ``commit_delay``.
        """
        self._check_open()
        if self._readonly:
            raise StoreClosedError("store was opened read-only")
        try:
            if not self._conn.in_transaction:
                self._conn.execute("BEGIN")  # the batch; committed by flush()
            with self._db.atomic():  # a savepoint: this write is all-or-nothing
                yield self._conn
        except sqlite3.Error as exc:
            error = self._note(_translate(exc, self.path))
            if _errcode(exc) == _SQLITE_FULL or not self._conn.in_transaction:
                self._rollback_after_failure(error)
            raise error from exc
        self._touch(background)

    def _read(self, sql: str, params: tuple | list = ()) -> list[tuple]:
        self._check_open()
        try:
            return self._conn.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise self._note(_translate(exc, self.path)) from exc

    def _note(self, error: StoreError) -> StoreError:
        if isinstance(error, StoreCorruptError) and self.damaged is None:
            self.damaged = error
            log.error("%s; the agent must restart (the file is moved aside at open)", error)
        return error

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError("store is closed")

    # --- objects ------------------------------------------------------------------------

    def add_listener(self, listener: Callable[[ObjectChange], None]) -> Callable[[], None]:
        """Call ``listener(change)`` after each committed object upsert/delete.

        Returns:
            A function that removes the listener.
        """
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def _notify(self, change: ObjectChange) -> None:
        for listener in list(self._listeners):
            try:
                listener(change)
            except Exception:
                log.exception("store listener failed for %s %s", change.op, change.uid)

    def inventory(self) -> dict[str, str]:
        """Every stored object's uid → resourceVersion (for the hello)."""
        return dict(self._read("SELECT uid, resource_version FROM objects"))

    def apply_upsert(self, ref: RefLike, resource_version: str, obj: dict[str, Any]) -> bool:
        """Store an object received from the hub and commit it, then tell listeners.

        Args:
            ref: the object's kind, namespace, name and uid.
            resource_version: its resourceVersion.
            obj: the raw API JSON.

        Returns:
            ``False`` when the same resourceVersion and body were already stored
            (nothing written), ``True`` otherwise.

        Raises:
            StoreFullError: not stored (the hub will resend it after the next inventory).
        """
        body = _dumps(obj)
        row = self._read("SELECT resource_version, body FROM objects WHERE uid = ?", (ref.uid,))
        if row and row[0][0] == resource_version and row[0][1] == body:
            return False
        with self._write() as conn:
            conn.execute(
                "INSERT INTO objects (uid, kind, namespace, name, resource_version, body) "
                "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(uid) DO UPDATE SET kind=excluded.kind, "
                "namespace=excluded.namespace, name=excluded.name, "
                "resource_version=excluded.resource_version, body=excluded.body",
                (ref.uid, ref.kind, ref.namespace, ref.name, resource_version, body),
            )
        self.flush()
        self._notify(
            ObjectChange("upsert", ref.kind, ref.namespace, ref.name, ref.uid, resource_version)
        )
        return True

    def apply_delete(self, uid: str) -> bool:
        """Remove an object the hub deleted (and its last known pod status); commit; tell
        listeners.

        Returns:
            ``False`` if no object had that uid.

        Raises:
            StoreFullError: not removed (the hub repeats deletes after the next inventory).
        """
        row = self._read(
            "SELECT kind, namespace, name, resource_version FROM objects WHERE uid = ?", (uid,)
        )
        if not row:
            return False
        kind, namespace, name, rv = row[0]
        with self._write() as conn:
            conn.execute("DELETE FROM objects WHERE uid = ?", (uid,))
            conn.execute("DELETE FROM pod_status WHERE uid = ?", (uid,))
        self.flush()
        self._notify(ObjectChange("delete", kind, namespace, name, uid, rv))
        return True

    def get_object(self, uid: str) -> StoredObject | None:
        """The object with that uid, or ``None``."""
        rows = self._read(
            "SELECT uid, kind, namespace, name, resource_version, body FROM objects WHERE uid = ?",
            (uid,),
        )
        return _obj(rows[0]) if rows else None

    def find_object(self, kind: str, namespace: str, name: str) -> StoredObject | None:
        """The object of that kind and name (the newest if the hub briefly sent two)."""
        rows = self._read(
            "SELECT uid, kind, namespace, name, resource_version, body FROM objects "
            "WHERE kind = ? AND namespace = ? AND name = ? ORDER BY rowid DESC LIMIT 1",
            (kind, namespace, name),
        )
        return _obj(rows[0]) if rows else None

    def list_objects(self, kind: str | None = None) -> list[StoredObject]:
        """All stored objects, or those of one kind, in arrival order."""
        sql = "SELECT uid, kind, namespace, name, resource_version, body FROM objects"
        params: tuple = ()
        if kind is not None:
            sql += " WHERE kind = ?"
            params = (kind,)
        return [_obj(r) for r in self._read(sql + " ORDER BY rowid", params)]

    # --- pod status ---------------------------------------------------------------------

    def record_pod_status(self, ref: RefLike, status: dict[str, Any], observed_at: float) -> int:
        """Keep a pod's latest status and queue a ``pod_status`` message (latest wins).

        Batched: committed within ``commit_delay``.

        Args:
            ref: the pod.
            status: the PodStatus JSON.
            observed_at: wall-clock seconds when it was observed.

        Returns:
            The outbox id of the queued message.

        Raises:
            StoreFullError: no space (the lost-writes listeners are called).
        """
        with self._write() as conn:
            conn.execute(
                "INSERT INTO pod_status (uid, status, observed_at) VALUES (?, ?, ?) "
                "ON CONFLICT(uid) DO UPDATE SET status=excluded.status, "
                "observed_at=excluded.observed_at",
                (ref.uid, _dumps(status), observed_at),
            )
            entry_id = self._append(
                conn,
                "pod_status",
                {"ref": ref_dict(ref), "status": status, "observed_at": observed_at},
                pod_coalesce_key(ref.uid),
            )
        return entry_id

    def pod_status(self, uid: str) -> dict[str, Any] | None:
        """The last recorded status of a pod, or ``None``."""
        rows = self._read("SELECT status FROM pod_status WHERE uid = ?", (uid,))
        return json.loads(rows[0][0]) if rows else None

    def pod_statuses(self) -> dict[str, dict[str, Any]]:
        """Every recorded pod status by uid."""
        return {uid: json.loads(s) for uid, s in self._read("SELECT uid, status FROM pod_status")}

    # --- outbox -------------------------------------------------------------------------

    def outbox_append(
        self, kind: str, body: dict[str, Any], *, coalesce_key: str | None = None
    ) -> int:
        """Queue an up-going message, unsent (batched commit).

        Args:
            kind: the protocol kind tag (``"event"``, ``"pod_deleted"`` …).
            body: the message's fields by name, JSON-serialisable (object references as
                ``{"kind", "namespace", "name", "uid"}``).
            coalesce_key: when given, an unsent message with the same key is dropped
                (latest wins); this one goes to the end of the queue.

        Returns:
            The message's outbox id.

        Raises:
            StoreFullError: no space.
        """
        with self._write() as conn:
            return self._append(conn, kind, body, coalesce_key)

    def _append(
        self, conn: sqlite3.Connection, kind: str, body: dict, coalesce_key: str | None
    ) -> int:
        if coalesce_key is not None:
            conn.execute(
                "DELETE FROM outbox WHERE coalesce_key = ? AND seq IS NULL", (coalesce_key,)
            )
        # Ids are never reused while the agent runs: SQLite would give a new row the id of
        # the highest one just deleted, and a status replaced (latest wins) while its
        # predecessor was being sent would then be marked sent in the predecessor's place
        # and never go up.
        self._last_outbox_id += 1
        cur = conn.execute(
            "INSERT INTO outbox (id, seq, kind, coalesce_key, body, created_at) "
            "VALUES (?,NULL,?,?,?,?)",
            (self._last_outbox_id, kind, coalesce_key, _dumps(body), self._wall()),
        )
        if coalesce_key is None:
            self._appends_since_trim += 1
            if self._appends_since_trim >= 100:
                self._trim(conn)
        for hook in list(self._outbox_hooks):
            try:
                hook()
            except Exception:  # a hook's bug must not fail the write
                log.exception("outbox hook failed")
        return int(cur.lastrowid or 0)

    def _trim(self, conn: sqlite3.Connection) -> None:
        self._appends_since_trim = 0
        limit = self.settings.outbox_max_events
        (count,) = conn.execute("SELECT COUNT(*) FROM outbox WHERE coalesce_key IS NULL").fetchone()
        if count > limit:
            conn.execute(
                "DELETE FROM outbox WHERE id IN (SELECT id FROM outbox WHERE coalesce_key "
                "IS NULL ORDER BY id LIMIT ?)",
                (count - limit,),
            )
            log.warning(
                "outbox over %d uncoalesced messages while the hub is away: dropped the %d oldest",
                limit,
                count - limit,
            )

    def _reserve(self, upto: int) -> None:
        self._reserved = upto
        self._conn.execute(
            "INSERT INTO state (key, value) VALUES ('seq.reserved', ?) "
            "ON CONFLICT(key) DO UPDATE SET value=excluded.value",
            (_dumps(upto),),
        )
        self._touch()

    def _keep_reserved(self) -> None:
        """Commit a new seq block when the next seq comes within SEQ_MARGIN of its end."""
        if self._reserved - self._next_seq < SEQ_MARGIN:
            with self._write():
                self._reserve(self._next_seq + SEQ_BLOCK)
            self.flush()

    def _entries(self, where: str, order: str, params: tuple = ()) -> list[OutboxEntry]:
        rows = self._read(
            f"SELECT id, seq, kind, body, coalesce_key, created_at FROM outbox {where} "
            f"ORDER BY {order}",
            params,
        )
        return [
            OutboxEntry(i, seq, kind, json.loads(body), key, created)
            for i, seq, kind, body, key, created in rows
        ]

    def outbox_unsent(self, limit: int | None = None) -> list[OutboxEntry]:
        """Messages not yet handed to a session, oldest first: send them in this order and
        record each seq with :meth:`outbox_mark_sent`."""
        if limit is None:
            return self._entries("WHERE seq IS NULL", "id")
        return self._entries("WHERE seq IS NULL", "id LIMIT ?", (limit,))

    def outbox_mark_sent(self, entry_id: int, seq: int, *, missing_ok: bool = False) -> bool:
        """Record the seq ``Session.send`` gave a message (batched commit). Call it right
        after the send, for every send, in order.

        Args:
            entry_id: the message's outbox id.
            seq: the seq the session gave it.
            missing_ok: a message replaced by a newer one with its coalescing key (latest
                wins) while it was being sent is gone: return ``False`` instead of raising.
                The seq is still recorded as used.

        Returns:
            ``True`` when the message was marked, ``False`` when it was gone (``missing_ok``).

        Raises:
            StoreError: the message is gone or was already sent (without ``missing_ok``), or
                ``seq`` is below :meth:`next_seq` (seqs only go up).
            StoreFullError: no space.
        """
        if seq < self._next_seq:
            raise StoreError(f"seq {seq} is not above the seqs used before (next {self._next_seq})")
        with self._write() as conn:
            cur = conn.execute(
                "UPDATE outbox SET seq = ? WHERE id = ? AND seq IS NULL", (seq, entry_id)
            )
            self._next_seq = max(self._next_seq, seq + 1)
            if cur.rowcount != 1 and not missing_ok:
                raise StoreError(f"outbox message {entry_id} is gone or was already sent")
        self._keep_reserved()
        return cur.rowcount == 1

    def note_seq_used(self, seq: int) -> None:
        """Record that the session gave ``seq`` to a message kept elsewhere (metrics batches
        have their own store-and-forward buffer), so that :meth:`next_seq` stays above it.
        Writes nothing except, once per ~512 seqs, a new reservation block."""
        if seq >= self._next_seq:
            self._next_seq = seq + 1
            self._keep_reserved()

    def outbox_drop(self, entry_id: int) -> bool:
        """Remove one message that can never be sent (its stored body no longer makes a
        valid message); the caller logs what was lost (batched commit).

        Returns:
            ``False`` if no message had that id.
        """
        with self._write() as conn:
            return conn.execute("DELETE FROM outbox WHERE id = ?", (entry_id,)).rowcount == 1

    def outbox_sent(self) -> list[OutboxEntry]:
        """Messages sent and not acknowledged, by seq: the ``pending`` to hand to the next
        ``Session.connect`` (all are below :meth:`next_seq`)."""
        return self._entries("WHERE seq IS NOT NULL", "seq")

    def outbox_pending(self) -> list[OutboxEntry]:
        """Every message not acknowledged: sent ones by seq, then unsent ones in order."""
        return self.outbox_sent() + self.outbox_unsent()

    def outbox_ack(self, up_to: int) -> int:
        """Drop messages the hub acknowledged (cumulative: every seq ≤ ``up_to``).

        Returns:
            How many were removed. An ack that covers none of them (it acknowledged twin
            reports or metrics batches, which have their own outbox) writes nothing, so
            it costs no commit.
        """
        if not self._read(
            "SELECT 1 FROM outbox WHERE seq IS NOT NULL AND seq <= ? LIMIT 1", (up_to,)
        ):
            return 0
        with self._write() as conn:
            cur = conn.execute("DELETE FROM outbox WHERE seq IS NOT NULL AND seq <= ?", (up_to,))
            return cur.rowcount

    def outbox_depth(self) -> int:
        """How many messages wait for an acknowledgement (sent or not)."""
        return self._read("SELECT COUNT(*) FROM outbox")[0][0]

    def next_seq(self) -> int:
        """The seq for ``Session(next_seq=…)``: above every seq that may have left this
        node, in this life or an earlier one."""
        self._keep_reserved()
        return self._next_seq

    def advance_seq(self, past: int) -> None:
        """Make every future seq greater than ``past`` (call with the welcome's
        ``received_up_to``: after a fresh store the hub may have seen higher seqs from
        this node, and it would drop lower ones as duplicates)."""
        if past >= self._next_seq:
            with self._write():
                self._next_seq = past + 1
                self._reserve(self._next_seq + SEQ_BLOCK)
            self.flush()

    # --- agent state --------------------------------------------------------------------

    def get_state(self, key: str, default: Any = None) -> Any:
        """A small JSON value from the agent-state table, or ``default``."""
        raw = self._get_state_raw(key)
        return default if raw is None else json.loads(raw)

    def _get_state_raw(self, key: str) -> str | None:
        rows = self._read("SELECT value FROM state WHERE key = ?", (key,))
        return rows[0][0] if rows else None

    def set_state(self, key: str, value: Any) -> None:
        """Set an agent-state value (batched commit; no write if unchanged)."""
        raw = _dumps(value)
        if self._get_state_raw(key) == raw:
            return
        with self._write() as conn:
            conn.execute(
                "INSERT INTO state (key, value) VALUES (?, ?) "
                "ON CONFLICT(key) DO UPDATE SET value=excluded.value",
                (key, raw),
            )

    # --- the hub's full sync ------------------------------------------------------------

    SYNCED_KEY = "hub.synced"
    """State key: ``{"at": seconds since the epoch, "objects": n}`` of the last full sync."""

    def note_full_sync(self, objects: int) -> None:
        """The hub ended a full sync (``sync_done``): the objects stored now are exactly
        the ones assigned to this node. Records it (state ``hub.synced``, committed at
        once: it decides what the next start may remove) and tells the sync listeners.

        Args:
            objects: how many objects the hub says this node holds.

        Raises:
            StoreError: the record could not be written (the listeners are still told).
        """
        try:
            self.set_state(self.SYNCED_KEY, {"at": self._wall(), "objects": objects})
            self.flush()
        finally:
            for listener in list(self._sync_listeners):
                try:
                    listener()
                except Exception:  # a listener's bug must not fail the sync
                    log.exception("sync listener failed")

    def synced_before(self) -> bool:
        """True when a full sync with the hub was recorded in this file: what it holds is
        the hub's word (a fresh file, or the one made after a damaged one was moved
        aside, has none until the hub's first ``sync_done``)."""
        return self.get_state(self.SYNCED_KEY) is not None

    def add_sync_listener(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call ``listener()`` after every :meth:`note_full_sync`.

        Returns:
            A function that removes the listener.
        """
        self._sync_listeners.append(listener)
        return lambda: self._sync_listeners.remove(listener)

    # --- device twins and the metrics buffer ---------------------------------------------

    def twins(self) -> SQLiteTwinStore:
        """The device twins' ``TwinStore`` over this store (one per store)."""
        if self._twins is None:
            from edgeagent.store.twins import SQLiteTwinStore

            self._twins = SQLiteTwinStore(self)
        return self._twins

    def metrics(self) -> SQLiteMetricsStorage:
        """The metrics buffer's ``MetricsStorage`` over this store (one per store)."""
        if self._metrics is None:
            from edgeagent.store.metrics import SQLiteMetricsStorage

            self._metrics = SQLiteMetricsStorage(self)
        return self._metrics

    # --- introspection ------------------------------------------------------------------

    def schema_version(self) -> int:
        """The highest applied migration number."""
        names = [m.name for m in MIGRATIONS.applied(self._db)]
        return max((migration_number(n) for n in names), default=0)

    @staticmethod
    def migration_set() -> str:
        """Name of the sqlite-utils migration set used by the store."""
        return MIGRATION_SET


def pod_coalesce_key(uid: str) -> str:
    """The latest-wins key of ``pod_status`` and ``pod_deleted`` messages for a pod."""
    return "pod:" + uid


def _obj(row: tuple) -> StoredObject:
    uid, kind, namespace, name, rv, body = row
    return StoredObject(uid, kind, namespace, name, rv, json.loads(body))


def _translate(exc: BaseException, path: pathlib.Path) -> StoreError:
    code = _errcode(exc)
    if code == _SQLITE_FULL:
        return StoreFullError(
            f"store {path}: disk full ({exc}); running pods are unaffected, changes since "
            "the last commit are not saved",
            path=str(path),
        )
    if code in (_SQLITE_CORRUPT, _SQLITE_NOTADB):
        return StoreCorruptError(f"store {path} is damaged: {exc}", path=str(path))
    return StoreError(f"store {path}: {exc}", path=str(path))


def agent_running(path: pathlib.Path) -> bool:
    """True when an agent holds the store at ``path`` open now (its ``<path>.lock``): the
    kernel drops the lock with the process, so a crashed agent never counts.

    Raises:
        StoreError: the lock file exists but cannot be opened (permissions).
    """
    lock_path = pathlib.Path(path).with_name(pathlib.Path(path).name + ".lock")
    try:
        fd = os.open(lock_path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise StoreError(f"cannot read {lock_path}: {exc}", path=str(path)) from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _lock(path: pathlib.Path) -> int:
    lock_path = path.with_name(path.name + ".lock")
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as exc:
        os.close(fd)
        raise StoreLockedError(
            f"another agent holds {lock_path}; one agent per state directory",
            path=str(path),
        ) from exc
    return fd


def _move_aside(path: pathlib.Path, exc: BaseException) -> pathlib.Path:
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    aside = path.with_name(f"{path.name}.corrupt-{stamp}")
    n = 1
    while aside.exists():
        aside = path.with_name(f"{path.name}.corrupt-{stamp}.{n}")
        n += 1
    os.replace(path, aside)
    for suffix in ("-wal", "-shm"):
        side = path.with_name(path.name + suffix)
        if side.exists():
            os.replace(side, aside.with_name(aside.name + suffix))
    log.error(
        "store %s is unusable (%s); moved it to %s and starting with an empty store — "
        "objects will be resynced from the hub",
        path,
        exc,
        aside,
    )
    return aside
