"""List: collection resourceVersion, limit/continue paging, label and field selectors."""

from __future__ import annotations

import asyncio
import base64

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from tests.contract.conftest import Kube


async def make_configmaps(kube: Kube, count: int, **labels: str) -> list[str]:
    names = [f"cm-{i:03d}" for i in range(count)]
    await asyncio.gather(
        *(
            kube.core.create_namespaced_config_map(
                kube.ns,
                client.V1ConfigMap(metadata=client.V1ObjectMeta(name=n, labels=labels or None)),
            )
            for n in names
        )
    )
    return names


async def test_list_returns_items_sorted_with_collection_resource_version(kube: Kube) -> None:
    names = await make_configmaps(kube, 5)
    listed = await kube.core.list_namespaced_config_map(kube.ns)
    got = [i.metadata.name for i in listed.items if i.metadata.name.startswith("cm-")]
    assert got == sorted(names)
    collection_rv = int(listed.metadata.resource_version)
    assert collection_rv >= max(int(i.metadata.resource_version) for i in listed.items)


async def test_limit_and_continue_page_through_a_consistent_snapshot(kube: Kube) -> None:
    names = await make_configmaps(kube, 7, page="yes")
    first = await kube.core.list_namespaced_config_map(kube.ns, label_selector="page=yes", limit=3)
    assert [i.metadata.name for i in first.items] == names[:3]
    assert first.metadata._continue
    # Changes after the first page do not show on later pages of the same list.
    await kube.core.delete_namespaced_config_map(names[5], kube.ns)
    await kube.core.create_namespaced_config_map(
        kube.ns,
        client.V1ConfigMap(metadata=client.V1ObjectMeta(name="cm-999", labels={"page": "yes"})),
    )
    second = await kube.core.list_namespaced_config_map(
        kube.ns, label_selector="page=yes", limit=3, _continue=first.metadata._continue
    )
    assert [i.metadata.name for i in second.items] == names[3:6]
    assert second.metadata.resource_version == first.metadata.resource_version
    third = await kube.core.list_namespaced_config_map(
        kube.ns, label_selector="page=yes", limit=3, _continue=second.metadata._continue
    )
    assert [i.metadata.name for i in third.items] == names[6:]
    assert not third.metadata._continue
    fresh = await kube.core.list_namespaced_config_map(kube.ns, label_selector="page=yes")
    assert names[5] not in [i.metadata.name for i in fresh.items]
    assert "cm-999" in [i.metadata.name for i in fresh.items]


async def test_remaining_item_count_without_selectors(kube: Kube) -> None:
    await make_configmaps(kube, 4)
    everything = await kube.core.list_namespaced_config_map(kube.ns)
    total = len(everything.items)
    page = await kube.core.list_namespaced_config_map(kube.ns, limit=1)
    assert len(page.items) == 1
    assert page.metadata.remaining_item_count == total - 1


async def test_invalid_continue_token_is_400(kube: Kube) -> None:
    status, body, _ = await kube.raw(
        "GET",
        f"/api/v1/namespaces/{kube.ns}/configmaps",
        query=[("limit", 1), ("continue", "garbage")],
    )
    assert status == 400
    assert body["reason"] == "BadRequest"


@pytest.mark.parametrize(
    "token",
    [
        # base64url of JSON that is not a continue key: an array, a string, a number,
        # and objects whose fields have the wrong types.
        base64.urlsafe_b64encode(raw).decode().rstrip("=")
        for raw in (
            b"[1]",
            b'"x"',
            b"7",
            b'{"v":"meta.k8s.io/v1","rv":"x","start":"a"}',
            b'{"v":"meta.k8s.io/v1","rv":3,"start":[]}',
        )
    ],
)
async def test_continue_token_of_another_shape_is_400(kube: Kube, token: str) -> None:
    status, body, _ = await kube.raw(
        "GET",
        f"/api/v1/namespaces/{kube.ns}/configmaps",
        query=[("limit", 1), ("continue", token)],
    )
    assert status == 400, body
    assert body["reason"] == "BadRequest"


