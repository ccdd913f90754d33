#!/usr/bin/env bash
# franz-go's own kgo integration tests (github.com/twmb/franz-go/pkg/kgo) against a fresh local
# kaas. See README.md beside this file.
#
#   e2e/clients/franzgo-kgo/run.sh            # the normal suite
#   e2e/clients/franzgo-kgo/run.sh --chaos    # the same with KGO_TEST_CHAOS=1 (random connection kills)
#   e2e/clients/franzgo-kgo/run.sh --run 'TestGroupETL|TestIssue.*'   # only some tests (debugging)
#
# Environment: KAAS_BIN (default <repo>/target/debug/kaas), KAAS_CACHE (default ~/.cache/kaas),
# KGO_TEST_CHAOS=1 (same as --chaos), KGO_RUN (same as --run), KGO_JOBS (test processes at once,
# default 2), KGO_PER_TEST_TIMEOUT (Go duration, default 300s), KGO_TIMEOUT (whole run, seconds,
# default 600), KGO_LOG_DIR (default $KAAS_CACHE/franzgo-kgo-<version>/last-run[-chaos]),
# KGO_TEST_RECORDS (records the two ETL tests produce; franz-go's default 500000).
#
# Every top-level test runs in its own test-binary process with -test.timeout set to the per-test
# timeout (capped by what is left of the overall one), so a test that hangs is reported as failed
# by timeout with its goroutine dump in its log, and the others still run.
#
# Exit status: 0 when every failure is listed in expected-failures.tsv (expected-failures-chaos.tsv
# too under --chaos) and every listed test still fails; 1 otherwise; 2 for a setup error.
set -euo pipefail

# The one pinned franz-go release (go list -m -versions github.com/twmb/franz-go).
FRANZGO_VERSION=v1.22.3

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
KAAS_BIN="${KAAS_BIN:-$repo/target/debug/kaas}"
KAAS_CACHE="${KAAS_CACHE:-$HOME/.cache/kaas}"
cache="$KAAS_CACHE/franzgo-kgo-$FRANZGO_VERSION"
chaos="${KGO_TEST_CHAOS:-0}"
run_re="${KGO_RUN:-}"
jobs="${KGO_JOBS:-2}"
per_test_timeout="${KGO_PER_TEST_TIMEOUT:-300s}"
overall_timeout="${KGO_TIMEOUT:-600}"

while [ $# -gt 0 ]; do
  case "$1" in
    --chaos) chaos=1 ;;
    --run) run_re="${2:?--run needs a regexp}"; shift ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done

suffix=""; [ "$chaos" = 1 ] && suffix="-chaos"
logdir="${KGO_LOG_DIR:-$cache/last-run$suffix}"
say() { echo "franzgo-kgo: $*" >&2; }

[ -x "$KAAS_BIN" ] || { say "$KAAS_BIN is missing (cargo build -p kaas, or set KAAS_BIN)"; exit 2; }
command -v go >/dev/null || { say "go is not installed"; exit 2; }

# --- 1. franz-go's source, copied out of the module cache (read-only there), and the compiled
#        kgo test binary. Both are kept under $cache; each step is skipped when already done.
src="$cache/src"
bin="$cache/kgo.test"
if [ ! -f "$src/.complete" ]; then
  say "fetching github.com/twmb/franz-go@$FRANZGO_VERSION from the Go module proxy"
  moddir="$(cd /tmp && GOFLAGS=-mod=mod go mod download -json "github.com/twmb/franz-go@$FRANZGO_VERSION" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  [ -d "$moddir" ] || { say "go mod download gave no directory"; exit 2; }
  rm -rf "$src" "$bin" "$src".tmp.*
  mkdir -p "$cache"
  cp -r "$moddir" "$src.tmp.$$"
  chmod -R u+w "$src.tmp.$$"
  (cd "$src.tmp.$$" && go mod download)   # kmsg, compress, lz4 ... as its go.mod pins them
  mv "$src.tmp.$$" "$src"
  touch "$src/.complete"
fi
# One file of ours goes into the copy (see its comment); a changed one means a rebuild.
# Named .in here so that the e2e Go module (go vet ./... in e2e/) does not take it for its own.
overlay="$here/kaas_adm_init_test.go.in"
if ! cmp -s "$overlay" "$src/pkg/kgo/kaas_adm_init_test.go"; then
  cp "$overlay" "$src/pkg/kgo/kaas_adm_init_test.go"
  rm -f "$bin"
fi
if [ ! -x "$bin" ]; then
  say "compiling the kgo test binary (go test -c, about 1.5 min on two cores)"
  rm -f "$bin".tmp.*
  (cd "$src" && go test -c -o "$bin.tmp.$$" ./pkg/kgo)
  mv "$bin.tmp.$$" "$bin"
