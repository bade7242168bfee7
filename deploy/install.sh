#!/usr/bin/env bash
# Bootstrap an EdgeFleet edge node in one command (Debian, Raspberry Pi OS, Ubuntu on
# Jetson): a Python venv under /opt/edgeagent, /etc/edgeagent/config.yaml, the join to
# the hub, and the systemd unit, enabled and started.
#
#   sudo ./install.sh --hub hub.example.com --token abcdef.0123456789abcdef \
#        --ca-cert-hash sha256:<hex>          # the line printed by 'cloudhub token create'
#
# Offline sites: --wheelhouse DIR (or an https:// URL of its .tar.gz), made by
# deploy/build-wheelhouse.sh: the wheels and their SHA256SUMS manifest, checked before use;
# nothing comes from a package index. Golden images: --root DIR with --token writes no
# identity into the image, only /etc/edgeagent/join-token: each device joins on its first
# boot (edgeagent-first-boot) and makes its own key. --upgrade keeps the previous venv as
# /opt/edgeagent.previous and goes back to it when the new agent does not start; the
# layout and its moves are the agent's own (edgeagent/upgrade/guard.py, docs/upgrade.md),
# the ones an EdgeUpgrade from the hub makes.
#
# Idempotent: a second run with the same arguments changes nothing. Run with --help for
# every option. Exit codes: 0 done, 1 a check or a step failed, 2 bad usage.

set -euo pipefail

PREFIX=/opt/edgeagent
CONFIG_DIR=/etc/edgeagent
STATE_DIR=/var/lib/edgeagent
UNIT_DIR=/etc/systemd/system
UNIT=edgeagent.service
FIRST_BOOT=edgeagent-first-boot
TOKEN_FILE=$CONFIG_DIR/join-token
# The agent's messages name 'edgeagent join --renew ...' and 'edgeagent status': this
# link makes them work as typed.
COMMAND_LINK=/usr/local/bin/edgeagent
BACKOFF_SYSTEMD=254 # RestartSteps= and RestartMaxDelaySec= appeared in systemd 254

ROOT=""
DRY_RUN=0
UNINSTALL=0
PURGE=0
KEEP_PODS=0
ROLLBACK=0
UPGRADE_TIMEOUT=120
NO_START=0
NO_SYSTEMD=0 # set by check_systemd: --dry-run/--no-start where systemd is not running
UPGRADE=0
PYTHON=python3
SYSTEM_SITE=0
WHEEL=""
WHEELHOUSE=""
INDEX_URL=""
PACKAGE="edgefleet[agent]" # the agent alone: none of the hub's dependencies
HUB=""
TOKEN=""
CA_HASH=""
NODE_NAME=""
LABELS=""
RUNTIME=docker
DOCKER_URL=unix:///var/run/docker.sock
ENGINE=""
CHANGED=0

usage() {
    cat <<'EOF'
Usage: install.sh [options]

Join (skipped when this node has already joined):
  --hub ADDRESS            the hub's join address (host[:port], port 7444)
  --token TOKEN            bootstrap token from 'cloudhub token create'
  --ca-cert-hash HASH      sha256:<hex> pin of the hub CA
  --node-name NAME         this node's name (default: the host name)
  --labels K=V,...         labels to ask for

What to install:
  --wheel FILE             install EdgeFleet from this wheel
  --wheelhouse DIR|URL     take every package from DIR, or from the .tar.gz at URL
                           (no index; for offline sites); its SHA256SUMS is checked
  --index-url URL          package index to install from (default: pip's)
  --package SPEC           package to install from the index (default: edgefleet[agent])
  --upgrade                upgrade an existing installation (prints old -> new; keeps
                           the previous venv in /opt/edgeagent.previous and goes back to
                           it if the new agent does not report ready in time)
  --upgrade-timeout SECS   how long the new agent has to report ready (default: 120)
  --rollback               go back to /opt/edgeagent.previous (the last upgrade's, by
                           --upgrade or by an EdgeUpgrade); the venv it replaces is
                           kept as /opt/edgeagent.failed
  --python PATH            Python >= 3.10 to build the venv with (default: python3)
  --system-site-packages   let the venv use the system's Python packages (apt's
                           python3-cryptography and the like)

Agent settings written to /etc/edgeagent/config.yaml (an existing file is kept):
  --runtime docker|process container runtime (default: docker)
  --docker-url URL         Docker Engine API (default: unix:///var/run/docker.sock)
  --container-engine NAME  fail unless this engine is installed (docker, podman,
                           balena-engine)

Modes:
  --root DIR               prepare an image: install into DIR as if it were / (the venv
                           is made for /opt/edgeagent; systemctl enable is done with
                           --root; daemon-reload, start and stop are skipped); with
                           --token, the join waits for each device's first boot
  --dry-run                print what would be done; change nothing
  --no-start               install and enable, but do not start the agent
  --uninstall              stop, disable and remove the agent (config and state kept),
                           stop its pods, and print the commands that remove the node
                           from the cloud
  --keep-pods              with --uninstall: leave the pods running
  --purge                  with --uninstall: also remove /etc/edgeagent and
                           /var/lib/edgeagent
  -h, --help               this text
EOF
}

say() { printf 'install.sh: %s\n' "$*"; }
die() {
    printf 'install.sh: error: %s\n' "$*" >&2
    exit 1
}
usage_error() {
    printf 'install.sh: %s (see --help)\n' "$*" >&2
    exit 2
}

need_value() { if [ $# -lt 2 ] || [ -z "$2" ]; then usage_error "$1 needs a value"; fi; }

while [ $# -gt 0 ]; do
    case "$1" in
    --hub) need_value "$@"; HUB=$2; shift ;;
    --token) need_value "$@"; TOKEN=$2; shift ;;
    --ca-cert-hash) need_value "$@"; CA_HASH=$2; shift ;;
    --node-name) need_value "$@"; NODE_NAME=$2; shift ;;
    --labels) need_value "$@"; LABELS=$2; shift ;;
    --wheel) need_value "$@"; WHEEL=$2; shift ;;
    --wheelhouse) need_value "$@"; WHEELHOUSE=$2; shift ;;
    --index-url) need_value "$@"; INDEX_URL=$2; shift ;;
    --package) need_value "$@"; PACKAGE=$2; shift ;;
    --python) need_value "$@"; PYTHON=$2; shift ;;
    --runtime) need_value "$@"; RUNTIME=$2; shift ;;
    --docker-url) need_value "$@"; DOCKER_URL=$2; shift ;;
    --container-engine) need_value "$@"; ENGINE=$2; shift ;;
    --root) need_value "$@"; ROOT=$2; shift ;;
    --system-site-packages) SYSTEM_SITE=1 ;;
    --upgrade) UPGRADE=1 ;;
    --upgrade-timeout) need_value "$@"; UPGRADE_TIMEOUT=$2; shift ;;
    --rollback) ROLLBACK=1 ;;
    --keep-pods) KEEP_PODS=1 ;;
    --dry-run) DRY_RUN=1 ;;
    --no-start) NO_START=1 ;;
    --uninstall) UNINSTALL=1 ;;
    --purge) PURGE=1 ;;
    -h | --help) usage; exit 0 ;;
    *) usage_error "unknown option: $1" ;;
    esac
    shift
