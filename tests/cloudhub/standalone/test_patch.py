"""Patch semantics: merge patch (RFC 7386) and strategic merge patch directives."""

from __future__ import annotations

import pytest

from cloudhub.standalone.errors import StatusError
from cloudhub.standalone.patch import (
    apply_json_patch,
    apply_merge_patch,
    apply_strategic_merge_patch,
    strategic_rules,
)

POD = {
    "metadata": {"name": "p", "finalizers": ["a/x"], "labels": {"k": "v"}},
    "spec": {
        "containers": [
            {
                "name": "app",
                "image": "app:1",
                "env": [{"name": "A", "value": "1"}],
                "ports": [{"containerPort": 80}],
            },
            {"name": "side", "image": "side:1"},
        ],
        "volumes": [{"name": "cfg", "configMap": {"name": "c"}}],
        "tolerations": [{"key": "t1"}],
    },
}
RULES = strategic_rules("Pod")


def smp(patch: dict) -> dict:
    return apply_strategic_merge_patch(POD, patch, RULES)


def test_merge_patch_null_deletes_and_lists_replace() -> None:
    out = apply_merge_patch(POD, {"metadata": {"labels": None}, "spec": {"tolerations": []}})
    assert "labels" not in out["metadata"]
    assert out["spec"]["tolerations"] == []
    assert out["spec"]["containers"] == POD["spec"]["containers"]
    assert POD["metadata"]["labels"] == {"k": "v"}  # the input is not modified


def test_containers_merge_by_name_and_env_by_name() -> None:
    out = smp({"spec": {"containers": [{"name": "app", "env": [{"name": "B", "value": "2"}]}]}})
    app = out["spec"]["containers"][0]
    assert app["image"] == "app:1"
    assert app["env"] == [{"name": "B", "value": "2"}, {"name": "A", "value": "1"}]
    assert [c["name"] for c in out["spec"]["containers"]] == ["app", "side"]


def test_merged_list_order_follows_apimachinery() -> None:
    names = lambda out: [c["name"] for c in out["spec"]["containers"]]  # noqa: E731
    # Named items that the server had keep the server's order...
    assert names(smp({"spec": {"containers": [{"name": "side", "image": "s:2"}]}})) == [
        "app",
        "side",
    ]
    # ...new ones go before the server-only items not yet placed.
    assert names(smp({"spec": {"containers": [{"name": "new"}, {"name": "side"}]}})) == [
        "new",
        "app",
        "side",
    ]


def test_lists_without_a_strategy_are_replaced() -> None:
    out = smp({"spec": {"tolerations": [{"key": "t2"}]}})
    assert out["spec"]["tolerations"] == [{"key": "t2"}]


def test_patch_delete_and_replace_directives() -> None:
    out = smp({"spec": {"containers": [{"name": "side", "$patch": "delete"}]}})
    assert [c["name"] for c in out["spec"]["containers"]] == ["app"]
    out = smp({"spec": {"containers": [{"name": "only", "image": "o:1"}, {"$patch": "replace"}]}})
    assert out["spec"]["containers"] == [{"name": "only", "image": "o:1"}]
    out = smp({"metadata": {"labels": {"$patch": "replace", "new": "1"}}})
    assert out["metadata"]["labels"] == {"new": "1"}


def test_retain_keys_on_volumes() -> None:
    out = smp(
        {
            "spec": {
                "volumes": [
                    {
                        "name": "cfg",
                        "secret": {"secretName": "s"},
                        "$retainKeys": ["name", "secret"],
                    }
                ]
            }
        }
    )
    assert out["spec"]["volumes"] == [{"name": "cfg", "secret": {"secretName": "s"}}]


def test_primitive_list_merge_and_delete_from_primitive_list() -> None:
    out = smp({"metadata": {"finalizers": ["b/y"]}})
    # Items the patch names come first when the server did not have them (apimachinery).
    assert out["metadata"]["finalizers"] == ["b/y", "a/x"]
    out = smp({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a/x"]}})
    assert out["metadata"]["finalizers"] == []


def test_set_element_order() -> None:
    out = smp({"spec": {"$setElementOrder/containers": [{"name": "side"}, {"name": "app"}]}})
    assert [c["name"] for c in out["spec"]["containers"]] == ["side", "app"]


def test_merge_key_missing_is_400() -> None:
    with pytest.raises(StatusError) as err:
        smp({"spec": {"containers": [{"image": "x"}]}})
    assert err.value.code == 400


def test_json_patch_errors() -> None:
    with pytest.raises(StatusError) as err:
        apply_json_patch(POD, {"op": "add"})
    assert err.value.code == 400
    with pytest.raises(StatusError) as err:
        apply_json_patch(POD, [{"op": "remove", "path": "/spec/nothing"}])
    assert err.value.code == 422
    out = apply_json_patch(POD, [{"op": "add", "path": "/metadata/labels/n", "value": "1"}])
    assert out["metadata"]["labels"] == {"k": "v", "n": "1"}
