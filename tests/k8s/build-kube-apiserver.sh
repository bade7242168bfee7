#!/usr/bin/env bash
# Build the reference kube-apiserver v1.20.2 that the contract and kubectl tests run against,
# from Debian bookworm's own `kubernetes` source package, and cache it outside the repository.
#
#   tests/k8s/build-kube-apiserver.sh [--quiet]  (as root, or with sudo, on Debian bookworm)
#
# --quiet prints nothing when the build is already cached (scripts/setup.sh uses it).
#
# What it does, once (about 5 minutes of compiling on 2 cores; a second run exits at once):
#   1. installs golang-1.19-go, Debian's newer modern-go/reflect2 and json-iterator, etcd-server
#      (the store the tests start) and dpkg-dev (for `apt-get source`);
#   2. adds a deb-src entry for bookworm if apt has none, and fetches the `kubernetes` source
#      package (1.20.5+really1.20.2: the upstream v1.20.2 tree with its vendor/ directory);
#   3. swaps the vendored reflect2 1.0.1 and json-iterator 1.1.10 for Debian's 1.0.2 and 1.1.12
#      (reflect2 1.0.1 crashes under Go >= 1.18), and removes the vendored kube-openapi's
#      zero-value check that turns "" into null under Go >= 1.16 (kubernetes#99804, see below);
#   4. generates pkg/generated/openapi/zz_generated.openapi.go with the bundled openapi-gen over
#      the same package list as upstream's Makefile.generated_files, and checks the API rule
#      report against api/api-rules/violation_exceptions.list as upstream's make does;
#   5. compiles cmd/kube-apiserver in GOPATH mode (GO111MODULE=off, GOPROXY=off, CGO_ENABLED=0)
#      with upstream's tags and version ldflags, checks `--version`, and moves it into the cache;
#   6. puts Debian's kubectl 1.20.2 (package kubernetes-client, unpacked, not installed: on our
#      machine images /usr/bin/kubectl belongs to another `kubectl` package) beside it;
#   7. deletes the source tree and the Go build cache (about 1.5 GB), and writes the recipe
#      stamp (kube-apiserver.recipe beside the binary).
#
# The recipe stamp is the cache key: a cached binary counts only when its stamp says
# RECIPE below. Bump RECIPE whenever a change here changes what the binary does (and
# tests/k8s/kube_apiserver.py's RECIPE with it): every existing cache then rebuilds once.
#
# Environment:
#   EDGEFLEET_KUBE_APISERVER  where the binary goes
#                             (default ~/.cache/edgefleet/kube-apiserver-v1.20.2/kube-apiserver)
#   EDGEFLEET_KUBECTL         where Debian's kubectl goes (default: kubectl beside the binary)
#   EDGEFLEET_BUILD_DIR       scratch directory (default: build/ beside the binary; emptied first
#                             and removed on success, kept on failure for inspection)
set -euo pipefail

KUBE_VERSION=1.20.2
# What the binary is, beyond its version (the cache key, see above).
# 1: upstream's tree, Debian's reflect2 and json-iterator; 2: plus the kubernetes#99804 fix.
RECIPE="v$KUBE_VERSION+edgefleet.2"
GO_ROOT=/usr/lib/go-1.19
PACKAGES=(golang-1.19-go golang-github-modern-go-reflect2-dev golang-github-json-iterator-go-dev
          etcd-server dpkg-dev xz-utils patch ca-certificates)

BINARY="${EDGEFLEET_KUBE_APISERVER:-$HOME/.cache/edgefleet/kube-apiserver-v$KUBE_VERSION/kube-apiserver}"
CACHE_DIR="$(dirname "$BINARY")"
KUBECTL="${EDGEFLEET_KUBECTL:-$CACHE_DIR/kubectl}"
BUILD_DIR="${EDGEFLEET_BUILD_DIR:-$CACHE_DIR/build}"
STAMP="$BINARY.recipe"

log() { echo "build-kube-apiserver: $*" >&2; }
die() { log "error: $*"; exit 1; }

# A binary counts as built when it runs, says it is our version and its stamp is our recipe
# (binary_runs alone for the one just compiled, before its stamp is written).
binary_runs() {
    [ -x "$1" ] && "$1" --version 2>/dev/null | grep -qx "Kubernetes v$KUBE_VERSION"
}
binary_ok() {
    binary_runs "$1" && [ "$(cat "$1.recipe" 2>/dev/null)" = "$RECIPE" ]
}
kubectl_ok() {
    [ -x "$1" ] && "$1" version --client --short 2>/dev/null | grep -q "v$KUBE_VERSION"
}
all_ok() {
    binary_ok "$BINARY" && kubectl_ok "$KUBECTL" && command -v etcd >/dev/null
}

QUIET=0
[ "${1:-}" = --quiet ] && QUIET=1

if all_ok; then
    [ "$QUIET" -eq 1 ] || log "cached: $BINARY ($RECIPE), kubectl $KUBECTL, etcd $(command -v etcd)"
    exit 0
