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
# dependency with no wheel for a target is listed and the script fails, naming it. For
# armv7l the public index has cryptography only; the others (aioquic, msgpack, psutil,
# PyYAML, ...) have to be built in an armhf Debian root under qemu-user-static, which this
# script does not do yet: it says so and which wheels are missing.
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

failed=""
for arch in ${ARCHES//,/ }; do
    for py in ${PYTHONS//,/ }; do
        abi="cp${py/./}"
        args=(download -q --only-binary=:all: --implementation cp --python-version "$py" --abi "$abi" --abi abi3 --abi none -d "$OUT")
        for platform in $(platforms "$arch"); do args+=(--platform "$platform"); done
        # pip itself: install.sh installs with the wheelhouse's pip wheel (nothing the agent
        # needs depends on pip any more, so it is named here).
        if "${PIP[@]}" "${args[@]}" "$WHEEL[agent]" pip >"$WORK/pip.log" 2>&1; then
            say "$arch, Python $py: done"
        else
            why=$(grep -m 3 -E 'No matching distribution|Could not find' "$WORK/pip.log" | tr '\n' ' ')
            say "$arch, Python $py: wheels missing: ${why:-$(tail -n 3 "$WORK/pip.log" | tr '\n' ' ')}"
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
    case "$failed" in *armv7l*)
        say "armv7l: the index has binary wheels for cryptography only; build the others in an armhf Debian root under qemu-user-static (not automated yet)" ;;
    esac
    die "no complete set of wheels for:$failed"
fi
