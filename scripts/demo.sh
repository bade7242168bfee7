#!/usr/bin/env bash
# The README's first command: install whatever is missing (scripts/setup.sh demo), then run
# `cloudhub demo` from the clone's virtual environment. Arguments go to the demo:
#
#   scripts/demo.sh                 a hub, three agents, real manifests, an outage; ~1 minute
#   scripts/demo.sh --keep          leave it running and print a kubeconfig for kubectl
#   scripts/demo.sh --help          every option
#
# Run as root (or with sudo for the installs): the pods run on a private rootful podman.
set -euo pipefail
TOP="$(cd "$(dirname "$0")/.." && pwd)"
"$TOP/scripts/setup.sh" demo
VENV="${EDGEFLEET_VENV:-$TOP/.venv}"
export PATH="$VENV/bin:$PATH"
exec "$VENV/bin/cloudhub" demo "$@"
