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

__all__ = ["EventHandler", "Indexer", "Informer", "object_key"]

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


class Informer:
    """A cache of one resource type kept current by list+watch.

    Args:
        client: the raw-JSON API client.
        rt: the resource type.
        namespace: watch one namespace only; ``None`` watches all.
        label_selector / field_selector: narrow the watched set, as on the API.
        indexers: name → function giving the index values of an object.
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
        self._indexers = dict(indexers or {})
        self._index: dict[str, dict[str, set[tuple[str, str]]]] = {n: {} for n in self._indexers}
        self._handlers: list[EventHandler] = []
        self.store: dict[tuple[str, str], dict] = {}
        self.resource_version = ""
        self.synced = asyncio.Event()
        #: monotonic time of the last list, event or bookmark (for the informer-lag metric)
        self.last_heard = 0.0
        self.relists = 0

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
        """List and watch forever; returns only when cancelled."""
        delays = self._delays()
        while True:
            try:
                await self._list()
                delays = self._delays()
                while True:
                    await self._watch_once()
            except KubeGone:
                self.relists += 1
                log.info("watch on %s expired (410 Gone); relisting", self.rt.plural)
                continue
            except KubeAPIError as exc:
                delay = next(delays)
                log.warning(
                    "list/watch on %s failed (%s); retrying in %.1f s", self.rt.plural, exc, delay
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
        fresh = {object_key(o): o for o in items}
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

    async def _watch_once(self) -> None:
        async for kind, obj in self.client.watch(
            self.rt,
            self.namespace,
            resource_version=self.resource_version,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            timeout_seconds=self.watch_timeout,
        ):
            self.last_heard = time.monotonic()
            rv = _rv(obj)
            if kind == "BOOKMARK":
                self.resource_version = rv or self.resource_version
                continue
            if kind in ("ADDED", "MODIFIED", "DELETED"):
                self._apply(kind, obj)
                self.resource_version = rv or self.resource_version

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
