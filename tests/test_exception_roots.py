"""One exception tree per package (STYLE.md §5): every public exception class the
``protocol`` and ``cloudhub`` packages define, and every one of ``edgeagent`` outside the
mapper SDK, derives from its package's root, so ``except ProtocolError`` /
``except HubError`` / ``except AgentError`` catches everything the package raises on
purpose."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

from cloudhub.errors import HubError
from edgeagent.errors import AgentError
from protocol.errors import ProtocolError

ROOTS = {"protocol": ProtocolError, "cloudhub": HubError, "edgeagent": AgentError}

# Mappers are separate programs built on the SDK (docs/devices.md); their errors have
# their own root, MapperError, and never reach the agent.
OWN_TREES = ("edgeagent.mappers",)


def _modules(package: str):
    root = importlib.import_module(package)
    for info in pkgutil.walk_packages(root.__path__, f"{package}."):
        name = info.name
        if name.endswith("__main__") or name.startswith(OWN_TREES):
            continue
        yield importlib.import_module(name)


def _exceptions(package: str):
    for module in _modules(package):
        for name, obj in vars(module).items():
            if (
                inspect.isclass(obj)
                and issubclass(obj, BaseException)
                and obj.__module__ == module.__name__
                and not name.startswith("_")
            ):
                yield obj


@pytest.mark.parametrize("package", sorted(ROOTS))
def test_every_public_exception_derives_from_the_package_root(package: str) -> None:
    root = ROOTS[package]
    found = list(_exceptions(package))
    assert root in found
    unrooted = sorted(f"{c.__module__}.{c.__qualname__}" for c in found if not issubclass(c, root))
    assert unrooted == []


def test_the_rooted_branches_keep_their_builtin_bases() -> None:
    """Joining the tree kept the built-in bases that existing handlers catch."""
    from cloudhub.standalone.bodies import BodyError
    from protocol.devices import DeviceError, InvalidDocument, InvalidValue

    for cls in (DeviceError, InvalidDocument, InvalidValue, BodyError):
        assert issubclass(cls, ValueError), cls
