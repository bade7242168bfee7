"""Staged agent upgrades over the fleet (the EdgeUpgrade resource, docs/upgrade.md).

- :mod:`~cloudhub.upgrade.model`: the EdgeUpgrade resource as validated data.
- :mod:`~cloudhub.upgrade.rollout`: the pure rollout state machine (batches, health
  gate, failure and offline policies), fed node facts and the time.
"""

from cloudhub.upgrade.errors import IllegalTransition, InvalidUpgrade, UpgradeError
from cloudhub.upgrade.model import (
    API_GROUP,
    API_VERSION,
    KIND,
    PLURAL,
    Artifact,
    Batching,
    FailurePolicy,
    HealthGate,
    OfflinePolicy,
    Upgrade,
    UpgradeSpec,
    parse_spec,
    parse_upgrade,
)
from cloudhub.upgrade.rollout import (
    NodeFacts,
    NodePhase,
    NodeState,
    Order,
    Rollback,
    Rollout,
    RolloutPhase,
)

__all__ = [
    "API_GROUP",
    "API_VERSION",
    "KIND",
    "PLURAL",
    "Artifact",
    "Batching",
    "FailurePolicy",
    "HealthGate",
    "IllegalTransition",
    "InvalidUpgrade",
    "NodeFacts",
    "NodePhase",
    "NodeState",
    "OfflinePolicy",
    "Order",
    "Rollback",
    "Rollout",
    "RolloutPhase",
    "Upgrade",
    "UpgradeError",
    "UpgradeSpec",
    "parse_spec",
    "parse_upgrade",
]
