"""In-memory object store with a global revision, a bounded change history,
watch subscriptions and group commit to a durable backend.

Revisions work as etcd's: one counter for the whole store, incremented by every
write; an object's ``metadata.resourceVersion`` is the revision that last wrote
it, a list's is the store revision it was read at.

Durability (what an acknowledged write means): a write is applied to memory at
once (so the next request sees it and conflicts are detected in order) and put in
the open batch; the single committer writes whole batches to SQLite in one
transaction each (group commit). The REST layer answers a write only after
:meth:`Store.sync` returned, i.e. once the batch holding it is committed
(fsynced, with ``synchronous=FULL``). Reads also wait for :meth:`Store.sync`
before answering, and watch events are published only after their commit, so no
client ever observes a change that a crash could undo. When a commit fails,
every change not yet durable is undone in memory and its writers get the error.
"""

from __future__ import annotations

import asyncio
import bisect
import concurrent.futures
import dataclasses
from collections.abc import Callable, Mapping

from cloudhub.standalone.errors import StorageError, expired
from cloudhub.standalone.persistence import Row, StorageBackend

__all__ = ["Change", "Entry", "Store", "Subscriber"]

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"


@dataclasses.dataclass(slots=True)
class Entry:
    """One stored object.

    Attributes:
        rv: The revision that wrote this state (its ``metadata.resourceVersion``).
        data: The object's JSON as served (``kind``, ``apiVersion``, ``metadata``...).
        labels: ``metadata.labels``, for label selectors.
        fields: Values of the resource's selectable fields, for field selectors.
        uid: ``metadata.uid``.
        owners: UIDs in ``metadata.ownerReferences`` (for garbage collection).
    """

    rv: int
    data: bytes
    labels: Mapping[str, str]
    fields: Mapping[str, str]
    uid: str
    owners: tuple[str, ...] = ()


@dataclasses.dataclass(slots=True)
class Change:
    """One write: the new state (for DELETED, the final state) and the previous one."""

    rev: int
    type: str
    resource: str
    namespace: str
    name: str
    entry: Entry
    prev: Entry | None
    line: bytes | None = None  # the watch event line, made once and shared

    def event_line(self, event_type: str) -> bytes:
        """``{"type":...,"object":...}\\n`` as a watch streams it."""
        if event_type == self.type:
            if self.line is None:
                self.line = b'{"type":"%s","object":%s}\n' % (self.type.encode(), self.entry.data)
            return self.line
        return b'{"type":"%s","object":%s}\n' % (event_type.encode(), self.entry.data)


class Subscriber:
    """Receives the changes of one resource; what to do with them is the caller's.

    ``deliver`` is called synchronously, in revision order, right after the
    change is durable (or while replaying history at subscription). It must not
    block; returning False ends the subscription (e.g. its buffer overflowed).
    """

    def deliver(self, change: Change) -> bool:
        raise NotImplementedError


@dataclasses.dataclass(slots=True)
class _Batch:
    changes: list[Change]
    done: asyncio.Future[None]