done

case "$RUNTIME" in docker | process) ;; *) usage_error "--runtime must be docker or process" ;; esac
[ "$PURGE" = 0 ] || [ "$UNINSTALL" = 1 ] || usage_error "--purge goes with --uninstall"
[ "$KEEP_PODS" = 0 ] || [ "$UNINSTALL" = 1 ] || usage_error "--keep-pods goes with --uninstall"
case "$UPGRADE_TIMEOUT" in '' | *[!0-9]*) usage_error "--upgrade-timeout takes whole seconds" ;; esac
if [ -n "$TOKEN" ] && { [ -z "$HUB" ] || [ -z "$CA_HASH" ]; }; then
    usage_error "--token needs --hub and --ca-cert-hash (the line 'cloudhub token create' prints)"
fi
if [ -n "$ROOT" ]; then
    ROOT=$(cd "$ROOT" 2>/dev/null && pwd) || usage_error "--root: no such directory"
    [ "$ROOT" != / ] || ROOT=""
fi
VENV=$ROOT$PREFIX
STAGING=$ROOT$PREFIX.new
PREVIOUS=$ROOT$PREFIX.previous
FAILED=$ROOT$PREFIX.failed
# The agent's upgrade start guard, run by the unit's ExecStartPre; install.sh makes its
# switch and rollback with it too (one mechanism for both upgrade paths).
GUARD=$ROOT$STATE_DIR/upgrade/guard.py
FETCHED=""
cleanup() { [ -z "$FETCHED" ] || rm -rf "$FETCHED"; }
trap cleanup EXIT

# -- doing things (or only saying them with --dry-run) -------------------------------------

run() {
    if [ "$DRY_RUN" = 1 ]; then
        say "would run: $*"
    else
        "$@"
    fi
}

# write_file PATH MODE: write stdin to PATH (atomically) unless identical; sets CHANGED.
write_file() {
    local path=$1 mode=$2 tmp
    tmp=$(mktemp)
    cat >"$tmp"
    if [ -f "$path" ] && cmp -s "$tmp" "$path"; then
        rm -f "$tmp"
        return 0
    fi
    if [ "$DRY_RUN" = 1 ]; then
        say "would write $path"
        rm -f "$tmp"
        return 0
    fi
    mkdir -p "$(dirname "$path")"
    install -m "$mode" "$tmp" "$path.tmp.$$"
    mv -f "$path.tmp.$$" "$path"
    rm -f "$tmp"
    CHANGED=1
    say "wrote $path"
}

# systemctl_do ARGS...: the real systemctl, or with --root only what works offline.
systemctl_do() {
    if [ "$NO_SYSTEMD" = 1 ]; then
        case "$1" in
        enable | disable) if command -v systemctl >/dev/null 2>&1; then run systemctl "$@"; fi ;;
        *) say "skipped (systemd is not running): systemctl $*" ;;
        esac
        return
    fi
    if [ -z "$ROOT" ]; then
        run systemctl "$@"
        return
    fi
    case "$1" in
    enable | disable) run systemctl --root="$ROOT" "$@" ;;
    *) say "skipped (--root): systemctl $*" ;;
    esac
}

systemctl_q() {
    if [ "$NO_SYSTEMD" = 1 ] && ! command -v systemctl >/dev/null 2>&1; then return 1; fi
    if [ -n "$ROOT" ]; then systemctl --root="$ROOT" "$@"; else systemctl "$@"; fi
}

systemd_version() {
    command -v systemctl >/dev/null 2>&1 || return 0 # none (--no-start where systemd is absent)
    systemctl --version 2>/dev/null | awk 'NR==1 {print $2; exit}'
}

# -- checks: everything that can fail is checked before anything is changed --------------

check_root_user() {
    if [ -z "$ROOT" ] && [ "$DRY_RUN" = 0 ] && [ "$(id -u)" != 0 ]; then
        die "run as root (sudo $0 ...), or use --dry-run to see what would be done"
    fi
}

