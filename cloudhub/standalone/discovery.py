"""Discovery documents: ``/api``, ``/apis``, ``/apis/<group>``, and the
APIResourceList of each group version, built from the served types.

kubectl and client libraries read these to map kinds to URLs; custom resources
appear as soon as their CRD is created and disappear when it is deleted.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from cloudhub.standalone.resources import ResourceType

__all__ = ["api_group", "api_group_list", "api_resource_list", "api_versions", "version_info"]

SERVER_VERSION = {"major": "1", "minor": "20", "gitVersion": "v1.20.2+edgefleet"}
_VERSION_RE = re.compile(r"^v(\d+)(?:(alpha|beta)(\d+))?$")


def version_priority(version: str) -> tuple[int, int, int, str]:
    """Sort key putting the preferred version first: v2 > v1 > v1beta2 > v1beta1 >
    v1alpha1 > anything else (alphabetically), as Kubernetes orders versions."""
    match = _VERSION_RE.match(version)
    if not match:
        return (3, 0, 0, version)
    major = int(match.group(1))
    stage = {None: 0, "beta": 1, "alpha": 2}[match.group(2)]
    minor = int(match.group(3) or 0)
    return (stage, -major, -minor, "")


def version_info() -> dict[str, str]:
    """``/version``: the Kubernetes release whose API this server follows."""
    return {
        **SERVER_VERSION,
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": "",
        "goVersion": "",
        "compiler": "",
        "platform": "linux/amd64",
    }


def api_versions(server_address: str) -> dict[str, Any]:
    """``/api``: the legacy core group's versions."""
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
        ],
    }


def _groups(types: Iterable[ResourceType]) -> dict[str, list[str]]:
    groups: dict[str, set[str]] = {}
    for rtype in types:
        if rtype.group:
            groups.setdefault(rtype.group, set()).add(rtype.version)
    return {g: sorted(v, key=version_priority) for g, v in sorted(groups.items())}


def _group_doc(group: str, versions: list[str]) -> dict[str, Any]:
    listed = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {"name": group, "versions": listed, "preferredVersion": listed[0]}


def api_group_list(types: Iterable[ResourceType]) -> dict[str, Any]:
    """``/apis``: every named group with its versions, preferred first."""
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [_group_doc(g, v) for g, v in _groups(types).items()],
    }


def api_group(types: Iterable[ResourceType], group: str) -> dict[str, Any] | None:
    """``/apis/<group>``, or None when the group is not served."""
    versions = _groups(types).get(group)
    if not versions:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group_doc(group, versions)}


def api_resource_list(
    types: Iterable[ResourceType], group: str, version: str
) -> dict[str, Any] | None:
    """``/api/v1`` or ``/apis/<group>/<version>``, or None when not served."""
    resources: list[dict[str, Any]] = []
    found = False
    for rtype in sorted(types, key=lambda t: t.plural):
        if rtype.group != group or rtype.version != version:
            continue
        found = True
        entry: dict[str, Any] = {
            "name": rtype.plural,
            "singularName": rtype.singular,
            "namespaced": rtype.namespaced,
            "kind": rtype.kind,
            "verbs": list(rtype.verbs),
        }
        if rtype.short_names:
            entry["shortNames"] = list(rtype.short_names)
        if rtype.categories:
            entry["categories"] = list(rtype.categories)
        resources.append(entry)
        if rtype.status_subresource:
            resources.append(
                {
                    "name": f"{rtype.plural}/status",
                    "singularName": "",
                    "namespaced": rtype.namespaced,
                    "kind": rtype.kind,
                    "verbs": ["get", "patch", "update"],
                }
            )
        if rtype.scale is not None:
            resources.append(
                {
                    "name": f"{rtype.plural}/scale",
                    "singularName": "",
                    "namespaced": rtype.namespaced,
                    "group": "autoscaling",
                    "version": "v1",
                    "kind": "Scale",
                    "verbs": ["get", "patch", "update"],
                }
            )
        if rtype.plural == "namespaces" and not rtype.group:
            resources.append(
                {
                    "name": "namespaces/finalize",
                    "singularName": "",
                    "namespaced": False,
                    "kind": "Namespace",
                    "verbs": ["update"],
                }
            )
    if not found:
        return None
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": resources,
    }
