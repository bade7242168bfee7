"""Embedded Kubernetes-compatible API server (standalone mode).

The hub starts it when it has no cluster to talk to; tests use it as their
cluster. Public names::

    async with EmbeddedAPIServer(APIServerSettings(data_dir=path)) as api:
        api.url, api.kubeconfig_path, api.token, api.ca_cert_path
        api.add_api(aggregated)  # an API group served by code (cloudhub.aggregation)
"""

from cloudhub.standalone.errors import (
    ConfigurationError,
    StandaloneError,
    StatusError,
    StorageError,
)
from cloudhub.standalone.server import EmbeddedAPIServer
from cloudhub.standalone.settings import APIServerSettings

__all__ = [
    "APIServerSettings",
    "ConfigurationError",
    "EmbeddedAPIServer",
    "StandaloneError",
    "StatusError",
    "StorageError",
]
