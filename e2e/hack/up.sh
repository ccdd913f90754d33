#!/usr/bin/env bash
# Starts a harness cluster in the background for debugging (make e2e-up) and prints how to reach
# it. Stop it with hack/down.sh (make e2e-down). State: $KAAS_E2E_STATE (default /tmp/kaas-e2e-up).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
state="${KAAS_E2E_STATE:-/tmp/kaas-e2e-up}"
tools="${KAAS_CACHE:-$HOME/.cache/kaas}/e2e-tools"

if [[ -f "$state/pid" ]] && kill -0 "$(cat "$state/pid")" 2>/dev/null; then
  echo "e2e-up: already running (pid $(cat "$state/pid")); kubeconfig: $state/kubeconfig" >&2
  exit 0
fi
mkdir -p "$state" "$tools"
rm -f "$state/ready"
(cd "$here" && nice -n 19 go build -o "$tools/e2e-up" ./cmd/e2e-up)
KAAS_E2E_DIR="$here" setsid "$tools/e2e-up" -state "$state" "$@" >"$state/e2e-up.log" 2>&1 </dev/null &
pid=$!
for _ in $(seq 1 600); do
  [[ -f "$state/ready" ]] && break
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "e2e-up: failed to start; log follows" >&2
    cat "$state/e2e-up.log" >&2
    exit 1
  fi
  sleep 0.5
done
[[ -f "$state/ready" ]] || { echo "e2e-up: not ready after 300s, see $state/e2e-up.log" >&2; exit 1; }
cat "$state/e2e-up.log"
echo "kubeconfig path: $state/kubeconfig   (use $state/kubectl: the cluster lives in a private network namespace)"
