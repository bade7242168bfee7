"""The node-selection admission rule (cloudhub/upgrade/admission.py) as a pure decision:
AdmissionReviews in, the access questions it asks and its answers out; and its HTTPS
endpoint with real TLS. The API server's own authorizer answering the questions is
tests/cloudhub/hub/test_upgrade_admission_kube.py."""

from __future__ import annotations

import json
import ssl
import time

import aiohttp
import pytest

from cloudhub.errors import KubeAPIError
from cloudhub.placement.errors import InvalidSpec
from cloudhub.upgrade.admission import (
    MAX_NAMED_NODES,
    MAX_REVIEW_BYTES,
    WEBHOOK_PATH,
    AdmissionServer,
    Requester,
    named_nodes,
    review,
)
from protocol import pki
from protocol.transport import TLSCredentials

HOST = "kubernetes.io/hostname"
KINDS = {
    "edgeupgrades": "EdgeUpgrade",
    "edgeimageprepulls": "EdgeImagePrePull",
    "edgeplacements": "EdgePlacement",
}


class Policy:
    """Who may list all nodes and get which: the answers a SubjectAccessReview would give,
    with every question recorded."""

    def __init__(self, *, listers=(), gets=None, fail=False) -> None:
        self.listers = set(listers)
        self.gets = gets or {}
        self.fail = fail
        self.asked: list[tuple[str, str, str | None]] = []

    async def __call__(self, who: Requester, verb: str, name: str | None) -> bool:
        self.asked.append((who.username, verb, name))
        if self.fail:
            raise KubeAPIError(503, "ServiceUnavailable", "etcd is away")
        if verb == "list":
            return who.username in self.listers or "admins" in who.groups
        return name in self.gets.get(who.username, ())


def admission(
    selector=None,
    *,
    user="alice",
    groups=("system:authenticated",),
    operation="CREATE",
    resource="edgeupgrades",
    old_selector=None,
    api_version="admission.k8s.io/v1",
    sub_resource="",
) -> dict:
    spec = {"version": "0.5.0"}
    if selector is not None:
        spec["nodeSelector"] = selector
    request = {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "kind": {"group": "apps.edgefleet.io", "version": "v1alpha1", "kind": KINDS[resource]},
        "resource": {"group": "apps.edgefleet.io", "version": "v1alpha1", "resource": resource},
        "name": "to-0.5.0",
        "operation": operation,
        "userInfo": {"username": user, "uid": "u-1", "groups": list(groups),
                     "extra": {"scopes": ["a"]}},
        "object": {"metadata": {"name": "to-0.5.0", "labels": {"x": "1"}}, "spec": spec},
    }  # fmt: skip
    if sub_resource:
        request["subResource"] = sub_resource
    if operation == "UPDATE":
        old_spec = dict(spec)
        if old_selector is not None:
            old_spec["nodeSelector"] = old_selector
        request["oldObject"] = {"metadata": {"name": "to-0.5.0"}, "spec": old_spec}
    return {"apiVersion": api_version, "kind": "AdmissionReview", "request": request}


def hostnames(*names: str) -> dict:
    return {"matchExpressions": [{"key": HOST, "operator": "In", "values": list(names)}]}


def test_named_nodes_bounds_by_hostname_only() -> None:
    assert named_nodes(None) is None
    assert named_nodes({}) is None
    assert named_nodes({"matchLabels": {"zone": "a"}}) is None
    assert named_nodes({"matchLabels": {HOST: "pi-1"}}) == {"pi-1"}
    assert named_nodes(hostnames("pi-1", "pi-2")) == {"pi-1", "pi-2"}
    # NotIn on the hostname bounds nothing
    expr = {"matchExpressions": [{"key": HOST, "operator": "NotIn", "values": ["pi-1"]}]}
    assert named_nodes(expr) is None
    # several bounds intersect; other terms narrow further but never widen
    both = {"matchLabels": {HOST: "pi-2", "zone": "a"}, **hostnames("pi-1", "pi-2")}
    assert named_nodes(both) == {"pi-2"}
    with pytest.raises(InvalidSpec):
        named_nodes({"matchLabels": "pi-1"})


async def test_a_user_who_may_list_nodes_selects_anything_with_one_question() -> None:
    policy = Policy(listers={"bob"})
    uid, decision = await review(admission({}, user="bob"), policy)
    assert uid == "705ab4f5-6393-11e8-b7cc-42010a800002"
    assert decision.allowed
    assert policy.asked == [("bob", "list", None)]
    # groups count: the API server's authorizer sees them (here "admins" may list)
    assert (await review(admission({}, user="x", groups=("admins",)), Policy()))[1].allowed