check_systemd() {
    # --dry-run and --no-start start nothing, so they also work where systemd is not running
    # (a chroot, a container, an image being prepared under qemu): the unit is written
    # (and enabled when systemctl is there: that works offline), nothing is started.
    local offline_ok=0
    if [ -z "$ROOT" ] && { [ "$DRY_RUN" = 1 ] || [ "$NO_START" = 1 ]; } && [ "$UNINSTALL" = 0 ] &&
        [ "$UPGRADE" = 0 ] && [ "$ROLLBACK" = 0 ]; then
        offline_ok=1
    fi
    if ! command -v systemctl >/dev/null 2>&1; then
        [ "$offline_ok" = 1 ] ||
            die "systemd is required but systemctl was not found: the agent runs as a systemd service (--no-start installs without it)"
        NO_SYSTEMD=1
        say "systemctl not found: the unit is written but not enabled; once systemd runs here: systemctl enable --now $UNIT"
        return 0
    fi
    if [ -z "$ROOT" ] && [ ! -d /run/systemd/system ]; then
        [ "$offline_ok" = 1 ] ||
            die "systemd is not running on this machine (no /run/systemd/system): the agent runs as a systemd service; use --no-start to install without starting it, or --root DIR to prepare an image instead"
        NO_SYSTEMD=1
        say "systemd is not running here: the unit is enabled offline, nothing is started or reloaded"
    fi
}

# check_image_python: with --root, the venv is made by $PYTHON of this machine and gets the
# wheels of its architecture and version, and its bin/python links to $PYTHON's path: the
# image must hold an interpreter of the same architecture and version at that path, or the
# agent would not start on the device (an arm64 image prepared on an x86_64 machine).
check_image_python() {
    [ -n "$ROOT" ] || return 0
    local verdict
    verdict=$("$PYTHON" -I - "$ROOT" <<'PY'
import os, struct, sys

MACHINES = {3: "i686", 0x3E: "x86_64", 0x28: "armv7l", 0xB7: "aarch64", 0xF3: "riscv64"}
root, wanted = sys.argv[1], sys._base_executable


def inside(path):
    """path resolved inside root (absolute links point into the image)."""
    for _ in range(40):
        full = root + path
        if not os.path.islink(full):
            return path
        target = os.readlink(full)
        path = target if target.startswith("/") else os.path.join(os.path.dirname(path), target)
        path = os.path.normpath(path)
    return path


def machine(path):
    with open(path, "rb") as f:
        head = f.read(20)
    if len(head) < 20 or head[:4] != b"\x7fELF":
        return None
    (code,) = struct.unpack("<H" if head[5] == 1 else ">H", head[18:20])
    return MACHINES.get(code, "ELF machine %#x" % code)


def version(path):
    name = os.path.basename(path)
    if name.startswith("python3."):
        return name[len("python"):]
    return None


image = inside(wanted)
host = os.path.realpath(wanted)
ours = "%s Python %d.%d" % (machine(host), *sys.version_info[:2])
if not os.path.isfile(root + image):
    print("warn:the image has no %s (the venv's interpreter: %s): install python3 and python3-venv in the image, or the agent will not start there" % (wanted, ours))
    sys.exit()
theirs_machine, theirs_version = machine(root + image), version(image)
mismatch = theirs_machine != machine(host)
mismatch |= theirs_version is not None and theirs_version != "%d.%d" % sys.version_info[:2]
theirs = "%s Python %s" % (theirs_machine or "not an ELF program", theirs_version or "?")
if mismatch:
    print("error:the image's %s (%s) is %s, but the venv and its wheels would be made by %s for %s: the agent would not start on the device. Run install.sh inside the image instead (for a foreign architecture under qemu-user-static: scripts/qemu-root.sh run DIR bash install.sh ...), or prepare the image on a machine of its architecture" % (wanted, image, theirs, sys.executable, ours))
else:
    print("ok:%s" % theirs)
PY
) || die "--root: cannot inspect the image's Python with $PYTHON"
    case "$verdict" in
    error:*) die "--root $ROOT: ${verdict#error:}" ;;
    warn:*) say "warning: --root $ROOT: ${verdict#warn:}" ;;
    esac
}

check_python() {
    command -v "$PYTHON" >/dev/null 2>&1 ||
        die "Python not found ($PYTHON): install Python >= 3.10 (apt-get install python3 python3-venv)"
    local version
    version=$("$PYTHON" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>/dev/null) ||
        die "$PYTHON does not run"
    "$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' ||
        die "Python >= 3.10 is required, $PYTHON is $version: install a newer one (Ubuntu 20.04 on Jetson: apt-get install python3.10 python3.10-venv, then --python python3.10)"
    "$PYTHON" -c 'import venv, ensurepip' 2>/dev/null ||
        die "$PYTHON $version lacks the venv module: apt-get install python3-venv"
}

check_engine() {
    if [ -n "$ENGINE" ] && [ "$ENGINE" != none ]; then
        command -v "$ENGINE" >/dev/null 2>&1 ||
            die "container engine '$ENGINE' was asked for but is not installed: install it (apt-get install docker.io, podman, ...) or choose --runtime process"
    fi
    if [ "$RUNTIME" = docker ] && [ -z "$ROOT" ]; then
        local socket=${DOCKER_URL#unix://}
        if [ "$socket" != "$DOCKER_URL" ] && [ ! -S "$socket" ]; then
            say "warning: no Docker Engine API socket at $socket yet; the agent waits for it"
        fi
    fi
}

# fetch_wheelhouse: --wheelhouse https://... is a .tar.gz of a wheelhouse; unpack it into a
# temporary directory (removed on exit) and use that.
fetch_wheelhouse() {
    case "$WHEELHOUSE" in http://* | https://*) ;; *) return 0 ;; esac
    local url=$WHEELHOUSE
    FETCHED=$(mktemp -d "${TMPDIR:-/tmp}/edgeagent-wheelhouse.XXXXXX")
    say "fetching the wheelhouse $url"
    "$PYTHON" - "$url" "$FETCHED/wheelhouse.tar.gz" <<'PY' || die "--wheelhouse: cannot fetch $url (see above)"
import shutil, sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=60) as answer, open(sys.argv[2], "wb") as out:
    shutil.copyfileobj(answer, out)
PY
    mkdir "$FETCHED/house"
    tar -xzf "$FETCHED/wheelhouse.tar.gz" -C "$FETCHED/house" --no-same-owner ||
        die "--wheelhouse: $url is not a .tar.gz archive"
    rm -f "$FETCHED/wheelhouse.tar.gz"
    local manifest
    manifest=$(find "$FETCHED/house" -maxdepth 2 -name SHA256SUMS | head -n 1)
    WHEELHOUSE=$(dirname "${manifest:-$FETCHED/house/SHA256SUMS}")
}

