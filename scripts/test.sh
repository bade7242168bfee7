#!/usr/bin/env bash
# The README's second command: install whatever is missing (scripts/setup.sh test), then run
# the whole suite from the clone's virtual environment. Arguments go to pytest:
#
#   scripts/test.sh                          everything (what CI runs, inside a fresh root)
#   scripts/test.sh tests/protocol -x        one directory, stop at the first failure
#   CI=true scripts/test.sh                  a missing podman, netns, tmpfs, cgroup or
#                                            kube-apiserver fails its tests instead of skipping
#
# Run as root: the container, network-namespace and disk-full tests need it.
set -euo pipefail
TOP="$(cd "$(dirname "$0")/.." && pwd)"
"$TOP/scripts/setup.sh" test
VENV="${EDGEFLEET_VENV:-$TOP/.venv}"
export PATH="$VENV/bin:$PATH"
cd "$TOP"
exec "$VENV/bin/python" -m pytest "$@"