@pytest.mark.parametrize("rv", ["-5", "abc", "1.5", "+7", " 7", "9" * 30])
@pytest.mark.parametrize("verb", ["list", "watch"])
async def test_malformed_resource_version_is_refused(kube: Kube, rv: str, verb: str) -> None:
    """kube-apiserver parses resourceVersion as an unsigned integer and refuses the rest
    (1.20 answers 500 with the strconv error; the embedded server 400): never a list, a
    watch, or a 410 that would send the client relisting."""
    query: list[tuple[str, object]] = [("resourceVersion", rv)]
    if verb == "watch":
        query += [("watch", "true"), ("timeoutSeconds", 1)]
    status, body, _ = await kube.raw("GET", f"/api/v1/namespaces/{kube.ns}/configmaps", query=query)
    assert status in (400, 500), body
    assert body["kind"] == "Status"
    assert "resourceVersion" in body["message"] or "ParseUint" in body["message"]


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("tier=web", {"a", "b"}),
        ("tier==web", {"a", "b"}),
        ("tier!=web", {"c", "d"}),
        ("tier in (web,db)", {"a", "b", "c"}),
        ("tier notin (web)", {"c", "d"}),
        ("tier", {"a", "b", "c"}),
        ("!tier", {"d"}),
        ("tier=web,env=prod", {"a"}),
        ("tier in (web),!env", {"b"}),
    ],
)
async def test_label_selectors(kube: Kube, selector: str, expected: set[str]) -> None:
    labels = {
        "a": {"tier": "web", "env": "prod"},
        "b": {"tier": "web"},
        "c": {"tier": "db"},
        "d": {"x": "y"},
    }
    for name, lab in labels.items():
        await kube.core.create_namespaced_config_map(
            kube.ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name, labels=lab))
        )
    listed = await kube.core.list_namespaced_config_map(kube.ns, label_selector=selector)
    assert {i.metadata.name for i in listed.items} == expected


@pytest.mark.parametrize("selector", ["tier in web", "a b c", "=x", "tier=(web)", "bad key!=1"])
async def test_bad_label_selector_is_400(kube: Kube, selector: str) -> None:
    status, body, _ = await kube.raw(
        "GET", f"/api/v1/namespaces/{kube.ns}/configmaps", query=[("labelSelector", selector)]
    )
    assert status == 400
    assert body["reason"] == "BadRequest"


async def test_pod_field_selectors(kube: Kube) -> None:
    for name, node in (("on-a", "node-a"), ("on-b", "node-b"), ("nowhere", None)):
        spec = client.V1PodSpec(
            containers=[client.V1Container(name="c", image="busybox:1.36")], node_name=node
        )
        await kube.core.create_namespaced_pod(
            kube.ns, client.V1Pod(metadata=client.V1ObjectMeta(name=name), spec=spec)
        )
    on_a = await kube.core.list_namespaced_pod(kube.ns, field_selector="spec.nodeName=node-a")
    assert [p.metadata.name for p in on_a.items] == ["on-a"]
    unscheduled = await kube.core.list_namespaced_pod(kube.ns, field_selector="spec.nodeName=")
    assert [p.metadata.name for p in unscheduled.items] == ["nowhere"]
    not_a = await kube.core.list_namespaced_pod(
        kube.ns, field_selector="spec.nodeName!=node-a,status.phase=Pending"
    )
    assert {p.metadata.name for p in not_a.items} == {"on-b", "nowhere"}
    by_name = await kube.core.list_namespaced_pod(kube.ns, field_selector="metadata.name=on-b")
    assert [p.metadata.name for p in by_name.items] == ["on-b"]
    # Empty terms are skipped (a trailing comma, as selectors are often built by joining).
    trailing = await kube.core.list_namespaced_pod(kube.ns, field_selector="metadata.name=on-b,")
    assert [p.metadata.name for p in trailing.items] == ["on-b"]
    everywhere = await kube.core.list_pod_for_all_namespaces(
        field_selector=f"metadata.namespace={kube.ns},spec.nodeName=node-b"
    )
    assert [p.metadata.name for p in everywhere.items] == ["on-b"]