# check_wheelhouse: every wheel of the wheelhouse is in its SHA256SUMS and matches it.
check_wheelhouse() {
    [ -n "$WHEELHOUSE" ] || return 0
    [ -d "$WHEELHOUSE" ] || die "--wheelhouse: no such directory: $WHEELHOUSE"
    [ -f "$WHEELHOUSE/SHA256SUMS" ] ||
        die "--wheelhouse $WHEELHOUSE has no SHA256SUMS: make it with deploy/build-wheelhouse.sh (or: cd $WHEELHOUSE && sha256sum *.whl >SHA256SUMS)"
    local bad="" wheel
    [ -n "$(find "$WHEELHOUSE" -maxdepth 1 -name '*.whl' -print -quit)" ] ||
        die "--wheelhouse $WHEELHOUSE holds no wheels"
    # every file pip's --find-links would take: wheels, and source archives (whose build
    # would run their setup.py: pip is also given --only-binary :all:)
    for wheel in "$WHEELHOUSE"/*.whl "$WHEELHOUSE"/*.tar.gz "$WHEELHOUSE"/*.zip; do
        [ -e "$wheel" ] || continue
        # the whole name, as sha256sum -c reads it ("<digest>  name", or " *name")
        awk -v name="$(basename "$wheel")" '{ f = substr($0, 67) } f == name { found = 1 }
            END { exit !found }' "$WHEELHOUSE/SHA256SUMS" || bad="$bad $(basename "$wheel")"
    done
    [ -z "$bad" ] || die "--wheelhouse $WHEELHOUSE: not in its SHA256SUMS:$bad (an unchecked file; rebuild the wheelhouse)"
    if ! bad=$(cd "$WHEELHOUSE" && sha256sum --quiet --strict -c SHA256SUMS 2>&1); then
        die "--wheelhouse $WHEELHOUSE: checksum mismatch, nothing was installed (a damaged or altered copy; fetch it again): $(printf '%s' "$bad" | tr '\n' ' ')"
    fi
}

check_sources() {
    [ -z "$WHEEL" ] || [ -f "$WHEEL" ] || die "--wheel: no such file: $WHEEL"
    fetch_wheelhouse
    check_wheelhouse
}

# -- uninstall ----------------------------------------------------------------------------

# config_value KEY: a top-level scalar of config.yaml (node_name), or nothing.
config_value() {
    awk -v key="$1" '$1 == key ":" {print $2; exit}' "$ROOT$CONFIG_DIR/config.yaml" 2>/dev/null || true
}

# runtime_kind: the config's runtime.kind (docker when unset).
runtime_kind() {
    awk '/^runtime:/ {in_rt = 1; next} /^[^ #]/ {in_rt = 0} in_rt && $1 == "kind:" {print $2; exit}' \
        "$ROOT$CONFIG_DIR/config.yaml" 2>/dev/null | grep . || echo docker
}

# stop_pods: end what the stopped agent leaves running (KillMode=process keeps the pods
# through restarts and upgrades; an uninstall must not leave them behind).
stop_pods() {
    local kind
    kind=$(runtime_kind)
    if [ "$KEEP_PODS" = 1 ]; then
        say "left the pods running (--keep-pods; runtime $kind): nothing supervises them now"
        return 0
    fi
    if [ -n "$ROOT" ]; then
        say "skipped (--root): stopping the pods (nothing runs in an image)"
        return 0
    fi
    if [ "$kind" = process ]; then
        # The pods' processes stay in the unit's cgroup after the agent stopped.
        run systemctl kill --kill-whom=all --signal=SIGKILL "$UNIT" 2>/dev/null || true
        say "stopped the pods (process runtime: what was left in $UNIT's cgroup)"
        return 0
    fi
    local engine ids
    for engine in docker podman balena-engine; do
        command -v "$engine" >/dev/null 2>&1 || continue
        ids=$("$engine" ps -aq --filter label=io.edgefleet.managed=true 2>/dev/null || true)
        if [ -n "$ids" ]; then
            # shellcheck disable=SC2086
            run "$engine" rm -f $ids >/dev/null
            say "removed the agent's containers ($engine): $(echo "$ids" | wc -w)"
        fi
        return 0
    done
    say "no container engine command found: the agent's containers (label io.edgefleet.managed=true) are left"
}

uninstall() {
    local unit=$ROOT$UNIT_DIR/$UNIT did=0 node
    node=$(config_value node_name)
    if [ -f "$unit" ]; then
        if systemctl_q is-enabled --quiet "$UNIT" 2>/dev/null; then systemctl_do disable "$UNIT"; fi
        [ -n "$ROOT" ] || systemctl_do stop "$UNIT"
        stop_pods
        run rm -f "$unit"
        run rm -rf "$ROOT$UNIT_DIR/$UNIT.d"
        systemctl_do daemon-reload
        did=1
    fi
    if [ -L "$ROOT$COMMAND_LINK" ] && [ "$(readlink "$ROOT$COMMAND_LINK")" = "$PREFIX/bin/edgeagent" ]; then
        run rm -f "$ROOT$COMMAND_LINK"
        did=1
    fi
    local dir
    for dir in "$VENV" "$PREVIOUS" "$STAGING" "$FAILED"; do
        if [ -d "$dir" ]; then
            run rm -rf "$dir"
            did=1
        fi
    done
    if [ "$PURGE" = 1 ]; then
        for dir in "$ROOT$CONFIG_DIR" "$ROOT$STATE_DIR"; do
            if [ -e "$dir" ]; then
                run rm -rf "$dir"
                did=1
            fi
        done
    elif [ -e "$ROOT$STATE_DIR" ] || [ -e "$ROOT$CONFIG_DIR" ]; then
        say "kept $ROOT$CONFIG_DIR and $ROOT$STATE_DIR (the node's identity and store); --purge removes them"
    fi
    if [ "$did" = 1 ]; then say "uninstalled"; else say "nothing to uninstall"; fi
    if [ -n "$node" ]; then
        say "the node $node still exists in the cloud, and its certificate is valid until it expires; on the hub's side run:"
        say "    cloudhub node revoke $node"
        say "    kubectl delete node $node"
    fi
}

# -- install ------------------------------------------------------------------------------

# new_venv DIR: a venv at DIR with the wanted interpreter and --system-site-packages, and
# neither pip nor setuptools in it (20 MB of a 74 MB agent): packages go in with a pip run
# from outside the venv (outside_pip).
new_venv() {
    local args=(--without-pip)
    [ "$SYSTEM_SITE" = 0 ] || args+=(--system-site-packages)
    run "$PYTHON" -m venv "${args[@]}" "$1"
}

# outside_pip DIR: sets PIP, a pip command that installs into the venv DIR from outside it:
# the pip wheel of the wheelhouse (run from the wheel file itself, as pip supports), else
# the interpreter's own pip if it knows --python (pip >= 22.3), else a pip bootstrapped
# into the venv with ensurepip (removed again after the install, see drop_pip).
outside_pip() {
    local dir=$1 wheel=""
    local quiet=(--disable-pip-version-check --no-input --quiet)
    if [ -n "$WHEELHOUSE" ]; then
        wheel=$(find "$WHEELHOUSE" -maxdepth 1 -name 'pip-*-py3-none-any.whl' | sort -V | tail -n 1)
    fi
    PIP_WHEEL=$wheel
    if [ -n "$wheel" ]; then
        PIP=("$PYTHON" "$wheel/pip" "${quiet[@]}" --python "$dir/bin/python")
    elif "$PYTHON" -m pip --python "$dir/bin/python" --version >/dev/null 2>&1; then
        PIP=("$PYTHON" -m pip "${quiet[@]}" --python "$dir/bin/python")
    else
        [ -x "$dir/bin/pip" ] || run "$dir/bin/python" -m ensurepip --default-pip >/dev/null ||
            die "no pip to install with: put pip's wheel in the wheelhouse, or apt-get install python3-pip"
        PIP=("$dir/bin/python" -m pip "${quiet[@]}")
    fi
}

# drop_pip DIR: take pip and setuptools out of the venv DIR again, keeping the pip wheel
# it was installed with in DIR/share/edgefleet (2 MB, not 14): the agent never runs pip
# itself; upgrades
# (install.sh --upgrade, and an EdgeUpgrade from the hub: edgeagent/upgrade/venvs.py) run
# that wheel. Without a pip wheel (no wheelhouse), pip stays in the venv.
drop_pip() {
    local dir=$1
    [ "$DRY_RUN" = 0 ] || return 0
    [ -n "$PIP_WHEEL" ] || return 0
    mkdir -p "$dir/share/edgefleet"
    rm -f "$dir"/share/edgefleet/pip-*.whl
    cp "$PIP_WHEEL" "$dir/share/edgefleet/"
    rm -rf "$dir"/bin/pip "$dir"/bin/pip3*
    find "$dir"/lib/python3*/site-packages -maxdepth 1 \
        \( -name pip -o -name 'pip-*.dist-info' -o -name setuptools -o -name 'setuptools-*.dist-info' \
        -o -name _distutils_hack -o -name distutils-precedence.pth -o -name pkg_resources \) \
        -exec rm -rf {} +
}

