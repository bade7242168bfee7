"""``edgeagent status``: what the local store knows, readable with no agent and no hub."""

from __future__ import annotations

import datetime
from typing import Any

from edgeagent.errors import StoreError
from edgeagent.settings import AgentSettings
from edgeagent.store import Store

__all__ = ["collect", "render"]


def _cert_expiry(settings: AgentSettings) -> dict[str, Any]:
    path = settings.cert_path()
    if not path.exists():
        return {"path": str(path), "not_after": None, "error": "no certificate (not joined)"}
    try:
        from cryptography import x509  # only the status command reads certificates

        cert = x509.load_pem_x509_certificate(path.read_bytes())
        not_after = cert.not_valid_after_utc
    except (OSError, ValueError) as exc:
        return {"path": str(path), "not_after": None, "error": f"unreadable: {exc}"}
    left = (not_after - datetime.datetime.now(datetime.timezone.utc)).total_seconds()
    return {"path": str(path), "not_after": not_after.isoformat(), "seconds_left": int(left)}


def _devices(store: Store, settings: AgentSettings) -> dict[str, Any]:
    if not settings.devices.enabled:
        return {"enabled": False}
    try:
        summary = store.twins().summary()
        count = len(store.list_objects("Device"))
        models = len(store.list_objects("DeviceModel"))
    except StoreError as exc:  # e.g. a store from an agent before device twins
        return {"enabled": True, "error": str(exc)}
    return {
        "enabled": True,
        "devices": count,
        "models": models,
        "desired": summary.devices_with_desired,
        "reported": summary.reported,
        "reported_pending": summary.reported_pending,
        "history_pending": summary.history_pending,
        "socket": str(settings.device_socket_path()),
    }


def _metrics(store: Store, settings: AgentSettings) -> dict[str, Any]:
    if not settings.metrics.enabled:
        return {"enabled": False}
    try:
        backlog = store.metrics().backlog()
    except StoreError as exc:
        return {"enabled": True, "error": str(exc)}
    oldest = None
    if backlog.oldest_t_ms is not None:
        oldest = datetime.datetime.fromtimestamp(
            backlog.oldest_t_ms / 1000, datetime.timezone.utc
        ).isoformat()
    return {
        "enabled": True,
        "samples_pending": backlog.samples,
        "batches_pending": backlog.batches,
        "bytes": backlog.bytes,
        "budget_bytes": settings.metrics.budget_bytes,
        "oldest": oldest,
    }


def _dead_letters(store: Store) -> dict[str, Any]:
    """Up-going messages given up on (:mod:`edgeagent.store.deadletters`): the count and
    the latest three, without their bodies (an event's reason and object only)."""
    try:
        count = store.dead_letter_count()
        latest = store.dead_letters(limit=3)
    except StoreError as exc:  # a store from an agent before dead letters (read-only)
        return {"count": 0, "latest": [], "error": str(exc)}
    return {
        "count": count,
        "latest": [
            {
                "kind": d.kind,
                "object": _ref_text(d.body.get("ref")),
                "reason": d.reason,
                "attempts": d.attempts,
                "size": d.size,
                "dead_at": datetime.datetime.fromtimestamp(
                    d.dead_at, datetime.timezone.utc
                ).isoformat(timespec="seconds"),
            }
            for d in latest
        ],
    }


def _ref_text(ref: Any) -> str:
    if not isinstance(ref, dict):
        return ""
    ns = ref.get("namespace") or ""
    return f"{ref.get('kind', '')} {ns + '/' if ns else ''}{ref.get('name', '')}".strip()


#: Kinds listed under ``objects`` (the configuration the node holds besides its pods).
OBJECT_KINDS = ("ConfigMap", "Secret", "DeviceModel", "Device")


def _objects(store: Store) -> list[dict[str, Any]]:
    """The ConfigMaps, Secrets and devices the node holds: identity and resourceVersion
    only (never a Secret's data)."""
    return [
        {
            "kind": obj.kind,
            "namespace": obj.namespace,
            "name": obj.name,
            "uid": obj.uid,
            "resourceVersion": obj.resource_version,
        }
        for kind in OBJECT_KINDS
        for obj in store.list_objects(kind)
    ]


