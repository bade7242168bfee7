"""Fixtures for the hub session tests: the end-to-end tests' embedded API, client and
namespace (one definition, in ``tests/edgeagent/hublink/conftest.py``)."""

from tests.edgeagent.hublink.conftest import api, kube, namespace

__all__ = ["api", "kube", "namespace"]
