#!/usr/bin/env bash
# Foreign-architecture Debian roots run under qemu user emulation: the arm64 proof of the
# agent (tests/deploy/test_arm64.py) and the armv7l wheels (deploy/build-wheelhouse.sh).
#
#   scripts/qemu-root.sh register                 register the qemu interpreters (below)
#   scripts/qemu-root.sh root ARCH [PACKAGE...]   print the path of a cached Debian 12 root
#                                                 of ARCH (arm64, armhf) with PACKAGEs,
#                                                 making it first if needed
#   scripts/qemu-root.sh run ROOT [--bind SRC:DST]... COMMAND...
#                                                 run COMMAND as root inside a copy-on-write
#                                                 view of ROOT (/proc, /dev, /sys, the host's
#                                                 network, its CA bundle and pip.conf, the
#                                                 directories SRC at DST), discarded after
#
# Installs nothing itself: scripts/setup.sh test installs qemu-user-static and binfmt-support.
# `register` mounts binfmt_misc when it is not mounted and writes the lines of
# /usr/lib/binfmt.d/qemu-{aarch64,arm}.conf to /proc/sys/fs/binfmt_misc/register with the F
# flag ("fix binary": the kernel opens the interpreter now, so it also runs inside a chroot or
# the fresh root of scripts/fresh-root.sh that has no qemu of its own). The registration is the
# kernel's, global to the machine; an entry already there with the F flag is left alone, one
# without it is replaced.
#
# A root is `debootstrap --arch=ARCH --variant=minbase --include=PACKAGEs bookworm` (its second
# stage runs under qemu: a cold arm64 root with python3 takes about 95 s here), made in a
# temporary directory and moved into place when complete, under
# ~/.cache/edgefleet/qemu-root/ARCH/KEY (KEY: the suite, mirror and package list), and never
# changed afterwards: `run` and the tests use it as the lower layer of an overlay. Two callers
# wanting the same root wait for one build (flock). The mirror is the host's Debian mirror
# (EDGEFLEET_MIRROR overrides it), as scripts/fresh-root.sh finds it.
#
# Needs root. Exit codes: 0 done; 1 a step failed; 2 bad usage.
set -euo pipefail

SUITE=bookworm
CACHE="${EDGEFLEET_CACHE:-$HOME/.cache/edgefleet}"
BINFMT=/proc/sys/fs/binfmt_misc

log() { printf 'qemu-root: %s\n' "$*" >&2; }
die() {
    log "error: $*"
    exit 1
}
usage() {
    sed -n '2,/^set -euo/p' "$0" | sed -e '/^set -euo/d' -e 's/^# \{0,1\}//'
}

# qemu_name ARCH: the qemu interpreter's name for a Debian architecture.
qemu_name() {
    case "$1" in
    arm64) echo aarch64 ;;
    armhf) echo arm ;;
    *) printf 'qemu-root: unknown architecture %s (arm64, armhf)\n' "$1" >&2; exit 2 ;;
    esac
}

# register_one NAME: the binfmt entry qemu-NAME, with the F flag.
register_one() {
    local name=$1 conf line flags
    conf=/usr/lib/binfmt.d/qemu-$name.conf
    if [ -f "$BINFMT/qemu-$name" ]; then
        flags=$(awk '$1 == "flags:" {print $2}' "$BINFMT/qemu-$name")
        case "$flags" in *F*) return 0 ;; esac
        log "qemu-$name is registered without the F flag (it would not run in a chroot): registering it again"
        echo -1 >"$BINFMT/qemu-$name"
    fi
    [ -f "$conf" ] || die "no $conf: install qemu-user-static (scripts/setup.sh test does)"
    line=$(grep -v '^#' "$conf" | head -n 1)
    # The last field holds the flags: make sure F is among them.
    case "${line##*:}" in *F*) ;; *) line="${line}F" ;; esac
    printf '%s' "$line" >"$BINFMT/register" || die "the kernel refused the binfmt entry of $conf"
    log "registered qemu-$name ($(awk '$1 == "interpreter" {print $2}' "$BINFMT/qemu-$name"))"
}

register() {
    [ "$(id -u)" -eq 0 ] || die "run as root (binfmt_misc registration needs it)"
    if [ ! -f "$BINFMT/register" ]; then
        mount -t binfmt_misc binfmt_misc "$BINFMT" 2>/dev/null ||
            die "cannot mount binfmt_misc on $BINFMT (a container without that privilege?)"
    fi
    [ "$(cat "$BINFMT/status")" = enabled ] || echo 1 >"$BINFMT/status"
    register_one aarch64
    register_one arm
}

