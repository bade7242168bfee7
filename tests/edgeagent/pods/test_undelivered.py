"""A ConfigMap or Secret the hub could not send arrives as its placeholder
(``protocol.undelivered``): whatever reads it for a pod (volumes, env, envFrom, optional or
not) fails with what happened, not ``not found``; an absent one still says ``not found``."""

from __future__ import annotations

import pytest

from edgeagent.errors import PodConfigError
from edgeagent.pods.env import resolve_env
from edgeagent.pods.objects import config_data
from protocol.undelivered import placeholder

BIG = placeholder(
    {"kind": "ConfigMap", "metadata": {"name": "big", "namespace": "ns", "uid": "u"}},
    102_450,
    65_536,
)
HUGE = placeholder(
    {"kind": "Secret", "metadata": {"name": "huge", "namespace": "ns", "uid": "s"}},
    136_600,
    65_536,
)
STORE = {("ConfigMap", "ns", "big"): BIG, ("Secret", "ns", "huge"): HUGE}


def lookup(kind: str, namespace: str, name: str):
    return STORE.get((kind, namespace, name))


@pytest.mark.parametrize("optional", [False, True])
def test_a_placeholder_says_it_exceeds_the_message_limit(optional: bool):
    with pytest.raises(PodConfigError) as err:
        config_data(lookup, "ConfigMap", "ns", "big", optional=optional)
    assert str(err.value) == 'configmap "big" exceeds the message limit (102450 > 65536 bytes)'
    with pytest.raises(PodConfigError, match=r'secret "huge" exceeds the message limit \(136600'):
        config_data(lookup, "Secret", "ns", "huge", optional=optional)


def test_an_absent_one_is_still_not_found():
    with pytest.raises(PodConfigError, match='configmap "gone" not found'):
        config_data(lookup, "ConfigMap", "ns", "gone")
    assert config_data(lookup, "ConfigMap", "ns", "gone", optional=True) is None


@pytest.mark.parametrize(
    "container",
    [
        {"name": "c", "envFrom": [{"secretRef": {"name": "huge"}}]},
        {
            "name": "c",
            "env": [{"name": "K", "valueFrom": {"secretKeyRef": {"name": "huge", "key": "k"}}}],
        },
    ],
)
def test_env_from_a_placeholder_names_the_limit(container: dict):
    pod = {"metadata": {"name": "p", "namespace": "ns"}, "spec": {"containers": [container]}}
    with pytest.raises(PodConfigError, match="exceeds the message limit"):
        resolve_env(container, pod, lookup, pod_ip="10.0.0.2", host_ip="10.0.0.1")