async def test_an_open_selector_from_a_user_who_may_not_list_is_refused() -> None:
    policy = Policy(gets={"alice": {"pi-1"}})
    for selector in (None, {}, {"matchLabels": {"zone": "a"}}):
        _, decision = await review(admission(selector), policy)
        assert not decision.allowed
        assert "user 'alice' may not list nodes" in decision.message
        assert HOST in decision.message
    assert {verb for _, verb, _ in policy.asked} == {"list"}  # no per-node question asked


async def test_named_nodes_must_each_be_visible() -> None:
    policy = Policy(gets={"alice": {"pi-1", "pi-2"}})
    assert (await review(admission(hostnames("pi-1", "pi-2")), policy))[1].allowed
    assert sorted(policy.asked[1:]) == [("alice", "get", "pi-1"), ("alice", "get", "pi-2")]
    _, decision = await review(admission(hostnames("pi-1", "pi-9", "pi-8")), policy)
    assert not decision.allowed
    assert decision.message.startswith("user 'alice' may not get node(s) pi-8, pi-9,")
    many = [f"n{i}" for i in range(7)]
    _, decision = await review(admission(hostnames(*many)), policy)
    assert "n0, n1, n2, n3, n4 and 2 more" in decision.message


async def test_too_many_named_nodes_are_refused_without_asking_each() -> None:
    policy = Policy()
    names = [f"n{i}" for i in range(MAX_NAMED_NODES + 1)]
    _, decision = await review(admission(hostnames(*names)), policy)
    assert not decision.allowed and f"at most {MAX_NAMED_NODES}" in decision.message
    assert policy.asked == [("alice", "list", None)]


async def test_prepulls_are_checked_and_other_resources_are_not() -> None:
    policy = Policy()
    _, decision = await review(admission({}, resource="edgeimageprepulls"), policy)
    assert not decision.allowed and "EdgeImagePrePull 'to-0.5.0'" in decision.message
    asked = len(policy.asked)
    for body in (
        admission({}, resource="edgeplacements"),
        admission({}, sub_resource="status"),
        admission({}, operation="DELETE"),
    ):
        assert (await review(body, policy))[1].allowed
    assert len(policy.asked) == asked  # none of those asked anything


async def test_updates_are_checked_only_when_spec_changes() -> None:
    policy = Policy()
    # a relabel or pause annotation of an open selection somebody else made: admitted
    assert (await review(admission({}, operation="UPDATE", old_selector={}), policy))[1].allowed
    assert policy.asked == []
    _, decision = await review(
        admission({}, operation="UPDATE", old_selector=hostnames("a")), policy
    )
    assert not decision.allowed


async def test_a_failing_access_review_refuses_and_names_the_cause() -> None:
    _, decision = await review(admission({}), Policy(fail=True))
    assert not decision.allowed
    assert "could not check node access" in decision.message and "503" in decision.message


async def test_a_selector_that_does_not_parse_is_refused_with_its_field() -> None:
    policy = Policy(listers={"alice"})
    bad = {"matchExpressions": [{"key": HOST, "operator": "Near", "values": ["a"]}]}
    _, decision = await review(admission(bad), policy)
    assert not decision.allowed and "spec.nodeSelector" in decision.message
    assert policy.asked == []


@pytest.mark.parametrize("body", [None, [], {}, {"request": {}}, {"request": {"uid": 7}}])
async def test_not_a_review(body) -> None:
    with pytest.raises(ValueError, match="not an AdmissionReview"):
        await review(body, Policy())


def test_requester_from_odd_user_info() -> None:
    assert Requester.from_user_info(None) == Requester("")
    who = Requester.from_user_info(
        {"username": "u", "groups": ["g", 3], "extra": {"k": ["v"], "bad": "x"}}
    )
    assert who.groups == ("g",) and who.extra == {"k": ("v",)}


# -- the HTTPS endpoint ------------------------------------------------------------------


