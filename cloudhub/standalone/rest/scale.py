"""The scale subresource in the embedded API (get and update ``/scale``).

Part of :class:`cloudhub.standalone.rest.Registry`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cloudhub.standalone import errors
from cloudhub.standalone.encoding import loads
from cloudhub.standalone.options import (
    WriteOptions,
)
from cloudhub.standalone.resources import ResourceType
from cloudhub.standalone.store import Entry

__all__ = ["Scales"]


class Scales:
    """The scale subresource."""

    def scale_of(self, rtype: ResourceType, entry: Entry) -> dict[str, Any]:
        """The ``autoscaling/v1`` Scale of an object with a scale subresource."""
        assert rtype.scale is not None
        spec_path, status_path, selector_path = rtype.scale
        obj = loads(entry.data)
        meta = obj["metadata"]
        scale_meta = {
            k: meta[k]
            for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
            if k in meta
        }
        status: dict[str, Any] = {"replicas": int(_get_path(obj, status_path) or 0)}
        selector = _selector_string(_get_path(obj, selector_path)) if selector_path else ""
        if selector:
            status["selector"] = selector
        return {
            "kind": "Scale",
            "apiVersion": "autoscaling/v1",
            "metadata": scale_meta,
            "spec": {"replicas": int(_get_path(obj, spec_path) or 0)},
            "status": status,
        }

    async def get_scale(self, rtype: ResourceType, namespace: str, name: str) -> dict[str, Any]:
        """GET ``<plural>/<name>/scale``. Raises StatusError 404 when missing."""
        return self.scale_of(rtype, await self.get(rtype, namespace, name))

    async def update_scale(
        self,
        rtype: ResourceType,
        namespace: str,
        name: str,
        change: Callable[[dict[str, Any]], Any],
        opts: WriteOptions | None = None,
    ) -> dict[str, Any]:
        """PUT or PATCH ``<plural>/<name>/scale``: ``change`` maps the current Scale
        to the new one; only ``spec.replicas`` is written back to the object.

        Raises:
            StatusError: 404 when missing; 409 on a stale resourceVersion; 422 for
                a negative or missing replica count.
        """
        assert rtype.scale is not None
        opts = opts or WriteOptions()
        ns = namespace if rtype.namespaced else ""
        current = self.store.get(rtype.storage_key, ns, name)
        if current is None:
            raise errors.not_found(rtype.plural, rtype.group, name)
        scale = change(self.scale_of(rtype, current))
        if not isinstance(scale, dict):
            raise errors.bad_request("a Scale must be a JSON object")
        replicas = (scale.get("spec") or {}).get("replicas")
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
            raise errors.invalid(
                "Scale",
                "autoscaling",
                name,
                [
                    errors.StatusCause(
                        "FieldValueInvalid",
                        f"Invalid value: {replicas!r}: must be greater than or equal to 0",
                        "spec.replicas",
                    )
                ],
            )
        asked = (scale.get("metadata") or {}).get("resourceVersion")
        if asked and asked != str(current.rv):
            raise errors.conflict(rtype.plural, rtype.group, name)
        obj = loads(current.data)
        _set_path(obj, rtype.scale[0], replicas)
        obj["metadata"].pop("resourceVersion", None)
        entry = self._update_now(rtype, ns, name, current, obj, "", opts)
        await self.store.sync()
        return self.scale_of(rtype, entry)


def _get_path(obj: Any, path: str) -> Any:
    for part in path.split(".") if path else ():
        if not isinstance(obj, dict):
            return None
        obj = obj.get(part)
    return obj


def _set_path(obj: dict[str, Any], path: str, value: Any) -> None:
    parts = path.split(".")
    for part in parts[:-1]:
        obj = obj.setdefault(part, {})
    obj[parts[-1]] = value


def _selector_string(selector: Any) -> str:
    """A label selector object (matchLabels/matchExpressions) in its string form."""
    if isinstance(selector, str):
        return selector
    if not isinstance(selector, dict):
        return ""
    terms = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        op, key, values = expr.get("operator"), expr.get("key"), expr.get("values") or []
        if op == "In":
            terms.append(f"{key} in ({','.join(values)})")
        elif op == "NotIn":
            terms.append(f"{key} notin ({','.join(values)})")
        elif op == "Exists":
            terms.append(str(key))
        elif op == "DoesNotExist":
            terms.append(f"!{key}")
    return ",".join(terms)
