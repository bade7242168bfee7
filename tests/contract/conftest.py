"""Fixtures of the contract suite: the same tests against every Kubernetes API we have.

Backends (the ``cluster`` fixture is parametrised over those available):

- ``embedded``: our embedded API server (``cloudhub.standalone``), in memory, run
  in a background thread with its own event loop. Always present.
- ``external``: the cluster of the kubeconfig named by ``EDGEFLEET_TEST_KUBECONFIG``.
- ``kube-apiserver``: a real upstream kube-apiserver 1.20.2 with etcd and no
  controller-manager (``tests/k8s``), when its binary has been built (see
  :func:`_reference_backend`).

Every test gets ``kube``: a configured kubernetes_asyncio ``ApiClient`` and a fresh
namespace, deleted afterwards with everything in it; cluster-scoped objects a test
creates are named with :meth:`Kube.unique` and registered with
:meth:`Kube.cluster_scoped`, so that nothing cluster-wide is left behind. Tests
talk to the API only through kubernetes_asyncio: nothing here reaches into the
embedded server's internals.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import pathlib
import secrets
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

from cloudhub.standalone import APIServerSettings, EmbeddedAPIServer
from tests.waiting import eventually

#: Changes the embedded backend keeps for watches; tests that need an expired
#: resourceVersion write more than this many changes.
EMBEDDED_HISTORY = 300
#: Generous deadline for conditions on a loaded machine (seconds).
DEADLINE_S = 20.0


@dataclasses.dataclass(frozen=True)
class Cluster:
    """One backend the suite runs against.

    Attributes:
        name: ``embedded``, ``external`` or ``kube-apiserver``.
        kubeconfig: Path of a kubeconfig for kubectl and kubernetes_asyncio.
        history_events: Changes after which an old resourceVersion is sure to be
            expired (410), or None when any resourceVersion from before the
            backend started (``"1"``) already is (kube-apiserver's watch cache
            starts at the revision it was created with).
    """

    name: str
    kubeconfig: pathlib.Path
    history_events: int | None


class _ThreadedServer:
    """The embedded server on its own event loop in a daemon thread, so that it
    outlives the per-test event loops of pytest-asyncio."""

    def __init__(self, settings: APIServerSettings) -> None:
        self.settings = settings
        self.kubeconfig: pathlib.Path | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._main, name="embedded-apiserver", daemon=True)

    def _main(self) -> None:
        async def run() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            try:
                async with EmbeddedAPIServer(self.settings) as api:
                    self.kubeconfig = api.kubeconfig_path
                    self._ready.set()
                    await self._stop.wait()
            except BaseException as exc:
                self._error = exc
                self._ready.set()
                raise

        with contextlib.suppress(BaseException):
            asyncio.run(run())

    def __enter__(self) -> pathlib.Path:
        self._thread.start()
        if not self._ready.wait(60):
            raise RuntimeError("the embedded API server did not start within 60 s")
        if self._error is not None:
            raise RuntimeError(f"the embedded API server failed to start: {self._error!r}")
        assert self.kubeconfig is not None
        return self.kubeconfig

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)


try:  # the reference kube-apiserver (tests/k8s, from the kubeapi work)
    from tests.k8s import kube_apiserver as _kube_apiserver
    from tests.k8s.fixtures import kube_apiserver  # noqa: F401  (re-exported fixture)
except ImportError:  # pragma: no cover - only when tests/k8s is absent
    _kube_apiserver = None  # type: ignore[assignment]


def _reference_backend() -> bool:
    """Whether the real upstream kube-apiserver backend can run here.

    HOOK (wired): ``tests/k8s/kube_apiserver.py`` is importable and both its cached
    kube-apiserver binary and etcd are present; the server itself comes from the
    session fixture ``tests.k8s.fixtures.kube_apiserver`` (one server shared with
    the tests in ``tests/k8s``). Without the binary the backend is simply not in the
    parameter list; ``scripts/setup.sh test`` builds it.
    """
    if _kube_apiserver is None:
        return False
    return _kube_apiserver.binary_path() is not None and _kube_apiserver.etcd_path() is not None


def _backends() -> list[Any]:
    names: list[Any] = ["embedded"]
    if os.environ.get("EDGEFLEET_TEST_KUBECONFIG"):
        names.append("external")
    if _reference_backend():
        names.append(pytest.param("kube-apiserver", marks=pytest.mark.kubeapiserver))
    return names


@pytest.fixture(scope="session", params=_backends())
def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    """A running Kubernetes API for the whole session, per backend."""
    name = request.param
    if name == "embedded":
        settings = APIServerSettings(data_dir=None, port=0, watch_history_events=EMBEDDED_HISTORY)
        with _ThreadedServer(settings) as kubeconfig:
            yield Cluster("embedded", kubeconfig, EMBEDDED_HISTORY)
    elif name == "external":
        yield Cluster("external", pathlib.Path(os.environ["EDGEFLEET_TEST_KUBECONFIG"]), None)
    else:
        server = request.getfixturevalue("kube_apiserver")
        yield Cluster("kube-apiserver", pathlib.Path(server.kubeconfig), None)


class Kube:
    """What a contract test works with.

    Attributes:
        cluster: The backend.
        api: A kubernetes_asyncio ApiClient configured from the backend's kubeconfig.
        ns: This test's namespace (fresh, deleted after the test).
        suffix: Random suffix of this test, for cluster-scoped names.
    """

    def __init__(self, cluster: Cluster, api: client.ApiClient, ns: str, suffix: str) -> None:
        self.cluster = cluster
        self.api = api
        self.ns = ns
        self.suffix = suffix
        self.core = client.CoreV1Api(api)
        self.apps = client.AppsV1Api(api)
        self.coordination = client.CoordinationV1Api(api)
        self.apiext = client.ApiextensionsV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self._cleanups: list[Callable[[], Awaitable[Any]]] = []

    def unique(self, name: str) -> str:
        """A cluster-wide unique name derived from ``name``."""
        return f"{name}-{self.suffix}"

    def cluster_scoped(self, delete: Callable[[], Awaitable[Any]]) -> None:
        """Register the deletion of a cluster-scoped object made by the test."""
        self._cleanups.append(delete)

    async def raw(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: list[tuple[str, Any]] | None = None,
        content_type: str = "application/json",
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any, Any]:
        """A request through the ApiClient returning (status, JSON body, headers),
        without raising on error statuses, for checks on exact Status bodies."""
        all_headers = {"Accept": "application/json", "Content-Type": content_type}
        # The ApiClient's own session, TLS and credentials; explicit headers win.
        await self.api.update_params_for_auth(all_headers, [], ["BearerToken"])
        all_headers.update(headers or {})
        data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
        response = await self.api.rest_client.pool_manager.request(
            method,
            self.api.configuration.host + path,
            params=[(k, str(v)) for k, v in query or []],
            data=data,
            headers=all_headers,
        )
        try:
            raw = await response.read()
        finally:
            response.release()
        return response.status, _json_or_text(raw), response.headers

    async def eventually(
        self, check: Callable[[], Awaitable[bool]], what: str, timeout_s: float = DEADLINE_S
    ) -> None:
        """Wait until ``check()`` is true (:func:`tests.waiting.eventually`)."""
        await eventually(check, what, timeout_s)

    async def _teardown(self) -> None:
        for delete in reversed(self._cleanups):
            with contextlib.suppress(ApiException):
                await delete()
        # Pods bound to a node wait for their kubelet to confirm deletion; no
        # kubelet runs here, so delete them at once, as a kubelet would.
        with contextlib.suppress(ApiException):
            await self.core.delete_collection_namespaced_pod(self.ns, grace_period_seconds=0)
        with contextlib.suppress(ApiException):
            await self.core.delete_namespace(self.ns)

        async def gone() -> bool:
            try:
                found = await self.core.read_namespace(self.ns)
            except ApiException as exc:
                if exc.status == 404:
                    return True
                raise
            # A backend without a namespace controller (a bare kube-apiserver)
            # never empties the namespace: do what the controller would.
            if found.status.phase == "Terminating":
                await self._finalize_namespace()
            return False

        await self.eventually(gone, f"namespace {self.ns} to be deleted", timeout_s=60)

    async def _finalize_namespace(self) -> None:
        """Delete what is left in the namespace, then its ``kubernetes`` finalizer."""
        for path, plural in await self._namespaced_collections():
            await self.raw(
                "DELETE", f"{path}/namespaces/{self.ns}/{plural}", query=[("gracePeriodSeconds", 0)]
            )
        status, ns, _ = await self.raw("GET", f"/api/v1/namespaces/{self.ns}")
        if status != 200:
            return
        ns["spec"]["finalizers"] = []
        await self.raw("PUT", f"/api/v1/namespaces/{self.ns}/finalize", ns)

    async def _namespaced_collections(self) -> list[tuple[str, str]]:
        """(group-version path, plural) of every namespaced resource that supports
        deletecollection, from discovery (as the namespace controller finds them)."""
        out: list[tuple[str, str]] = []
        paths = ["/api/v1"]
        status, groups, _ = await self.raw("GET", "/apis")
        if status == 200:
            paths += [f"/apis/{g['preferredVersion']['groupVersion']}" for g in groups["groups"]]
        for path in paths:
            status, listing, _ = await self.raw("GET", path)
            if status != 200:
                continue
            for res in listing["resources"]:
                if (
                    "/" not in res["name"]
                    and res["namespaced"]
                    and ("deletecollection" in res["verbs"])
                ):
                    out.append((path, res["name"]))
        return out


def _json_or_text(raw: bytes) -> Any:
    """The body as JSON, or as text when it is not (kube-apiserver answers unknown
    paths with a plain-text "404 page not found")."""
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace")


async def api_client(kubeconfig: pathlib.Path) -> client.ApiClient:
    """A kubernetes_asyncio ApiClient configured from ``kubeconfig``."""
    configuration = client.Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    return client.ApiClient(configuration)


@pytest.fixture
async def kube(cluster: Cluster) -> AsyncIterator[Kube]:
    """A client and a fresh namespace (``ct-<random>``), removed after the test."""
    suffix = secrets.token_hex(4)
    api = await api_client(cluster.kubeconfig)
    try:
        ns = f"ct-{suffix}"
        await client.CoreV1Api(api).create_namespace(
            client.V1Namespace(
                metadata=client.V1ObjectMeta(name=ns, labels={"edgefleet-contract": "1"})
            )
        )
        kube = Kube(cluster, api, ns, suffix)
        try:
            yield kube
        finally:
            await kube._teardown()
    finally:
        await api.close()
