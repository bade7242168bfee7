"""How an operator's command reaches the Kubernetes API (``cloudhub token``, ``node``,
``placement explain``): one rule for all of them.

First found: the kubeconfig given (``--kubeconfig``, or ``$KUBECONFIG``, which the
commands read into the same option, as kubectl does), the kubeconfig the embedded API
writes in the hub's default data directory (:data:`EMBEDDED_KUBECONFIGS`), the pod's
service account (in-cluster).
"""

from __future__ import annotations

import os

from cloudhub.errors import ConfigError
from cloudhub.kube.client import KubeClient
from cloudhub.settings import KubeSettings

__all__ = ["EMBEDDED_KUBECONFIGS", "connect", "kubeconfig_path"]

EMBEDDED_KUBECONFIGS = (str(KubeSettings().embedded_data_dir / "kubeconfig"),)
"""Where the embedded API's kubeconfig is looked for when no other is given (in the hub's
default ``kube.embedded_data_dir``)."""


def kubeconfig_path(kubeconfig: str | None) -> str | None:
    """The kubeconfig to use: the one given (flag or ``$KUBECONFIG``), else the embedded
    API's when it exists, else None (in-cluster)."""
    if kubeconfig:
        return kubeconfig
    return next((c for c in EMBEDDED_KUBECONFIGS if os.path.exists(c)), None)


async def connect(kubeconfig: str | None) -> KubeClient:
    """A client of the API :func:`kubeconfig_path` chose (None: in-cluster).

    Raises:
        ConfigError: the kubeconfig is unusable, or there is neither a kubeconfig nor a
            service account (the message lists what was tried).
    """
    if kubeconfig:
        return await KubeClient.from_kubeconfig(kubeconfig)
    try:
        return KubeClient.in_cluster()
    except ConfigError as exc:
        tried = ", ".join(EMBEDDED_KUBECONFIGS)
        raise ConfigError(
            f"no Kubernetes API to talk to: pass --kubeconfig (or set KUBECONFIG); "
            f"also tried {tried} and the in-cluster service account"
        ) from exc
