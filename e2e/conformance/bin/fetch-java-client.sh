#!/usr/bin/env bash
# Resolves one release of the Java client (kafka-clients and its runtime dependencies) with Maven
# into $KAAS_CACHE/kafka-clients-<version>/libs, for the older releases the conformance suite
# runs (java-clients.txt). Does nothing when that directory is complete; prints its path.
set -euo pipefail
. "$(dirname "$0")/common.sh"
version="${1:?usage: fetch-java-client.sh VERSION}"
home="$KAAS_CACHE/kafka-clients-$version"
if [ -f "$home/.complete" ]; then
  echo "$home/libs"
  exit 0
fi
command -v mvn >/dev/null || { echo "fetch-java-client: mvn is not installed (apt-get install maven)" >&2; exit 1; }
echo "fetch-java-client: resolving kafka-clients $version into $home/libs" >&2
tmp="$home.tmp.$$"
rm -rf "$tmp"
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.kaas.e2e</groupId>
  <artifactId>kafka-clients-$version</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka-clients</artifactId>
      <version>$version</version>
    </dependency>
  </dependencies>
</project>
POM
nice -n 10 mvn -B -q -Dstyle.color=never -f "$tmp/pom.xml" dependency:copy-dependencies \
  -DincludeScope=runtime -DoutputDirectory="$tmp/libs" >&2
ls "$tmp/libs/kafka-clients-$version.jar" >/dev/null
touch "$tmp/.complete"
rm -rf "$home"
mv "$tmp" "$home"
trap - EXIT
echo "$home/libs"
