"""docs/hub.md shows what the hub's ServiceAccount may do, as ``kubectl auth can-i --list``
prints it against the reference kube-apiserver after ``kubectl apply -k deploy/base``;
this test keeps that block true (issue 16 item 6)."""

from __future__ import annotations

import re

import pytest

from tests.deploy.test_image_in_cluster import run
from tests.deploy.wheels import REPO

pytestmark = pytest.mark.kubeapiserver
SA = "system:serviceaccount:edgefleet:cloudhub"
DOC = REPO / "docs" / "hub.md"


def documented(namespace: str) -> list[str]:
    """The lines of the doc's block for ``namespace``."""
    text = DOC.read_text()
    block = re.search(
        rf"<!-- can-i {re.escape(namespace)} -->\n```text\n(.*?)```", text, flags=re.DOTALL
    )
    assert block, f"docs/hub.md has no can-i block for {namespace}"
    return block[1].splitlines()


def normalised(out: str) -> list[str]:
    """can-i's table with its column padding collapsed (widths depend on the longest row)."""
    return [re.sub(r"\s{2,}", "  ", line.rstrip()) for line in out.strip().splitlines()]


@pytest.mark.parametrize("namespace", ["edgefleet", "default"])
async def test_docs_show_what_the_service_account_may_do(
    kube_apiserver, kubectl: str, namespace: str
) -> None:
    k = [kubectl, "--kubeconfig", str(kube_apiserver.kubeconfig)]
    code, _, err = await run(*k, "apply", "-k", str(REPO / "deploy" / "base"))
    assert code == 0, err
    try:
        code, out, err = await run(*k, "auth", "can-i", "--list", f"--as={SA}", "-n", namespace)
        assert code == 0, err
        # The rules' order is the server's; what they grant is the set.
        got = normalised(out)
        assert sorted(got) == sorted(documented(namespace)), "\n" + "\n".join(got)
    finally:
        await run(*k, "delete", "--ignore-not-found", "-k", str(REPO / "deploy" / "crds"))
