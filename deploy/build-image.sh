#!/usr/bin/env bash
# Build the hub's container image on this machine, with no image registry: a Debian 12 base
# made here (debootstrap --variant=minbase with python3, trimmed, then 'podman import'; cached
# under ~/.cache/edgefleet), the EdgeFleet wheel and its hub dependencies installed into a
# venv from a wheelhouse built on the host (no index inside the build), a non-root user,
# nothing written outside /tmp (read-only root filesystem), 'cloudhub serve' as entry point,
# OCI labels with the version and the source revision. Then 'podman save' writes an archive
# an operator loads anywhere ('podman load -i' or 'docker load -i').
#
#   deploy/build-image.sh [--out FILE] [--tag NAME] [--no-save]
#
# Prints, as its last line, one JSON object: {"image", "version", "revision", "size_bytes",
# "archive", "archive_bytes"}. Needs root (debootstrap), podman, debootstrap and network
# access to the Debian mirror the first time (then the cached base is reused).
#
# Environment: EDGEFLEET_CACHE (default ~/.cache/edgefleet), EDGEFLEET_MIRROR (default
# http://deb.debian.org/debian), EDGEFLEET_PYTHON (the host interpreter that builds the
# wheelhouse; default .venv/bin/python, else python3; must be the base's Python minor, 3.11).
#
# Exit codes: 0 built; 1 a step failed (the message says which); 2 bad usage.
set -euo pipefail

TOP="$(cd "$(dirname "$0")/.." && pwd)"
CACHE="${EDGEFLEET_CACHE:-$HOME/.cache/edgefleet}"
MIRROR="${EDGEFLEET_MIRROR:-http://deb.debian.org/debian}"
SUITE=bookworm
BASE_TAG="localhost/edgefleet/hub-base:$SUITE"
BASE_TAR="$CACHE/hub-base-$SUITE.tar"
OUT=""
TAG=""
SAVE=1

say() { printf 'build-image: %s\n' "$*" >&2; }
die() {
    printf 'build-image: error: %s\n' "$*" >&2
    exit 1
}

while [ $# -gt 0 ]; do
    case "$1" in
    --out) OUT=${2:?--out needs a file}; shift ;;
    --tag) TAG=${2:?--tag needs a name}; shift ;;
    --no-save) SAVE=0 ;;
    -h | --help)
        sed -n '2,/^set -euo/p' "$0" | sed -e '/^set -euo/d' -e 's/^# \{0,1\}//'
        exit 0
        ;;
    *)
        printf 'build-image: unknown option: %s (see --help)\n' "$1" >&2
        exit 2
        ;;
    esac
    shift
done

command -v podman >/dev/null || die "podman is needed (apt-get install podman)"
PYTHON="${EDGEFLEET_PYTHON:-}"
if [ -z "$PYTHON" ]; then
    if [ -x "$TOP/.venv/bin/python" ]; then PYTHON="$TOP/.venv/bin/python"; else PYTHON=python3; fi
fi
VERSION=$("$PYTHON" -c 'import re,sys; print(re.search(r"(?m)^version = \"(.+)\"$", open(sys.argv[1]).read()).group(1))' "$TOP/pyproject.toml")
REVISION=$(git -C "$TOP" rev-parse HEAD 2>/dev/null || echo unknown)
if [ "$REVISION" != unknown ] && [ -n "$(git -C "$TOP" status --porcelain -- protocol cloudhub edgeagent pyproject.toml deploy/image 2>/dev/null)" ]; then
    REVISION="$REVISION-dirty"
fi
TAG="${TAG:-ghcr.io/edgefleet/cloudhub:$VERSION}"
[ -n "$OUT" ] || OUT="$TOP/dist/cloudhub-$VERSION.oci.tar"

