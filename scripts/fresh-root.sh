#!/usr/bin/env bash
# Run one of the README's Quick start commands the way a newcomer would: in a fresh, minimal
# Debian 12 root (debootstrap --variant=minbase, plus python3, nothing else), from a fresh
# clone of this repository's HEAD, as root. CI (.ci/run) runs `test` here on every submission.
#
#   scripts/fresh-root.sh demo [-- ARGS]   the README's first command (install + demo); prints
#                                          the demo's verdict
#   scripts/fresh-root.sh test [-- ARGS]   the README's second command (install + whole suite)
#   scripts/fresh-root.sh shell            a shell in a fresh root with the clone, to look around
#   scripts/fresh-root.sh commands         print the README's two commands as this script reads them
#   options: --keep    leave the root directory for inspection (its path is printed)
#
# The commands are read from the README's "Quick start" block, so what is tested is what a
# newcomer reads. Only committed work is tested (the clone is of HEAD).
#
# What the root gets from this machine, and nothing else: the CA trust
# (/etc/ssl/certs/ca-certificates.crt), the pip configuration (/etc/pip.conf), the apt sources
# and Acquire settings for Debian's mirror, /etc/resolv.conf and /etc/hosts. Mounted: a new
# /proc (own PID namespace: every process started inside dies with the run), /sys (cgroups),
# /dev, a tmpfs on /run; the root is pivoted to, so nothing of the host's file system is
# visible inside. Cached between runs under ~/.cache/edgefleet/ (never installed state):
# the untouched root tarball, downloaded .deb and wheel files, and ~/.cache/edgefleet's
# built artifacts (the reference kube-apiserver from tests/k8s/build-kube-apiserver.sh).
#
# Needs root on a Debian/Ubuntu host (debootstrap is installed if missing) and the network
# access the host's apt and pip have.
#
# Environment: EDGEFLEET_FRESH_DIR (where roots are made, default /var/tmp/edgefleet-fresh),
# EDGEFLEET_CACHE (default ~/.cache/edgefleet), EDGEFLEET_MIRROR (default: the host's Debian
# mirror from /etc/apt/sources.list.d/).
set -euo pipefail

TOP="$(cd "$(dirname "$0")/.." && pwd)"
MODE=""
KEEP=0
EXTRA=()
while [ $# -gt 0 ]; do
    case "$1" in
        demo | test | shell | commands) MODE="$1" ;;
        --keep) KEEP=1 ;;
        --) shift; EXTRA=("$@"); break ;;
        -h | --help) sed -n '2,/^set -euo/p' "$0" | sed -e '/^set -euo/d' -e 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "usage: scripts/fresh-root.sh demo|test|shell|commands [--keep] [-- ARGS]" >&2; exit 2 ;;
    esac
    shift
done
[ -n "$MODE" ] || { echo "usage: scripts/fresh-root.sh demo|test|shell|commands [--keep] [-- ARGS]" >&2; exit 2; }