make_venv() {
    local want_site=false
    [ "$SYSTEM_SITE" = 0 ] || want_site=true
    if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c 'import sys' 2>/dev/null; then
        local have_version want_version have_site
        have_version=$("$VENV/bin/python" -c 'import sys; print(sys.version_info[:2])')
        want_version=$("$PYTHON" -c 'import sys; print(sys.version_info[:2])')
        have_site=$(awk -F' *= *' '$1 == "include-system-site-packages" {print $2}' "$VENV/pyvenv.cfg")
        if [ "$have_version" = "$want_version" ] && [ "$have_site" = "$want_site" ]; then
            return 0
        fi
        say "recreating $VENV (Python or --system-site-packages changed)"
        run rm -rf "$VENV"
    fi
    new_venv "$VENV"
    CHANGED=1
    [ "$DRY_RUN" = 1 ] || say "created the venv $VENV"
}

# relocate DIR: make the venv at DIR work at $PREFIX, where it runs on the device: the
# scripts' "#!" lines, activate and pyvenv.cfg name DIR when it is an image's or a staging
# copy; the byte code is compiled for $PREFIX (so no path of this machine is left inside).
relocate() {
    local dir=$1
    [ "$DRY_RUN" = 0 ] || return 0
    if [ "$dir" != "$PREFIX" ]; then
        grep -rlIZF -- "$dir" "$dir" 2>/dev/null | xargs -0 -r sed -i "s|$dir|$PREFIX|g"
    fi
    find "$dir" -name __pycache__ -type d -prune -exec rm -rf {} +
    "$dir/bin/python" -m compileall -q -j 0 -s "$dir" -p "$PREFIX" "$dir/lib" >/dev/null ||
        die "compiling the agent's byte code in $dir failed"
}

