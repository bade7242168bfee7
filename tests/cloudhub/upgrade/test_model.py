"""cloudhub.upgrade.model: EdgeUpgrade objects validated field by field."""

from __future__ import annotations

import copy
import pathlib
from typing import Any

import jsonschema
import pytest
import yaml

from cloudhub.placement.selectors import parse_label_selector
from cloudhub.upgrade import (
    Batching,
    FailurePolicy,
    InvalidUpgrade,
    OfflinePolicy,
    parse_upgrade,
)
from cloudhub.upgrade.model import HOSTNAME_LABEL, selection_labels

ROOT = pathlib.Path(__file__).resolve().parents[3]
CRD = ROOT / "deploy/crds/edgeupgrades.apps.edgefleet.io.yaml"
DIGEST = "0123456789abcdef" * 4


def example(**spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "apps.edgefleet.io/v1alpha1",
        "kind": "EdgeUpgrade",
        "metadata": {"name": "agent-0-5", "uid": "u-1", "generation": 3},
        "spec": {
            "version": "0.5.0",
            "artifact": {"sha256": DIGEST, "name": "edgefleet-0.5.0-py3-none-any.whl"},
        },
    }
    body["spec"].update(spec)
    return body


def schema() -> dict[str, Any]:
    crd = yaml.safe_load(CRD.read_text())
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def test_defaults() -> None:
    upgrade = parse_upgrade(example())
    spec = upgrade.spec
    assert (upgrade.name, upgrade.uid, upgrade.generation) == ("agent-0-5", "u-1", 3)
    assert str(spec.version) == "0.5.0"
    assert spec.artifact.name == "edgefleet-0.5.0-py3-none-any.whl" and not spec.artifact.url
    assert spec.batching == Batching(10, percent=True)
    assert spec.gate.pods_ready and spec.gate.soak_s == 0 and spec.gate.timeout_s == 600
    assert spec.failure_policy is FailurePolicy.PAUSE and spec.max_failures == 0
    assert spec.offline_policy is OfflinePolicy.WAIT
    assert not spec.paused and not spec.allow_downgrade
    assert spec.node_selector.empty


def test_every_field() -> None:
    spec = parse_upgrade(
        example(
            artifact={"sha256": DIGEST, "name": "a-1-py3-none-any.whl", "size": 1234},
            nodeSelector={"matchLabels": {"fleet": "pi"}},
            maxUnavailable=3,
            healthGate={"podsReady": False, "soakSeconds": 30, "timeoutSeconds": 120},
            failurePolicy="RollbackBatch",
            maxFailures=2,
            offlinePolicy="Skip",
            paused=True,
            allowDowngrade=True,
        )
    ).spec
    assert spec.artifact.name == "a-1-py3-none-any.whl" and spec.artifact.size == 1234
    assert spec.node_selector.matches({"fleet": "pi"})
    assert not spec.node_selector.matches({"fleet": "jetson"})
    assert spec.batching.size(1000) == 3
    assert (spec.gate.pods_ready, spec.gate.soak_s, spec.gate.timeout_s) == (False, 30, 120)
    assert spec.failure_policy is FailurePolicy.ROLLBACK_BATCH and spec.max_failures == 2
    assert spec.offline_policy is OfflinePolicy.SKIP and spec.paused and spec.allow_downgrade


@pytest.mark.parametrize(
    ("total", "value", "size"),
    [(1000, "10%", 100), (30, "10%", 3), (5, "10%", 1), (7, "100%", 7), (30, 4, 4)],
)
def test_batch_sizes_round_down_to_at_least_one(total: int, value: Any, size: int) -> None:
    assert parse_upgrade(example(maxUnavailable=value)).spec.batching.size(total) == size


