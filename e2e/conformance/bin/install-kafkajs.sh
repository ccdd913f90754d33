#!/usr/bin/env bash
# Installs kafkajs/'s pinned npm packages (package-lock.json, `npm ci`) into
# $KAAS_CACHE/conformance/kafkajs-<hash>/node_modules, keyed by the hash of package.json and
# package-lock.json as conformance.py computes it; the suite runs kafkajs/conformance.js with
# NODE_PATH pointing there. Does nothing when that directory is complete; prints its path.
set -euo pipefail
. "$(dirname "$0")/common.sh"
src="$CONFORMANCE_DIR/kafkajs"
key="$(python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); import conformance as c; from pathlib import Path; s = Path(sys.argv[2]); print(c.digest(s / "package.json", s / "package-lock.json"))' "$CONFORMANCE_DIR" "$src")"
out="$KAAS_CACHE/conformance/kafkajs-$key"
if [ -f "$out/node_modules/kafkajs/package.json" ]; then
  echo "$out/node_modules"
  exit 0
fi
command -v npm >/dev/null || { echo "install-kafkajs: npm is not installed (apt-get install npm)" >&2; exit 1; }
echo "install-kafkajs: npm ci into $out" >&2
tmp="$out.tmp.$$"
rm -rf "$tmp"
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
cp "$src/package.json" "$src/package-lock.json" "$tmp/"
(cd "$tmp" && nice -n 10 npm ci --no-audit --no-fund --loglevel=error >&2)
rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
# Older installs (other lock hashes) go.
for old in "$KAAS_CACHE"/conformance/kafkajs-*; do
  [ "$old" = "$out" ] || rm -rf "$old"
done
echo "$out/node_modules"
