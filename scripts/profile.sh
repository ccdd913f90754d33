#!/usr/bin/env bash
# Profiles a release kaas broker under one named load and writes what docs/performance.md
# quotes: perf's top symbols, the samples attributed to phases of the request path
# (scripts/perf_phases.py), perf stat counters and syscall counts.
#
#   scripts/profile.sh consume    [SIZE=16384] [PARTITIONS=8]   fill a topic, profile a consume
#   scripts/profile.sh produce    [SIZE=1024]  [LINGER=0]       profile 10,000 msg/s, acks=all
#   scripts/profile.sh produce-flat [SIZE=16384] [PARTITIONS=8] profile producing flat out, acks=all
#
# Needs perf (and strace for the syscall counts) and root or kernel.perf_event_paranoid <= 0.
# Build first with `make build` (the release profile carries
# line tables, so perf's DWARF unwinding names inlined frames). Output: target/profile/<load>/.
# The broker and the load generator share the machine: quote proportions, not absolute rates.
set -euo pipefail
cd "$(dirname "$0")/.."
load="${1:?usage: scripts/profile.sh consume|produce|produce-flat [SIZE] [PARTITIONS|LINGER]}"
seconds="${PROFILE_SECONDS:-5}"
out="target/profile/$load"
mkdir -p "$out"
data="$(mktemp -d "${TMPDIR:-/tmp}/kaas-profile.XXXXXX")"
bin=e2e/conformance/bin
cleanup() {
  "$bin/kaas-stop.sh" "$data" >/dev/null 2>&1 || true
  rm -rf "$data"
}
trap cleanup EXIT
# The topic is auto-created on first produce, with the partition count asked for.
parts=1
case "$load" in consume|produce-flat) parts="${3:-8}" ;; esac
addr="$("$bin/kaas-start.sh" "$data" --default-partitions "$parts")"
pid="$(cat "$data/pid")"
bench() { nice -n 10 target/release/kaas-bench --bootstrap "$addr" "$@"; }

# Runs the load ("$@") while perf record, perf stat and strace -c watch the broker in turn
# (one at a time: each disturbs what the others measure).
profile() {
  perf record -F 999 -g --call-graph dwarf,16384 -p "$pid" -o "$out/perf.data" 2>/dev/null &
  local rec=$!
  sleep 0.3
  "$@" | tee "$out/load.txt"
  kill -INT "$rec"; wait "$rec" || true
  perf stat -e task-clock,context-switches,page-faults -p "$pid" -o "$out/stat.txt" 2>/dev/null &
  local st=$!
  sleep 0.3
  "$@" >>"$out/load.txt"
  kill -INT "$st"; wait "$st" || true
  if command -v strace >/dev/null; then
    strace -f -qq -c -p "$pid" -o "$out/syscalls.txt" &
    local tr=$!
    sleep 0.5
    "$@" >>"$out/load.txt"
    kill -INT "$tr"; wait "$tr" || true
  fi
}

case "$load" in
  consume)
    size="${2:-16384}"
    bench produce --topic prof --partitions "$parts" --size "$size" --seconds "$seconds" >/dev/null
    # Every pass reads the whole topic: the same bytes each time.
    profile bench consume --topic prof --partitions "$parts"
    ;;
  produce)
    size="${2:-1024}" linger="${3:-0}"
    profile bench produce --topic prof --size "$size" --rate 10000 --linger-ms "$linger" --seconds "$seconds"
    ;;
  produce-flat)
    size="${2:-16384}"
    profile bench produce --topic prof --partitions "$parts" --size "$size" --seconds "$seconds"
    ;;
  *) echo "unknown load $load (consume|produce|produce-flat)"; exit 2 ;;
esac

# awk, not head: an early exit would fail the pipeline (pipefail) on SIGPIPE.
perf report -i "$out/perf.data" --no-children --stdio --sort sym 2>/dev/null | awk '/^ +[0-9]/ && n++ < 40' >"$out/report.txt"
perf script -i "$out/perf.data" 2>/dev/null | python3 scripts/perf_phases.py >"$out/phases.txt"
echo "== phases (share of broker CPU samples)"; cat "$out/phases.txt"
echo "== top symbols"; sed -n 1,15p "$out/report.txt"
echo "== perf stat"; grep -E 'task-clock|context|faults' "$out/stat.txt"
if [ -f "$out/syscalls.txt" ]; then echo "== syscalls"; sed -n 1,12p "$out/syscalls.txt"; fi
echo "written to $out/"
