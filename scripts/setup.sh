#!/usr/bin/env bash
# Install whatever is missing for one EdgeFleet profile, quietly when nothing is.
#
#   scripts/setup.sh demo    system packages for the demo (podman and its network backends, a
#                            static busybox, iptables) and EdgeFleet in .venv
#   scripts/setup.sh test    the demo's, plus etcd, systemd's tools and git, the test extra,
#                            and the reference kube-apiserver v1.20.2 (built once from Debian's
#                            source package, cached in ~/.cache/edgefleet; about 3 minutes)
#
# Run from any directory of a clone, as root or as a user with sudo (only apt needs root).
# Python packages go into .venv at the top of the clone, owned by this script: no
# --break-system-packages, no pip outside the venv. A second run with nothing to do prints
# nothing. It is what scripts/demo.sh and scripts/test.sh (the README's two commands) run
# first. Tested on Debian 12 (bookworm), the base of Raspberry Pi OS.
#
# Environment:
#   EDGEFLEET_VENV   the virtual environment (default: .venv at the top of the clone)
#   EDGEFLEET_PYTHON the interpreter that makes it (default: python3 on PATH; >= 3.10)
set -euo pipefail

PROFILE="${1:-}"
case "$PROFILE" in
    demo | test) ;;
    -h | --help)
        sed -n '2,/^set -euo/p' "$0" | sed -e '/^set -euo/d' -e 's/^# \{0,1\}//'
        exit 0
        ;;
    *)
        echo "usage: scripts/setup.sh demo|test" >&2
        exit 2
        ;;
esac

TOP="$(cd "$(dirname "$0")/.." && pwd)"
VENV="${EDGEFLEET_VENV:-$TOP/.venv}"
PYTHON="${EDGEFLEET_PYTHON:-python3}"
START=$(date +%s)
LOG="$(mktemp "${TMPDIR:-/tmp}/edgefleet-setup.XXXXXX.log")"
trap 'rm -f "$LOG"' EXIT

say() { printf 'setup: %s\n' "$*" >&2; }
fail() {
    say "error: $*"
    if [ -s "$LOG" ]; then
        say "the last lines of the step's output:"
        tail -n 25 "$LOG" | sed 's/^/    /' >&2
    fi
    exit 1
}
elapsed() { echo "$(($(date +%s) - START)) s"; }

# System packages. The engine needs podman with runc and a network backend: Debian 12's podman
# 4.3 uses netavark when it is installed and CNI (containernetworking-plugins) otherwise; both
# are installed so that the tests cover both (the demo's engine detects which one podman
# uses). busybox-static is the image the pods run (no registry is reachable).
APT_DEMO=(python3 python3-venv ca-certificates podman runc conmon netavark aardvark-dns
          containernetworking-plugins busybox-static iptables iproute2 procps util-linux)
# The demo ends with kubectl logs and kubectl exec (cloudhub/demo/day2.py): Debian's
# kubectl 1.20 (kubernetes-client), unless a kubectl is there already (on some images
# another package owns /usr/bin/kubectl, and the two conflict).
command -v kubectl >/dev/null 2>&1 || APT_DEMO+=(kubernetes-client)
# The tests add etcd (the reference kube-apiserver's store), systemd (systemd-analyze verifies
# the agent's unit), git (tests/deploy reads the revision), faketime (an agent or a join on
# a clock hours behind, or stepped while it runs: libfaketime under a real process) and
# debootstrap (the base of the hub's image: deploy/build-image.sh, tests/deploy/test_image.py),
# qemu-user-static and binfmt-support (foreign-architecture Debian roots for the arm64 proof and
# the armv7l wheels: scripts/qemu-root.sh, tests/deploy/test_arm64.py) and docker-registry (a
# local registry the image pre-pull tests push to and pull from: no registry is reachable; the
# tests start their own on a free port, so the package's service, which would listen on :5000,
# is disabled and stopped below); the kube-apiserver build installs its own Go toolchain.
APT_TEST=(etcd-server systemd git faketime debootstrap qemu-user-static binfmt-support
          docker-registry)

packages=("${APT_DEMO[@]}")
[ "$PROFILE" = test ] && packages+=("${APT_TEST[@]}")

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
    SUDO=(sudo)
fi

missing=()
for pkg in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" ||
        missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
    command -v apt-get >/dev/null || fail "missing ${missing[*]} and there is no apt-get: install them by hand"
    if [ "${#SUDO[@]}" -gt 0 ] && ! command -v sudo >/dev/null; then
        fail "missing system packages (${missing[*]}): run as root, or install sudo"
    fi
    APT=("${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -q -o DPkg::Lock::Timeout=600)
    say "system packages: installing ${#missing[@]} (${missing[*]}) with apt; about a minute"
    "${APT[@]}" update >"$LOG" 2>&1 || fail "apt-get update failed"
    "${APT[@]}" install -y --no-install-recommends "${missing[@]}" >"$LOG" 2>&1 ||
        fail "apt-get install ${missing[*]} failed"
    say "system packages: done ($(elapsed))"
fi
if [ "$PROFILE" = test ] && [ -e /lib/systemd/system/docker-registry.service ] &&
    [ -d /run/systemd/system ]; then
    "${SUDO[@]}" systemctl disable --now docker-registry.service >/dev/null 2>&1 || true
fi

# The virtual environment, made by this script and reused while pyproject.toml and the
# profile stay the same (the stamp records both, and the interpreter).
command -v "$PYTHON" >/dev/null || fail "no $PYTHON on PATH (apt-get install python3)"
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' ||
    fail "EdgeFleet needs Python >= 3.10; $PYTHON is $("$PYTHON" -V 2>&1)"
# One source tree, two installs (pyproject's extras): the demo and the tests run both halves.
extras="[agent,hub]"
[ "$PROFILE" = test ] && extras="[agent,hub,test]"
stamp_want="$(
    {
        cat "$TOP/pyproject.toml"
        echo "$extras"
        "$PYTHON" -c 'import sys; print(sys.version, sys.base_prefix)'
    } | sha256sum | cut -d' ' -f1
)"
STAMP="$VENV/.edgefleet-setup"
if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$STAMP" 2>/dev/null)" != "$stamp_want" ]; then
    if [ ! -x "$VENV/bin/python" ]; then
        say "python: making the virtual environment $VENV ($("$PYTHON" -V 2>&1))"
        "$PYTHON" -m venv "$VENV" >"$LOG" 2>&1 ||
            fail "$PYTHON -m venv failed (on Debian/Ubuntu: apt-get install python3-venv)"
    fi
    say "python: installing EdgeFleet$extras and its dependencies into $VENV; about a minute"
    "$VENV/bin/python" -m pip install -q --upgrade pip >"$LOG" 2>&1 || fail "upgrading pip in $VENV failed"
    "$VENV/bin/python" -m pip install -q --progress-bar off -e "$TOP$extras" >"$LOG" 2>&1 ||
        fail "pip install -e .$extras failed"
    echo "$stamp_want" >"$STAMP"
    say "python: done ($(elapsed))"
fi

if [ "$PROFILE" = test ]; then
    # Quiet when cached; prints its own progress while it builds.
    "$TOP/tests/k8s/build-kube-apiserver.sh" --quiet || fail "the reference kube-apiserver build failed (output above)"
fi
