"""``protocol.undelivered``: the placeholder the hub sends for an object over the message
limit, and how the edge recognises one (and does not mistake a stranger's annotation)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.undelivered import ANNOTATION, PLACEHELD_KINDS, placeholder, undelivered

SECRET = {
    "apiVersion": "v1",
    "kind": "Secret",
    "type": "kubernetes.io/tls",
    "metadata": {
        "name": "huge",
        "namespace": "ns",
        "uid": "u-1",
        "resourceVersion": "42",
        "annotations": {"owner": "team"},
        "managedFields": [{"manager": "kubectl"}],
    },
    "data": {"tls.crt": "eA==" * 1000},
}


def test_a_placeholder_keeps_the_identity_and_drops_the_data():
    got = placeholder(SECRET, 9_000_000, 8_388_608)
    assert got == {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": {
            "name": "huge",
            "namespace": "ns",
            "uid": "u-1",
            "resourceVersion": "42",
            "annotations": {ANNOTATION: json.dumps({"size": 9_000_000, "limit": 8_388_608})},
        },
    }
    assert undelivered(got) == (9_000_000, 8_388_608)
    assert undelivered(SECRET) is None
    assert PLACEHELD_KINDS == {"ConfigMap", "Secret"}


def test_a_placeholder_of_an_object_with_no_metadata():
    got = placeholder({"kind": "ConfigMap"}, 10, 5)
    assert got["metadata"] == {"annotations": {ANNOTATION: '{"size": 10, "limit": 5}'}}
    assert undelivered(got) == (10, 5)


@pytest.mark.parametrize(
    "value",
    [None, 7, "", "not json", "[]", "{}", '{"size": 1}', '{"size": "x", "limit": 2}', "null"],
)
def test_an_annotation_that_is_not_ours_is_not_a_placeholder(value):
    obj = {"kind": "ConfigMap", "metadata": {"annotations": {ANNOTATION: value}}}
    assert undelivered(obj) is None


@pytest.mark.parametrize("obj", [{}, {"metadata": None}, {"metadata": {"annotations": None}}])
def test_objects_without_annotations(obj):
    assert undelivered(obj) is None


@given(st.dictionaries(st.text(max_size=20), st.text(max_size=40), max_size=5))
def test_undelivered_never_raises_on_any_annotations(annotations):
    assert undelivered({"metadata": {"annotations": annotations}}) is None or (
        ANNOTATION in annotations
    )


@given(st.integers(0, 2**40), st.integers(0, 2**40))
def test_sizes_round_trip(size, limit):
    assert undelivered(placeholder({"kind": "ConfigMap"}, size, limit)) == (size, limit)
