"""Fixtures for the deploy tests: the reference kube-apiserver and kubectl (shared with
the rest of the session, see tests/k8s/fixtures.py), and a started hub PKI on the
embedded API (tests/cloudhub/pki/conftest.py)."""

from tests.cloudhub.pki.conftest import cluster, start_hub  # noqa: F401  (re-exported)
from tests.k8s.fixtures import kube_apiserver, kubectl  # noqa: F401  (re-exported fixtures)
