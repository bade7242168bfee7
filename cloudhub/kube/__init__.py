"""The hub's only door to the Kubernetes API (kubernetes_asyncio is imported nowhere else)."""

from cloudhub.kube.client import KubeClient, RequestObserver
from cloudhub.kube.informer import EventHandler, Indexer, Informer, object_key
from cloudhub.kube.ratelimit import TokenBucket
from cloudhub.kube.resources import (
    CONFIGMAPS,
    CRDS,
    DAEMONSETS,
    DEPLOYMENTS,
    EVENTS,
    LEASES,
    NAMESPACES,
    NODES,
    PODS,
    SECRETS,
    ResourceType,
)
from cloudhub.kube.retry import retrying, update_with_retry

__all__ = [
    "CONFIGMAPS",
    "CRDS",
    "DAEMONSETS",
    "DEPLOYMENTS",
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
    "RequestObserver",
    "ResourceType",
    "TokenBucket",
    "object_key",
    "retrying",
    "update_with_retry",
]