# 1. The base: a trimmed Debian minbase root with python3, imported once and cached.
make_base() {
    [ "$(id -u)" -eq 0 ] || die "the first build makes the Debian base with debootstrap: run as root"
    command -v debootstrap >/dev/null || die "debootstrap is needed (apt-get install debootstrap)"
    mkdir -p "$CACHE"
    local stage
    stage=$(mktemp -d "$CACHE/hub-base.XXXXXX")
    say "debootstrap --variant=minbase --include=python3,python3-venv $SUITE (about a minute, cached afterwards)"
    if ! debootstrap --variant=minbase --include=python3,python3-venv "$SUITE" "$stage" "$MIRROR" >"$stage.log" 2>&1; then
        tail -n 20 "$stage.log" >&2
        rm -rf "$stage"
        die "debootstrap failed (log: $stage.log)"
    fi
    # What a server image never reads: documentation, manuals, translations, apt's caches.
    rm -rf "$stage"/usr/share/doc/* "$stage"/usr/share/man/* "$stage"/usr/share/info/* \
        "$stage"/usr/share/locale/* "$stage"/usr/share/lintian "$stage"/var/cache/apt/* \
        "$stage"/var/lib/apt/lists/* "$stage"/var/log/* "$stage"/usr/share/common-licenses
    find "$stage/usr/lib/python3.11" -name 'test' -maxdepth 1 -type d -exec rm -rf {} +
    tar -C "$stage" --numeric-owner -cf "$BASE_TAR.tmp" .
    mv "$BASE_TAR.tmp" "$BASE_TAR"
    rm -rf "$stage" "$stage.log"
}
if ! podman image exists "$BASE_TAG"; then
    [ -f "$BASE_TAR" ] || make_base
    say "podman import $BASE_TAR as $BASE_TAG"
    podman import --change 'CMD ["/bin/sh"]' "$BASE_TAR" "$BASE_TAG" >/dev/null ||
        die "podman import of $BASE_TAR failed"
fi

# 2. The build context: the wheel of this tree and the wheelhouse of its hub dependencies.
CONTEXT=$(mktemp -d "${TMPDIR:-/tmp}/edgefleet-image.XXXXXX")
trap 'rm -rf "$CONTEXT"' EXIT
mkdir "$CONTEXT/src" "$CONTEXT/wheels"
for name in pyproject.toml README.md; do cp "$TOP/$name" "$CONTEXT/src/"; done
for name in protocol cloudhub edgeagent systemd; do
    cp -r "$TOP/$name" "$CONTEXT/src/"
done
find "$CONTEXT/src" -name __pycache__ -type d -prune -exec rm -rf {} +
find "$CONTEXT/src" -name '*.egg-info' -type d -prune -exec rm -rf {} +
say "building the wheel edgefleet $VERSION and the hub's wheelhouse"
"$PYTHON" -m pip wheel -q --no-deps -w "$CONTEXT/wheels" "$CONTEXT/src" >"$CONTEXT/pip.log" 2>&1 ||
    { tail -n 20 "$CONTEXT/pip.log" >&2; die "building the EdgeFleet wheel failed"; }
rm -rf "$CONTEXT/src"
WHEEL=$(ls "$CONTEXT"/wheels/edgefleet-*.whl)
"$PYTHON" -m pip wheel -q -w "$CONTEXT/wheels" "$WHEEL[hub]" >"$CONTEXT/pip.log" 2>&1 ||
    { tail -n 20 "$CONTEXT/pip.log" >&2; die "building the hub's wheelhouse failed (pip wheel $WHEEL[hub])"; }
cp "$TOP/deploy/image/Containerfile" "$CONTEXT/Containerfile"

# 3. The image.
say "podman build $TAG"
OLD_ID=$(podman image inspect --format '{{.Id}}' "$TAG" 2>/dev/null || true)
podman build -q --pull=never --layers=false -f "$CONTEXT/Containerfile" \
    --build-arg "BASE=$BASE_TAG" --build-arg "VERSION=$VERSION" --build-arg "REVISION=$REVISION" \
    -t "$TAG" "$CONTEXT" >"$CONTEXT/build.log" 2>&1 ||
    { tail -n 25 "$CONTEXT/build.log" >&2; die "podman build failed"; }
SIZE=$(podman image inspect --format '{{.Size}}' "$TAG")
# The image this tag named before, now untagged: removed (unless a container uses it).
if [ -n "$OLD_ID" ] && [ "$OLD_ID" != "$(podman image inspect --format '{{.Id}}' "$TAG")" ]; then
    podman rmi "$OLD_ID" >/dev/null 2>&1 || true
fi
ARCHIVE_BYTES=0
if [ "$SAVE" = 1 ]; then
    mkdir -p "$(dirname "$OUT")"
    rm -f "$OUT"
    podman save --format oci-archive -o "$OUT" "$TAG" >/dev/null || die "podman save failed"
    ARCHIVE_BYTES=$(stat -c %s "$OUT")
    say "saved $OUT (load it with: podman load -i $(basename "$OUT"))"
else
    OUT=""
fi
say "built $TAG: $((SIZE / 1000000)) MB"
printf '{"image": "%s", "version": "%s", "revision": "%s", "size_bytes": %s, "archive": "%s", "archive_bytes": %s}\n' \
    "$TAG" "$VERSION" "$REVISION" "$SIZE" "$OUT" "$ARCHIVE_BYTES"
