#!/usr/bin/env bash
# Installs one older release of confluent-kafka (confluent-kafka-releases.txt) into its own
# virtualenv, $KAAS_CACHE/confluent-kafka-<version>/venv, from its binary wheel (which bundles
# that release's librdkafka). Does nothing when it is complete; prints the venv's python.
set -euo pipefail
. "$(dirname "$0")/common.sh"
version="${1:?usage: fetch-confluent-kafka.sh VERSION}"
home="$KAAS_CACHE/confluent-kafka-$version"
if [ -f "$home/.complete" ]; then
  echo "$home/venv/bin/python3"
  exit 0
fi
echo "fetch-confluent-kafka: installing confluent-kafka $version into $home" >&2
tmp="$home.tmp.$$"
rm -rf "$tmp"
trap 'rm -rf "$tmp"' EXIT
python3 -m venv "$tmp/venv"
"$tmp/venv/bin/pip" install -q --disable-pip-version-check --only-binary confluent-kafka "confluent-kafka==$version" >&2
# NB: only the venv's python3 is used, and it finds its packages from wherever the venv lives
# (pyvenv.cfg beside it); the pip script's first line names the temporary path, and is not used.
touch "$tmp/.complete"
rm -rf "$home"
mv "$tmp" "$home"
echo "$home/venv/bin/python3"