fi

# --- 2. The expected failures: "TestName<TAB>reason" (a subtest as TestName/sub/name; an entry
#        covers the subtests below it). Such a test runs and must fail. A reason starting with
#        "[skip]" means it is not run at all (-test.skip): for a test that would only hang until
#        its timeout. KGO_RUN_SKIPPED=1 runs those too, as expected failures, to check a fix.
declare -A expected=() skiplisted=()
load_expected() {
  local file="$1" name reason
  [ -f "$file" ] || return 0
  while IFS=$'\t' read -r name reason || [ -n "$name" ]; do
    case "$name" in ''|'#'*) continue ;; esac
    expected["$name"]="${reason:-}"
    if [[ "${reason:-}" == "[skip]"* ]] && [ "${KGO_RUN_SKIPPED:-0}" != 1 ]; then skiplisted["$name"]=1; fi
  done <"$file"
}
# The -test.skip pattern for the [skip] subtests of top-level test $1 (empty if none): one
# anchored pattern per level, "|" between entries (go test's own syntax for several).
skip_pattern() {
  local top="$1" e l lvl pat out=""
  for e in $(printf '%s\n' "${!skiplisted[@]}" | sort); do
    [[ "$e" == "$top/"* ]] || continue
    pat=""
    IFS=/ read -ra lvl <<<"$e"
    for l in "${lvl[@]}"; do pat+="${pat:+/}^$(printf '%s' "$l" | sed 's/[][\\.*^$+?(){}|]/\\&/g')\$"; done
    out+="${out:+|}$pat"
  done
  printf '%s' "$out"
}
load_expected "$here/expected-failures.tsv"
[ "$chaos" = 1 ] && load_expected "$here/expected-failures-chaos.tsv"

# The tests: every top-level Test and Fuzz function (go test runs a fuzz test's seed corpus).
mapfile -t all_tests < <(cd "$src/pkg/kgo" && "$bin" -test.list '^(Test|Fuzz)' | grep -E '^(Test|Fuzz)')
[ "${#all_tests[@]}" -gt 0 ] || { say "the test binary lists no tests"; exit 2; }
# The two long ETL tests go first so that they overlap with the many short ones.
heavy=(TestGroupETL TestTxnEtl)
ordered=()
for t in "${heavy[@]}" "${all_tests[@]}"; do
  [[ " ${ordered[*]} " == *" $t "* ]] && continue
  [[ " ${all_tests[*]} " == *" $t "* ]] || continue
  ordered+=("$t")
done
tests=(); skipped_by_list=()
for t in "${ordered[@]}"; do
  if [ -n "$run_re" ] && ! [[ "$t" =~ ^($run_re)$ ]]; then continue; fi
  if [ -n "${skiplisted[$t]:-}" ]; then skipped_by_list+=("$t"); continue; fi
  tests+=("$t")
done

