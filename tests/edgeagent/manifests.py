"""Turn the real workload manifests in ../shared/data/manifests into Pods, as the hub
would send them (API-server defaults filled in), for the agent tests."""

from __future__ import annotations

import copy
import os
import pathlib
import uuid
from typing import Any

import yaml


def _find_corpus() -> pathlib.Path:
    """``../shared/data/manifests`` next to the repository (or next to the directory
    holding its worktree); ``EDGEFLEET_MANIFESTS`` overrides."""
    if os.environ.get("EDGEFLEET_MANIFESTS"):
        return pathlib.Path(os.environ["EDGEFLEET_MANIFESTS"])
    repo = pathlib.Path(__file__).resolve().parents[2]
    for base in (repo.parent, repo.parent.parent):
        candidate = base / "shared" / "data" / "manifests"
        if candidate.is_dir():
            return candidate
    return repo.parent / "shared" / "data" / "manifests"


MANIFESTS = _find_corpus()
WORKLOAD_KINDS = {"Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "Job"}


def load_documents() -> list[tuple[pathlib.Path, dict[str, Any]]]:
    """Every YAML document in the corpus that parses (the broken ones are skipped: their
    loader errors are another component's concern)."""
    docs = []
    for path in sorted(MANIFESTS.rglob("*")):
        if path.suffix not in (".yaml", ".yml"):
            continue
        try:
            for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
                if isinstance(doc, dict):
                    docs.append((path, doc))
        except yaml.YAMLError:
            continue
    return docs


def pod_templates(docs) -> list[tuple[str, str, dict[str, Any]]]:
    """(workload name, namespace, pod template) for each workload, including the ones
    nested in DeploymentGrid, UnitedDeployment and the Karmada CloneSet test case."""
    out = []
    for _path, doc in docs:
        kind = doc.get("kind")
        meta = doc.get("metadata") or {}
        ns = meta.get("namespace") or "default"
        spec = doc.get("spec") or {}
        if kind in WORKLOAD_KINDS:
            out.append((meta.get("name", ""), ns, spec.get("template") or {}))
        elif kind == "DeploymentGrid":
            out.append((meta["name"], ns, spec["template"]["template"]))
        elif kind == "UnitedDeployment":
            tmpl = spec["workloadTemplate"]["deploymentTemplate"]["spec"]["template"]
            out.append((meta["name"], ns, tmpl))
        elif "desiredObj" in doc and doc["desiredObj"].get("kind") == "CloneSet":
            obj = doc["desiredObj"]
            out.append(
                (
                    obj["metadata"]["name"],
                    obj["metadata"].get("namespace", "default"),
                    obj["spec"]["template"],
                )
            )
    return out


def configs(docs) -> list[dict[str, Any]]:
    """ConfigMaps and Secrets of the corpus, namespace defaulted."""
    out = []
    for _path, doc in docs:
        if doc.get("kind") in ("ConfigMap", "Secret"):
            obj = copy.deepcopy(doc)
            obj["metadata"].setdefault("namespace", "default")
            obj["metadata"]["uid"] = str(uuid.uuid4())
            out.append(obj)
    return out


def default_pull_policy(image: str) -> str:
    last = image.rsplit("/", 1)[-1]
    return "Always" if ":" not in last or last.endswith(":latest") else "IfNotPresent"


def to_pod(name: str, namespace: str, template: dict[str, Any], node: str) -> dict[str, Any]:
    """A Pod from a template, with the defaults the API server fills in."""
    spec = copy.deepcopy(template.get("spec") or {})
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    spec["nodeName"] = node
    for group in ("containers", "initContainers"):
        for c in spec.get(group) or []:
            c.setdefault("imagePullPolicy", default_pull_policy(c.get("image", "")))
            c.setdefault("terminationMessagePath", "/dev/termination-log")
            c.setdefault("terminationMessagePolicy", "File")
            c.setdefault("resources", {})
            for p in c.get("ports") or []:
                p.setdefault("protocol", "TCP")
    for vol in spec.get("volumes") or []:
        for key in ("configMap", "secret"):
            if key in vol:
                vol[key].setdefault("defaultMode", 420)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{name}-0",
            "namespace": namespace,
            "uid": str(uuid.uuid4()),
            "labels": (template.get("metadata") or {}).get("labels") or {},
        },
        "spec": spec,
    }


def adapt_for_busybox(pod: dict[str, Any], image: str, host_root: pathlib.Path) -> dict[str, Any]:
    """Images → the local busybox (pull policy as the API server set it for the real image
    stays), commands → a script that serves the probe paths and sleeps, hostPaths → below
    ``host_root`` (created as their type requires)."""
    pod = copy.deepcopy(pod)
    spec = pod["spec"]
    for group in ("containers", "initContainers"):
        for c in spec.get(group) or []:
            c["image"] = image
            if c.get("imagePullPolicy") == "Always":
                c["imagePullPolicy"] = "IfNotPresent"  # no registry here
            script = ["mkdir -p /www"]
            for probe in (c.get("readinessProbe"), c.get("livenessProbe")):
                http = (probe or {}).get("httpGet")
                if http:
                    script.append(f"echo ok > /www{http.get('path', '/index.html')}")
                    script.append(f"busybox httpd -p {http['port']} -h /www")
            script.append("exec sleep 3600" if group == "containers" else "true")
            c["command"] = ["/bin/sh", "-c", "; ".join(script)]
            c.pop("args", None)
    for vol in spec.get("volumes") or []:
        hp = vol.get("hostPath")
        if hp:
            target = host_root / hp["path"].lstrip("/")
            kind = hp.get("type", "")
            if kind in ("", "Directory", "DirectoryOrCreate"):
                target.mkdir(parents=True, exist_ok=True)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
            hp["path"] = str(target)
    return pod