BAD = [
    ({"version": "0.5.0; rm -rf /"}, "spec.version"),
    ({"version": "../../0.5"}, "spec.version"),
    ({"version": None}, "spec.version"),
    (
        {"artifact": {"sha256": DIGEST.upper(), "name": "a-1-py3-none-any.whl"}},
        "spec.artifact.sha256",
    ),
    ({"artifact": {"sha256": DIGEST[:-1], "name": "a-1-py3-none-any.whl"}}, "spec.artifact.sha256"),
    ({"artifact": {"sha256": DIGEST, "name": "../../etc/x.whl"}}, "spec.artifact.name"),
    ({"artifact": {"sha256": DIGEST, "name": "a.tar.gz"}}, "spec.artifact.name"),
    ({"artifact": {"sha256": DIGEST}}, "spec.artifact"),
    (
        {"artifact": {"sha256": DIGEST, "name": "a-1-py3-none-any.whl", "url": "https://x"}},
        "spec.artifact",
    ),
    ({"artifact": {"sha256": DIGEST, "url": "http://plain.example/a.whl"}}, "spec.artifact.url"),
    ({"artifact": {"sha256": DIGEST, "url": "https://x/a b.whl"}}, "spec.artifact.url"),
    (
        {"artifact": {"sha256": DIGEST, "name": "a-1-py3-none-any.whl", "path": "/x"}},
        "spec.artifact",
    ),
    ({"artifact": "edgefleet.whl"}, "spec.artifact"),
    ({"maxUnavailable": 0}, "spec.maxUnavailable"),
    ({"maxUnavailable": "0%"}, "spec.maxUnavailable"),
    ({"maxUnavailable": "150%"}, "spec.maxUnavailable"),
    ({"maxUnavailable": "ten"}, "spec.maxUnavailable"),
    ({"maxUnavailable": True}, "spec.maxUnavailable"),
    # Regression (break1): "²".isdigit() is true and int("²") raised ValueError, as did
    # a 5000-digit percentage (int's digit limit), instead of InvalidUpgrade.
    ({"maxUnavailable": "²%"}, "spec.maxUnavailable"),
    ({"maxUnavailable": "9" * 5000 + "%"}, "spec.maxUnavailable"),
    ({"maxUnavailable": "\u0665\u0660%"}, "spec.maxUnavailable"),  # Arabic-Indic 50
    ({"version": "$(reboot)"}, "spec.version"),
    ({"healthGate": {"soakSeconds": -1}}, "spec.healthGate.soakSeconds"),
    ({"healthGate": {"soakSeconds": 60, "timeoutSeconds": 60}}, "spec.healthGate.soakSeconds"),
    ({"healthGate": {"timeoutSeconds": 0}}, "spec.healthGate.timeoutSeconds"),
    ({"healthGate": {"podsReady": "yes"}}, "spec.healthGate.podsReady"),
    ({"healthGate": {"ready": True}}, "spec.healthGate"),
    ({"failurePolicy": "Ignore"}, "spec.failurePolicy"),
    ({"offlinePolicy": "Later"}, "spec.offlinePolicy"),
    ({"maxFailures": -1}, "spec.maxFailures"),
    ({"paused": "true"}, "spec.paused"),
    ({"allowDowngrade": 1}, "spec.allowDowngrade"),
    ({"nodeSelector": {"matchLabels": {"bad key!": "x"}}}, "spec.nodeSelector.matchLabels"),
    ({"batchSize": 3}, "spec"),
]


@pytest.mark.parametrize(("change", "path"), BAD)
def test_a_bad_field_is_refused_naming_it(change: dict[str, Any], path: str) -> None:
    with pytest.raises(InvalidUpgrade) as caught:
        parse_upgrade(example(**change))
    assert caught.value.path == path


def test_a_bad_object_is_refused() -> None:
    with pytest.raises(InvalidUpgrade, match="kind"):
        parse_upgrade({**example(), "kind": "EdgePlacement"})
    with pytest.raises(InvalidUpgrade, match=r"metadata\.name"):
        parse_upgrade({**example(), "metadata": {}})
    with pytest.raises(InvalidUpgrade, match="spec"):
        parse_upgrade({**example(), "spec": []})
    with pytest.raises(InvalidUpgrade, match="status"):
        parse_upgrade({**example(), "status": "done"})


def test_the_crd_schema_takes_the_examples_and_refuses_what_the_api_can_check() -> None:
    validator = jsonschema.Draft7Validator(schema())
    validator.validate(example())
    validator.validate(example(maxUnavailable="25%", failurePolicy="RollbackBatch"))
    for change, path in BAD:
        body = copy.deepcopy(example(**change))
        if path in ("spec.version", "spec.artifact.sha256", "spec.failurePolicy"):
            assert list(validator.iter_errors(body)), (change, path)


def test_a_url_artifact_is_invalid_until_agents_can_fetch_one() -> None:
    """Found by breakit5: the CRD and the model took ``artifact.url`` ("an https URL the
    agent fetches"), the hub ordered it, and every agent refused it (URLNotSupported):
    each node Failed, the first failure paused the rollout. Refused at the resource now,
    saying what to do instead."""
    with pytest.raises(InvalidUpgrade) as caught:
        parse_upgrade(example(artifact={"sha256": DIGEST, "url": "https://example.org/a.whl"}))
    assert caught.value.path == "spec.artifact.url"
    assert "not supported yet" in caught.value.reason and "artifact_dir" in caught.value.reason


def test_selection_reads_the_hostname_label_as_the_nodes_name() -> None:
    by_name = parse_label_selector({"matchLabels": {HOSTNAME_LABEL: "pi-1"}}, "s")
    honest = {"metadata": {"name": "pi-1", "labels": {HOSTNAME_LABEL: "pi-1", "zone": "a"}}}
    assert selection_labels(honest) is honest["metadata"]["labels"]  # no copy
    assert by_name.matches(selection_labels(honest))
    # relabelled to pi-1's name: not selected by it, still by its own
    relabelled = {"metadata": {"name": "pi-9", "labels": {HOSTNAME_LABEL: "pi-1"}}}
    assert not by_name.matches(selection_labels(relabelled))
    assert selection_labels(relabelled) == {HOSTNAME_LABEL: "pi-9"}
    # a Node without the label (made by hand) has it as its name
    assert by_name.matches(selection_labels({"metadata": {"name": "pi-1"}}))
