"""get, list and watch in the embedded API (consistent snapshots at one revision,
``limit``/``continue`` paging, resourceVersion and resourceVersionMatch rules).

Part of :class:`cloudhub.standalone.rest.Registry`.
"""

from __future__ import annotations

from cloudhub.standalone import errors
from cloudhub.standalone.options import (
    ListParams,
    ListResult,
    decode_continue,
    encode_continue,
    parse_resource_version,
)
from cloudhub.standalone.resources import ResourceType
from cloudhub.standalone.store import Entry
from cloudhub.standalone.watch import Watch

__all__ = ["Reads"]


class Reads:
    """The read verbs."""

    async def get(self, rtype: ResourceType, namespace: str, name: str) -> Entry:
        """The stored object.

        Raises:
            StatusError: 404 NotFound.
        """
        entry = self.store.get(rtype.storage_key, namespace, name)
        await self.store.sync()
        if entry is None:
            raise errors.not_found(rtype.plural, rtype.group, name)
        return entry

    async def list(
        self, rtype: ResourceType, namespace: str | None, params: ListParams
    ) -> ListResult:
        """One page of the collection (all of it without ``limit``).

        Raises:
            StatusError: 400 for bad paging parameters; 410 Expired when the
                ``continue`` token or the exact resourceVersion asked is older than
                the kept history; 504 when the resourceVersion asked is newer than
                the store's after 3 s.
        """
        store = self.store
        key = rtype.storage_key
        start = ""
        rv_param, match = params.resource_version, params.resource_version_match
        if match and match not in ("Exact", "NotOlderThan"):
            raise errors.bad_request(
                f'resourceVersionMatch: Unsupported value: "{match}": supported values: '
                '"Exact", "NotOlderThan"'
            )
        if match and not rv_param:
            raise errors.bad_request(
                "resourceVersionMatch is forbidden unless resourceVersion is provided"
            )
        if params.continue_token:
            if rv_param:
                raise errors.bad_request(
                    "specifying resource version is not allowed when using continue"
                )
            revision, start = decode_continue(params.continue_token)
            if revision < store.compacted_revision:
                raise errors.StatusError(
                    410,
                    "Expired",
                    "The provided continue parameter is too old to display a consistent list "
                    "result. You can start a new list without the continue parameter.",
                )
            rows = store.items_at(key, namespace, revision)
        elif rv_param and rv_param != "0":
            asked = parse_resource_version(rv_param)
            exact = match == "Exact" or (not match and params.limit > 0)
            if asked > store.revision and not await store.wait_for_revision(asked, 3.0):
                raise errors.too_large_resource_version(asked, store.revision)
            if exact:
                revision = asked
                rows = store.items_at(key, namespace, asked)
            else:
                revision = store.revision
                rows = store.items(key, namespace)
        else:
            if match == "Exact":
                raise errors.bad_request(
                    'resourceVersionMatch "exact" is forbidden for resourceVersion "0"'
                )
            revision = store.revision
            rows = store.items(key, namespace)
        limit = params.limit
        if rv_param == "0" and not params.continue_token:
            limit = 0  # served from the watch cache, which ignores limit (as in 1.20)
        out: list[Entry] = []
        token, remaining = "", None
        last = ""
        for index, (ns, name, entry) in enumerate(rows):
            if start and f"{ns}/{name}" <= start:
                continue
            if params.filtered and not params.matches(ns, name, entry):
                continue
            if limit and len(out) == limit:
                token = encode_continue(revision, last)
                if not params.filtered:
                    remaining = len(rows) - index
                break
            out.append(entry)
            last = f"{ns}/{name}"
        await store.sync()
        return ListResult(revision, out, token, remaining)

    async def watch(self, rtype: ResourceType, namespace: str | None, params: ListParams) -> Watch:
        """Subscribe to changes; the caller drains ``watch.initial`` then ``watch.queue``
        and must call :meth:`unwatch`.

        Raises:
            StatusError: 410 Expired when the resourceVersion asked is older than
                the kept history (the HTTP layer sends it as an ERROR event).
        """
        store = self.store
        rv = params.resource_version
        if rv in ("", "0"):
            since = store.revision
            watch = Watch(rtype, namespace, params, since, self.watch_queue_events)
            watch.initial = [
                (ns, name, entry)
                for ns, name, entry in store.items(rtype.storage_key, namespace)
                if not params.filtered or params.matches(ns, name, entry)
            ]
            store.subscribe_now(rtype.storage_key, watch)
            watch.bounded = True
            try:
                await store.sync()
            except BaseException:
                store.unsubscribe(rtype.storage_key, watch)
                raise
            return watch
        since = parse_resource_version(rv)
        watch = Watch(rtype, namespace, params, since, self.watch_queue_events)
        store.subscribe(rtype.storage_key, since, watch)
        watch.bounded = True
        return watch

    def unwatch(self, watch: Watch) -> None:
        self.store.unsubscribe(watch.rtype.storage_key, watch)