# installed_version DIR: the EdgeFleet version installed in the venv DIR (empty if none).
installed_version() {
    "$1/bin/python" -I -c 'import importlib.metadata as m; print(m.version("edgefleet"))' 2>/dev/null || true
}

# pip_into DIR [ARGS...]: pip install into the venv DIR from the chosen source (the wheel,
# the wheelhouse, an index); no byte code (relocate compiles it for the target path).
pip_into() {
    local dir=$1
    shift
    local PIP=() PIP_WHEEL=""
    outside_pip "$dir"
    local pip=("${PIP[@]}")
    local args=(--no-compile)
    if [ -n "$WHEELHOUSE" ]; then args+=(--no-index --only-binary :all: --find-links "$WHEELHOUSE"); fi
    if [ -n "$INDEX_URL" ]; then args+=(--index-url "$INDEX_URL"); fi
    if [ -n "$WHEEL" ] && [ "$SYSTEM_SITE" = 1 ] && [ -z "$WHEELHOUSE" ] && [ -z "$INDEX_URL" ]; then
        args+=(--no-index) # dependencies come from the system's packages
    fi
    local what=$PACKAGE
    [ -z "$WHEEL" ] || what="$WHEEL[agent]"
    run "${pip[@]}" install "${args[@]}" "$@" "$what" || return 1
    if [ "$DRY_RUN" = 0 ] && [ ! -x "$dir/bin/edgeagent" ]; then
        # Satisfied by a copy outside the venv (--system-site-packages): put it in the venv
        # itself, so that the unit's /opt/edgeagent/bin/edgeagent exists.
        run "${pip[@]}" install "${args[@]}" --no-deps --ignore-installed "$what" || return 1
    fi
    drop_pip "$dir"
}

pip_install() {
    local stamp=$VENV/.edgefleet-wheel.sha256 digest=""
    if [ -n "$WHEEL" ]; then
        digest=$(sha256sum "$WHEEL" | awk '{print $1}')
        if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$digest" ]; then
            return 0
        fi
        # A rebuilt wheel of the same version must replace the old one: force it, but
        # leave the dependencies alone unless they are missing.
        local force=()
        [ ! -f "$stamp" ] || force=(--force-reinstall --no-deps)
        pip_into "$VENV" "${force[@]}" || die "installing $(basename "$WHEEL") failed (see above)"
    elif [ -x "$VENV/bin/edgeagent" ]; then
        return 0
    else
        pip_into "$VENV" || die "installing $PACKAGE failed (see above)"
    fi
    relocate "$VENV"
    if [ "$DRY_RUN" = 0 ] && [ -n "$digest" ]; then printf '%s\n' "$digest" >"$stamp"; fi
    CHANGED=1
    [ "$DRY_RUN" = 1 ] || say "installed edgefleet $(installed_version "$VENV") (the agent) in $PREFIX"
}

# smoke_test DIR: the venv's agent imports and parses its command line.
smoke_test() {
    "$1/bin/python" -I -m edgeagent run --help >/dev/null 2>"$1.smoke.log"
}

# install_guard DIR: the venv DIR's start guard becomes the unit's ($GUARD).
install_guard() {
    local source
    if [ "$DRY_RUN" = 1 ] && [ ! -x "$1/bin/python" ]; then
        say "would install the upgrade guard $GUARD"
        return 0
    fi
    source=$("$1/bin/python" -I -c 'import edgeagent.upgrade.guard as g; print(g.__file__)' 2>/dev/null) ||
        die "the agent in $1 has no upgrade guard (edgeagent.upgrade.guard)"
    write_file "$GUARD" 0644 <"$source"
}

# layout_step --switch|--rollback: the agent's own move of the venvs (guard.py):
# --switch: $PREFIX.new -> $PREFIX, $PREFIX -> $PREFIX.previous; --rollback:
# $PREFIX.previous -> $PREFIX, $PREFIX -> $PREFIX.failed.
layout_step() {
    "$PYTHON" -I "$GUARD" "$1" "$VENV"
}

# wait_ready: restart the agent and wait for its READY=1 (Type=notify: systemctl blocks
# until then); 0 when it is active within --upgrade-timeout.
wait_ready() {
    if [ -n "$ROOT" ] || [ "$NO_SYSTEMD" = 1 ] || ! joined; then
        smoke_test "$VENV"
        return
    fi
    systemctl daemon-reload
    timeout "$UPGRADE_TIMEOUT" systemctl restart "$UNIT" && systemctl is-active --quiet "$UNIT"
}

