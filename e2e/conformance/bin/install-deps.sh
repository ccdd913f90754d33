#!/usr/bin/env bash
# Installs what the conformance suite and bench-compare need beyond scripts/install-deps.sh
# (which the top-level `make deps` runs: the kafka-python virtualenv, build tools), then fetches
# what is missing into the cache. Quick when everything is there.
#  - Debian packages: a JDK 17+ (javac) and Maven, if absent.
#  - The pinned Apache Kafka jars (pom.xml) into $KAAS_CACHE/kafka-<version>/libs.
#  - The older Java client releases (java-clients.txt) into $KAAS_CACHE/kafka-clients-<version>.
#  - Kafka Connect's release (connect-release.txt) into $KAAS_CACHE/kafka-<artifacts>-<version>.
#  - The older confluent-kafka releases (confluent-kafka-releases.txt), each in its own virtualenv
#    in $KAAS_CACHE/confluent-kafka-<version>.
#  - The Go modules of franzgo/, sarama/ and kafkago/ (each its own go.mod) into the module cache.
#  - KafkaJS and confluent-kafka-javascript (<client>/package-lock.json, npm ci; the latter builds
#    librdkafka from source) into $KAAS_CACHE/conformance/<client>-<hash>.
set -euo pipefail
. "$(dirname "$0")/common.sh"
missing=()
command -v javac >/dev/null || missing+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null || missing+=(maven)
command -v npm >/dev/null || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing Debian packages: ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}"
fi
command -v go >/dev/null || { echo "conformance: Go is not installed (franz-go, sarama and kafka-go need it)" >&2; exit 1; }
"$CONFORMANCE_DIR/bin/fetch-kafka.sh" >/dev/null
grep -v '^#' "$CONFORMANCE_DIR/java-clients.txt" | while read -r v; do
  [ -z "$v" ] || "$CONFORMANCE_DIR/bin/fetch-java-client.sh" "$v" >/dev/null
done
# Kafka Connect now, not when the suite first needs it: conformance-cluster runs the suite in a
# network namespace that has no registries.
# shellcheck disable=SC2046 # the line is a version and its artifacts
"$CONFORMANCE_DIR/bin/fetch-java-client.sh" $(grep -v '^#' "$CONFORMANCE_DIR/connect-release.txt") >/dev/null
grep -v '^#' "$CONFORMANCE_DIR/confluent-kafka-releases.txt" | while read -r v; do
  [ -z "$v" ] || "$CONFORMANCE_DIR/bin/fetch-confluent-kafka.sh" "$v" >/dev/null
done
for m in franzgo sarama kafkago; do
  (cd "$CONFORMANCE_DIR/$m" && nice -n 10 go mod download)
done
for c in kafkajs confluent-kafka-javascript; do
  "$CONFORMANCE_DIR/bin/install-node-client.sh" "$c" >/dev/null
done
