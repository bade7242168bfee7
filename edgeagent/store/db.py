"""The store's database: open, lock, migrate, batched commits, reads and writes, and the
translation of SQLite errors (the base of :class:`~edgeagent.store.Store`; the module
docstring of :mod:`edgeagent.store.store` says what is durable when).

Every table family is a part over this one (:mod:`.objects`, :mod:`.podstatus`,
:mod:`.outbox`, :mod:`.state`); they write through :meth:`StoreCore._write` (one batched
transaction, a savepoint per write) and read through :meth:`StoreCore._read`.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import logging
import os
import pathlib
import random
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from edgeagent.errors import (
    StoreBusyError,
    StoreClosedError,
    StoreCorruptError,
    StoreError,
    StoreFullError,
    StoreLockedError,
)
from edgeagent.settings import StoreSettings
from edgeagent.store._sqlite import Database, sqlite3
from edgeagent.store.migrations import MIGRATION_SET, MIGRATIONS, migration_number

__all__ = ["StoreCore", "agent_running", "dumps"]

log = logging.getLogger("edgeagent.store.store")

Self = TypeVar("Self", bound="StoreCore")

_SQLITE_BUSY = 5
_SQLITE_FULL = 13
_SQLITE_CORRUPT = 11
_SQLITE_NOTADB = 26


def dumps(value: Any) -> str:
    """The store's JSON: compact, keys sorted (equal values give equal text)."""
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
    if "database is locked" in text:
        return _SQLITE_BUSY
    return None


def _is_corruption(exc: BaseException) -> bool:
    return _errcode(exc) in (_SQLITE_CORRUPT, _SQLITE_NOTADB)


class _SchemaTooNew(Exception):
    pass


