"""Why an agent upgrade did not happen; every one carries the status ``reason``.

::

    UpgradeFailed (AgentError)      reason: the CamelCase cause reported to the hub
    ├── OrderRefused (UsageError)   the order breaks a rule: bad version, traversal, downgrade
    ├── DigestMismatch              the artifact's SHA-256 is not the ordered one (discarded)
    ├── BudgetExceeded              the artifact does not fit the cache's byte budget
    └── InstallFailed (EnvironmentFault)  pip, the smoke test or a rename failed
"""

from __future__ import annotations

from edgeagent.errors import AgentError, EnvironmentFault, UsageError

__all__ = ["BudgetExceeded", "DigestMismatch", "InstallFailed", "OrderRefused", "UpgradeFailed"]


class UpgradeFailed(AgentError):
    """An upgrade step failed; nothing of the running agent was changed.

    Attributes:
        reason: the cause for the node's status (``"DigestMismatch"``, ...).
    """

    reason = "UpgradeFailed"

    def __init__(self, message: str, *, reason: str | None = None) -> None:
        super().__init__(message)
        if reason is not None:
            self.reason = reason


class OrderRefused(UpgradeFailed, UsageError):
    """The order is not one this agent may carry out (a refused downgrade, a version or
    artifact name outside the grammar, a path escaping the cache)."""

    reason = "OrderRefused"


class DigestMismatch(UpgradeFailed):
    """The downloaded artifact's SHA-256 differs from the ordered one; it was deleted.

    Attributes:
        expected: the ordered digest.
        actual: the digest of what arrived.
    """

    reason = "DigestMismatch"

    def __init__(self, expected: str, actual: str) -> None:
        super().__init__(f"artifact digest {actual} is not the ordered {expected}")
        self.expected = expected
        self.actual = actual


class BudgetExceeded(UpgradeFailed):
    """The artifact is larger than the cache's byte budget allows."""

    reason = "ArtifactTooLarge"


class InstallFailed(UpgradeFailed, EnvironmentFault):
    """Building, checking or switching to the new environment failed."""

    reason = "InstallFailed"
