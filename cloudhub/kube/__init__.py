"""The hub's only door to the Kubernetes API (kubernetes_asyncio is imported nowhere else)."""

from cloudhub.kube.client import KubeClient, RequestObserver
from cloudhub.kube.informer import EventHandler, Indexer, Informer, object_key, strip_object
from cloudhub.kube.ratelimit import TokenBucket
from cloudhub.kube.resources import (
    CONFIGMAPS,
    CRDS,
    DAEMONSETS,
    DEPLOYMENTS,
    DEVICEMODELS,
    DEVICES,
    EVENTS,
    LEASES,
    NAMESPACES,
    NODES,
    PODS,
    SECRETS,
    ResourceType,
)
from cloudhub.kube.retry import retrying, update_with_retry
from cloudhub.kube.scoped import NamespacedInformers, scoped_informers
from cloudhub.kube.times import micro_time, parse_time, rfc3339

__all__ = [
    "CONFIGMAPS",
    "CRDS",
    "DAEMONSETS",
    "DEPLOYMENTS",
    "DEVICEMODELS",
    "DEVICES",
    "EVENTS",
    "LEASES",
    "NAMESPACES",
    "NODES",
    "PODS",
    "SECRETS",
    "EventHandler",
    "Indexer",
    "Informer",
    "KubeClient",
    "NamespacedInformers",
    "RequestObserver",
    "ResourceType",
    "TokenBucket",
    "micro_time",
    "object_key",
    "parse_time",
    "retrying",
    "rfc3339",
    "scoped_informers",
    "strip_object",
    "update_with_retry",
]