class Store:
    """Objects of every resource, keyed by (resource, namespace, name).

    Args:
        backend: Durable copy (SQLite) or :class:`MemoryBackend`.
        history_events: Changes kept for watches and consistent paging.
        commit_interval_s: Longest wait to gather a batch before committing.
    """

    def __init__(
        self, backend: StorageBackend, *, history_events: int, commit_interval_s: float = 0.0
    ) -> None:
        self._backend = backend
        self._history_events = history_events
        self._commit_interval_s = commit_interval_s
        self._objects: dict[str, dict[str, dict[str, Entry]]] = {}
        self._sorted: dict[tuple[str, str], list[str]] = {}
        self._revision = 0
        self._durable = 0
        self._compacted = 0
        self._history: list[Change] = []
        self._history_revs: list[int] = []
        self._subscribers: dict[str, set[Subscriber]] = {}
        self._open: _Batch | None = None
        self._committing: _Batch | None = None
        self._commit_task: asyncio.Task[None] | None = None
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._revision_changed = asyncio.Event()
        self._closed = False
        self.on_commit: list[Callable[[list[Change]], None]] = []
        #: Called with the changes a failed commit undid, after memory is restored
        #: (whoever derived state from them at write time re-derives it).
        self.on_undo: list[Callable[[list[Change]], None]] = []

    # -- lifecycle -------------------------------------------------------------

    async def open(self) -> list[Row]:
        """Load the durable copy. Returns its rows for the caller to index
        (custom resource types must be known before their objects are served).

        Raises:
            StorageError: The backend cannot be read.
        """
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="apiserver-store"
        )
        loop = asyncio.get_running_loop()
        revision, rows = await loop.run_in_executor(self._executor, self._load)
        self._revision = self._durable = self._compacted = revision
        return rows

    def _load(self) -> tuple[int, list[Row]]:
        revision, rows = self._backend.load()
        return revision, list(rows)

    def restore(self, resource: str, namespace: str, name: str, entry: Entry) -> None:
        """Put a loaded object in memory (only between :meth:`open` and serving)."""
        self._objects.setdefault(resource, {}).setdefault(namespace, {})[name] = entry
        self._sorted.pop((resource, namespace), None)

    async def close(self) -> None:
        """Commit what is pending, stop the committer and close the backend."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._open is not None or self._committing is not None:
                try:
                    await self.sync()
                except StorageError:
                    pass
        finally:
            if self._commit_task is not None:
                self._commit_task.cancel()
                await asyncio.gather(self._commit_task, return_exceptions=True)
            if self._executor is not None:
                loop = asyncio.get_running_loop()
                await loop.run_in_executor(self._executor, self._backend.close)
                self._executor.shutdown(wait=True)

    # -- reads -----------------------------------------------------------------

    @property
    def revision(self) -> int:
        """The last revision assigned (applied in memory, maybe not yet durable)."""
        return self._revision

    @property
    def durable_revision(self) -> int:
        """The last revision committed and published to watchers."""
        return self._durable

    @property
    def compacted_revision(self) -> int:
        """Changes at or before this revision are no longer kept."""
        return self._compacted

    def get(self, resource: str, namespace: str, name: str) -> Entry | None:
        return self._objects.get(resource, {}).get(namespace, {}).get(name)

    def count(self, resource: str, namespace: str | None = None) -> int:
        spaces = self._objects.get(resource, {})
        if namespace is None:
            return sum(len(v) for v in spaces.values())
        return len(spaces.get(namespace, ()))

    def resources(self) -> list[str]:
        """Storage keys that hold (or held) objects."""
        return list(self._objects)

    def items(self, resource: str, namespace: str | None = None) -> list[tuple[str, str, Entry]]:
        """Current objects sorted by (namespace, name), as etcd orders its keys."""
        spaces = self._objects.get(resource)
        if not spaces:
            return []
        out: list[tuple[str, str, Entry]] = []
        names = [namespace] if namespace is not None else sorted(spaces)
        for ns in names:
            objs = spaces.get(ns)
            if not objs:
                continue
            order = self._sorted.get((resource, ns))
            if order is None or len(order) != len(objs):
                order = sorted(objs)
                self._sorted[(resource, ns)] = order
            out.extend((ns, n, objs[n]) for n in order)
        return out

    def items_at(
        self, resource: str, namespace: str | None, revision: int
    ) -> list[tuple[str, str, Entry]]:
        """The objects as they were at ``revision``, sorted by (namespace, name).

        Rebuilt from the current objects and the kept history, the way etcd
        reads a past revision for a paged list.

        Raises:
            StatusError: 410 Expired when ``revision`` is older than the kept history.
        """
        if revision >= self._revision:
            return self.items(resource, namespace)
        if revision < self._compacted:
            raise expired(revision, self._compacted)
        first = bisect.bisect_right(self._history_revs, revision)
        older: dict[tuple[str, str], Entry | None] = {}
        for change in self._history[first:]:
            if change.resource != resource:
                continue
            if namespace is not None and change.namespace != namespace:
                continue
            key = (change.namespace, change.name)
            if key not in older:
                older[key] = change.prev
        # Changes applied in memory but not yet durable are not in the history.
        for batch in (self._committing, self._open):
            if batch is None:
                continue
            for change in batch.changes:
                if change.resource != resource or change.rev <= revision:
                    continue
                if namespace is not None and change.namespace != namespace:
                    continue
                older.setdefault((change.namespace, change.name), change.prev)
        current = {(ns, n): e for ns, n, e in self.items(resource, namespace)}
        for key, entry in older.items():
            if entry is None:
                current.pop(key, None)
            else:
                current[key] = entry
        return [(ns, n, current[(ns, n)]) for ns, n in sorted(current)]

    async def wait_for_revision(self, revision: int, timeout_s: float) -> bool:
        """Wait until the durable revision reaches ``revision``; False on timeout."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self._durable < revision:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            self._revision_changed.clear()
            try:
                await asyncio.wait_for(self._revision_changed.wait(), remaining)
            except asyncio.TimeoutError:
                return self._durable >= revision
        return True

    # -- writes ----------------------------------------------------------------

    def next_revision(self) -> int:
        """Reserve the revision of the next write; call :meth:`write` (or
        :meth:`release_revision`) before awaiting."""
        self._revision += 1
        return self._revision

    def release_revision(self, rev: int) -> None:
        """Give back the revision just reserved when its write is refused before
        :meth:`write`, so that revisions stay gapless."""
        if rev == self._revision:
            self._revision -= 1

    def write(
        self,
        event_type: str,
        resource: str,
        namespace: str,
        name: str,
        entry: Entry,
    ) -> Change:
        """Apply one change (at ``entry.rv``, from :meth:`next_revision`) in memory
        and queue it for commit. For DELETED, ``entry`` is the object's final state.

        Then await :meth:`sync` before telling anyone about it.
        """
        if self._closed:
            raise StorageError("the store is closed")
        spaces = self._objects.setdefault(resource, {})
        objs = spaces.setdefault(namespace, {})
        prev = objs.get(name)
        if event_type == DELETED:
            objs.pop(name, None)
            self._sorted.pop((resource, namespace), None)
            if not objs:
                del spaces[namespace]
        else:
            if prev is None:
                self._sorted.pop((resource, namespace), None)
            objs[name] = entry
        change = Change(entry.rv, event_type, resource, namespace, name, entry, prev)
        if self._open is None:
            self._open = _Batch([], asyncio.get_running_loop().create_future())
        self._open.changes.append(change)
        if self._commit_task is None or self._commit_task.done():
            self._commit_task = asyncio.get_running_loop().create_task(
                self._commit_loop(), name="apiserver-commit"
            )
        return change

    async def sync(self) -> None:
        """Return once every change applied so far is durable and published.

        Raises:
            StorageError: The commit that held one of those changes failed.
        """
        batch = self._open or self._committing
        if batch is not None:
            await asyncio.shield(batch.done)

    async def _commit_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while self._open is not None:
            if self._commit_interval_s > 0:
                await asyncio.sleep(self._commit_interval_s)
            batch, self._open = self._open, None
            self._committing = batch
            top = batch.changes[-1].rev
            rows = [
                Row(
                    c.resource,
                    c.namespace,
                    c.name,
                    c.rev,
                    None if c.type == DELETED else c.entry.data,
                )
                for c in batch.changes
            ]
            try:
                if self._backend.blocking:
                    await loop.run_in_executor(self._executor, self._backend.commit, rows, top)
                else:
                    self._backend.commit(rows, top)
            except (StorageError, OSError) as exc:
                failed = [batch] + ([self._open] if self._open is not None else [])
                self._open = None
                self._committing = None
                self._undo([c for b in failed for c in b.changes])
                error = exc if isinstance(exc, StorageError) else StorageError(str(exc))
                for b in failed:
                    if not b.done.done():
                        b.done.set_exception(error)
                        b.done.exception()  # retrieved here; waiters re-raise it
                continue
            except asyncio.CancelledError:
                for b in (batch, self._open):
                    if b is not None and not b.done.done():
                        b.done.set_exception(StorageError("the store was closed mid-commit"))
                        b.done.exception()
                raise
            self._committing = None
            self._durable = top
            self._publish(batch.changes)
            batch.done.set_result(None)
            self._revision_changed.set()

    def _undo(self, changes: list[Change]) -> None:
        for change in reversed(changes):
            spaces = self._objects.setdefault(change.resource, {})
            objs = spaces.setdefault(change.namespace, {})
            if change.prev is None:
                objs.pop(change.name, None)
            else:
                objs[change.name] = change.prev
            self._sorted.pop((change.resource, change.namespace), None)
            if not objs:
                del spaces[change.namespace]
        self._revision = self._durable
        for hook in self.on_undo:
            hook(changes)

    def _publish(self, changes: list[Change]) -> None:
        history, revs = self._history, self._history_revs
        for change in changes:
            history.append(change)
            revs.append(change.rev)
            subs = self._subscribers.get(change.resource)
            if subs:
                for sub in list(subs):
                    if not sub.deliver(change):
                        subs.discard(sub)
        excess = len(history) - self._history_events
        if excess > 0:
            self._compacted = revs[excess - 1]
            del history[:excess]
            del revs[:excess]
        for hook in self.on_commit:
            hook(changes)

    # -- watch -----------------------------------------------------------------

    def subscribe(self, resource: str, since: int, subscriber: Subscriber) -> None:
        """Deliver every durable change of ``resource`` after revision ``since``
        from the history, then every future one, to ``subscriber``.

        Raises:
            StatusError: 410 Expired when ``since`` is older than the kept history.
        """
        if since < self._compacted:
            raise expired(since, self._compacted)
        first = bisect.bisect_right(self._history_revs, since)
        for change in self._history[first:]:
            if change.resource == resource and not subscriber.deliver(change):
                return
        self._subscribers.setdefault(resource, set()).add(subscriber)

    def subscribe_now(self, resource: str, subscriber: Subscriber) -> None:
        """Deliver every future change of ``resource`` to ``subscriber``."""
        self._subscribers.setdefault(resource, set()).add(subscriber)

    def unsubscribe(self, resource: str, subscriber: Subscriber) -> None:
        subs = self._subscribers.get(resource)
        if subs is not None:
            subs.discard(subscriber)
