#!/usr/bin/env bash
# Builds the control-plane binaries the e2e harness runs, from the Go modules pinned in
# e2e/go.mod (Kubernetes) and e2e/etcd/go.mod (etcd), into a cache keyed by version so that only
# the first run on a machine pays for the build. Prints the two bin directories, one per line:
#   <k8s bin dir>
#   <etcd bin dir>
# Idempotent: a binary that is already cached is not rebuilt. Builds run under `nice -n 19`
# because the machine is shared with Rust builds.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${KAAS_CACHE:-$HOME/.cache/kaas}"

k8s_version="$(cd "$here" && go list -m -f '{{.Version}}' k8s.io/kubernetes)"
etcd_version="$(cd "$here/etcd" && go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)"
k8s_bin="$cache/k8s-$k8s_version/bin"
etcd_bin="$cache/etcd-$etcd_version/bin"
mkdir -p "$k8s_bin" "$etcd_bin"

# The version stamps that Kubernetes' own build (hack/lib/version.sh) puts in, so that
# `kubectl version` and the apiserver's /version report the real release, not v0.0.0-master.
minor="${k8s_version#v1.}"; minor="${minor%%.*}"
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done

build() { # build <module dir> <out dir> <name> <package>
  local dir="$1" out="$2" name="$3" pkg="$4"
  [[ -x "$out/$name" ]] && return 0
  echo "e2e-bins: building $name ($pkg) into $out" >&2
  local start=$SECONDS
  # Build to a temporary name and rename, so an interrupted build never leaves a half binary
  # that a later run would take for a cached one.
  (cd "$dir" && CGO_ENABLED=0 nice -n 19 go build -trimpath -ldflags "$ldflags" -o "$out/.$name.tmp" "$pkg")
  mv "$out/.$name.tmp" "$out/$name"
  echo "e2e-bins: built $name in $((SECONDS - start))s" >&2
}

build "$here/etcd" "$etcd_bin" etcd go.etcd.io/etcd/server/v3
# The kubelet is only for the real-kubelet leg (images/realkubelet_test.go), which runs it with
# containerd; the harness' own nodes are process kubelets (cmd/process-kubelet).
for c in kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet; do
  build "$here" "$k8s_bin" "$c" "k8s.io/kubernetes/cmd/$c"
done

echo "$k8s_bin"
echo "$etcd_bin"
