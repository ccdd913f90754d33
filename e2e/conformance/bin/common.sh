# Sourced by the scripts in this folder: where the pinned Apache Kafka lives and how to run it.
# shellcheck shell=bash
CONFORMANCE_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REPO_DIR="$(cd "$CONFORMANCE_DIR/../.." && pwd)"
KAAS_CACHE="${KAAS_CACHE:-$HOME/.cache/kaas}"
# The one pinned version: read from pom.xml so there is a single place to change it.
KAFKA_VERSION="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$CONFORMANCE_DIR/pom.xml")"
KAFKA_HOME="$KAAS_CACHE/kafka-$KAFKA_VERSION"
KAFKA_LIBS="$KAFKA_HOME/libs"
# Kafka 4.x needs Java 17 or newer for the broker and the tools.
JAVA="${JAVA:-java}"
export KAAS_CACHE KAFKA_VERSION KAFKA_HOME KAFKA_LIBS CONFORMANCE_DIR REPO_DIR
