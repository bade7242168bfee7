"""Shared informers: one list+watch per resource kind, never one watch per node.

An :class:`Informer` keeps a local cache of raw JSON objects for one resource type
(optionally narrowed by namespace or selectors), kept current by the loop that
client-go's reflector made standard (STYLE.md §7):

- outer loop: forever, back-off with full jitter after a failure, reset after a
  successful list;
- middle: list (paged), then watch from the list's resourceVersion with bookmarks;
- inner: one watch stream, until the server ends it (``timeoutSeconds``) — then
  watch again from the last resourceVersion seen — or it fails: 410 Gone relists at
  once, anything else backs off and relists.

Handlers see a consistent picture: a relist synthesises ADDED / MODIFIED / DELETED
for what changed while the watch was down. Indexers map an object to index values
(for example pods by ``spec.nodeName``) so lookups per node cost O(result).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Iterable, Mapping

from cloudhub.errors import KubeAPIError, KubeGone
from cloudhub.kube.client import KubeClient
from cloudhub.kube.resources import ResourceType
from protocol.backoff import backoff

__all__ = ["EventHandler", "Indexer", "Informer", "object_key", "strip_object"]

log = logging.getLogger(__name__)

#: ``handler(event_type, obj, old)``: ADDED/MODIFIED/DELETED; ``old`` is the cached
#: previous version for MODIFIED and DELETED, else ``None``. Called synchronously, in
#: order; a handler must not block (schedule work instead).
EventHandler = Callable[[str, dict, "dict | None"], None]
#: Maps an object to the values it is indexed under.
Indexer = Callable[[dict], Iterable[str]]


def object_key(obj: dict) -> tuple[str, str]:
    """``(namespace, name)`` of a raw object; namespace is ``""`` for cluster-scoped ones."""
    meta = obj.get("metadata") or {}
    return meta.get("namespace") or "", meta.get("name") or ""


def strip_object(obj: dict) -> dict:
    """Informer transform: drop ``managedFields`` (server-side apply bookkeeping that no
    edge needs and that often outweighs the object itself)."""
    meta = obj.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        obj["metadata"] = {k: v for k, v in meta.items() if k != "managedFields"}
    return obj


class Informer:
    """A cache of one resource type kept current by list+watch.

    Args:
        client: the raw-JSON API client.
        rt: the resource type.
        namespace: watch one namespace only; ``None`` watches all.
        label_selector / field_selector: narrow the watched set, as on the API.
        indexers: name → function giving the index values of an object.
        transform: applied to every object before it is cached or handed to handlers
            (client-go's ``SetTransform``), e.g. to drop ``managedFields`` or everything
            but the fields the hub reads: what 10,000 cached Nodes cost is decided here.
        watch_timeout: seconds the server keeps one watch open (``timeoutSeconds``).
        page_size: objects per list page.
        backoff_base / backoff_cap: seconds, for retries after API failures
            (exponential with full jitter).
    """

    def __init__(
        self,
        client: KubeClient,
        rt: ResourceType,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        indexers: Mapping[str, Indexer] | None = None,
        transform: Callable[[dict], dict] | None = None,
        watch_timeout: int = 300,
        page_size: int = 500,
        backoff_base: float = 0.5,
        backoff_cap: float = 30.0,
    ) -> None:
        self.client = client
        self.rt = rt
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.watch_timeout = watch_timeout
        self.page_size = page_size
        self._backoff_base = backoff_base
        self._backoff_cap = backoff_cap
        self._transform = transform
        self._indexers = dict(indexers or {})
        self._index: dict[str, dict[str, set[tuple[str, str]]]] = {n: {} for n in self._indexers}
        self._handlers: list[EventHandler] = []
        self.store: dict[tuple[str, str], dict] = {}
        self.resource_version = ""
        self.synced = asyncio.Event()
        #: monotonic time of the last list, event or bookmark (for the informer-lag metric)
        self.last_heard = 0.0
        #: lists made after the first one (410 Gone, or a failed list retried)
        self.relists = 0
        #: watch streams opened
        self.watches = 0

    # -- reading -------------------------------------------------------------------------

    def get(self, name: str, namespace: str = "") -> dict | None:
        """The cached object, or ``None``."""
        return self.store.get((namespace, name))

    def by_index(self, index: str, value: str) -> list[dict]:
        """Cached objects whose indexer ``index`` yields ``value``.

        Raises:
            KeyError: no indexer of that name.
        """
        keys = self._index[index].get(value, ())
        return [self.store[k] for k in keys]

    def items(self) -> list[dict]:
        """A snapshot list of every cached object."""
        return list(self.store.values())

    def add_handler(self, handler: EventHandler) -> None:
        """Register a handler; it also receives ADDED for objects already cached."""
        self._handlers.append(handler)
        for obj in list(self.store.values()):
            self._call(handler, "ADDED", obj, None)

    async def wait_synced(self, timeout: float | None = None) -> None:
        """Wait until the first list has been applied.

        Raises:
            TimeoutError: not synced within ``timeout`` seconds.
        """
        await asyncio.wait_for(self.synced.wait(), timeout)

    # -- the loop ------------------------------------------------------------------------

    async def run(self) -> None:
        """List and watch forever; returns only when cancelled.

        A watch that ends normally (its ``timeoutSeconds``) or fails is resumed from the
        last resourceVersion seen (events or bookmarks), after a back-off when it failed;
        only 410 Gone, or a failed list, lists again (as client-go's reflector).
        """
        delays = self._delays()
        listed = False
        while True:
            try:
                if not listed:
                    if self.synced.is_set():
                        self.relists += 1
                    await self._list()
                    listed = True
                    delays = self._delays()
                heard = await self._watch_once()
                if heard:
                    delays = self._delays()
                    continue
                # Ended at once with nothing said: do not spin on a server that does that.
                await asyncio.sleep(next(delays))
            except KubeGone:
                log.info("watch on %s expired (410 Gone); relisting", self.rt.plural)
                listed = False
            except KubeAPIError as exc:
                delay = next(delays)
                log.warning(
                    "%s on %s failed (%s); retrying in %.1f s",
                    "watch" if listed else "list",
                    self.rt.plural,
                    exc,
                    delay,
                )
                await asyncio.sleep(delay)

    def _delays(self):
        return backoff(uniform=random.uniform, base=self._backoff_base, cap=self._backoff_cap)

    async def _list(self) -> None:
        items, rv = await self.client.list(
            self.rt,
            self.namespace,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            limit=self.page_size,
        )
        self.last_heard = time.monotonic()
        transform = self._transform
        fresh = {}
        for o in items:
            obj = transform(o) if transform is not None else o
            fresh[object_key(obj)] = obj
        for key in [k for k in self.store if k not in fresh]:
            self._apply("DELETED", self.store[key])
        for key, obj in fresh.items():
            old = self.store.get(key)
            if old is None:
                self._apply("ADDED", obj)
            elif _rv(old) != _rv(obj):
                self._apply("MODIFIED", obj)
        self.resource_version = rv
        self.synced.set()

    async def _watch_once(self) -> bool:
        """One watch stream; returns whether it brought any event or bookmark."""
        self.watches += 1
        heard = False
        started = time.monotonic()
        async for kind, obj in self.client.watch(
            self.rt,
            self.namespace,
            resource_version=self.resource_version,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            timeout_seconds=self.watch_timeout,
        ):
            heard = True
            self.last_heard = time.monotonic()
            rv = _rv(obj)
            if kind == "BOOKMARK":
                self.resource_version = rv or self.resource_version
                continue
            if kind in ("ADDED", "MODIFIED", "DELETED"):
                if self._transform is not None:
                    obj = self._transform(obj)
                self._apply(kind, obj)
                self.resource_version = rv or self.resource_version
        # A watch the server ended after a while is healthy even if nothing happened.
        return heard or time.monotonic() - started >= 1.0

    # -- cache updates -------------------------------------------------------------------

    def _apply(self, kind: str, obj: dict) -> None:
        key = object_key(obj)
        old = self.store.get(key)
        if old is not None:
            self._unindex(key, old)
        if kind == "DELETED":
            self.store.pop(key, None)
        else:
            if kind == "ADDED" and old is not None:
                kind = "MODIFIED"
            self.store[key] = obj
            self._reindex(key, obj)
        for handler in self._handlers:
            self._call(handler, kind, obj, old)

    def _reindex(self, key: tuple[str, str], obj: dict) -> None:
        for name, fn in self._indexers.items():
            for value in fn(obj):
                self._index[name].setdefault(value, set()).add(key)

    def _unindex(self, key: tuple[str, str], obj: dict) -> None:
        for name, fn in self._indexers.items():
            bucket = self._index[name]
            for value in fn(obj):
                keys = bucket.get(value)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del bucket[value]

    def _call(self, handler: EventHandler, kind: str, obj: dict, old: dict | None) -> None:
        try:
            handler(kind, obj, old)
        except Exception:  # a broken handler must not stop the informer
            log.exception("informer handler for %s failed on %s", self.rt.plural, kind)


def _rv(obj: dict) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion", ""))