fi
if binary_runs "$BINARY"; then
    log "the cached $BINARY was built by another recipe ($(cat "$STAMP" 2>/dev/null || echo none)); rebuilding it as $RECIPE"
fi

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || die "run as root, or install sudo"
    SUDO=(sudo)
fi
APT=("${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -q -o DPkg::Lock::Timeout=600)

grep -q 'VERSION_CODENAME=bookworm' /etc/os-release ||
    log "warning: this is not Debian bookworm; the source package may differ"

mkdir -p "$CACHE_DIR"
# One build at a time on a machine; a second caller waits, then finds the binary cached.
exec 9>"$CACHE_DIR/.lock"
if ! flock -n 9; then
    log "another build holds $CACHE_DIR/.lock; waiting for it"
    flock 9
fi
if all_ok; then
    log "built meanwhile by another run: $BINARY"
    exit 0
fi

START=$(date +%s)
APT_UPDATED=0
apt_update() {
    if [ "$APT_UPDATED" -eq 0 ]; then
        log "apt-get update"
        "${APT[@]}" update -qq
        APT_UPDATED=1
    fi
}

# 1. Packages.
missing=()
for pkg in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
    apt_update
    log "installing ${missing[*]}"
    "${APT[@]}" install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
command -v etcd >/dev/null || die "etcd-server is installed but no etcd is on PATH"

# 2. A deb-src entry, then the source package (only when the binary itself is missing).
has_source() {
    apt-cache showsrc kubernetes 2>/dev/null | grep -q "^Version: .*really$KUBE_VERSION"
}
if ! binary_ok "$BINARY" && ! has_source; then
    apt_update
fi
if ! binary_ok "$BINARY" && ! has_source; then
    SRC_LIST=/etc/apt/sources.list.d/edgefleet-deb-src.sources
    log "adding source package entries in $SRC_LIST"
    "${SUDO[@]}" tee "$SRC_LIST" >/dev/null <<'EOF'
# Added by EdgeFleet's tests/k8s/build-kube-apiserver.sh: Debian source packages, used to build
# the reference kube-apiserver from the `kubernetes` source package.
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    APT_UPDATED=0
    apt_update
    has_source || die "apt still finds no source package kubernetes (…really$KUBE_VERSION) after adding $SRC_LIST"
fi

rm -rf "$BUILD_DIR"
mkdir -p "$BUILD_DIR"
cd "$BUILD_DIR"

# 6 first (small, fast): Debian's kubectl for the same version, unpacked beside the binary.
if ! kubectl_ok "$KUBECTL"; then
    log "fetching Debian's kubernetes-client (kubectl v$KUBE_VERSION)"
    mkdir -p deb
    (cd deb && apt-get -q -o APT::Sandbox::User=root download kubernetes-client >/dev/null)
    dpkg-deb -x deb/kubernetes-client_*.deb deb/root
    mkdir -p "$(dirname "$KUBECTL")"
    install -m 0755 deb/root/usr/bin/kubectl "$KUBECTL.tmp"
    mv -f "$KUBECTL.tmp" "$KUBECTL"
    kubectl_ok "$KUBECTL" || die "$KUBECTL does not report v$KUBE_VERSION"
fi

if ! binary_ok "$BINARY"; then
    log "fetching the kubernetes source package into $BUILD_DIR"
    apt-get -q -o APT::Sandbox::User=root source kubernetes >source.log 2>&1 ||
        { cat source.log >&2; die "apt-get source kubernetes failed"; }
    TREE=$(find "$BUILD_DIR" -maxdepth 1 -type d -name "kubernetes-*really$KUBE_VERSION" | head -n1)
    if [ -z "$TREE" ] || [ ! -d "$TREE/vendor" ]; then
        die "no kubernetes-*really$KUBE_VERSION tree with vendor/ in $BUILD_DIR"
    fi

    export GOPATH="$BUILD_DIR/gopath" GOCACHE="$BUILD_DIR/gocache"
    export GO111MODULE=off GOPROXY=off GOFLAGS="" CGO_ENABLED=0 GOTOOLCHAIN=local
    export PATH="$GO_ROOT/bin:$PATH"
    mkdir -p "$GOPATH/src/k8s.io"
    ln -sfn "$TREE" "$GOPATH/src/k8s.io/kubernetes"
    cd "$GOPATH/src/k8s.io/kubernetes"
    log "$(go version)"

    # 3. Newer reflect2 and json-iterator from Debian.
    for pkg in github.com/modern-go/reflect2 github.com/json-iterator/go; do
        [ -d "/usr/share/gocode/src/$pkg" ] || die "/usr/share/gocode/src/$pkg missing (Debian -dev package)"
        rm -rf "vendor/$pkg"
        cp -a "/usr/share/gocode/src/$pkg" "vendor/$pkg"
    done

    # 3b. kubernetes#99804. The vendored kube-openapi validator treats a value as JSON null
    # when reflect.DeepEqual says reflect.Zero(type) equals reflect.ValueOf(data): two
    # reflect.Value structs, which never compared equal before Go 1.16 (reflect.Zero pointed
    # at a fresh allocation); since Go 1.16 reflect.Zero shares one zero buffer, so "" (and 0,
    # false) compare equal and a typed, non-nullable field refuses "" with `must be of type
    # string: "null"`. Released 1.20 binaries were built with Go 1.15 and accept "";
    # upstream's fix (kube-openapi#230, in Kubernetes 1.21) keeps only the nil test. So do we.
    openapi_type=vendor/k8s.io/kube-openapi/pkg/validation/validate/type.go
    zero_check='if data == nil || reflect.DeepEqual(reflect.Zero(reflect.TypeOf(data)), reflect.ValueOf(data)) {'
    [ "$(grep -cF "$zero_check" "$openapi_type")" = 1 ] ||
        die "$openapi_type no longer has the one zero-value check of kubernetes#99804 to remove"
    sed -i "s/if data == nil || reflect\.DeepEqual(reflect\.Zero(reflect\.TypeOf(data)), reflect\.ValueOf(data)) {/if data == nil { \/\/ edgefleet: \"\" is not null (kubernetes#99804)/" "$openapi_type"
    grep -qF 'if data == nil { // edgefleet' "$openapi_type" ||
        die "patching $openapi_type failed"

    # 4. OpenAPI definitions, as `make gen_openapi` does for KUBE_OPENAPI_OUTPUT_PKG: every
    # directory with Go files (staging/src named as vendor/, the rest of vendor/ left out) one of
    # whose files carries a +k8s:openapi-gen= tag, minus code-generator and sample-apiserver.
    log "generating pkg/generated/openapi/zz_generated.openapi.go"
    go build -o "$BUILD_DIR/openapi-gen" ./vendor/k8s.io/kube-openapi/cmd/openapi-gen
    inputs=$(
        find -H . \( -path './_*' -o -path './.*' -o -path ./vendor \) -prune -o \
            -type f -name '*.go' -print |
            sed -e 's|^\./staging/src/|vendor/|' -e 's|^\./||' |
            xargs grep --color=never -l '^// *+k8s:' |
            xargs grep --color=never -l '+k8s:openapi-gen=' |
            grep -v -e '^vendor/k8s.io/code-generator/' -e '^vendor/k8s.io/sample-apiserver/' |
            xargs -n1 dirname | LC_ALL=C sort -u | sed 's|^|k8s.io/kubernetes/|' | paste -sd, -
    )
    [ -n "$inputs" ] || die "found no package with a +k8s:openapi-gen tag"
    "$BUILD_DIR/openapi-gen" --logtostderr \
        -i "$inputs" \
        -p k8s.io/kubernetes/pkg/generated/openapi \
        -O zz_generated.openapi \
        -h vendor/k8s.io/code-generator/hack/boilerplate.go.txt \
        -r "$BUILD_DIR/openapi-violations.report" 2>"$BUILD_DIR/openapi-gen.log" ||
        { tail -n 20 "$BUILD_DIR/openapi-gen.log" >&2; die "openapi-gen failed"; }
    diff -q "$BUILD_DIR/openapi-violations.report" api/api-rules/violation_exceptions.list >/dev/null ||
        die "openapi-gen's API rule report differs from api/api-rules/violation_exceptions.list: the generator saw a different package set than upstream's make would"

    # 5. The binary, with upstream's build tags and version stamps (hack/lib/golang.sh, version.sh).
    log "compiling cmd/kube-apiserver (about 5 minutes on 2 idle cores)"
    stamp="k8s.io/kubernetes/vendor/k8s.io"
    ldflags="-s -w -buildid="
    for p in client-go/pkg/version component-base/version; do
        ldflags+=" -X $stamp/$p.gitVersion=v$KUBE_VERSION -X $stamp/$p.gitMajor=1"
        ldflags+=" -X $stamp/$p.gitMinor=20 -X $stamp/$p.gitTreeState=archive"
        ldflags+=" -X $stamp/$p.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    done
    COMPILE_START=$(date +%s)
    go build -tags selinux,notest -trimpath -ldflags "$ldflags" \
        -o "$BUILD_DIR/kube-apiserver" ./cmd/kube-apiserver
    log "compiled in $(($(date +%s) - COMPILE_START)) s"
    binary_runs "$BUILD_DIR/kube-apiserver" ||
        die "the new binary does not print 'Kubernetes v$KUBE_VERSION' for --version"
    log "disk used by the build: $(du -sh "$BUILD_DIR" | cut -f1) (source tree, Go cache)"
    cp "$BUILD_DIR/kube-apiserver" "$BINARY.tmp"
    mv -f "$BINARY.tmp" "$BINARY"
    printf '%s\n' "$RECIPE" >"$STAMP.tmp"
    mv -f "$STAMP.tmp" "$STAMP"
fi

cd /
rm -rf "$BUILD_DIR"
all_ok || die "after the build the cache is still incomplete"
log "done in $(($(date +%s) - START)) s: $BINARY ($RECIPE), $KUBECTL, $(du -sh "$CACHE_DIR" | cut -f1) cached"