log() { printf 'fresh-root: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

SUITE=bookworm
CACHE="${EDGEFLEET_CACHE:-$HOME/.cache/edgefleet}"
FRESH_DIR="${EDGEFLEET_FRESH_DIR:-/var/tmp/edgefleet-fresh}"
T0=$(date +%s)
since() { echo "$(($(date +%s) - ${1:-$T0})) s"; }

# The README's Quick start: the first fenced block after the heading, command lines only
# (comments and blank lines dropped, a trailing "# ..." comment stripped).
readme_command() {
    awk -v want="$1" '
        /^## Quick start/ { inside = 1; next }
        inside && /^## / { exit }
        inside && /^```/ { if (block) exit; block = 1; next }
        block {
            line = $0
            sub(/[ \t]+#.*$/, "", line)
            if (line ~ /^[ \t]*(#|$)/) next
            if (++n == want) { print line; exit }
        }' "$TOP/README.md"
}
if [ "$MODE" = commands ]; then
    printf 'demo: %s\ntest: %s\n' "$(readme_command 1)" "$(readme_command 2)"
    exit 0
fi
[ "$(id -u)" -eq 0 ] || die "run as root (debootstrap, pivot_root and the mounts need it)"
case "$MODE" in
    demo) COMMAND="$(readme_command 1)" ;;
    test) COMMAND="$(readme_command 2)" ;;
    shell) COMMAND="bash -i" ;;
esac
[ -n "$COMMAND" ] || die "no Quick start command for '$MODE' in README.md (see readme_command in $0)"
if [ "${#EXTRA[@]}" -gt 0 ]; then
    COMMAND="$COMMAND $(printf '%q ' "${EXTRA[@]}")"
fi

# The host's Debian mirror, as debootstrap and the root's apt will use it.
MIRROR="${EDGEFLEET_MIRROR:-}"
if [ -z "$MIRROR" ]; then
    MIRROR=$(awk '/^URIs:/ && $2 ~ /debian\/?$/ { print $2; exit }' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
    [ -n "$MIRROR" ] || MIRROR=$(awk '/^deb / && $3 == "'$SUITE'" { print $2; exit }' /etc/apt/sources.list 2>/dev/null || true)
fi
[ -n "$MIRROR" ] || die "cannot find the host's Debian mirror; set EDGEFLEET_MIRROR"

if ! command -v debootstrap >/dev/null; then
    log "installing debootstrap on the host"
    DEBIAN_FRONTEND=noninteractive apt-get -q -o DPkg::Lock::Timeout=600 install -y --no-install-recommends debootstrap >/dev/null
fi
command -v git >/dev/null || die "git is needed on the host to clone the repository"

# 1. The untouched root: debootstrap once, then reuse its tarball.
mkdir -p "$CACHE/fresh-root" "$FRESH_DIR"
KEY=$(printf '%s %s minbase python3 v1' "$SUITE" "$MIRROR" | sha256sum | cut -c1-12)
TARBALL="$CACHE/fresh-root/$SUITE-minbase-python3-$KEY.tar"
if [ ! -s "$TARBALL" ]; then
    log "debootstrap --variant=minbase --include=python3 $SUITE from $MIRROR (about 30 s, cached afterwards)"
    STAGE=$(mktemp -d "$FRESH_DIR/debootstrap.XXXXXX")
    debootstrap --variant=minbase --include=python3 "$SUITE" "$STAGE" "$MIRROR" >"$STAGE.log" 2>&1 ||
        { tail -n 20 "$STAGE.log" >&2; die "debootstrap failed (log: $STAGE.log)"; }
    # A root as debootstrap leaves it: no package lists or downloaded .debs kept.
    rm -rf "$STAGE"/var/cache/apt/archives/*.deb "$STAGE"/var/lib/apt/lists/*_Packages
    tar -C "$STAGE" -cf "$TARBALL.tmp" .
    mv "$TARBALL.tmp" "$TARBALL"
    rm -rf --one-file-system "$STAGE" "$STAGE.log"
fi

ROOT=$(mktemp -d "$FRESH_DIR/root.XXXXXX")
cleanup() {
    if [ "$KEEP" -eq 1 ]; then
        log "kept the root: $ROOT (remove it with: rm -rf --one-file-system $ROOT)"
    else
        rm -rf --one-file-system "$ROOT"
    fi
}
trap cleanup EXIT
tar -C "$ROOT" -xf "$TARBALL"
log "fresh root $ROOT: Debian $(cat "$ROOT/etc/debian_version"), $("$ROOT/usr/bin/python3" -V 2>/dev/null || chroot "$ROOT" python3 -V), no pip, no venv module, nothing of ours"

# 2. What the root may take from the host: CA trust, pip and apt configuration, name resolution.
# The trust goes in twice: as the bundle apt and pip read now, and as a local CA that
# update-ca-certificates adds back when the ca-certificates package regenerates the bundle.
mkdir -p "$ROOT/etc/ssl/certs" "$ROOT/usr/local/share/ca-certificates"
cp /etc/ssl/certs/ca-certificates.crt "$ROOT/etc/ssl/certs/ca-certificates.crt"
cp /etc/ssl/certs/ca-certificates.crt "$ROOT/usr/local/share/ca-certificates/host-trust.crt"
[ -f /etc/pip.conf ] && cp /etc/pip.conf "$ROOT/etc/pip.conf"
# The host's Debian sources replace debootstrap's one-line sources.list (they add the
# security and updates suites); other vendors' sources and our own scripts' are left out.
rm -f "$ROOT/etc/apt/sources.list"
grep -qs debian /etc/apt/sources.list && cp /etc/apt/sources.list "$ROOT/etc/apt/sources.list"
for f in /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    case "$(basename "$f")" in edgefleet-*) continue ;; esac
    grep -q 'debian' "$f" && cp "$f" "$ROOT/etc/apt/sources.list.d/"
done
for f in /etc/apt/apt.conf.d/*; do
    grep -q '^Acquire' "$f" 2>/dev/null && cp "$f" "$ROOT/etc/apt/apt.conf.d/"
done
cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
cp /etc/hosts "$ROOT/etc/hosts"

# 3. A fresh clone of HEAD.
if [ -n "$(git -C "$TOP" status --porcelain --untracked-files=no 2>/dev/null)" ]; then
    log "warning: uncommitted changes in $TOP are not tested (the clone is of HEAD)"
fi
git clone --quiet --no-local "$TOP" "$ROOT/root/edgefleet"
log "clone of $(git -C "$ROOT/root/edgefleet" log -1 --format='%h %s' | cut -c1-80)"

# 4. Caches of downloads and builds (bind-mounted, so nothing installed survives the root).
# ~/.cache/edgefleet is the project's cache of built artifacts (the kube-apiserver build and
# whatever else a script caches there): the root sees the host's.
mkdir -p "$CACHE/fresh-root/apt-archives/partial" "$CACHE/fresh-root/pip" \
    "$ROOT/var/cache/apt/archives" "$ROOT/root/.cache/pip" "$ROOT/root/.cache/edgefleet"
# apt keeps downloaded .debs only when told to (Debian's default; the host's docker-clean is
# not carried in).
echo 'Binary::apt::APT::Keep-Downloaded-Packages "true";' >"$ROOT/etc/apt/apt.conf.d/01keep-debs"

ENVIRONMENT=(HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
             LANG=C.UTF-8 TERM="${TERM:-dumb}")
[ -n "${CI:-}" ] && ENVIRONMENT+=(CI="$CI")

log "running the README's $MODE command in the fresh root: $COMMAND"
T1=$(date +%s)
set +e
CACHE="$CACHE" unshare --mount --pid --fork --propagation private -- bash -euc '
    root=$1; shift
    # The root becomes the real root of this mount namespace (pivot_root, not chroot), as
    # / is on a real machine: runc joins a container through its mount namespace, and in a
    # mere chroot `podman exec` lands in the file system of the host.
    mount --bind "$root" "$root"
    mount -t proc proc "$root/proc"
    mount --rbind /sys "$root/sys"; mount --make-rslave "$root/sys"
    mount --rbind /dev "$root/dev"; mount --make-rslave "$root/dev"
    mount -t tmpfs -o mode=755 tmpfs "$root/run"
    mkdir -p "$root/run/lock" "$root/.host"
    mount --bind "$CACHE/fresh-root/apt-archives" "$root/var/cache/apt/archives"
    mount --bind "$CACHE/fresh-root/pip" "$root/root/.cache/pip"
    mount --bind "$CACHE" "$root/root/.cache/edgefleet"
    cd "$root"
    pivot_root . .host
    exec /usr/sbin/chroot . /usr/bin/env -i "$@"
' fresh-root "$ROOT" "${ENVIRONMENT[@]}" bash -c "umount -l /.host && rmdir /.host && cd /root/edgefleet && $COMMAND"
rc=$?
set -e
case "$MODE" in
    demo)
        if [ "$rc" -eq 0 ]; then verdict="converged (exit 0)"; else verdict="FAILED (exit $rc)"; fi
        log "demo verdict: $verdict; $(since "$T1") since the command started (installs included), $(since) in all"
        ;;
    test)
        log "suite exit $rc; $(since "$T1") since the command started (installs included), $(since) in all"
        ;;
esac
exit "$rc"
