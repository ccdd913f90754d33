#!/usr/bin/env bash
# Installs a Node.js client's pinned npm packages (<client>/package.json and package-lock.json,
# `npm ci`) into $KAAS_CACHE/conformance/<client>-<hash>/node_modules, keyed by the hash of the
# two files as conformance.py computes it; the suite runs kafkajs/conformance.js with NODE_PATH
# pointing there. Does nothing when that directory is complete; prints its path.
#   install-node-client.sh kafkajs                      KafkaJS (pure JavaScript)
#   install-node-client.sh confluent-kafka-javascript   librdkafka's Node.js binding: its prebuilt
#       binary comes from GitHub, which this machine cannot reach, so npm builds it from the
#       librdkafka sources in the package (a few minutes, once per version), linked against the
#       system's OpenSSL, zlib and libcurl (CKJS_LINKING=dynamic: the static build downloads
#       them) and the installed Node headers.
set -euo pipefail
. "$(dirname "$0")/common.sh"
client="${1:?usage: install-node-client.sh kafkajs|confluent-kafka-javascript}"
src="$CONFORMANCE_DIR/$client"
[ -f "$src/package-lock.json" ] || { echo "install-node-client: no $src/package-lock.json" >&2; exit 1; }
key="$(python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); import conformance as c; from pathlib import Path; s = Path(sys.argv[2]); print(c.digest(s / "package.json", s / "package-lock.json"))' "$CONFORMANCE_DIR" "$src")"
out="$KAAS_CACHE/conformance/$client-$key"
if [ -f "$out/node_modules/.installed" ]; then
  echo "$out/node_modules"
  exit 0
fi
command -v npm >/dev/null || { echo "install-node-client: npm is not installed (apt-get install npm)" >&2; exit 1; }
echo "install-node-client: npm ci into $out" >&2
tmp="$out.tmp.$$"
rm -rf "$tmp"
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
cp "$src/package.json" "$src/package-lock.json" "$tmp/"
(cd "$tmp" && CKJS_LINKING=dynamic nice -n 10 npm ci --no-audit --no-fund --loglevel=error >&2)
touch "$tmp/node_modules/.installed"
rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
# Older installs of this client (other lock hashes) go.
for old in "$KAAS_CACHE/conformance/$client"-*; do
  [ "$old" = "$out" ] || rm -rf "$old"
done
echo "$out/node_modules"
