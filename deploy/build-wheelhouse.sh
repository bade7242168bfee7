#!/usr/bin/env bash
# Build the agent's wheelhouse for offline sites: the EdgeFleet wheel of this tree and every
# wheel 'edgefleet[agent]' needs, for each target architecture and Python, in one flat
# directory with its SHA256SUMS manifest (deploy/install.sh --wheelhouse checks it), and a
# .tar.gz of it to serve over HTTPS (install.sh --wheelhouse https://…/wheelhouse.tar.gz).
#
#   deploy/build-wheelhouse.sh [--out DIR] [--arch LIST] [--python LIST] [--no-archive]
#
#   --arch LIST     comma-separated: aarch64 (Jetson, Raspberry Pi OS 64-bit), armv7l
#                   (Raspberry Pi OS 32-bit), x86_64 (default: aarch64,armv7l)
#   --python LIST   comma-separated minor versions (default: 3.10,3.11: JetPack 6 and
#                   Raspberry Pi OS bookworm)
#   --out DIR       the wheelhouse (default: dist/wheelhouse); emptied first
#
# Only binary wheels are taken (pip download --only-binary=:all: --platform ...): a
# dependency with no wheel for a target is listed and the script fails, naming it.
# armv7l: the public index has armv7l wheels for cryptography only, so for CPython 3.11 the
# others (aioquic, pylsqpack, msgpack, psutil, PyYAML with libyaml, aiohttp and its
# multidict/yarl/frozenlist/propcache, websockets, cffi, ...) are built by pip in a Debian 12
# armhf root under qemu user emulation (scripts/qemu-root.sh, as root; the root and pip's
# cache of built wheels are kept in ~/.cache/edgefleet/qemu-root: cold, the builds take
# minutes). They are tagged linux_armv7l (what Raspberry Pi OS's pip accepts). CPython 3.10
# armv7l cannot be built here: Debian 12 armhf has Python 3.11 only; the script says so and
# fails for that target unless the index has every wheel.
#
# Exit codes: 0 built; 1 a step failed or wheels are missing; 2 bad usage.
set -euo pipefail

TOP="$(cd "$(dirname "$0")/.." && pwd)"
OUT="$TOP/dist/wheelhouse"
ARCHES="aarch64,armv7l"
PYTHONS="3.10,3.11"
ARCHIVE=1

say() { printf 'build-wheelhouse: %s\n' "$*" >&2; }
die() {
    printf 'build-wheelhouse: error: %s\n' "$*" >&2
    exit 1
}
usage_error() {
    printf 'build-wheelhouse: %s (see --help)\n' "$*" >&2
    exit 2
}

while [ $# -gt 0 ]; do
    case "$1" in
    --out) OUT=${2:?--out needs a directory}; shift ;;
    --arch) ARCHES=${2:?--arch needs a list}; shift ;;
    --python) PYTHONS=${2:?--python needs a list}; shift ;;
    --no-archive) ARCHIVE=0 ;;
    -h | --help)
        sed -n '2,/^set -euo/p' "$0" | sed -e '/^set -euo/d' -e 's/^# \{0,1\}//'
        exit 0
        ;;
    *) usage_error "unknown option: $1" ;;
    esac
    shift
done

platforms() {
    case "$1" in
    aarch64) echo "manylinux2014_aarch64 manylinux_2_28_aarch64 linux_aarch64" ;;
    armv7l) echo "manylinux2014_armv7l manylinux_2_31_armv7l linux_armv7l" ;;
    x86_64) echo "manylinux2014_x86_64 manylinux_2_28_x86_64 linux_x86_64" ;;
    *) usage_error "--arch: unknown architecture $1 (aarch64, armv7l, x86_64)" ;;
    esac
}
for py in ${PYTHONS//,/ }; do
    case "$py" in 3.1[0-9]) ;; *) usage_error "--python: $py is not 3.10 or later" ;; esac
