#!/usr/bin/env bash
# A/B of broker builds producing flat out: each build in turn, ROUNDS times, on a fresh data
# directory (sync before each run so one run's write-back does not land in the next). Prints, per
# run, the throughput kaas-bench measured and the broker's CPU seconds per GB written (utime +
# stime from /proc over the run, divided by the bytes on disk after it), its peak RSS and its
# minor page faults. docs/performance.md quotes it ("Produce flat out: what each request held").
#
#   scripts/produce-ab.sh [-s SIZE] [-p PARTITIONS] [-t SECONDS] [-r ROUNDS] KAAS_BIN...
#
# Build an older commit with `git worktree add /tmp/old COMMIT` and `CARGO_TARGET_DIR=/tmp/old-target
# cargo build --release -p kaas` in it; kaas-bench is this checkout's (target/release/kaas-bench).
# The first round is usually slower for every build: compare the later ones.
set -euo pipefail
cd "$(dirname "$0")/.."
size=1024 parts=1 seconds=6 rounds=3
while getopts s:p:t:r: opt; do
  case "$opt" in
    s) size="$OPTARG" ;; p) parts="$OPTARG" ;; t) seconds="$OPTARG" ;; r) rounds="$OPTARG" ;;
    *) echo "usage: $0 [-s SIZE] [-p PARTITIONS] [-t SECONDS] [-r ROUNDS] KAAS_BIN..." >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -gt 0 ] || { echo "usage: $0 [-s SIZE] [-p PARTITIONS] [-t SECONDS] [-r ROUNDS] KAAS_BIN..." >&2; exit 2; }
bench=target/release/kaas-bench
[ -x "$bench" ] || { echo "$bench is missing (cargo build --release -p kaas-bench)" >&2; exit 1; }
bin=e2e/conformance/bin
stat_field() { awk -v f="$2" '{print $f}' "/proc/$1/stat"; }
run() {
  local kaas="$1" dir addr pid cpu0 flt0 cpu1 flt1 rss bytes figures
  sync; sleep 1
  dir="$(mktemp -d "${TMPDIR:-/tmp}/kaas-ab.XXXXXX")"
  addr="$(KAAS_BIN="$kaas" "$bin/kaas-start.sh" "$dir" --default-partitions "$parts")"
  pid="$(cat "$dir/pid")"
  cpu0=$(( $(stat_field "$pid" 14) + $(stat_field "$pid" 15) )); flt0="$(stat_field "$pid" 10)"
  figures="$("$bench" --bootstrap "$addr" produce --topic ab --partitions "$parts" --size "$size" --seconds "$seconds" 2>&1 | tail -1)"
  cpu1=$(( $(stat_field "$pid" 14) + $(stat_field "$pid" 15) )); flt1="$(stat_field "$pid" 10)"
  rss="$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")"
  bytes="$(du -sb "$dir/data" | awk '{print $1}')"
  "$bin/kaas-stop.sh" "$dir" >/dev/null 2>&1 || true
  rm -rf "$dir"
  awk -v k="$kaas" -v c=$((cpu1 - cpu0)) -v hz="$(getconf CLK_TCK)" -v b="$bytes" -v r="$rss" -v f=$((flt1 - flt0)) -v fig="$figures" \
    'BEGIN { split(fig, w, " +"); printf "%-40s %8s MB/s  %.3f CPU s/GB  peak RSS %d MiB  minor faults %d\n", k, w[2], (c / hz) / (b / 1e9), r / 1024, f }'
}
echo "flat out, $size B x $parts partitions, $seconds s a run, $rounds rounds"
for round in $(seq 1 "$rounds"); do
  echo "round $round"
  for kaas in "$@"; do run "$kaas"; done
done