def collect(settings: AgentSettings) -> dict[str, Any]:
    """Gather the report from the store (read-only) and the certificate file.

    Raises:
        StoreError: no store yet, or it cannot be read.
    """
    store = Store.open_readonly(settings.store_path, settings.store)
    try:
        statuses = store.pod_statuses()
        pods = []
        for obj in store.list_objects("Pod"):
            st = statuses.get(obj.uid) or {}
            cs = st.get("containerStatuses") or []
            waiting = [
                c["state"]["waiting"].get("reason", "")
                for c in cs
                if "waiting" in (c.get("state") or {})
            ]
            pods.append(
                {
                    "namespace": obj.namespace,
                    "name": obj.name,
                    "uid": obj.uid,
                    "phase": st.get("phase", "Unknown"),
                    "reason": st.get("reason") or (waiting[0] if waiting else ""),
                    "ready": f"{sum(1 for c in cs if c.get('ready'))}/{len(cs)}",
                    "restarts": sum(int(c.get("restartCount", 0)) for c in cs),
                    "terminating": bool(obj.body.get("metadata", {}).get("deletionTimestamp")),
                }
            )
        session = store.get_state("hub.session") or {}
        return {
            "node_name": store.get_state("node.name") or settings.node_name,
            "hub": {
                "url": settings.hub.url or None,
                "state": session.get("state", "never connected"),
                "transport": session.get("transport"),
                "since": session.get("since"),
                "reason": session.get("reason"),
            },
            "certificate": _cert_expiry(settings),
            "pods": pods,
            "objects": _objects(store),
            "outbox_depth": store.outbox_depth(),
            "dead_letters": _dead_letters(store),
            "devices": _devices(store, settings),
            "metrics": _metrics(store, settings),
            "store": {
                "path": str(settings.store_path),
                "schema_version": store.schema_version(),
                "adoption": store.get_state("pods.adoption"),
            },
        }
    finally:
        store.close()


def render(report: dict[str, Any]) -> str:
    """The report as aligned text."""
    hub = report["hub"]
    cert = report["certificate"]
    lines = [
        f"node:        {report['node_name']}",
        f"hub:         {hub['state']}"
        + (f" over {hub['transport']}" if hub.get("transport") else "")
        + (f" since {hub['since']}" if hub.get("since") else "")
        + (f" ({hub['url']})" if hub.get("url") else " (no hub configured)"),
    ]
    if hub["state"] in ("refused", "no-credentials", "clock-wrong") and hub.get("reason"):
        lines.append(f"             {hub['reason']}")  # what to run to fix it
    if cert.get("not_after"):
        days = cert["seconds_left"] / 86400
        lines.append(f"certificate: expires {cert['not_after']} ({days:.1f} days left)")
    else:
        lines.append(f"certificate: {cert.get('error')}")
    lines.append(f"outbox:      {report['outbox_depth']} message(s) waiting for the hub")
    dead = report.get("dead_letters") or {}
    if dead.get("count"):
        lines.append(
            f"dead letters: {dead['count']} message(s) the hub could not take "
            "(edgeagent status --json lists the latest)"
        )
        for d in dead.get("latest") or []:
            lines.append(f"  {d['dead_at']}  {d['kind']}  {d['object']}  {d['reason']}"[:200])
    lines.append("devices:     " + _devices_line(report.get("devices") or {}))
    lines.append("metrics:     " + _metrics_line(report.get("metrics") or {}))
    adoption = (report.get("store") or {}).get("adoption") or {}
    if adoption.get("state") == "adopting":
        why = (
            f"store recovered (damaged file moved to {adoption.get('recoveredFrom')})"
            if adoption.get("reason") == "StoreRecovered"
            else "store never in sync with the hub"
        )
        lines.append(
            f"store:       {why}; {len(adoption.get('pods') or [])} running pod(s) adopted "
            "until the hub's first full sync"
        )
    lines.append(f"pods:        {len(report['pods'])}")
    if report["pods"]:
        rows = [("NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS")]
        for p in report["pods"]:
            shown = "Terminating" if p["terminating"] else (p["reason"] or p["phase"])
            rows.append((p["namespace"], p["name"], p["ready"], shown, str(p["restarts"])))
        widths = [max(len(r[i]) for r in rows) for i in range(5)]
        for r in rows:
            lines.append(
                "  " + "  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip()
            )
    return "\n".join(lines)


def _devices_line(d: dict[str, Any]) -> str:
    if not d.get("enabled"):
        return "disabled"
    if "error" in d:
        return f"unavailable ({d['error']})"
    text = (
        f"{d['devices']} device(s), {d['models']} model(s), desired {d['desired']}, "
        f"reported {d['reported']} ({d['reported_pending']} waiting for the hub)"
    )
    if d["history_pending"]:
        text += f", history {d['history_pending']}"
    return text


def _metrics_line(m: dict[str, Any]) -> str:
    if not m.get("enabled"):
        return "disabled"
    if "error" in m:
        return f"unavailable ({m['error']})"
    text = (
        f"{m['batches_pending']} batch(es) + {m['samples_pending']} sample(s) waiting for the "
        f"hub, {m['bytes'] / 1024:.1f} of {m['budget_bytes'] / 1024:.0f} KiB"
    )
    return text + (f", oldest {m['oldest'][:19]}Z" if m.get("oldest") else "")
