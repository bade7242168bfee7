"""deploy/monitoring: the ServiceMonitor scrapes a port the hub's Service has, and the
Grafana dashboard parses and names only metrics (and labels) the hub exports."""

from __future__ import annotations

import json
import re

import yaml
from prometheus_client.metrics import MetricWrapperBase

from cloudhub.observability.metrics import HubMetrics
from tests.deploy.wheels import REPO

MONITORING = REPO / "deploy" / "monitoring"
_SUFFIXES = ("_bucket", "_count", "_sum", "_total", "_created")


def exported() -> tuple[set[str], dict[str, set[str]]]:
    """The metric family names the hub renders, and the label names of its labelled ones."""
    metrics = HubMetrics()
    text = metrics.render().decode()
    families = set(re.findall(r"(?m)^# TYPE (\S+) ", text))
    labels = {
        wrapper._name: set(wrapper._labelnames)
        for wrapper in vars(metrics).values()
        if isinstance(wrapper, MetricWrapperBase)
    }
    return families, labels


def family(name: str) -> str:
    for suffix in _SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def problems(expr: str, families: set[str], labels: dict[str, set[str]]) -> list[str]:
    """What in the PromQL ``expr`` the hub does not export: unknown metric names, and
    labels grouped on that its labelled metrics do not have."""
    names = re.findall(r"[a-z_][a-z0-9_]*", expr)
    metrics = [n for n in names if n.startswith(("edgefleet_", "process_"))]
    out = [f"no metric in {expr!r}"] if not metrics else []
    out += [n for n in metrics if n not in families and family(n) not in families]
    for grouped in re.findall(r"by \(([^)]*)\)", expr):
        wanted = {g.strip() for g in grouped.split(",")} - {"le"}
        for name in metrics:
            known = labels.get(family(name))
            if known is not None and not wanted <= known:
                out.append(f"{name} has no label {sorted(wanted - known)}")
    return out


def test_dashboard_names_only_exported_metrics_and_labels() -> None:
    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    families, labels = exported()
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    assert exprs and len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])
    assert [p for expr in exprs for p in problems(expr, families, labels)] == []


def test_the_check_catches_unknown_metrics_and_labels() -> None:
    families, labels = exported()
    assert problems("rate(edgefleet_hub_no_such_thing_total[5m])", families, labels) == [
        "edgefleet_hub_no_such_thing_total"
    ]
    assert problems(
        "sum by (reason) (rate(edgefleet_hub_sessions_refused_total[5m]))", families, labels
    ) == ["edgefleet_hub_sessions_refused_total has no label ['reason']"]
    assert problems("vector(1)", families, labels) == ["no metric in 'vector(1)'"]


def test_servicemonitor_scrapes_the_services_metrics_port() -> None:
    (monitor,) = yaml.safe_load_all((MONITORING / "servicemonitor.yaml").read_text())
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    services = yaml.safe_load_all((REPO / "deploy" / "hub" / "30-service.yaml").read_text())
    (service,) = [s for s in services if s]
    ports = {p["name"]: p for p in service["spec"]["ports"]}
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == "http" and ports["http"]["port"] == 9095
    assert endpoint["path"] == "/metrics"
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
