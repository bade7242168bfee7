#!/usr/bin/env bash
# Install everything EdgeFleet's tests and benchmarks need on a fresh Debian/Ubuntu machine:
# system packages (podman, runc, a static busybox, iptables, etcd), EdgeFleet itself in
# editable mode with its test extra, and the reference kube-apiserver v1.20.2 with Debian's
# kubectl 1.20.2 (built once, cached in ~/.cache/edgefleet; Go comes with that build).
#
# Not Debian's kubernetes-client: on our machine images /usr/bin/kubectl belongs to the
# image's own `kubectl` package. tests/k8s/build-kube-apiserver.sh unpacks Debian's kubectl
# next to the reference kube-apiserver instead.
#
# Usage: scripts/install-dev.sh        (as root, or with sudo available)
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "install-dev.sh: run as root or install sudo" >&2; exit 1; }
    SUDO="sudo"
fi

PACKAGES=(podman runc busybox-static iptables iproute2 etcd-server
          systemd ca-certificates)
missing=()
for pkg in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
    echo "install-dev.sh: installing ${missing[*]}"
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

python3 -m pip install -q --upgrade pip
python3 -m pip install -q -e '.[test]'

tests/k8s/build-kube-apiserver.sh   # about 5 minutes on the first run, then instant
echo "install-dev.sh: done"
