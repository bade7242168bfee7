"""The hub fixtures (``cluster``, ``hubs``, ``kube``, ``namespace``) and the reference
kube-apiserver's session fixtures, for the aggregated API's tests."""

from tests.cloudhub.hub.conftest import cluster, hubs, kube, namespace  # noqa: F401
from tests.k8s.fixtures import kube_apiserver, kubectl  # noqa: F401  (session fixtures)
