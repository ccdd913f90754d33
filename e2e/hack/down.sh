#!/usr/bin/env bash
# Stops the harness started by hack/up.sh: SIGTERM, which tears down every process and the
# harness directory, then waits for it to exit.
set -euo pipefail
state="${KAAS_E2E_STATE:-/tmp/kaas-e2e-up}"
if [[ ! -f "$state/pid" ]] || ! kill -0 "$(cat "$state/pid")" 2>/dev/null; then
  echo "e2e-down: no harness running" >&2
  rm -f "$state/pid" "$state/ready"
  exit 0
fi
pid="$(cat "$state/pid")"
kill -TERM "$pid"
for _ in $(seq 1 120); do
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.5
done
if kill -0 "$pid" 2>/dev/null; then
  echo "e2e-down: $pid still running after 60s, killing" >&2
  kill -KILL "$pid"
fi
rm -f "$state/pid" "$state/ready"
echo "e2e-down: stopped"
