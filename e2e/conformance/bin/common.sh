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

# fetch_lock DIR: one fetch of DIR at a time (held on fd 9 until the script exits). Tests start
# Kafka's tools in parallel, and a second fetch finishing after the first would replace the
# directory a JVM of the first is loading its classpath from.
fetch_lock() {
  mkdir -p "$(dirname "$1")"
  exec 9>"$1.lock"
  flock 9
}

# maven_resolve POM OUTDIR: copies POM's runtime dependencies into OUTDIR, once more on failure
# (a clean-clone CI run lost one resolution to the registry). The retry passes -U: Maven
# remembers a failed download in ~/.m2 and would not ask the registry again without it.
maven_resolve() {
  local force
  for force in "" -U; do
    # shellcheck disable=SC2086
    nice -n 10 mvn -B -q $force -Dstyle.color=never -f "$1" dependency:copy-dependencies \
      -DincludeScope=runtime -DoutputDirectory="$2" >&2 && return 0
    [ -n "$force" ] || echo "$(basename "$0"): resolution failed; retrying once" >&2
  done
  return 1
}