upgrade() {
    [ -x "$VENV/bin/python" ] || die "--upgrade: no agent is installed in $PREFIX (run install.sh without --upgrade)"
    local old new digest="" stamp=$VENV/.edgefleet-wheel.sha256
    old=$(installed_version "$VENV")
    if [ -n "$WHEEL" ]; then
        digest=$(sha256sum "$WHEEL" | awk '{print $1}')
        if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$digest" ]; then
            say "edgefleet $old is installed from this wheel already; nothing to upgrade"
            return 0
        fi
    fi
    if [ "$DRY_RUN" = 1 ]; then
        say "would build the new agent in $STAGING, keep $PREFIX as $PREFIX.previous and restart"
        return 0
    fi
    # The new venv is a copy of the running one with the new agent installed into it, as
    # the agent builds it for an EdgeUpgrade; install.sh also brings new dependencies
    # (from the wheelhouse or the index). A new Python needs install.sh without --upgrade.
    rm -rf "$STAGING"
    cp -a "$VENV" "$STAGING"
    pip_into "$STAGING" --upgrade || {
        rm -rf "$STAGING"
        die "the upgrade's install failed (see above); edgefleet $old is unchanged and keeps running"
    }
    relocate "$STAGING"
    new=$(installed_version "$STAGING")
    if [ -z "$WHEEL" ] && [ "$new" = "$old" ]; then
        rm -rf "$STAGING"
        say "edgefleet $old is the newest the source has; nothing to upgrade"
        return 0
    fi
    # The new venv runs at $PREFIX only: check it before anything is swapped.
    if ! smoke_test "$STAGING"; then
        local why
        why=$(tail -n 3 "$STAGING.smoke.log")
        rm -rf "$STAGING" "$STAGING.smoke.log"
        die "the new agent (edgefleet $new) does not start, so nothing was changed: edgefleet $old is still installed and keeps running. Its error: $why"
    fi
    rm -f "$STAGING.smoke.log"
    say "upgrading edgefleet $old -> $new (the previous venv stays as $PREFIX.previous)"
    # The new agent's guard makes the switch and guards its starts.
    install_guard "$STAGING"
    if [ -n "$digest" ]; then printf '%s\n' "$digest" >"$STAGING/.edgefleet-wheel.sha256"; fi
    layout_step --switch || die "switching to the new agent failed (see above)"
    enable_upgrades
    install_unit
    if wait_ready; then
        rm -f "$VENV.smoke.log"
        say "upgraded edgefleet $old -> $new"
        return 0
    fi
    say "the new agent (edgefleet $new) did not report ready within $UPGRADE_TIMEOUT s: going back to edgefleet $old"
    layout_step --rollback || die "going back to edgefleet $old failed (see above)"
    install_unit
    if [ -z "$ROOT" ] && joined; then
        systemctl daemon-reload && systemctl restart "$UNIT" || true
    fi
    die "upgrade to edgefleet $new failed; edgefleet $old is back (the failed venv is in $PREFIX.failed; journalctl -u edgeagent says why)"
}

rollback() {
    [ -d "$PREVIOUS" ] || die "--rollback: there is no $PREFIX.previous (made by --upgrade)"
    local old new
    old=$(installed_version "$VENV")
    new=$(installed_version "$PREVIOUS")
    if [ "$DRY_RUN" = 1 ]; then
        say "would go back from edgefleet $old to $new"
        return 0
    fi
    [ -f "$GUARD" ] || install_guard "$VENV"
    layout_step --rollback || die "--rollback failed (see above)"
    install_unit
    if [ -z "$ROOT" ] && joined; then
        systemctl daemon-reload
        systemctl restart "$UNIT"
    fi
    say "rolled back edgefleet $old -> $new (edgefleet $old is kept in $PREFIX.failed)"
}

write_config() {
    local config=$ROOT$CONFIG_DIR/config.yaml
    if [ -f "$config" ]; then
        return 0
    fi
    write_file "$config" 0644 <<EOF
# Written by deploy/install.sh; edit it, then: systemctl restart edgeagent
# ('edgeagent join' adds node_name and hub.url).
state_dir: $STATE_DIR
runtime:
  kind: $RUNTIME
  docker:
    url: $DOCKER_URL
# Carry out the EdgeUpgrades the hub orders (docs/upgrade.md): the venvs are this
# script's (/opt/edgeagent, .new, .previous, .failed).
upgrade:
  enabled: true
EOF
}

# enable_upgrades: a config written before the agent had upgrades gets the group (an
# existing 'upgrade:' group is the site's and is left alone).
enable_upgrades() {
    local config=$ROOT$CONFIG_DIR/config.yaml
    [ -f "$config" ] || return 0
    grep -q '^upgrade:' "$config" && return 0
    if [ "$DRY_RUN" = 1 ]; then
        say "would add 'upgrade: {enabled: true}' to $config"
        return 0
    fi
    printf '%s\n' "# Added by deploy/install.sh --upgrade: carry out the hub's EdgeUpgrades." \
        "upgrade:" "  enabled: true" >>"$config"
    say "enabled agent upgrades from the hub in $config"
}

link_command() {
    local link=$ROOT$COMMAND_LINK target=$PREFIX/bin/edgeagent
    if [ -L "$link" ] && [ "$(readlink "$link")" = "$target" ]; then
        return 0
    fi
    if [ -e "$link" ] || [ -L "$link" ]; then
        say "warning: $COMMAND_LINK exists and is not a link to $target; left alone (run $target instead)"
        return 0
    fi
    if [ "$DRY_RUN" = 1 ]; then
        say "would link $link -> $target"
        return 0
    fi
    mkdir -p "$(dirname "$link")"
    ln -s "$target" "$link"
    CHANGED=1
    say "linked $COMMAND_LINK -> $target"
}

joined() { [ -f "$ROOT$STATE_DIR/pki/node.crt" ] && [ -f "$ROOT$STATE_DIR/pki/node.key" ]; }

# image_join: with --root, the image keeps the join line for each device's first boot
# (edgeagent-first-boot) instead of joining here: an identity made now would be the same
# on every device flashed from the image.
image_join() {
    if joined; then
        say "warning: $ROOT$STATE_DIR/pki holds a node identity: every device flashed from this image would share it; remove $ROOT$STATE_DIR/pki unless the image is for one device"
        return 0
    fi
    if [ -z "$TOKEN" ]; then
        [ -f "$ROOT$TOKEN_FILE" ] ||
            say "no join token in the image: put the line 'cloudhub token create' prints into $TOKEN_FILE on each device (before its first boot), or run it there by hand"
        return 0
    fi
    local line="edgeagent join --hub $HUB --token $TOKEN --ca-cert-hash $CA_HASH"
    [ -z "$NODE_NAME" ] || line="$line --node-name $NODE_NAME"
    [ -z "$LABELS" ] || line="$line --labels $LABELS"
    write_file "$ROOT$TOKEN_FILE" 0600 <<<"$line"
    say "the image holds no node identity: each device joins on its first boot with $TOKEN_FILE (a token with enough uses for the fleet: cloudhub token create --help) and makes its own key"
}