# --- 3. A fresh kaas on a temporary data directory and a free loopback port.
work="$(mktemp -d "${TMPDIR:-/tmp}/franzgo-kgo.XXXXXX")"
rm -rf "$logdir"; mkdir -p "$logdir/tests"
kaas_pid=""
cleanup() {
  local rc=$? f
  for f in "$logdir"/tests/*.pid; do
    [ -f "$f" ] && kill -KILL "$(cat "$f")" 2>/dev/null || true
    rm -f "$f"
  done
  if [ -n "$kaas_pid" ] && kill -0 "$kaas_pid" 2>/dev/null; then
    kill -TERM -- "-$kaas_pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$kaas_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$kaas_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

setsid "$KAAS_BIN" --listen 127.0.0.1:0 --http-listen 127.0.0.1:0 --data-dir "$work/data" \
  --auto-create-topics true --group-initial-rebalance-delay-ms 0 \
  >"$logdir/kaas.stdout" 2>"$logdir/kaas.log" </dev/null &
kaas_pid=$!
seeds=""
for _ in $(seq 1 300); do
  seeds="$(sed -n 's/^kaas listening on \([^ ]*\).*/\1/p' "$logdir/kaas.stdout" 2>/dev/null | head -n1)"
  [ -n "$seeds" ] && break
  kill -0 "$kaas_pid" 2>/dev/null || break
  sleep 0.05
done
if [ -z "$seeds" ]; then
  say "kaas did not start:"; tail -n 30 "$logdir/kaas.log" >&2; exit 2
fi
say "kaas $KAAS_BIN on $seeds; franz-go $FRANZGO_VERSION; ${#tests[@]} tests, $jobs at a time$([ "$chaos" = 1 ] && echo ', CHAOS'); logs in $logdir"

# --- 4. The tests, each in its own process, $jobs at a time.
export KGO_SEEDS="$seeds" KGO_TEST_RF=1 KGO_TEST_CHAOS="$chaos" KGO_KAAS_ADM_INIT=1
start=$SECONDS
deadline=$((SECONDS + overall_timeout))
to_seconds() { # Go duration (240s, 4m, 1m30s) -> seconds
  local d="$1" s=0 n
  while [[ "$d" =~ ^([0-9]+)([hms])(.*)$ ]]; do
    n=${BASH_REMATCH[1]}
    case ${BASH_REMATCH[2]} in h) s=$((s + n * 3600)) ;; m) s=$((s + n * 60)) ;; s) s=$((s + n)) ;; esac
    d=${BASH_REMATCH[3]}
  done
  echo "$s"
}
per_test_s="$(to_seconds "$per_test_timeout")"
run_one() {
  local name="$1" timeout_s="$2" rc=0 skip
  skip="$(skip_pattern "$name")"
  (cd "$src/pkg/kgo" && exec "$bin" -test.run "^${name}\$" ${skip:+-test.skip "$skip"} -test.count=1 -test.v \
     -test.timeout="${timeout_s}s") >"$logdir/tests/$name.log" 2>&1 &
  echo $! >"$logdir/tests/$name.pid"
  wait $! || rc=$?
  echo "$rc" >"$logdir/tests/$name.rc"
  rm -f "$logdir/tests/$name.pid"
}
prune() { # keep in job_pids only the test jobs still running (kaas is a background job too)
  local p live=()
  for p in "${job_pids[@]}"; do kill -0 "$p" 2>/dev/null && live+=("$p"); done
  job_pids=("${live[@]}")
}
is_heavy() { [[ " ${heavy[*]} " == *" $1 "* ]]; }
not_started=(); job_pids=(); heavy_pid=""; queue=("${tests[@]}")
while [ "${#queue[@]}" -gt 0 ]; do
  prune
  if [ "${#job_pids[@]}" -ge "$jobs" ]; then wait -n "${job_pids[@]}" 2>/dev/null || true; continue; fi
  # At most one heavy test at a time (franz-go's own run shares one semaphore of 4 ETL chains
  # between them; here they are separate processes): the next test that may start now.
  heavy_busy=0; [ -n "$heavy_pid" ] && kill -0 "$heavy_pid" 2>/dev/null && heavy_busy=1
  pick=-1
  for i in "${!queue[@]}"; do
    if [ "$heavy_busy" = 1 ] && is_heavy "${queue[$i]}"; then continue; fi
    pick=$i; break
  done
  if [ "$pick" -lt 0 ]; then wait -n "${job_pids[@]}" 2>/dev/null || true; continue; fi
  name="${queue[$pick]}"; unset 'queue[pick]'; queue=("${queue[@]}")
  left=$((deadline - SECONDS))
  if [ "$left" -lt 5 ]; then not_started+=("$name"); continue; fi
  t=$per_test_s; [ "$left" -lt "$t" ] && t=$left
  run_one "$name" "$t" &
  job_pids+=($!)
  if is_heavy "$name"; then heavy_pid=$!; fi
done
for p in "${job_pids[@]}"; do wait "$p" 2>/dev/null || true; done
elapsed=$((SECONDS - start))

# --- 5. Results. status[name] = PASS|FAIL|SKIP for every test and subtest that reported one;
#        a process that died without a top-level verdict (timeout panic, crash) is a FAIL, and the
#        tests its timeout panic lists as running are FAILs by timeout.
declare -A status=() note=()
for name in "${tests[@]}"; do
  log="$logdir/tests/$name.log"
  [ -f "$log" ] || continue
  while read -r verdict tname; do
    status["$tname"]="$verdict"
  done < <(sed -n 's/^[[:space:]]*--- \(PASS\|FAIL\|SKIP\): \([^ ]*\) (.*/\1 \2/p' "$log")
  if [ -z "${status[$name]:-}" ]; then
    status["$name"]=FAIL
    if grep -q '^panic: test timed out' "$log"; then
      note["$name"]="timeout"
      while read -r tname; do
        status["$tname"]=FAIL; note["$tname"]="timeout"
      done < <(sed -n '/^[[:space:]]*running tests:/,/^$/s/^[[:space:]]\+\([^ ]\+\) ([0-9].*)$/\1/p' "$log")
    else
      note["$name"]="exit $(cat "$logdir/tests/$name.rc" 2>/dev/null || echo '?'), no verdict"
    fi
  fi
