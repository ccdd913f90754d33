#!/usr/bin/env bash
# Resolves the pinned Apache Kafka (broker, kafka-clients, kafka-tools and every transitive
# dependency, see pom.xml) into $KAAS_CACHE/kafka-<version>/libs with Maven. Does nothing when
# that directory is complete and was resolved from this pom.xml; prints its path.
set -euo pipefail
. "$(dirname "$0")/common.sh"
fetch_lock "$KAFKA_HOME"
if [ -f "$KAFKA_HOME/.complete" ] && cmp -s "$KAFKA_HOME/pom.xml" "$CONFORMANCE_DIR/pom.xml"; then
  echo "$KAFKA_LIBS"
  exit 0
fi
command -v mvn >/dev/null || { echo "fetch-kafka: mvn is not installed (apt-get install maven)" >&2; exit 1; }
echo "fetch-kafka: resolving Apache Kafka $KAFKA_VERSION into $KAFKA_LIBS" >&2
tmp="$KAFKA_HOME.tmp.$$"
rm -rf "$tmp"
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
maven_resolve "$CONFORMANCE_DIR/pom.xml" "$tmp/libs"
ls "$tmp/libs/kafka_2.13-$KAFKA_VERSION.jar" "$tmp/libs/kafka-tools-$KAFKA_VERSION.jar" \
  "$tmp/libs/kafka-clients-$KAFKA_VERSION.jar" >/dev/null
cp "$CONFORMANCE_DIR/pom.xml" "$tmp/pom.xml"
touch "$tmp/.complete"
rm -rf "$KAFKA_HOME"
mv "$tmp" "$KAFKA_HOME"
trap - EXIT
echo "$KAFKA_LIBS"
