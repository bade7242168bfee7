#!/usr/bin/env bash
# Bootstrap an EdgeFleet edge node in one command (Debian, Raspberry Pi OS, Ubuntu on
# Jetson): a Python venv under /opt/edgeagent, /etc/edgeagent/config.yaml, the join to
# the hub, and the systemd unit, enabled and started.
#
#   sudo ./install.sh --hub hub.example.com --token abcdef.0123456789abcdef \
#        --ca-cert-hash sha256:<hex>          # the line printed by 'cloudhub token create'
#
# Offline sites: --wheel edgefleet-X-py3-none-any.whl --wheelhouse DIR (the dependencies,
# made with 'pip wheel edgefleet -w DIR' on a machine of the same architecture).
#
# Idempotent: a second run with the same arguments changes nothing. Run with --help for
# every option. Exit codes: 0 done, 1 a check or a step failed, 2 bad usage.

set -euo pipefail

PREFIX=/opt/edgeagent
CONFIG_DIR=/etc/edgeagent
STATE_DIR=/var/lib/edgeagent
UNIT_DIR=/etc/systemd/system
UNIT=edgeagent.service
# The agent's messages name 'edgeagent join --renew ...' and 'edgeagent status': this
# link makes them work as typed.
COMMAND_LINK=/usr/local/bin/edgeagent
BACKOFF_SYSTEMD=254 # RestartSteps= and RestartMaxDelaySec= appeared in systemd 254

ROOT=""
DRY_RUN=0
UNINSTALL=0
PURGE=0
NO_START=0
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
  --wheelhouse DIR         take dependencies only from DIR (no index; for offline sites)
  --index-url URL          package index to install from (default: pip's)
  --package SPEC           package to install from the index (default: edgefleet[agent])
  --upgrade                upgrade an existing installation
  --python PATH            Python >= 3.10 to build the venv with (default: python3)
  --system-site-packages   let the venv use the system's Python packages (apt's
                           python3-cryptography and the like)

Agent settings written to /etc/edgeagent/config.yaml (an existing file is kept):
  --runtime docker|process container runtime (default: docker)
  --docker-url URL         Docker Engine API (default: unix:///var/run/docker.sock)
  --container-engine NAME  fail unless this engine is installed (docker, podman,
                           balena-engine)

Modes:
  --root DIR               install into DIR as if it were / (systemctl enable is done
                           with --root; daemon-reload, start and stop are skipped)
  --dry-run                print what would be done; change nothing
  --no-start               install and enable, but do not start the agent
  --uninstall              stop, disable and remove the agent (config and state kept)
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
if [ -n "$TOKEN" ] && { [ -z "$HUB" ] || [ -z "$CA_HASH" ]; }; then
    usage_error "--token needs --hub and --ca-cert-hash (the line 'cloudhub token create' prints)"
fi
if [ -n "$ROOT" ]; then
    ROOT=$(cd "$ROOT" 2>/dev/null && pwd) || usage_error "--root: no such directory"
    [ "$ROOT" != / ] || ROOT=""
fi
VENV=$ROOT$PREFIX

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
    if [ -z "$ROOT" ]; then
        run systemctl "$@"
        return
    fi
    case "$1" in
    enable | disable) run systemctl --root="$ROOT" "$@" ;;
    *) say "skipped (--root): systemctl $*" ;;
    esac
}

systemctl_q() { if [ -n "$ROOT" ]; then systemctl --root="$ROOT" "$@"; else systemctl "$@"; fi; }

systemd_version() { systemctl --version 2>/dev/null | awk 'NR==1 {print $2; exit}'; }

# -- checks: everything that can fail is checked before anything is changed --------------

check_root_user() {
    if [ -z "$ROOT" ] && [ "$DRY_RUN" = 0 ] && [ "$(id -u)" != 0 ]; then
        die "run as root (sudo $0 ...), or use --dry-run to see what would be done"
    fi
}