done
for arch in ${ARCHES//,/ }; do platforms "$arch" >/dev/null; done

PIP=("$TOP/.venv/bin/python" -m pip)
[ -x "$TOP/.venv/bin/python" ] || PIP=(python3 -m pip)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/edgefleet-wheelhouse.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
[ "$OUT" != / ] && [ "$OUT" != "$TOP" ] || die "--out $OUT would empty the tree"
rm -rf "$OUT"
mkdir -p "$OUT"

# The wheel of this tree, from a copy (the tree stays clean).
mkdir "$WORK/src"
cp "$TOP/pyproject.toml" "$TOP/README.md" "$WORK/src/"
for name in protocol cloudhub edgeagent systemd; do cp -r "$TOP/$name" "$WORK/src/"; done
find "$WORK/src" \( -name __pycache__ -o -name '*.egg-info' \) -type d -prune -exec rm -rf {} +
"${PIP[@]}" wheel -q --no-deps -w "$OUT" "$WORK/src" >"$WORK/pip.log" 2>&1 ||
    { tail -n 20 "$WORK/pip.log" >&2; die "building the EdgeFleet wheel failed"; }
WHEEL=$(ls "$OUT"/edgefleet-*.whl)
say "built $(basename "$WHEEL")"

# ARMV7_PACKAGES: the armhf build root's packages beyond python3 (compilers and headers of
# the native dependencies: libffi for cffi, OpenSSL, libyaml for PyYAML's compiled loader).
ARMV7_PACKAGES=(python3-venv python3-dev gcc g++ libffi-dev libssl-dev libyaml-dev)
# ARMV7_PYTHON: the one CPython of Debian 12 armhf.
ARMV7_PYTHON=3.11

# build_armv7l: pip builds, in the armhf root, the wheels of every dependency that has no
# armv7l wheel on the index, and the armv7l ones are copied into the wheelhouse.
build_armv7l() {
    [ "$(id -u)" -eq 0 ] || { say "armv7l: building the wheels under qemu needs root"; return 1; }
    local root built=$WORK/armv7l cache="${EDGEFLEET_CACHE:-$HOME/.cache/edgefleet}/qemu-root/pip-armhf"
    root=$("$TOP/scripts/qemu-root.sh" root armhf "${ARMV7_PACKAGES[@]}") || return 1
    mkdir -p "$built/in" "$built/out" "$cache"
    cp "$WHEEL" "$built/in/"
    say "armv7l, Python $ARMV7_PYTHON: building the native wheels in the armhf root under qemu (minutes when cold; pip's cache: $cache)"
    local start
    start=$(date +%s)
    "$TOP/scripts/qemu-root.sh" run "$root" --bind "$built/in:/in" --bind "$built/out:/out" \
        --bind "$cache:/root/.cache/pip" sh -euc '
            # Debian'"'"'s own pip wheel, run from the file (no venv to make under emulation);
            # pip wheel builds each sdist in an isolated environment and installs nothing.
            pip=$(ls /usr/share/python-wheels/pip-*.whl | tail -n 1)
            python3 "$pip/pip" wheel -q --disable-pip-version-check --retries 10 --timeout 60 \
                -w /out "$(ls /in/*.whl)[agent]"
        ' >"$WORK/armv7l.log" 2>&1 || {
        tail -n 25 "$WORK/armv7l.log" >&2
        say "armv7l: the build in the armhf root failed (output above)"
        return 1
    }
    local wheel names=""
    for wheel in "$built"/out/*armv7l*.whl; do
        [ -e "$wheel" ] || continue
        cp "$wheel" "$OUT/"
        names="$names $(basename "$wheel" | cut -d- -f1)"
    done
    say "armv7l, Python $ARMV7_PYTHON: built in $(($(date +%s) - start)) s:$names"
}

failed=""
for arch in ${ARCHES//,/ }; do
    if [ "$arch" = armv7l ] && [[ ",$PYTHONS," == *",$ARMV7_PYTHON,"* ]]; then
        build_armv7l || failed="$failed armv7l/cp${ARMV7_PYTHON/./}(build)"
    fi
    for py in ${PYTHONS//,/ }; do
        abi="cp${py/./}"
        args=(download -q --only-binary=:all: --implementation cp --python-version "$py" --abi "$abi" --abi abi3 --abi none -d "$OUT" --find-links "$OUT")
        for platform in $(platforms "$arch"); do args+=(--platform "$platform"); done
        # pip itself: install.sh installs with the wheelhouse's pip wheel (nothing the agent
        # needs depends on pip any more, so it is named here).
        if "${PIP[@]}" "${args[@]}" "$WHEEL[agent]" pip >"$WORK/pip.log" 2>&1; then
            say "$arch, Python $py: done"
        else
            why=$(grep -m 3 -E 'No matching distribution|Could not find' "$WORK/pip.log" | tr '\n' ' ')
            say "$arch, Python $py: wheels missing: ${why:-$(tail -n 3 "$WORK/pip.log" | tr '\n' ' ')}"
            if [ "$arch" = armv7l ] && [ "$py" != "$ARMV7_PYTHON" ]; then
                say "armv7l, Python $py: not built here: Debian 12 armhf, the root the armv7l wheels are built in, has only Python $ARMV7_PYTHON, and the index has armv7l wheels for cryptography only; build them with pip wheel on a 32-bit ARM machine with Python $py"
            fi
            failed="$failed $arch/cp${py/./}"
        fi
    done
done

(cd "$OUT" && sha256sum -- *.whl >SHA256SUMS)
count=$(ls "$OUT"/*.whl | wc -l)
if [ "$ARCHIVE" = 1 ]; then
    tar -C "$(dirname "$OUT")" -czf "$OUT.tar.gz" "$(basename "$OUT")"
    say "wrote $OUT.tar.gz"
fi
say "$count wheels and SHA256SUMS in $OUT"
if [ -n "$failed" ]; then
    die "no complete set of wheels for:$failed"
fi
