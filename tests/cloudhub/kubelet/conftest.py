"""The hub fixtures (``cluster`` on the embedded API or the real kube-apiserver, ``hubs``,
``kube``, ``namespace``) for the kubelet API's tests."""

from tests.cloudhub.hub.conftest import cluster, hubs, kube, namespace  # noqa: F401
from tests.k8s.fixtures import kube_apiserver, kubectl  # noqa: F401  (session fixtures)
