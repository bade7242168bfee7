"""Label and field selector parsing (the rules of k8s.io/apimachinery)."""

from __future__ import annotations

import pytest

from cloudhub.standalone.errors import StatusError
from cloudhub.standalone.selectors import parse_field_selector, parse_label_selector

LABELS = {"app": "web", "tier": "front", "version": "3"}


@pytest.mark.parametrize(
    ("text", "matches"),
    [
        ("", True),
        ("app=web", True),
        ("app==web", True),
        ("app!=web", False),
        ("app!=db", True),
        ("missing!=x", True),
        ("app in (web, db)", True),
        ("app in (db)", False),
        ("app notin (db)", True),
        ("missing notin (db)", True),
        ("app", True),
        ("!app", False),
        ("!missing", True),
        ("version>2", True),
        ("version<3", False),
        ("app=web,tier=front", True),
        ("app=web,tier=back", False),
        ("example.com/role", False),
        ("app in (web),!missing,version>1", True),
    ],
)
def test_label_selector_matching(text: str, matches: bool) -> None:
    assert parse_label_selector(text).matches(LABELS) is matches


@pytest.mark.parametrize(
    "text",
    [
        "app in web",
        "app=",
        "=web",
        "app in ()",
        "app=web,",
        "bad key=1",
        "app=bad value!",
        "a/b/c=1",
        "version>x",
        "app web",
    ],
)
def test_label_selector_errors_are_400(text: str) -> None:
    if text == "app=":
        # An empty value is valid: it selects objects whose label is empty.
        assert parse_label_selector(text).matches({"app": ""})
        return
    with pytest.raises(StatusError) as err:
        parse_label_selector(text)
    assert err.value.code == 400
    assert err.value.reason == "BadRequest"


def test_field_selector_terms_and_escapes() -> None:
    selector = parse_field_selector(r"spec.nodeName=edge\,1,status.phase!=Failed")
    assert selector.matches({"spec.nodeName": "edge,1", "status.phase": "Running"})
    assert not selector.matches({"spec.nodeName": "edge,1", "status.phase": "Failed"})
    assert selector.exact("spec.nodeName") == "edge,1"
    assert selector.exact("status.phase") is None
    assert parse_field_selector("a==b").matches({"a": "b"})
    assert parse_field_selector("a=").matches({})
    # Empty terms are skipped, as kube-apiserver's fields.ParseSelector skips them.
    assert parse_field_selector("a=b,,c=d").terms == (("a", False, "b"), ("c", False, "d"))
    assert parse_field_selector(",").empty


@pytest.mark.parametrize("text", ["nonsense", "a=b,nonsense", "=b"])
def test_field_selector_errors_are_400(text: str) -> None:
    with pytest.raises(StatusError) as err:
        parse_field_selector(text)
    assert err.value.code == 400