async def test_unsupported_field_selector_is_400(kube: Kube) -> None:
    with pytest.raises(ApiException) as err:
        await kube.core.list_namespaced_config_map(kube.ns, field_selector="data.key=x")
    assert err.value.status == 400
    with pytest.raises(ApiException) as err:
        await kube.core.list_namespaced_pod(kube.ns, field_selector="spec.hostname=x")
    assert err.value.status == 400


async def test_secret_type_and_event_field_selectors(kube: Kube) -> None:
    await kube.core.create_namespaced_secret(
        kube.ns,
        client.V1Secret(
            metadata=client.V1ObjectMeta(name="tls"),
            type="kubernetes.io/tls",
            data={"tls.crt": "", "tls.key": ""},
        ),
    )
    await kube.core.create_namespaced_secret(
        kube.ns, client.V1Secret(metadata=client.V1ObjectMeta(name="plain"))
    )
    tls = await kube.core.list_namespaced_secret(kube.ns, field_selector="type=kubernetes.io/tls")
    assert [s.metadata.name for s in tls.items] == ["tls"]
    involved = client.V1ObjectReference(kind="Pod", name="web-1", namespace=kube.ns)
    for name, reason in (("e1", "Started"), ("e2", "Killing")):
        await kube.core.create_namespaced_event(
            kube.ns,
            client.CoreV1Event(
                metadata=client.V1ObjectMeta(name=name),
                involved_object=involved,
                reason=reason,
                type="Normal",
                message=reason,
            ),
        )
    started = await kube.core.list_namespaced_event(
        kube.ns, field_selector="involvedObject.name=web-1,reason=Started"
    )
    assert [e.metadata.name for e in started.items] == ["e1"]


async def test_list_across_namespaces(kube: Kube) -> None:
    await make_configmaps(kube, 2, mark=kube.suffix)
    everywhere = await kube.core.list_config_map_for_all_namespaces(
        label_selector=f"mark={kube.suffix}"
    )
    assert {(i.metadata.namespace, i.metadata.name) for i in everywhere.items} == {
        (kube.ns, "cm-000"),
        (kube.ns, "cm-001"),
    }


async def test_raw_list_through_preload_content_false(kube: Kube) -> None:
    await make_configmaps(kube, 3, raw="1")
    resp = await kube.core.list_namespaced_config_map(
        kube.ns, label_selector="raw=1", _preload_content=False
    )
    try:
        data = await resp.json()
    finally:
        resp.release()
    assert data["kind"] == "ConfigMapList"
    assert data["apiVersion"] == "v1"
    assert [i["metadata"]["name"] for i in data["items"]] == ["cm-000", "cm-001", "cm-002"]
    assert data["metadata"]["resourceVersion"]


async def test_list_at_a_future_resource_version_times_out_with_504(kube: Kube) -> None:
    listed = await kube.core.list_namespaced_config_map(kube.ns)
    future = str(int(listed.metadata.resource_version) + 1_000_000)
    status, body, _ = await kube.raw(
        "GET", f"/api/v1/namespaces/{kube.ns}/configmaps", query=[("resourceVersion", future)]
    )
    assert status == 504
    assert body["reason"] == "Timeout"
    assert "Too large resource version" in body["message"]


async def test_exact_resource_version_lists_the_past(kube: Kube) -> None:
    await kube.core.create_namespaced_config_map(
        kube.ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="early"))
    )
    then = (await kube.core.list_namespaced_config_map(kube.ns)).metadata.resource_version
    await kube.core.create_namespaced_config_map(
        kube.ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="late"))
    )
    await kube.core.delete_namespaced_config_map("early", kube.ns)
    past = await kube.core.list_namespaced_config_map(
        kube.ns, resource_version=then, resource_version_match="Exact", limit=500
    )
    names = {i.metadata.name for i in past.items}
    assert "early" in names and "late" not in names
    assert past.metadata.resource_version == then