mirror() {
    local found="${EDGEFLEET_MIRROR:-}"
    if [ -z "$found" ]; then
        found=$(awk '/^URIs:/ && $2 ~ /debian\/?$/ { print $2; exit }' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
        [ -n "$found" ] || found=$(awk '/^deb / && $3 == "'$SUITE'" { print $2; exit }' /etc/apt/sources.list 2>/dev/null || true)
    fi
    [ -n "$found" ] || die "cannot find the host's Debian mirror; set EDGEFLEET_MIRROR"
    echo "$found"
}

# make_root ARCH PACKAGE...: print the cached root's path, building it first if needed.
make_root() {
    local arch=$1
    shift
    qemu_name "$arch" >/dev/null
    command -v debootstrap >/dev/null || die "no debootstrap: scripts/setup.sh test installs it"
    register
    local packages source key dir
    packages=$(printf '%s\n' python3 "$@" | sort -u | paste -sd, -)
    source=$(mirror)
    key=$(printf '%s %s %s %s v1' "$SUITE" "$source" "$arch" "$packages" | sha256sum | cut -c1-12)
    dir=$CACHE/qemu-root/$arch/$key
    mkdir -p "$CACHE/qemu-root/$arch"
    exec 9>"$dir.lock"
    flock 9
    if [ ! -f "$dir/.complete" ]; then
        local stage start
        start=$(date +%s)
        rm -rf --one-file-system "$dir" "$dir.stage"
        stage=$dir.stage
        log "debootstrap --arch=$arch --variant=minbase --include=$packages $SUITE (under qemu: minutes, cached afterwards in $dir)"
        debootstrap --arch="$arch" --variant=minbase --include="$packages" "$SUITE" "$stage" "$source" \
            >"$stage.log" 2>&1 || {
            tail -n 20 "$stage.log" >&2
            die "debootstrap failed (log: $stage.log)"
        }
        rm -rf "$stage"/var/cache/apt/archives/*.deb "$stage"/var/lib/apt/lists/*_Packages
        printf '%s %s %s\n' "$SUITE" "$arch" "$packages" >"$stage/.complete"
        mv "$stage" "$dir"
        rm -f "$stage.log"
        log "made the $arch root in $(($(date +%s) - start)) s: $dir"
    fi
    exec 9>&-
    echo "$dir"
}

# run_in ROOT COMMAND...: COMMAND in an overlay over ROOT, in new mount and PID namespaces
# (everything started inside dies with it), with the host's network and name resolution.
run_in() {
    local root=$1
    shift
    [ -f "$root/.complete" ] || die "$root is not a root made by $0 root"
    local binds=()
    while [ "${1:-}" = --bind ]; do
        [ $# -ge 2 ] && [[ $2 == *:/* ]] || { usage >&2; exit 2; }
        binds+=("$2")
        shift 2
    done
    [ $# -gt 0 ] || { usage >&2; exit 2; }
    register
    local work
    work=$(mktemp -d "${TMPDIR:-/var/tmp}/qemu-root.XXXXXX")
    mkdir "$work/upper" "$work/work" "$work/merged"
    set +e
    unshare --mount --pid --fork --propagation private -- bash -euc '
        lower=$1 work=$2 nbinds=$3; shift 3
        m=$work/merged
        mount -t overlay overlay -o "lowerdir=$lower,upperdir=$work/upper,workdir=$work/work" "$m"
        mount -t proc proc "$m/proc"
        mount --rbind /dev "$m/dev"; mount --make-rslave "$m/dev"
        mount --rbind /sys "$m/sys"; mount --make-rslave "$m/sys"
        mount -t tmpfs tmpfs "$m/tmp"
        cp /etc/resolv.conf "$m/etc/resolv.conf"
        cp /etc/hosts "$m/etc/hosts"
        mkdir -p "$m/etc/ssl/certs"
        [ ! -f /etc/ssl/certs/ca-certificates.crt ] || cp /etc/ssl/certs/ca-certificates.crt "$m/etc/ssl/certs/"
        [ ! -f /etc/pip.conf ] || cp /etc/pip.conf "$m/etc/pip.conf"
        for _ in $(seq "$nbinds"); do
            src=${1%%:/*} dst=/${1#*:/}; shift
            mkdir -p "$m$dst"
            mount --bind "$src" "$m$dst"
        done
        exec chroot "$m" /usr/bin/env -i HOME=/root LANG=C.UTF-8 \
            PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
            PIP_CERT=/etc/ssl/certs/ca-certificates.crt "$@"
    ' qemu-root "$root" "$work" "${#binds[@]}" "${binds[@]}" "$@"
    local rc=$?
    set -e
    rm -rf --one-file-system "$work"
    return "$rc"
}

case "${1:-}" in
register) register ;;
root)
    [ $# -ge 2 ] || { usage >&2; exit 2; }
    shift
    make_root "$@"
    ;;
run)
    [ $# -ge 3 ] || { usage >&2; exit 2; }
    shift
    run_in "$@"
    ;;
-h | --help) usage ;;
*) usage >&2; exit 2 ;;
esac
