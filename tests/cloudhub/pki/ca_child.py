"""One hub replica's CA start in a process of its own, for the multi-process race test.

``python -m tests.cloudhub.pki.ca_child KUBECONFIG NAMESPACE SECRET`` connects its own API
client, then waits for one line on stdin (the parent writes it to every child at once, so
that they all reach the API together), runs :meth:`CAManager.start` and prints one JSON
line: ``{"origin": "created"|"loaded", "pin": "sha256:..."}``. Errors go to stderr with
exit status 1.
"""

from __future__ import annotations

import asyncio
import json
import sys

from cloudhub.kube import KubeClient
from cloudhub.pki import CAManager, PKISettings


async def main(kubeconfig: str, namespace: str, secret: str) -> None:
    client = await KubeClient.from_kubeconfig(kubeconfig)
    async with client:
        await client.version()  # connected before the start line
        print(json.dumps({"ready": True}), flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        manager = CAManager(client, PKISettings(namespace=namespace, ca_secret=secret))
        await manager.start()
        print(json.dumps({"origin": manager.origin, "pin": manager.ca_hash}), flush=True)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