@pytest.fixture
async def webhook(pki_ca):
    cert, key = pki.issue_server_certificate(
        pki_ca.ca, dns_names=["cloudhub.edgefleet.svc"], ip_addresses=["127.0.0.1"],
        lifetime=3600.0, now=time.time(),
    )  # fmt: skip
    creds = TLSCredentials(cas=(pki_ca.ca.certificate,), chain=(cert,), private_key=key)
    server = AdmissionServer(
        Policy(gets={"alice": {"pi-1"}}), lambda: creds, host="127.0.0.1", port=0
    )
    await server.start()
    context = ssl.create_default_context(
        cadata=pki.dump_certificate_pem(pki_ca.ca.certificate).decode()
    )
    context.check_hostname = False  # the API server checks the Service name; here the IP
    async with aiohttp.ClientSession() as client:
        yield server, client, f"https://127.0.0.1:{server.port}", context
    await server.aclose()


async def test_the_endpoint_answers_in_the_review_version(webhook) -> None:
    server, client, url, context = webhook
    for version in ("admission.k8s.io/v1", "admission.k8s.io/v1beta1"):
        body = admission(hostnames("pi-1", "pi-2"), api_version=version)
        async with client.post(url + WEBHOOK_PATH, json=body, ssl=context) as answer:
            assert answer.status == 200
            got = await answer.json()
        assert got["apiVersion"] == version and got["kind"] == "AdmissionReview"
        response = got["response"]
        assert response["uid"] == body["request"]["uid"] and response["allowed"] is False
        assert response["status"]["code"] == 403 and "pi-2" in response["status"]["message"]
    body = admission(hostnames("pi-1"))
    async with client.post(url + WEBHOOK_PATH, json=body, ssl=context) as answer:
        assert (await answer.json())["response"] == {"uid": body["request"]["uid"], "allowed": True}
    assert server.denied == 2


async def test_the_endpoint_refuses_bad_input_and_keeps_serving(webhook) -> None:
    _, client, url, context = webhook
    cases = [
        (b"{not json", 400),
        (json.dumps({"kind": "AdmissionReview"}).encode(), 400),
        (b" " * (MAX_REVIEW_BYTES + 10), 400),
    ]
    for data, status in cases:
        async with client.post(url + WEBHOOK_PATH, data=data, ssl=context) as answer:
            assert answer.status == status, await answer.text()
    async with client.get(url + WEBHOOK_PATH, ssl=context) as answer:
        assert answer.status == 405
    async with client.post(url + "/validate/other", json={}, ssl=context) as answer:
        assert answer.status == 404
    async with client.get(url + "/healthz", ssl=context) as answer:
        assert answer.status == 200
    body = admission(hostnames("pi-1"))
    async with client.post(url + WEBHOOK_PATH, json=body, ssl=context) as answer:
        assert (await answer.json())["response"]["allowed"] is True


async def test_a_review_larger_than_the_read_buffer_is_read_whole(webhook) -> None:
    # one StreamReader.read(n) returns what is buffered (~128 KiB): a 1 MiB review (an
    # object and its oldObject with big annotations, last-applied-configuration...) was cut
    # short and refused as unreadable JSON
    server, client, url, context = webhook
    body = admission(hostnames("pi-1"))
    body["request"]["object"]["metadata"]["annotations"] = {"big": "x" * (1024 * 1024)}
    for _ in range(3):
        async with client.post(url + WEBHOOK_PATH, json=body, ssl=context) as answer:
            assert answer.status == 200, await answer.text()
            assert (await answer.json())["response"]["allowed"] is True
    assert server.denied == 0


async def test_odd_shapes_are_answered_not_500(webhook) -> None:
    _, client, url, context = webhook
    body = admission({}, resource="edgeplacements")
    body["request"]["userInfo"] = "alice"  # not a map: the log line must not crash
    body["request"]["resource"] = "edgeplacements"
    async with client.post(url + WEBHOOK_PATH, json=body, ssl=context) as answer:
        assert answer.status == 200, await answer.text()
        assert (await answer.json())["response"]["allowed"] is True
    deep = b"[" * 100_000 + b"]" * 100_000  # deeper than json's recursion limit
    async with client.post(url + WEBHOOK_PATH, data=deep, ssl=context) as answer:
        assert answer.status == 400, await answer.text()
        assert "recursion" in await answer.text()


async def test_an_empty_hostname_is_refused_without_asking_about_every_node() -> None:
    # a SubjectAccessReview with name "" asks "get any node": the message named nobody
    policy = Policy(gets={"alice": {"pi-1"}})
    _, decision = await review(admission({"matchLabels": {HOST: ""}}), policy)
    assert not decision.allowed and f"{HOST} '' names no node" in decision.message
    assert policy.asked == [("alice", "list", None)]
