#!/usr/bin/env bash
# Resolves one release of the Java client (kafka-clients and its runtime dependencies) with Maven
# into $KAAS_CACHE/kafka-clients-<version>/libs, for the older releases the conformance suite
# runs (java-clients.txt); with artifact names after the version, those Apache Kafka artifacts of
# that release instead (e.g. `4.3.1 connect-runtime connect-file`, Kafka Connect with its
# FileStream connectors), into $KAAS_CACHE/kafka-<artifact>_...-<version>/libs. Does nothing when
# that directory is complete; prints its path.
set -euo pipefail
. "$(dirname "$0")/common.sh"
version="${1:?usage: fetch-java-client.sh VERSION [ARTIFACT ...]}"
shift
artifacts=("${@:-kafka-clients}")
label="$(IFS=_; echo "${artifacts[*]}")"
home="$KAAS_CACHE/kafka-${label#kafka-}-$version"
fetch_lock "$home"
if [ -f "$home/.complete" ]; then
  echo "$home/libs"
  exit 0
fi
command -v mvn >/dev/null || { echo "fetch-java-client: mvn is not installed (apt-get install maven)" >&2; exit 1; }
echo "fetch-java-client: resolving ${artifacts[*]} $version into $home/libs" >&2
tmp="$home.tmp.$$"
rm -rf "$tmp"
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.kaas.e2e</groupId>
  <artifactId>kafka-$label-$version</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
$(for a in "${artifacts[@]}"; do echo "    <dependency><groupId>org.apache.kafka</groupId><artifactId>$a</artifactId><version>$version</version></dependency>"; done)
  </dependencies>
</project>
POM
maven_resolve "$tmp/pom.xml" "$tmp/libs"
for a in "${artifacts[@]}"; do ls "$tmp/libs/$a-$version.jar" >/dev/null; done
touch "$tmp/.complete"
rm -rf "$home"
mv "$tmp" "$home"
trap - EXIT
echo "$home/libs"
