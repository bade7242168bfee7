"""List-then-watch informer keeping raw objects, relisting on 410 Gone.

Layers (STYLE.md §7): the outer loop runs forever with backoff (full jitter,
reset after a successful list); the middle one lists, then watches from the
list's resourceVersion; the inner one reads one watch stream. A relist diffs
against the cache and reports objects that vanished meanwhile as DELETED,
so the handler sees every change exactly as a watch would have shown it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from cloudhub.kube.backoff import backoff_delays
from cloudhub.kube.client import KubeClient
from cloudhub.kube.errors import Gone, KubeError
from cloudhub.kube.resources import Resource

__all__ = ["Handler", "Informer"]

log = logging.getLogger(__name__)

Handler = Callable[[str, dict[str, Any]], None]
"""Called with ``(ADDED | MODIFIED | DELETED, object)`` for every change."""


def _key(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


class Informer:
    """Keeps a cache of one resource in sync and reports changes.

    Args:
        client: the API client.
        resource: what to watch.
        handler: called synchronously for each change (keep it quick).
        namespace: one namespace, or None for all.
        watch_timeout_s: how long one watch lasts before it is renewed.

    Attributes:
        cache: ``(namespace, name) -> object`` as last seen.
        synced: set once the first list has been delivered.
    """

    def __init__(
        self,
        client: KubeClient,
        resource: Resource,
        handler: Handler,
        *,
        namespace: str | None = None,
        watch_timeout_s: int = 300,
    ) -> None:
        self.client = client
        self.resource = resource
        self.handler = handler
        self.namespace = namespace
        self.watch_timeout_s = watch_timeout_s
        self.cache: dict[tuple[str, str], dict[str, Any]] = {}
        self.synced = asyncio.Event()

    async def run(self) -> None:
        """List and watch until cancelled."""
        delays = backoff_delays()
        while True:
            try:
                resource_version = await self._relist()
                delays = backoff_delays()
                await self._watch(resource_version)
            except Gone:
                log.info("%s: resourceVersion expired, relisting", self.resource.plural)
            except KubeError as exc:
                delay = next(delays)
                log.warning("%s: %s; retrying in %.1f s", self.resource.plural, exc, delay)
                await asyncio.sleep(delay)

    async def _relist(self) -> str:
        items, resource_version = await self.client.list(self.resource, self.namespace)
        fresh = {_key(obj): obj for obj in items}
        for key in [k for k in self.cache if k not in fresh]:
            self.handler("DELETED", self.cache.pop(key))
        for key, obj in fresh.items():
            old = self.cache.get(key)
            self.cache[key] = obj
            if old is None:
                self.handler("ADDED", obj)
            elif (old.get("metadata") or {}).get("resourceVersion") != (
                obj.get("metadata") or {}
            ).get("resourceVersion"):
                self.handler("MODIFIED", obj)
        self.synced.set()
        return resource_version

    async def _watch(self, resource_version: str) -> None:
        while True:
            async for kind, obj in self.client.watch(
                self.resource,
                resource_version,
                self.namespace,
                timeout_s=self.watch_timeout_s,
            ):
                resource_version = str(
                    (obj.get("metadata") or {}).get("resourceVersion") or resource_version
                )
                if kind == "BOOKMARK":
                    continue
                key = _key(obj)
                if kind == "DELETED":
                    self.cache.pop(key, None)
                else:
                    self.cache[key] = obj
                self.handler(kind, obj)
