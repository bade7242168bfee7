"""Fixtures for the deploy tests: the reference kube-apiserver and kubectl (shared with
the rest of the session, see tests/k8s/fixtures.py)."""

from tests.k8s.fixtures import kube_apiserver, kubectl  # noqa: F401  (re-exported fixtures)
