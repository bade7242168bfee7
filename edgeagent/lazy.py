"""Names a package imports from its modules on first use (PEP 562).

A package whose modules are costly to import and not needed by every agent (the upgrade
machinery, the device API, the metrics sampler) lists its public names with the module
each comes from, and lets :func:`lazy_exports` make its module-level ``__getattr__`` and
``__dir__``::

    __getattr__, __dir__ = lazy_exports(globals(), {"UpgradeManager": "manager"})
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    namespace: dict[str, Any], where: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's ``__getattr__`` and ``__dir__`` for names imported on first use.

    Args:
        namespace: the package's ``globals()``; a name, once imported, is stored there, so
            later lookups do not reach ``__getattr__`` again.
        where: public name -> the submodule (relative to the package) that defines it.

    Returns:
        ``(__getattr__, __dir__)``: bind them at the package's top level.
        ``__getattr__(name)`` raises AttributeError for a name not in ``where``.
    """
    package = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *where})

    return __getattr__, __dir__
