"""Pod lifecycle: spec checks, volumes, env, probes, status and the reconciler."""

from edgeagent.pods.reconciler import PodReconciler
from edgeagent.pods.spec import check_pod
from edgeagent.pods.worker import PodRef

__all__ = ["PodReconciler", "PodRef", "check_pod"]
