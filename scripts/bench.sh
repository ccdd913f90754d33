#!/usr/bin/env bash
# Starts a release kaas broker on a fresh on-disk data directory and runs the kaas-bench suite
# against it (1 KiB messages, acks=all, 1 and 8 partitions; then consumer groups: commit latency
# at one synchronous commit every 100 ms, and the time until all 32 partitions are consumed again
# after a member of a 10-consumer group leaves, for the classic and the KIP-848 protocol). The
# broker runs with Kafka's default group settings; then transactions of 100 records over 8
# partitions back to back against the idempotent producer; then keyed produce to a compacted topic
# against a delete-policy one, the compacted topic's fixed-rate phase running while the log
# cleaner works, with the cleaner's passes and bytes from /metrics; the broker's cleaner rests 1 s
# between rounds instead of Kafka's default 15 s, so that a pass overlaps that phase). Prints the
# figures.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${BENCH_SECONDS:-10}"
data="$(mktemp -d "${TMPDIR:-/tmp}/kaas-bench.XXXXXX")"
log="$data/kaas.log"
cleanup() {
  [ -n "${pid:-}" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf "$data"
}
trap cleanup EXIT

target/release/kaas --listen 127.0.0.1:0 --http-listen 127.0.0.1:0 --log-cleaner-backoff-ms 1000 --data-dir "$data/data" >"$data/stdout" 2>"$log" &
pid=$!
for _ in $(seq 1 100); do
  addr=$(sed -n 's/^kaas listening on \([^ ]*\).*/\1/p' "$data/stdout")
  [ -n "$addr" ] && break
  sleep 0.1
done
[ -n "${addr:-}" ] || { echo "kaas did not start"; cat "$log"; exit 1; }
http=$(sed -n 's|^kaas probes and metrics on \(http://[^ ]*\).*|\1|p' "$data/stdout")
echo "kaas $(git rev-parse --short HEAD 2>/dev/null || echo '?') on $addr, data on $(df --output=source "$data" | tail -1), $(nproc) cores"
target/release/kaas-bench --bootstrap "$addr" suite --seconds "$seconds"
target/release/kaas-bench --bootstrap "$addr" compaction --seconds "$seconds" --metrics "$http/metrics"
