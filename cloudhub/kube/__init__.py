"""The only code that imports the Kubernetes client (kubernetes_asyncio).

Objects travel as raw JSON dicts (no generated models: deserialising a
fleet's pods into models costs far more than the API takes to send them).

- :class:`KubeClient`: list, watch, create, delete, patch status, over a
  kubernetes_asyncio ``ApiClient`` with ``_preload_content=False``.
- :class:`Informer`: list, then watch from the list's resourceVersion with
  bookmarks; relist on 410 Gone; reconnect with backoff (full jitter).
- :class:`Resource` and the well-known resources.

Minimal for now (placement's needs); the lead reconciles it with the hub's.
"""

from cloudhub.kube.backoff import backoff_delays
from cloudhub.kube.client import KubeClient
from cloudhub.kube.errors import AlreadyExists, Conflict, Gone, KubeError, NotFound
from cloudhub.kube.informer import Informer
from cloudhub.kube.resources import (
    CRDS,
    DAEMONSETS,
    DEPLOYMENTS,
    EDGEPLACEMENTS,
    NODES,
    PODS,
    Resource,
)

__all__ = [
    "CRDS",
    "DAEMONSETS",
    "DEPLOYMENTS",
    "EDGEPLACEMENTS",
    "NODES",
    "PODS",
    "AlreadyExists",
    "Conflict",
    "Gone",
    "Informer",
    "KubeClient",
    "KubeError",
    "NotFound",
    "Resource",
    "backoff_delays",
]
