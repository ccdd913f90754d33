#!/usr/bin/env bash
# What a take-over costs in file operations on an NFS-like volume. A release broker in local
# mode keeps its data on a kaas-nfsfs mount (which, like an NFS mount with `noac`, caches no
# names or attributes); a topic of PARTITIONS partitions gets one record in each; then the broker
# restarts and takes every partition over again. Prints the FUSE requests kaas-nfsfs served
# during the restart, by kind, and the broker's file system calls on partition 0's directory
# (strace -y), by call.
#
#   scripts/takeover-ops.sh [PARTITIONS=100]
#
# Needs root (FUSE), strace and the test venv's confluent-kafka ($PYTHON, see `make deps`).
# Build first: make build. About 30 s.
set -euo pipefail
cd "$(dirname "$0")/.."
partitions="${1:-100}"
settle="${TAKEOVER_SETTLE_SECONDS:-8}"
python="${PYTHON:-${KAAS_CACHE:-$HOME/.cache/kaas}/venv/bin/python3}"
bin="${CARGO_TARGET_DIR:-target}/release"
port="${TAKEOVER_PORT:-19192}"
work="$(mktemp -d "${TMPDIR:-/tmp}/kaas-takeover-ops.XXXXXX")"
mnt="$work/mnt"
mkdir -p "$work/export" "$mnt"
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    # The broker strace started outlives strace.
    pkill -f -- "--data-dir $mnt/data" 2>/dev/null || true
    wait 2>/dev/null || true
    fusermount3 -uz "$mnt" 2>/dev/null || true
    [ -n "${TAKEOVER_KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT

RUST_LOG=fuser=debug "$bin/kaas-nfsfs" --backing "$work/export" --mount "host=$mnt" \
    >"$work/nfsfs.out" 2>"$work/nfsfs.log" &
pids+=($!)
for _ in $(seq 100); do grep -q ready "$work/nfsfs.out" && break; sleep 0.1; done
grep -q ready "$work/nfsfs.out" || { echo "kaas-nfsfs did not start: $(tail -3 "$work/nfsfs.log")" >&2; exit 1; }

broker() { exec "$@" "$bin/kaas" --data-dir "$mnt/data" --listen "127.0.0.1:$port" --http-listen 127.0.0.1:0; }
broker >"$work/first.log" 2>&1 &
first=$!
pids+=("$first")
"$python" - "$port" "$partitions" <<'PY'
import sys, time
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
port, n = sys.argv[1], int(sys.argv[2])
bootstrap = {"bootstrap.servers": f"127.0.0.1:{port}"}
admin = AdminClient(bootstrap)
for attempt in range(100):
    try:
        admin.list_topics(timeout=1)
        break
    except Exception:
        time.sleep(0.2)
for f in admin.create_topics([NewTopic("t", n, 1)]).values():
    f.result()
producer = Producer({**bootstrap, "acks": "all"})
for p in range(n):
    producer.produce("t", b"x" * 100, partition=p)
if producer.flush(30) != 0:
    sys.exit("records not acknowledged")
PY
kill -TERM "$first"
wait "$first" || true

from="$(wc -l <"$work/nfsfs.log")"
broker strace -f -y -o "$work/broker.strace" >"$work/second.log" 2>&1 &
second=$!
pids+=("$second")
sleep "$settle"
to="$(wc -l <"$work/nfsfs.log")"
calls="$(wc -l <"$work/broker.strace")"

echo "FUSE requests in the ${settle} s after the restart (${partitions} partitions taken over):"
sed -n "${from},${to}p" "$work/nfsfs.log" | grep -oE 'FUSE\( *[0-9]+\) ino 0x[0-9a-f]+ [A-Z_]+' \
    | awk '{print $NF}' | sort | uniq -c | sort -rn | awk '{n += $1; print} END {print n, "in all"}'
echo "the broker's file system calls on partition 0's directory and its files (open and take-over):"
head -n "$calls" "$work/broker.strace" | grep -E "/t/0[/>\"]" | sed -E 's/^[0-9]+ +//; s/\(.*//' \
    | sort | uniq -c | sort -rn | awk '{n += $1; print} END {print n, "in all"}'
