"""kubectl apply -f, get, describe and delete on the real manifests in shared/data/manifests.

Every file is applied in a namespace of its own (see ``tests.k8s.manifests.in_namespace``)
on each backend in ``KUBECTL_BACKENDS`` (conftest.py): what is served must be created,
listed, described and deleted; what is not must fail with the documented error and leave
nothing behind. The expectations are those of a real kube-apiserver 1.20.
"""

from __future__ import annotations

import re
import subprocess
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.k8s.fixtures import Backend
from tests.k8s.manifests import MANIFESTS, NOT_SERVED, PARTLY, SERVED, Manifest, in_namespace
from tests.k8s.manifests import manifests_dir as find_manifests_dir

pytestmark = pytest.mark.kubeapiserver

DOC = Path(__file__).resolve().parents[2] / "docs" / "manifests.md"
KUBECTL_TIMEOUT = 120.0
"""Seconds one kubectl call may take before the test fails (calls take ~0.1-1 s idle)."""

# Objects a real cluster's controllers put in every namespace; not left behind by a test.
_NAMESPACE_DEFAULTS = re.compile(
    r"^(serviceaccount/default|configmap/kube-root-ca\.crt|secret/default-token-\w+)$"
)
# What a refused file could have left in its namespace, had kubectl created anything.
_KINDS_TO_CHECK = "all,configmaps,secrets,serviceaccounts,roles,rolebindings,ingresses"