check_systemd() {
    command -v systemctl >/dev/null 2>&1 ||
        die "systemd is required but systemctl was not found: the agent runs as a systemd service"
    if [ -z "$ROOT" ] && [ ! -d /run/systemd/system ]; then
        die "systemd is not running on this machine (no /run/systemd/system): the agent runs as a systemd service; use --root DIR to prepare an image instead"
    fi
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

check_sources() {
    [ -z "$WHEEL" ] || [ -f "$WHEEL" ] || die "--wheel: no such file: $WHEEL"
    [ -z "$WHEELHOUSE" ] || [ -d "$WHEELHOUSE" ] || die "--wheelhouse: no such directory: $WHEELHOUSE"
}

# -- uninstall ----------------------------------------------------------------------------

uninstall() {
    local unit=$ROOT$UNIT_DIR/$UNIT did=0
    if [ -f "$unit" ]; then
        if systemctl_q is-enabled --quiet "$UNIT" 2>/dev/null; then systemctl_do disable "$UNIT"; fi
        [ -n "$ROOT" ] || systemctl_do stop "$UNIT"
        run rm -f "$unit"
        run rm -rf "$ROOT$UNIT_DIR/$UNIT.d"
        systemctl_do daemon-reload
        did=1
    fi
    if [ -L "$ROOT$COMMAND_LINK" ] && [ "$(readlink "$ROOT$COMMAND_LINK")" = "$PREFIX/bin/edgeagent" ]; then
        run rm -f "$ROOT$COMMAND_LINK"
        did=1
    fi
    if [ -d "$VENV" ]; then
        run rm -rf "$VENV"
        did=1
    fi
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
}

# -- install ------------------------------------------------------------------------------

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
    local args=()
    [ "$SYSTEM_SITE" = 0 ] || args+=(--system-site-packages)
    run "$PYTHON" -m venv "${args[@]}" "$VENV"
    CHANGED=1
    say "created the venv $VENV"
}

pip_install() {
    local pip=("$VENV/bin/python" -m pip --disable-pip-version-check --no-input --quiet)
    local args=()
    if [ -n "$WHEELHOUSE" ]; then args+=(--no-index --find-links "$WHEELHOUSE"); fi
    if [ -n "$INDEX_URL" ]; then args+=(--index-url "$INDEX_URL"); fi
    if [ -n "$WHEEL" ]; then
        local stamp=$VENV/.edgefleet-wheel.sha256 digest
        digest=$(sha256sum "$WHEEL" | awk '{print $1}')
        if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$digest" ]; then
            return 0
        fi
        # A rebuilt wheel of the same version must replace the old one: force it, but
        # leave the dependencies alone unless they are missing.
        local force=()
        [ ! -f "$stamp" ] || force=(--force-reinstall --no-deps)
        if [ "$SYSTEM_SITE" = 1 ] && [ -z "$WHEELHOUSE" ] && [ -z "$INDEX_URL" ]; then
            args+=(--no-index) # dependencies come from the system's packages
        fi
        run "${pip[@]}" install "${args[@]}" "${force[@]}" "$WHEEL[agent]"
        if [ "$DRY_RUN" = 0 ]; then printf '%s\n' "$digest" >"$stamp"; fi
        CHANGED=1
        say "installed $(basename "$WHEEL")"
        return 0
    fi
    if [ "$UPGRADE" = 0 ] && [ -x "$VENV/bin/edgeagent" ]; then
        return 0
    fi
    [ "$UPGRADE" = 0 ] || args+=(--upgrade)
    run "${pip[@]}" install "${args[@]}" "$PACKAGE"
    if [ "$DRY_RUN" = 0 ] && [ ! -x "$VENV/bin/edgeagent" ]; then
        # Satisfied by a copy outside the venv (--system-site-packages): put it in the venv
        # itself, so that the unit's /opt/edgeagent/bin/edgeagent exists.
        run "${pip[@]}" install "${args[@]}" --no-deps --ignore-installed "$PACKAGE"
    fi
    CHANGED=1
    say "installed $PACKAGE"
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
EOF
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

do_join() {
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
    if [ "$NO_START" = 1 ]; then
        say "not started (--no-start): systemctl start edgeagent"
    elif ! joined; then
        say "not started: the node has not joined"
    elif [ "$CHANGED" = 1 ]; then
        systemctl_do restart "$UNIT"
    elif [ -n "$ROOT" ] || ! systemctl is-active --quiet "$UNIT"; then
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
    check_python
    check_engine
    check_sources
    if [ "$DRY_RUN" = 0 ]; then
        mkdir -p "$ROOT$CONFIG_DIR" "$ROOT$STATE_DIR"
        chmod 0700 "$ROOT$STATE_DIR"
    fi
    make_venv
    pip_install
    if [ "$DRY_RUN" = 0 ]; then
        "$VENV/bin/edgeagent" --help >/dev/null || die "the installed agent does not start: $VENV/bin/edgeagent --help failed"
    fi
    link_command
    write_config
    do_join
    install_unit
    start_unit
    if [ "$CHANGED" = 0 ]; then say "already installed; nothing changed"; else say "done"; fi
}

main
