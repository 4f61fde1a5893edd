#!/usr/bin/env bash
# `make k8s-tools`: builds the local control plane's binaries (etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kubectl, kwok, helm) from the Go module proxy at
# the versions pinned in e2e/versions.env, into a cache outside the repository:
#
#   ${PAGODA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pagoda}/k8s-tools/<key>/bin
#
# <key> hashes versions.env and this script, so a version bump or a change of build flags
# builds afresh while an unchanged checkout finds the binaries in seconds. The Go module
# and build caches are shared between keys, so a bump rebuilds only what changed.
#
# All seven programs are built in ONE throwaway module so that MVS picks one version of
# each shared dependency (client-go, grpc, protobuf, ...) and each package compiles once,
# which matters on a 2-core machine. Only the seven main packages are built, stripped.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
versions="$here/versions.env"
# shellcheck source=versions.env
source "$versions"

cache="${PAGODA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pagoda}"
key="$(cat "$versions" "$0" | sha256sum | cut -c1-12)"
dest="$cache/k8s-tools/$key"
# `build-tools.sh --print-key` prints <key> and stops: e2e/tools.py computes the same key
# to find the binaries, and a test compares the two.
if [[ "${1:-}" == "--print-key" ]]; then
    echo "$key"
    exit 0
fi
if [[ -f "$dest/.complete" ]]; then
    echo "k8s tools are cached in $dest/bin"
    exit 0
fi

export GOMODCACHE="$cache/go/mod" GOCACHE="$cache/go/build"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-mod=mod"
command -v go >/dev/null || { echo "error: the go command is needed to build the k8s tools" >&2; exit 1; }

kube_minor="${KUBERNETES_VERSION#v1.}"  # 1.37.2 -> staging modules v0.37.2
# package@version: `go get` of a package without a version would upgrade its module.
packages=(
    "k8s.io/kubernetes/cmd/kube-apiserver@$KUBERNETES_VERSION"
    "k8s.io/kubernetes/cmd/kube-controller-manager@$KUBERNETES_VERSION"
    "k8s.io/kubernetes/cmd/kube-scheduler@$KUBERNETES_VERSION"
    "k8s.io/kubernetes/cmd/kubectl@$KUBERNETES_VERSION"
    "go.etcd.io/etcd/server/v3@$ETCD_VERSION"
    "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
    "helm.sh/helm/v4/cmd/helm@$HELM_VERSION"
)

src="$dest/src"
rm -rf "$dest" && mkdir -p "$src" "$dest/bin"
cd "$src"
echo "building k8s tools into $dest (Kubernetes $KUBERNETES_VERSION, etcd $ETCD_VERSION," \
    "kwok $KWOK_VERSION, helm $HELM_VERSION)"
go mod init pagoda.dev/k8s-tools >/dev/null 2>&1

# k8s.io/kubernetes requires its staging modules at v0.0.0 and replaces them with folders
# of its own repository; a module that depends on it must replace them with the
# published versions instead.
kube_gomod="$(go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" |
    sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')"
sed -n 's|^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/.*|\1|p' "$kube_gomod" |
    while read -r staging; do
        go mod edit -replace "$staging=$staging@v0.$kube_minor"
    done

go get "${packages[@]}" 2>"$dest/go-get.log" || { cat "$dest/go-get.log" >&2; exit 1; }

# Version stamps: clients such as helm compare the server's reported version with a
# chart's kubeVersion, so the binaries must not report v0.0.0-master.
kube_minor_only="${kube_minor%%.*}"
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$KUBERNETES_VERSION -X $pkg.gitMajor=1"
    ldflags+=" -X $pkg.gitMinor=$kube_minor_only -X $pkg.gitTreeState=clean"
done
ldflags+=" -X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION"
ldflags+=" -X helm.sh/helm/v4/internal/version.version=$HELM_VERSION"

# The one change to upstream code: Endpoints and EndpointSlices accept loopback addresses.
# Pods here get IPs in 127.0.0.0/8, the only addresses this machine may serve on, and a
# Service must be able to list them (the API server advertises 127.0.0.1 for the same
# reason). The module is linked into a copy, not edited in place: the cache stays pristine.
upstream="$(go list -m -f '{{.Dir}}' k8s.io/kubernetes)"
cp -al "$upstream" "$src/kubernetes" && chmod -R u+w "$src/kubernetes/pkg/apis/core/validation"
validation="pkg/apis/core/validation/validation.go"
rm "$src/kubernetes/$validation"  # a hard link: write a new file, never through the link
sed 's|if ip.IsLoopback() {|if false \&\& ip.IsLoopback() { // pagoda e2e: pod IPs are loopback|' \
    "$upstream/$validation" >"$src/kubernetes/$validation"
if [[ "$(grep -c 'if false && ip.IsLoopback()' "$src/kubernetes/$validation")" != 1 ]]; then
    echo "error: the loopback patch no longer applies to $upstream/$validation" >&2
    exit 1
fi
go mod edit -replace k8s.io/kubernetes=./kubernetes

go build -trimpath -ldflags "$ldflags" -o "$dest/bin/" \
    "${packages[@]%@*}"
mv "$dest/bin/server" "$dest/bin/etcd"  # go names a .../server/v3 main package "server"
echo "built k8s tools in $SECONDS s: $(ls "$dest/bin" | tr '\n' ' ')"
touch "$dest/.complete"
# binaries of other keys (older pins or build flags) are ~0.5 GB each; the shared Go
# caches make rebuilding them quick, so keep only this one
find "$cache/k8s-tools" -mindepth 1 -maxdepth 1 ! -name "$key" -exec rm -rf {} +
