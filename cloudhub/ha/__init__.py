"""Hub high availability: several replicas share one fleet, each node served by exactly
one replica at a time, recorded and fenced in the Kubernetes API (docs/hub.md, "High
availability")."""

from cloudhub.ha.handover import full_jitter, renew_before_stop, shutdown_spread
from cloudhub.ha.ownership import OWNER_ANNOTATION, Claim, NodeOwnership, owner_of
from cloudhub.ha.replicas import REPLICA_LABEL, ReplicaLeases, replica_lease_name
from cloudhub.ha.settings import HASettings

__all__ = [
    "OWNER_ANNOTATION",
    "REPLICA_LABEL",
    "Claim",
    "HASettings",
    "NodeOwnership",
    "ReplicaLeases",
    "full_jitter",
    "owner_of",
    "renew_before_stop",
    "replica_lease_name",
    "shutdown_spread",
]
