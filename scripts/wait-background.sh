#!/usr/bin/env bash
# Waits for a background step of `make test` that writes its output to <dir>/log and its exit
# status to <dir>/rc, prints the log, and exits with the step's status.
#   scripts/wait-background.sh <what> <dir>
set -euo pipefail
what="$1" dir="$2"
start=$SECONDS
until [[ -f "$dir/rc" ]]; do
  if (( (SECONDS - start) % 60 == 0 )); then
    echo "waiting for the $what ($((SECONDS - start)) s): $(tail -n 1 "$dir/log" 2>/dev/null || true)"
  fi
  sleep 1
done
cat "$dir/log"
rc="$(cat "$dir/rc")"
if [[ "$rc" != 0 ]]; then
  echo "the $what failed (exit $rc)" >&2
fi
exit "$rc"