done
for name in "${not_started[@]}"; do status["$name"]=FAIL; note["$name"]="not started: overall timeout"; done

# The plain -v log of the whole run, in test order.
for name in "${tests[@]}"; do
  [ -f "$logdir/tests/$name.log" ] && cat "$logdir/tests/$name.log"
done >"$logdir/kgo-test.log"

passed=0; failed=0; skipped=0
for name in "${tests[@]}" "${not_started[@]}"; do
  case "${status[$name]:-}" in PASS) passed=$((passed + 1)) ;; SKIP) skipped=$((skipped + 1)) ;; *) failed=$((failed + 1)) ;; esac
done
skipped=$((skipped + ${#skipped_by_list[@]}))

# Leaf failures: failed tests none of whose subtests failed (the parent of a failed subtest fails too).
mapfile -t failed_names < <(for n in "${!status[@]}"; do [ "${status[$n]}" = FAIL ] && echo "$n"; done | sort)
leaves=()
for n in "${failed_names[@]}"; do
  leaf=1
  for m in "${failed_names[@]}"; do [[ "$m" == "$n/"* ]] && { leaf=0; break; }; done
  [ "$leaf" = 1 ] && leaves+=("$n")
done
covering() { # the listed entry that is $1 or an ancestor of it, if any
  local n="$1" e
  for e in "${!expected[@]}"; do [[ "$n" == "$e" || "$n" == "$e/"* ]] && { echo "$e"; return 0; }; done
  return 1
}
ancestor_failed() {
  local n="$1"
  while [[ "$n" == */* ]]; do n="${n%/*}"; [ "${status[$n]:-}" = FAIL ] && return 0; done
  return 1
}
unexpected=(); expected_seen=(); now_passing=()
for n in "${leaves[@]}"; do
  if covering "$n" >/dev/null; then expected_seen+=("$n"); else unexpected+=("$n"); fi
done
for e in $(printf '%s\n' "${!expected[@]}" | sort); do
  [ -n "${skiplisted[$e]:-}" ] && continue
  top="${e%%/*}"
  if ! [[ " ${all_tests[*]} " == *" $top "* ]]; then now_passing+=("$e (no such test in $FRANZGO_VERSION: renamed or removed?)"); continue; fi
  [[ " ${tests[*]} " == *" $top "* ]] || continue            # filtered out by --run
  case "${status[$e]:-}" in
    FAIL) ;;
    PASS|SKIP) now_passing+=("$e (${status[$e]})") ;;
    *) ancestor_failed "$e" || now_passing+=("$e (no result: renamed or removed?)") ;;
  esac
done

{
  echo
  echo "franz-go $FRANZGO_VERSION kgo tests against kaas$([ "$chaos" = 1 ] && echo ' (chaos)'): ${elapsed}s; log $logdir/kgo-test.log"
  for n in "${expected_seen[@]}"; do
    e="$(covering "$n")"
    echo "  expected failure: $n${note[$n]:+ (${note[$n]})} -- ${expected[$e]#\[skip\] }"
  done
  for n in $(printf '%s\n' "${!skiplisted[@]}" | sort); do
    [[ " ${all_tests[*]} " == *" ${n%%/*} "* ]] || continue
    if [ -n "$run_re" ] && ! [[ "${n%%/*}" =~ ^($run_re)$ ]]; then continue; fi
    echo "  not run (listed [skip]): $n -- ${expected[$n]#\[skip\] }"
  done
  for n in $(printf '%s\n' "${!status[@]}" | sort); do
    [ "${status[$n]}" = SKIP ] || continue
    [[ "$n" == */* ]] && continue
    # The test's own message: the last log line before its verdict that is not a cleanup's.
    why="$(grep -B8 -E "^--- SKIP: $n " "$logdir/tests/$n.log" 2>/dev/null |
      grep -E '^[[:space:]]+[^ ]+\.go:[0-9]+: ' | grep -vE 'panic\.go:|: deleting (topic|group)' |
      tail -n1 | sed 's/^[[:space:]]*//')"
    echo "  skipped by the test itself: $n -- $why"
  done
  for n in "${unexpected[@]}"; do
    echo "  UNEXPECTED FAILURE: $n${note[$n]:+ (${note[$n]})} -- log $logdir/tests/${n%%/*}.log"
  done
  for n in "${now_passing[@]}"; do echo "  LISTED BUT DID NOT FAIL: $n -- update expected-failures.tsv"; done
  echo "franzgo-kgo: $passed passed, $failed failed, $skipped skipped"
} | tee "$logdir/summary.txt"

[ "${#unexpected[@]}" -eq 0 ] && [ "${#now_passing[@]}" -eq 0 ]