@dataclass(frozen=True)
class Kubectl:
    """Runs one kubectl binary against one backend's kubeconfig."""

    binary: str
    kubeconfig: Path
    cache_dir: Path

    def __call__(self, *args: str | Path, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run ``kubectl ARGS``; with ``check``, fail the test on a non-zero exit."""
        command = [
            self.binary,
            f"--kubeconfig={self.kubeconfig}",
            f"--cache-dir={self.cache_dir}",
            *map(str, args),
        ]
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=KUBECTL_TIMEOUT, check=False
        )
        if check and result.returncode != 0:
            pytest.fail(
                f"kubectl {' '.join(map(str, args))} exited {result.returncode}:\n"
                f"{result.stdout}{result.stderr}"
            )
        return result


@pytest.fixture(scope="session")
def manifests_dir() -> Path:
    """The repository's copy of the shared manifests (tests/data/manifests)."""
    return find_manifests_dir()


@pytest.fixture(scope="session")
def ktl(
    kubectl: str, kubectl_backend: Backend, tmp_path_factory: pytest.TempPathFactory
) -> Kubectl:
    """kubectl pointed at the current backend, with a discovery cache of its own."""
    return Kubectl(kubectl, kubectl_backend.kubeconfig, tmp_path_factory.mktemp("kubectl-cache"))


def _names(output: str) -> list[str]:
    return [line.strip() for line in output.splitlines() if line.strip()]


def _created(apply_output: str) -> list[str]:
    """Object names from ``kubectl apply`` lines such as ``deployment.apps/x created``."""
    return [line.rsplit(" ", 1)[0] for line in _names(apply_output) if line.endswith(" created")]


def _variant(manifests_dir: Path, entry: Manifest, namespace: str, tmp_path: Path) -> Path:
    data, _ = in_namespace((manifests_dir / entry.path).read_bytes(), namespace)
    path = tmp_path / Path(entry.path).name
    path.write_bytes(data)
    return path


def test_every_manifest_file_has_an_expectation(manifests_dir: Path) -> None:
    on_disk = {
        str(path.relative_to(manifests_dir))
        for path in manifests_dir.rglob("*")
        if path.is_file() and path.suffix in {".yaml", ".yml", ".json"}
    }
    assert on_disk == {entry.path for entry in MANIFESTS}


def test_docs_list_every_manifest_with_its_verdict() -> None:
    rows = {}
    for line in DOC.read_text().splitlines():
        match = re.match(r"^\| `([^`]+)` \| ([^|]+?) \|", line)
        if match:
            rows[match.group(1)] = match.group(2)
    assert rows == {entry.path: entry.verdict for entry in MANIFESTS}


def test_namespace_rewrite_keeps_bytes_and_placeholders() -> None:
    data = b"metadata:\r\n  namespace: kubeedge \r\n  name: x\nnamespace: < Replace me >\n"
    rewritten, count = in_namespace(data, "t1")
    assert count == 1
    assert rewritten == b"metadata:\r\n  namespace: t1 \r\n  name: x\nnamespace: < Replace me >\n"


@pytest.fixture(scope="session")
def refusal_namespace(ktl: Kubectl) -> Iterator[str]:
    """One namespace shared by the files that must be refused: it must stay empty."""
    namespace = f"refused-{uuid.uuid4().hex[:8]}"
    ktl("create", "namespace", namespace)
    yield namespace
    ktl("delete", "namespace", namespace, "--wait=false", check=False)


@pytest.mark.parametrize("entry", MANIFESTS, ids=lambda entry: entry.path)
def test_kubectl_apply_get_describe_delete(
    entry: Manifest,
    ktl: Kubectl,
    manifests_dir: Path,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    if entry.objects:
        namespace = f"manifest-{uuid.uuid4().hex[:8]}"
        ktl("create", "namespace", namespace)
    else:
        namespace = request.getfixturevalue("refusal_namespace")
    variant = _variant(manifests_dir, entry, namespace, tmp_path)
    deleted = False
    try:
        applied = ktl("apply", "-f", variant, "-n", namespace, check=False)
        created = _created(applied.stdout)
        report = f"kubectl apply said:\n{applied.stdout}{applied.stderr}"
        if entry.verdict == SERVED:
            assert applied.returncode == 0, report
        else:
            assert entry.verdict in (PARTLY, NOT_SERVED)
            assert applied.returncode != 0, report
            assert entry.error in applied.stderr, report
        assert sorted(created) == sorted(entry.objects), report

        if entry.objects:
            # Whole-file forms where every object is served; by name where some are not.
            targets: Sequence[str | Path] = (
                ["-f", variant] if entry.verdict == SERVED else list(entry.objects)
            )
            got = ktl("get", *targets, "-n", namespace, "-o", "name")
            assert sorted(_names(got.stdout)) == sorted(entry.objects)
            described = ktl("describe", *targets, "-n", namespace)
            for name in entry.objects:
                short = name.split("/", 1)[1]
                assert re.search(rf"^Name:\s+{re.escape(short)}$", described.stdout, re.M), name
            ktl("delete", *targets, "-n", namespace, "--wait=true", "--timeout=60s")
            deleted = True
            after = ktl("get", *entry.objects, "-n", namespace, "--ignore-not-found", "-o", "name")
            assert _names(after.stdout) == []
        else:
            left = ktl("get", _KINDS_TO_CHECK, "-n", namespace, "-o", "name")
            leftovers = [n for n in _names(left.stdout) if not _NAMESPACE_DEFAULTS.match(n)]
            assert leftovers == [], f"a refused file left objects behind: {leftovers}"
    finally:
        if entry.objects:
            if not deleted:  # cluster-scoped objects outlive the namespace: remove them
                ktl("delete", *entry.objects, "-n", namespace, "--ignore-not-found", check=False)
            ktl("delete", "namespace", namespace, "--wait=false", check=False)


def test_duplicate_key_keeps_the_last_value(
    ktl: Kubectl, manifests_dir: Path, tmp_path: Path
) -> None:
    (entry,) = [m for m in MANIFESTS if m.path.endswith("kubeedge-pi-counter-app.yaml")]
    namespace = f"manifest-{uuid.uuid4().hex[:8]}"
    ktl("create", "namespace", namespace)
    try:
        ktl("apply", "-f", _variant(manifests_dir, entry, namespace, tmp_path), "-n", namespace)
        selector = ktl(
            "get",
            "deployment.apps/kubeedge-pi-counter",
            "-n",
            namespace,
            "-o",
            "jsonpath={.spec.template.spec.nodeSelector}",
        )
        assert "node-role.kubernetes.io/edge" in selector.stdout
        assert "node-role.kubernetes.io/master" not in selector.stdout
    finally:
        ktl("delete", "namespace", namespace, "--wait=false", check=False)


def test_kubectl_get_describe_builtin_lists(ktl: Kubectl) -> None:
    namespaces = ktl("get", "namespaces", "-o", "name")
    assert {"namespace/default", "namespace/kube-system"} <= set(_names(namespaces.stdout))
    described = ktl("describe", "namespace", "kube-node-lease")
    assert re.search(r"^Name:\s+kube-node-lease$", described.stdout, re.M)
    resources = ktl("api-resources", "-o", "name")
    for name in ("leases.coordination.k8s.io", "customresourcedefinitions.apiextensions.k8s.io"):
        assert name in _names(resources.stdout)
