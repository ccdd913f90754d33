#!/usr/bin/env bash
# Stops the broker kafka-start.sh or kaas-start.sh started in DIR: SIGTERM, then SIGKILL
# after 20 s. Leaves DIR in place (remove it yourself).
set -euo pipefail
dir="${1:?usage: kafka-stop.sh DIR}"
[ -f "$dir/pid" ] || exit 0
pid="$(cat "$dir/pid")"
if kill -0 "$pid" 2>/dev/null; then
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
fi
rm -f "$dir/pid"
