#!/usr/bin/env bash
# Runs a class of the pinned Apache Kafka (fetched first if missing), like Kafka's
# kafka-run-class.sh. The first argument is a class name or one of these short names:
#   topics configs console-producer console-consumer consumer-groups transactions
#   console-share-consumer share-groups producer-perf consumer-perf e2e-latency storage
#   metadata-quorum log-dirs
# e.g.  kafka-class.sh topics --bootstrap-server 127.0.0.1:9092 --list
# KAFKA_HEAP_OPTS (default -Xmx256M) and KAFKA_OPTS are passed to the JVM as in Kafka's scripts.
set -euo pipefail
. "$(dirname "$0")/common.sh"
[ $# -ge 1 ] || { sed -n '2,8p' "$0" >&2; exit 2; }
"$CONFORMANCE_DIR/bin/fetch-kafka.sh" >/dev/null
cls="$1"; shift
case "$cls" in
  topics)            cls=org.apache.kafka.tools.TopicCommand ;;
  configs)           cls=org.apache.kafka.tools.ConfigCommand ;;
  console-producer)  cls=org.apache.kafka.tools.ConsoleProducer ;;
  console-consumer)  cls=org.apache.kafka.tools.consumer.ConsoleConsumer ;;
  consumer-groups)   cls=org.apache.kafka.tools.consumer.group.ConsumerGroupCommand ;;
  console-share-consumer) cls=org.apache.kafka.tools.consumer.ConsoleShareConsumer ;;
  share-groups)      cls=org.apache.kafka.tools.consumer.group.ShareGroupCommand ;;
  transactions)      cls=org.apache.kafka.tools.TransactionsCommand ;;
  producer-perf)     cls=org.apache.kafka.tools.ProducerPerformance ;;
  consumer-perf)     cls=org.apache.kafka.tools.ConsumerPerformance ;;
  e2e-latency)       cls=org.apache.kafka.tools.EndToEndLatency ;;
  storage)           cls=kafka.tools.StorageTool ;;
  metadata-quorum)   cls=org.apache.kafka.tools.MetadataQuorumCommand ;;
  log-dirs)          cls=org.apache.kafka.tools.LogDirsCommand ;;
esac
# Short-lived tools start faster with the C1 compiler only and the serial collector;
# KAFKA_JVM_FAST="" (set but empty) turns that off, as the benchmarks do.
# shellcheck disable=SC2086
exec "$JAVA" ${KAFKA_HEAP_OPTS:--Xmx256M} ${KAFKA_JVM_FAST--XX:TieredStopAtLevel=1 -XX:+UseSerialGC} \
  -Djava.awt.headless=true -Dlog4j2.configurationFile="$CONFORMANCE_DIR/log4j2-tools.properties" \
  ${KAFKA_OPTS:-} -cp "$KAFKA_LIBS/*${KAFKA_EXTRA_CP:+:$KAFKA_EXTRA_CP}" "$cls" "$@"