do_join() {
    if [ -n "$ROOT" ]; then
        image_join
        return 0
    fi
    if joined; then
        if [ -n "$TOKEN" ]; then
            say "already joined (certificate in $STATE_DIR/pki): the token was not used; to get a new certificate keeping the node's name, labels and store: edgeagent join --renew --token TOKEN"
        fi
        return 0
    fi
    if [ -z "$TOKEN" ]; then
        say "not joined yet: run 'edgeagent join --hub ... --token ... --ca-cert-hash ...' (from 'cloudhub token create'), then: systemctl start edgeagent"
        return 0
    fi
    local args=(join --config "$ROOT$CONFIG_DIR/config.yaml" --state-dir "$ROOT$STATE_DIR"
        --hub "$HUB" --token "$TOKEN" --ca-cert-hash "$CA_HASH")
    [ -z "$NODE_NAME" ] || args+=(--node-name "$NODE_NAME")
    [ -z "$LABELS" ] || args+=(--labels "$LABELS")
    if [ "$DRY_RUN" = 1 ]; then
        say "would run: $VENV/bin/edgeagent join --hub $HUB --token <token> --ca-cert-hash $CA_HASH"
        return 0
    fi
    "$VENV/bin/edgeagent" "${args[@]}" || die "the join failed (see above); fix it and run install.sh again"
    CHANGED=1
}

install_unit() {
    local source="" here
    here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
    for candidate in "$VENV/share/edgeagent/$UNIT" "$here/../systemd/$UNIT"; do
        if [ -f "$candidate" ]; then
            source=$candidate
            break
        fi
    done
    if [ -z "$source" ]; then
        [ "$DRY_RUN" = 1 ] || die "the unit file $UNIT is in neither the installed package nor beside this script"
        say "would install the unit $ROOT$UNIT_DIR/$UNIT"
        return 0
    fi
    write_file "$ROOT$UNIT_DIR/$UNIT" 0644 <"$source"
    # The unit's ExecStartPre: the first-boot join of a device flashed from an image.
    local first_boot
    first_boot=$(dirname "$source")/$FIRST_BOOT
    [ -f "$first_boot" ] || first_boot=$here/../systemd/$FIRST_BOOT
    write_file "$VENV/bin/$FIRST_BOOT" 0755 <"$first_boot"
    if [ "$RUNTIME" = process ]; then
        write_file "$ROOT$UNIT_DIR/$UNIT.d/20-process-runtime.conf" 0644 <<'EOF'
# Written by deploy/install.sh --runtime process: pods run as children of the agent and
# inherit its sandbox; that runtime shares the host's /tmp, users and set-uid programs.
[Service]
PrivateTmp=no
NoNewPrivileges=no
ProtectControlGroups=no
EOF
    fi
    local version
    version=$(systemd_version)
    if [ -n "$version" ] && [ "$version" -ge "$BACKOFF_SYSTEMD" ] 2>/dev/null; then
        write_file "$ROOT$UNIT_DIR/$UNIT.d/10-restart-backoff.conf" 0644 <<'EOF'
# Written by deploy/install.sh (systemd >= 254): back off exponentially from RestartSec
# (5 s) to 5 minutes between restarts of a crashing agent.
[Service]
RestartSteps=8
RestartMaxDelaySec=300s
EOF
    fi
}

start_unit() {
    [ "$CHANGED" = 0 ] || systemctl_do daemon-reload
    if systemctl_q is-enabled --quiet "$UNIT" 2>/dev/null; then
        :
    else
        systemctl_do enable "$UNIT"
    fi
    if [ -n "$ROOT" ]; then
        if [ "$DRY_RUN" = 1 ]; then
            say "the agent would start when the device boots (enabled as above)"
        elif [ "$CHANGED" = 1 ]; then
            say "enabled: the agent starts when the device boots (joining first if it has not)"
        fi
    elif [ "$NO_START" = 1 ]; then
        say "not started (--no-start): systemctl start edgeagent"
    elif ! joined; then
        say "not started: the node has not joined"
    elif [ "$CHANGED" = 1 ]; then
        systemctl_do restart "$UNIT"
    elif [ "$NO_SYSTEMD" = 1 ] || ! systemctl is-active --quiet "$UNIT"; then
        systemctl_do start "$UNIT"
    fi
}

main() {
    check_root_user
    check_systemd
    if [ "$UNINSTALL" = 1 ]; then
        uninstall
        return
    fi
    if [ "$ROLLBACK" = 1 ]; then
        rollback
        return
    fi
    check_python
    check_image_python
    check_engine
    check_sources
    if [ "$UPGRADE" = 1 ]; then
        upgrade
        return
    fi
    if [ "$DRY_RUN" = 0 ]; then
        mkdir -p "$ROOT$CONFIG_DIR" "$ROOT$STATE_DIR"
        chmod 0700 "$ROOT$STATE_DIR"
    fi
    make_venv
    pip_install
    install_guard "$VENV"
    if [ "$DRY_RUN" = 0 ]; then
        smoke_test "$VENV" || die "the installed agent does not start: $(tail -n 3 "$VENV.smoke.log")"
        rm -f "$VENV.smoke.log"
    fi
    link_command
    write_config
    do_join
    install_unit
    start_unit
    if [ "$CHANGED" = 0 ]; then say "already installed; nothing changed"; else say "done"; fi
}

main
