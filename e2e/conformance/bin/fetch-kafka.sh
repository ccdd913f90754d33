#!/usr/bin/env bash
# Resolves the pinned Apache Kafka (broker, kafka-clients, kafka-tools and every transitive
# dependency, see pom.xml) into $KAAS_CACHE/kafka-<version>/libs with Maven. Does nothing when
# that directory is complete and was resolved from this pom.xml; prints its path.
set -euo pipefail
. "$(dirname "$0")/common.sh"
# One fetch at a time: tests start Kafka's tools in parallel, and a second fetch finishing after
# the first would replace the directory a JVM of the first is loading its classpath from.
mkdir -p "$(dirname "$KAFKA_HOME")"
exec 9>"$KAFKA_HOME.lock"
flock 9
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
for attempt in 1 2; do
  nice -n 10 mvn -B -q -Dstyle.color=never -f "$CONFORMANCE_DIR/pom.xml" dependency:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$tmp/libs" >&2 && break
  [ "$attempt" = 2 ] && exit 1
  echo "fetch-kafka: resolution failed; retrying once" >&2
done
ls "$tmp/libs/kafka_2.13-$KAFKA_VERSION.jar" "$tmp/libs/kafka-tools-$KAFKA_VERSION.jar" \
  "$tmp/libs/kafka-clients-$KAFKA_VERSION.jar" >/dev/null
cp "$CONFORMANCE_DIR/pom.xml" "$tmp/pom.xml"
touch "$tmp/.complete"
rm -rf "$KAFKA_HOME"
mv "$tmp" "$KAFKA_HOME"
trap - EXIT
echo "$KAFKA_LIBS"