class StoreCore:
    """The database under the store's parts. Not thread-safe: use it from the event loop
    thread. Open with :meth:`open` (the daemon) or :meth:`open_readonly` (``edgeagent
    status``)."""

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
        self._lost_listeners: list[Callable[[], None]] = []
        self._dirty_hooks: list[Callable[[], None]] = []
        self._busy_lost = False  # a write failed on another process's lock: redo later
        self._batch_written = False  # False: the open batch is only wait_writable's
        self._reclaim_checked_at: float | None = None
        self.recovered_from: pathlib.Path | None = None
        """Where a damaged database was moved at open, or ``None``."""
        self.damaged: StoreCorruptError | None = None
        """Set when SQLite reported the file damaged while running: the agent exits so
        that the next start moves it aside (no crash loop: that start succeeds)."""

    def _after_open(self) -> None:
        """Called once the schema is current (the outbox part loads its sequence numbers)."""

    def _after_rollback(self) -> None:
        """Called after a failed commit was rolled back (the outbox part reloads seqs)."""

    # --- opening ------------------------------------------------------------------------

    @classmethod
    def open(
        cls: type[Self],
        path: pathlib.Path,
        settings: StoreSettings | None = None,
        *,
        wall_clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> Self:
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
            store._after_open()
            store._settle()
            return store
        except BaseException:
            os.close(lock_fd)
            raise

    @classmethod
    def open_readonly(
        cls: type[Self], path: pathlib.Path, settings: StoreSettings | None = None
    ) -> Self:
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
        db = Database(conn)
        if not readonly:
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StoreError(f"cannot put {path} in WAL mode (got {mode})", path=str(path))
            conn.execute(f"PRAGMA synchronous = {settings.synchronous.upper()}")
            conn.execute(f"PRAGMA journal_size_limit = {int(settings.journal_size_limit)}")
        return db

    def _settle(self) -> None:
        """After open: free pages can be given back (a file from before that is rebuilt
        once with ``VACUUM``: a store is a few hundred KiB), and statements stop waiting
        long for other processes' locks (see ``StoreSettings.loop_busy_timeout``)."""
        conn = self._conn
        if conn.execute("PRAGMA auto_vacuum").fetchone()[0] != 2:  # 2: INCREMENTAL
            conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
            try:
                conn.execute("VACUUM")  # needs room for a copy: a full disk keeps the file
            except sqlite3.Error as exc:
                log.warning("store %s: cannot rebuild it to give space back: %s", self.path, exc)
        conn.execute(f"PRAGMA busy_timeout = {int(self.settings.loop_busy_timeout * 1000)}")

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

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- batching -----------------------------------------------------------------------

    def add_dirty_hook(self, hook: Callable[[], None]) -> None:
        """Call ``hook()`` when a write opens a batch that needs a :meth:`flush` later
        (the agent's flusher waits on it)."""
        self._dirty_hooks.append(hook)

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
            wait = self.settings.background_commit_delay
            if not self._batch_written:
                wait = self.settings.commit_delay  # opened, nothing written: free the lock
            background = self._background_since + wait
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
        self._after_rollback()
        self._tell_lost_writes()

    def _tell_lost_writes(self) -> None:
        for listener in list(self._lost_listeners):
            try:
                listener()
            except Exception:  # a listener's bug must not mask the store error
                log.exception("lost-writes listener failed")

    def _touch(self, background: bool = False) -> None:
        self._batch_written = True
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
        if not self._conn.in_transaction:
            self._begin()
        try:
            with self._db.atomic():  # a savepoint: this write is all-or-nothing
                yield self._conn
        except sqlite3.Error as exc:
            error = self._note(_translate(exc, self.path))
            if _errcode(exc) == _SQLITE_FULL or not self._conn.in_transaction:
                self._rollback_after_failure(error)
            raise error from exc
        self._touch(background)

    def _begin(self) -> None:
        """Open the batch, taking the write lock now (``BEGIN IMMEDIATE``): the batch's
        later writes and its commit then never wait for another process.

        Raises:
            StoreBusyError: another process holds the lock (after ``loop_busy_timeout``);
                nothing was written. :meth:`wait_writable` tells the lost-writes listeners
                once the lock is free.
        """
        try:
            self._conn.execute("BEGIN IMMEDIATE")  # the batch; committed by flush()
            self._batch_written = False
        except sqlite3.Error as exc:
            error = self._note(_translate(exc, self.path))
            if isinstance(error, StoreBusyError):
                self._busy_lost = True
                for hook in self._dirty_hooks:  # the flusher waits for the lock
                    hook()
            else:
                self._rollback_after_failure(error)
            raise error from exc

    async def wait_writable(self, *, poll: float = 0.02, cap: float = 0.5) -> None:
        """Return once the store holds the write lock (an open batch), so that the writes
        that follow do not fail on another process's lock (an operator's ``sqlite3``
        shell in a transaction). The lock is tried every ``poll`` seconds, backing off
        with jitter up to ``cap``, each try waiting at most ``loop_busy_timeout``: the
        event loop keeps running (heartbeats stay on time). SQLite offers no notice
        across processes when a lock is released, so polling is the only way to wait.

        The batch opened here is committed as a background write would be (the writes
        that follow set their own delay); one nobody writes into is committed within
        ``commit_delay``, releasing the lock (an empty commit writes nothing). Once the
        lock is won after writes failed on it, the lost-writes listeners are told
        (whoever wrote status writes it again).

        Raises:
            StoreError: the batch could not be opened for another reason.
        """
        import asyncio  # the store is sync; only the waiters need the event loop

        self._check_open()
        delay = poll
        while not self._conn.in_transaction:
            try:
                self._begin()
            except StoreBusyError:
                await asyncio.sleep(random.uniform(delay / 2, delay))
                delay = min(cap, delay * 2)
                continue
            self._background_since = self._mono()
            for hook in self._dirty_hooks:
                hook()
        if self._busy_lost:
            self._busy_lost = False
            self._tell_lost_writes()

    @property
    def write_lock_lost(self) -> bool:
        """True when a write failed on another process's lock since the last
        :meth:`wait_writable` (the agent's flusher then waits for the lock)."""
        return self._busy_lost

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

    # --- giving space back -------------------------------------------------------------

    RECLAIM_CHECK = 10.0
    """Seconds between two looks at the free pages (:meth:`reclaim`)."""

    def reclaim(self, *, force: bool = False) -> int:
        """Give free pages back to the file system when they are over
        ``reclaim_free_fraction`` of the file (an offline backlog that drained), and
        truncate the WAL to ``journal_size_limit``. Cheap when there is nothing to do (two
        header reads, at most every :data:`RECLAIM_CHECK` seconds unless ``force``); runs
        only between batches.

        Returns:
            The bytes given back (0 when nothing was due, a batch is open, or another
            process holds the lock: the next call tries again).

        Raises:
            StoreError: SQLite failed otherwise (e.g. the file is damaged).
        """
        self._check_open()
        now = self._mono()
        if self._readonly or self._conn.in_transaction:
            return 0
        if not force and self._reclaim_checked_at is not None:
            if now - self._reclaim_checked_at < self.RECLAIM_CHECK:
                return 0
        self._reclaim_checked_at = now
        free = self._read("PRAGMA freelist_count")[0][0]
        pages, size = self._read("PRAGMA page_count")[0][0], self._read("PRAGMA page_size")[0][0]
        if free < 8 or free < pages * self.settings.reclaim_free_fraction:
            return 0
        try:
            # executescript steps the pragma to its end: execute() frees a single page
            self._conn.executescript("PRAGMA incremental_vacuum;")
            self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        except sqlite3.Error as exc:
            error = self._note(_translate(exc, self.path))
            if isinstance(error, StoreBusyError):
                return 0
            raise error from exc
        given = (pages - self._read("PRAGMA page_count")[0][0]) * size
        log.info("store: gave %d KiB of free pages back to the file system", given // 1024)
        return given

    # --- introspection ------------------------------------------------------------------

    def schema_version(self) -> int:
        """The highest applied migration number.

        Raises:
            StoreError: the file cannot be read (damaged: not a database).
        """
        try:
            names = [m.name for m in MIGRATIONS.applied(self._db)]
        except sqlite3.Error as exc:
            raise _translate(exc, self.path) from exc
        return max((migration_number(n) for n in names), default=0)

    @staticmethod
    def migration_set() -> str:
        """Name of the migration set used by the store (``_sqlite_migrations``)."""
        return MIGRATION_SET


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
    if code == _SQLITE_BUSY:
        return StoreBusyError(
            f"store {path}: another process holds the write lock ({exc}); written later",
            path=str(path),
        )
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
