"""Errors of the agent's metrics package.

::

    MetricsError                 root (under edgeagent.errors.AgentError): everything from
                                 edgeagent.metrics
    ├── MetricsSettingsError     a setting with an invalid value (we misused it)
    └── SamplingError            a host source that must exist could not be read

Optional sources (thermal zones, GPUs, container stats) never raise: they are skipped and
logged, so that one missing file never costs the whole sample.
"""

from __future__ import annotations

from edgeagent.errors import AgentError

__all__ = ["MetricsError", "MetricsSettingsError", "SamplingError"]


class MetricsError(AgentError):
    """Root of the errors raised by ``edgeagent.metrics``."""


class MetricsSettingsError(MetricsError, ValueError):
    """A metrics setting has an invalid value.

    Attributes:
        key: the setting's name (``"budget_bytes"``).
        reason: what is wrong with it.
    """

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"metrics setting {key}: {reason}")
        self.key = key
        self.reason = reason


class SamplingError(MetricsError):
    """A required host source (``/proc``, the state directory) could not be read.

    Attributes:
        source: what was being read (``"filesystem /var/lib/edgeagent"``).
    """

    def __init__(self, source: str, reason: str) -> None:
        super().__init__(f"cannot sample {source}: {reason}")
        self.source = source
        self.reason = reason
