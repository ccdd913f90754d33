#!/usr/bin/env bash
# Starts the release kaas binary (target/release/kaas; build it with
# `cargo build --release -p kaas -p kaas-bench`) in local mode on a free 127.0.0.1 port with
# its data in DIR/data. Prints the bootstrap address; DIR/bootstrap, DIR/pid and DIR/kaas.log as
# for kafka-start.sh. Extra arguments go to kaas. Stop it with kaas-stop.sh DIR.
set -euo pipefail
. "$(dirname "$0")/common.sh"
dir="${1:?usage: kaas-start.sh DIR [kaas flags...]}"; shift
kaas="${KAAS_BIN:-$REPO_DIR/target/release/kaas}"
[ -x "$kaas" ] || { echo "kaas-start: $kaas is missing (cargo build --release -p kaas)" >&2; exit 1; }
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
setsid nohup "$kaas" --listen 127.0.0.1:0 --http-listen 127.0.0.1:0 --data-dir "$dir/data" "$@" >"$dir/stdout" 2>"$dir/kaas.log" </dev/null &
echo $! >"$dir/pid"
for _ in $(seq 1 200); do
  addr="$(sed -n 's/^kaas listening on \([^ ]*\).*/\1/p' "$dir/stdout" 2>/dev/null || true)"
  if [ -n "$addr" ]; then echo "$addr" >"$dir/bootstrap"; echo "$addr"; exit 0; fi
  kill -0 "$(cat "$dir/pid")" 2>/dev/null || break
  sleep 0.05
done
echo "kaas-start: kaas did not start:" >&2
tail -n 30 "$dir/kaas.log" >&2
"$CONFORMANCE_DIR/bin/kafka-stop.sh" "$dir" || true
exit 1
