"""The hub's container image (issue 16): built by deploy/build-image.sh on this machine
(the cached Debian base, the wheel of this tree), its size as podman reports it (the
uncompressed layers, what a node stores) and the ``podman save`` archive's size.

``--quick`` builds the same image without saving the archive (the size goal is the same:
the image is what it is). The wall time and the process CPU seconds of the build (the
script and everything it ran, from ``RUSAGE_CHILDREN``) are reported beside it; a first
build includes the debootstrap of the base (cached under ~/.cache/edgefleet afterwards).
"""

from __future__ import annotations

import json
import pathlib
import resource
import subprocess
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "deploy" / "build-image.sh"


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(quick: bool) -> dict:
    with tempfile.TemporaryDirectory(prefix="edgefleet-bench-deploy-") as tmp:
        out = pathlib.Path(tmp) / "cloudhub.oci.tar"
        args = [str(SCRIPT), "--tag", "localhost/edgefleet/cloudhub:bench"]
        args += ["--no-save"] if quick else ["--out", str(out)]
        cpu0, wall0 = _children_cpu(), time.monotonic()
        proc = subprocess.run(args, capture_output=True, text=True, timeout=1800)
        wall, cpu = time.monotonic() - wall0, _children_cpu() - cpu0
        if proc.returncode != 0:
            raise RuntimeError(f"deploy/build-image.sh failed:\n{proc.stderr[-3000:]}")
        built = json.loads(proc.stdout.strip().splitlines()[-1])
        subprocess.run(["podman", "rmi", "-f", built["image"]], capture_output=True, timeout=120)
    size_mb = built["size_bytes"] / 1e6
    results = {
        "image": built["image"],
        "version": built["version"],
        "revision": built["revision"],
        "hub_image_mb": round(size_mb, 1),
        "archive_mb": round(built["archive_bytes"] / 1e6, 1) if not quick else None,
        "build_wall_s": round(wall, 1),
        "build_cpu_s": round(cpu, 1),
    }
    goals = [{"id": "deploy.hub_image_mb", "value": round(size_mb, 1), "target": 200, "unit": "MB"}]
    return {"results": results, "goals": goals}
