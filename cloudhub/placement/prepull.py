"""EdgeImagePrePull objects as placement sees them (docs/upgrade.md "Image pre-pull").

An EdgePlacement with ``updateStrategy.prePull: true`` keeps an EdgeImagePrePull of the
same name in its namespace, owned by it: its template's images, its node selector
(:func:`prepull_for`). The hub's pre-pull controller (:mod:`cloudhub.upgrade.prepull`)
has the nodes pull them; the placement's rolling update replaces a pod on a node only once
that node pulled the current template's images (:func:`pulled_nodes`; the planner's
``set_pulled``).

The functions are pure; :class:`PrePullKeeper` writes the objects.
"""

from __future__ import annotations

import asyncio
import logging
import pathlib
from collections.abc import Callable, Mapping
from typing import Any

from cloudhub.errors import KubeAPIError, KubeConflict
from cloudhub.kube import ResourceType
from cloudhub.placement.model import API_GROUP, API_VERSION, KIND, PlacementKey, template_images

__all__ = [
    "PREPULLS",
    "PREPULL_CRD_PATH",
    "PREPULL_KIND",
    "PrePullKeeper",
    "prepull_for",
    "pulled_nodes",
    "template_images",
]

log = logging.getLogger(__name__)

PREPULL_KIND = "EdgeImagePrePull"
PREPULLS = ResourceType(API_GROUP, "v1alpha1", "edgeimageprepulls", PREPULL_KIND, True)
"""The EdgeImagePrePull resource type (namespaced)."""


PREPULL_CRD_PATH = pathlib.Path(__file__).with_name("prepull_crd.yaml")
"""The EdgeImagePrePull CRD (the same file as ``deploy/crds/``)."""


def prepull_for(placement: Mapping[str, Any]) -> dict[str, Any] | None:
    """The EdgeImagePrePull an EdgePlacement object asks for (``None`` when it does not
    set ``updateStrategy.prePull`` or its template names no image)."""
    spec = placement.get("spec") or {}
    if not (spec.get("updateStrategy") or {}).get("prePull"):
        return None
    images = template_images(spec.get("template") or {})
    if not images:
        return None
    meta = placement.get("metadata") or {}
    body: dict[str, Any] = {"images": list(images)}
    if spec.get("nodeSelector"):
        body["nodeSelector"] = spec["nodeSelector"]
    return {
        "apiVersion": API_VERSION,
        "kind": PREPULL_KIND,
        "metadata": {
            "name": meta.get("name", ""),
            "namespace": meta.get("namespace") or "default",
            "labels": {f"{API_GROUP}/placement": meta.get("name", "")},
            "ownerReferences": [
                {
                    "apiVersion": API_VERSION,
                    "kind": KIND,
                    "name": meta.get("name", ""),
                    "uid": meta.get("uid", ""),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": body,
    }


def pulled_nodes(prepull: Mapping[str, Any], images: tuple[str, ...]) -> frozenset[str]:
    """Nodes that pulled exactly ``images`` for the pre-pull's current generation: its
    spec names them, its status is of that generation, the node's entry ``Pulled``."""
    spec = prepull.get("spec") or {}
    if tuple(spec.get("images") or ()) != tuple(images):
        return frozenset()
    generation = (prepull.get("metadata") or {}).get("generation")
    status = prepull.get("status") or {}
    return frozenset(
        str(entry.get("name"))
        for entry in status.get("nodes") or ()
        if entry.get("phase") == "Pulled" and entry.get("generation") == generation
    )


class PrePullKeeper:
    """Keeps the EdgeImagePrePull of every EdgePlacement with ``prePull`` in line with it
    and tells the planner which nodes pulled (used by the placement controller).

    Args:
        client: the API client.
        on_pulled: ``(placement key, nodes)`` whenever the nodes that pulled a
            placement's current images may have changed.
        retry_s: seconds before a failed write is tried again.
    """

    def __init__(
        self,
        client: Any,
        on_pulled: Callable[[PlacementKey, frozenset[str]], None],
        *,
        retry_s: float = 1.0,
    ) -> None:
        self.client = client
        self.on_pulled = on_pulled
        self.retry_s = retry_s
        self._wanted: dict[PlacementKey, dict[str, Any]] = {}
        self._seen: dict[PlacementKey, Mapping[str, Any]] = {}
        self._pending: set[PlacementKey] = set()
        self._wake = asyncio.Event()

    def placement(self, key: PlacementKey, obj: Mapping[str, Any] | None) -> None:
        """An EdgePlacement changed (``None``: deleted or invalid)."""
        want = prepull_for(obj) if obj is not None else None
        if want is None:
            self._wanted.pop(key, None)
            self._pending.discard(key)
            return
        self._wanted[key] = want
        self._recompute(key)
        if (self._seen.get(key) or {}).get("spec") != want["spec"]:
            self._pending.add(key)
            self._wake.set()

    def prepull(self, kind: str, obj: dict[str, Any], old: dict[str, Any] | None = None) -> None:
        """An informer event of an EdgeImagePrePull."""
        meta = obj.get("metadata") or {}
        key = PlacementKey(KIND, meta.get("namespace") or "default", meta.get("name") or "")
        if kind == "DELETED":
            self._seen.pop(key, None)
            if key in self._wanted:
                self._pending.add(key)
                self._wake.set()
        else:
            self._seen[key] = obj
        if key in self._wanted:
            self._recompute(key)

    def _recompute(self, key: PlacementKey) -> None:
        images = tuple(self._wanted[key]["spec"]["images"])
        self.on_pulled(key, pulled_nodes(self._seen.get(key) or {}, images))

    async def run(self) -> None:
        """Write the wanted EdgeImagePrePulls until cancelled (create, else patch spec)."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            for key in sorted(self._pending, key=lambda k: (k.namespace, k.name)):
                want = self._wanted.get(key)
                self._pending.discard(key)
                if want is None:
                    continue
                try:
                    await self._write(key, want)
                except KubeAPIError as exc:
                    log.warning("EdgeImagePrePull %s/%s: %s", key.namespace, key.name, exc)
                    self._pending.add(key)
            if self._pending:
                await asyncio.sleep(self.retry_s)
                self._wake.set()

    async def _write(self, key: PlacementKey, want: dict[str, Any]) -> None:
        try:
            # rbac: hub's ClusterRole (create edgeimageprepulls)
            await self.client.create(PREPULLS, want, key.namespace)
        except KubeConflict:
            # rbac: hub's ClusterRole (patch edgeimageprepulls)
            await self.client.patch(PREPULLS, key.name, {"spec": want["spec"]}, key.namespace)
