"""docs/hub.md shows what the hub's ServiceAccount may do, as ``kubectl auth can-i --list``
prints it against the reference kube-apiserver after ``kubectl apply -k deploy/base`` (and
after ``deploy/overlays/namespaced``, the namespaced mode); this test keeps those blocks
true (issue 16 item 6)."""

from __future__ import annotations

import re

import pytest

from tests.deploy.test_image_in_cluster import run
from tests.deploy.wheels import REPO

pytestmark = pytest.mark.kubeapiserver
SA = "system:serviceaccount:edgefleet:cloudhub"
DOC = REPO / "docs" / "hub.md"
NAMESPACED = REPO / "deploy" / "overlays" / "namespaced"
#: What the namespaced overlay adds to the base besides its ClusterRole (taken away again
#: after the test: the kube-apiserver is shared by the session).
NAMESPACED_ONLY = ("edge-namespace-rbac.yaml", "node-events-rbac.yaml", "hub-namespace-rbac.yaml")


def documented(block: str) -> list[str]:
    """The lines of the doc's block named ``block``."""
    text = DOC.read_text()
    found = re.search(rf"<!-- can-i {re.escape(block)} -->\n```text\n(.*?)```", text, re.DOTALL)
    assert found, f"docs/hub.md has no can-i block {block!r}"
    return found[1].splitlines()


def normalised(out: str) -> list[str]:
    """can-i's table with its column padding collapsed (widths depend on the longest row)."""
    return [re.sub(r"\s{2,}", "  ", line.rstrip()) for line in out.strip().splitlines()]


def granted(lines: list[str]) -> list[str]:
    """The rows as a set: each row's verbs sorted (a resource granted by two roles lists its
    verbs in whichever order the server merged the roles, which varies from call to call)."""

    def verbs_sorted(line: str) -> str:
        head, sep, verbs = line.rpartition("  [")
        if not sep:
            return line
        return f"{head}  [{' '.join(sorted(verbs.rstrip(']').split()))}]"

    return sorted(verbs_sorted(line) for line in lines)


@pytest.mark.parametrize(
    ("kustomization", "namespace", "block"),
    [
        ("base", "edgefleet", "edgefleet"),
        ("base", "default", "default"),
        ("overlays/namespaced", "edge-apps", "namespaced edge-apps"),
        ("overlays/namespaced", "edgefleet", "namespaced edgefleet"),
        ("overlays/namespaced", "default", "namespaced default"),
    ],
)
async def test_docs_show_what_the_service_account_may_do(
    kube_apiserver, kubectl: str, kustomization: str, namespace: str, block: str
) -> None:
    k = [kubectl, "--kubeconfig", str(kube_apiserver.kubeconfig)]
    code, _, err = await run(*k, "apply", "-k", str(REPO / "deploy" / kustomization))
    assert code == 0, err
    try:
        code, out, err = await run(*k, "auth", "can-i", "--list", f"--as={SA}", "-n", namespace)
        assert code == 0, err
        # The rules' order is the server's; what they grant is the set.
        got = normalised(out)
        assert granted(got) == granted(documented(block)), "\n" + "\n".join(got)
    finally:
        for name in NAMESPACED_ONLY:
            await run(*k, "delete", "--ignore-not-found", "-f", str(NAMESPACED / name))
        await run(*k, "apply", "-k", str(REPO / "deploy" / "base"))  # the base's ClusterRole
        await run(*k, "delete", "--ignore-not-found", "-k", str(REPO / "deploy" / "crds"))
