#!/usr/bin/env bash
# Fetch with and without zero copy (`--fetch-zero-copy`): a release broker in local mode, a fresh
# topic each round, filled by kaas-bench for BENCH_SECONDS and read back at once (while it is
# still in the page cache) by kaas-bench consume (librdkafka), the rounds alternating the flag.
# Prints, per round, the consumer's rate and the broker's CPU (utime + stime from /proc) for
# the same number of records.
#
#   scripts/bench-zero-copy.sh [SIZE=16384] [PARTITIONS=8] [ROUNDS=8]
#
# Build first: make build. About 10 s a round.
set -euo pipefail
cd "$(dirname "$0")/.."
size="${1:-16384}"; parts="${2:-8}"; rounds="${3:-8}"
seconds="${BENCH_SECONDS:-4}"
bin=e2e/conformance/bin
data="$(mktemp -d "${TMPDIR:-/tmp}/kaas-zero-copy.XXXXXX")"
trap '"$bin/kaas-stop.sh" "$data" >/dev/null 2>&1 || true; rm -rf "$data"' EXIT
ticks_per_second="$(getconf CLK_TCK)"
cpu_ms() { awk -v hz="$ticks_per_second" '{print int(($14 + $15) * 1000 / hz)}' "/proc/$1/stat"; }
# Records read per round: what BENCH_SECONDS of producing leaves at least, at 100 MB/s.
records=$((seconds * 100000000 / size))
printf '%-10s %10s %14s %16s\n' zero_copy records consumer_MB/s broker_cpu_ms
for round in $(seq 1 "$rounds"); do
  zero_copy=$([ $((round % 2)) = 1 ] && echo true || echo false)
  addr="$("$bin/kaas-start.sh" "$data" --default-partitions "$parts" --fetch-zero-copy "$zero_copy")"
  pid="$(cat "$data/pid")"
  nice -n 10 target/release/kaas-bench --bootstrap "$addr" produce --topic "zc$round" --partitions "$parts" \
    --size "$size" --seconds "$seconds" >/dev/null
  before="$(cpu_ms "$pid")"
  line="$(nice -n 10 target/release/kaas-bench --bootstrap "$addr" consume --topic "zc$round" \
    --partitions "$parts" --messages "$records" | tail -n 1)"
  after="$(cpu_ms "$pid")"
  printf '%-10s %10s %14s %16s\n' "$zero_copy" "$records" "$(awk '{print $2}' <<<"$line")" $((after - before))
  "$bin/kaas-stop.sh" "$data" >/dev/null
done
