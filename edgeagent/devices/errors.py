"""Errors of the agent's device twins and local device API.

``TwinError`` is the root, under the agent's root ``edgeagent.errors.AgentError``. Value
errors are ``protocol.devices.InvalidValue`` (not re-wrapped).
"""

from __future__ import annotations

from edgeagent.errors import AgentError


class TwinError(AgentError):
    """Root of the agent's twin errors."""


class APIStartError(TwinError):
    """The device API cannot listen (socket path taken by a live server, or an OS error)."""


class DeviceNotFound(TwinError, LookupError):
    """No device of that namespace/name is assigned to this node.

    Attributes:
        namespace: the namespace asked for.
        name: the name asked for.
    """

    def __init__(self, namespace: str, name: str) -> None:
        self.namespace = namespace
        self.name = name
        super().__init__(f"device {namespace}/{name} is not assigned to this node")


class ModelUnavailable(TwinError):
    """The device's DeviceModel has not reached this node yet, so values cannot be checked.

    Attributes:
        namespace: the device's namespace.
        model: the model name the device refers to.
    """

    def __init__(self, namespace: str, model: str) -> None:
        self.namespace = namespace
        self.model = model
        super().__init__(
            f"DeviceModel {namespace}/{model} is not on this node yet; retry after the agent syncs"
        )


class BadRequest(TwinError, ValueError):
    """A device API request is malformed (not JSON, wrong shape)."""
