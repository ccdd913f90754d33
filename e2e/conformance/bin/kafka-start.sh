#!/usr/bin/env bash
# Starts a single-node Apache Kafka broker in KRaft combined mode (broker + controller in one
# process) on free 127.0.0.1 ports, with its storage formatted in DIR (created; use a fresh
# one). Waits until it serves, then prints the bootstrap address; DIR/bootstrap and DIR/pid
# hold the address and the process id, DIR/server.log its log. Stop it with kafka-stop.sh DIR.
#
#   kafka-start.sh DIR [key=value ...]     extra lines for server.properties
#
# The configuration is the one Kafka's own config/server.properties ships for a single node
# (internal topics with replication factor 1, no initial rebalance delay), so "Kafka's
# defaults" means what a user gets from the distribution. As in Kafka 4.x's quickstart, the
# controller quorum is dynamic (KIP-853): controller.quorum.bootstrap.servers, and the storage
# formatted with --standalone, which makes this node the quorum's only voter (the static
# controller.quorum.voters still works in 4.4; the distribution no longer ships it).
# KAFKA_HEAP_OPTS defaults to -Xmx1G -Xms1G and the JVM flags to those of kafka-server-start.sh.
set -euo pipefail
. "$(dirname "$0")/common.sh"
[ $# -ge 1 ] || { sed -n '2,8p' "$0" >&2; exit 2; }
dir="$1"; shift
"$CONFORMANCE_DIR/bin/fetch-kafka.sh" >/dev/null
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
port="$("$CONFORMANCE_DIR/bin/free-port.sh")"
cport="$("$CONFORMANCE_DIR/bin/free-port.sh")"
while [ "$cport" = "$port" ]; do cport="$("$CONFORMANCE_DIR/bin/free-port.sh")"; done
cat >"$dir/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:$cport
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$dir/data
num.partitions=1
offsets.topic.replication.factor=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
PROPS
for kv in "$@"; do echo "$kv" >>"$dir/server.properties"; done

export KAFKA_HEAP_OPTS="${KAFKA_HEAP_OPTS:--Xmx1G -Xms1G}"
# The JVM flags of kafka-run-class.sh for the broker.
export KAFKA_JVM_FAST="-XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent"
cluster_id="$("$CONFORMANCE_DIR/bin/kafka-class.sh" storage random-uuid)"
"$CONFORMANCE_DIR/bin/kafka-class.sh" storage format --standalone -t "$cluster_id" -c "$dir/server.properties" >"$dir/format.log" 2>&1 \
  || { cat "$dir/format.log" >&2; exit 1; }
KAFKA_OPTS="-Dkafka.logs.dir=$dir -Dlog4j2.configurationFile=$CONFORMANCE_DIR/log4j2-broker.properties ${KAFKA_OPTS:-}" \
  setsid nohup "$CONFORMANCE_DIR/bin/kafka-class.sh" kafka.Kafka "$dir/server.properties" \
  >"$dir/stdout" 2>&1 </dev/null &
echo $! >"$dir/pid"
# It starts in ~15 s on two cores busy with Rust builds (a few seconds when idle); wait up to 180 s.
deadline=$((SECONDS + 180))
while [ "$SECONDS" -lt "$deadline" ]; do
  if grep -q "Kafka Server started" "$dir/server.log" 2>/dev/null; then
    echo "127.0.0.1:$port" >"$dir/bootstrap"
    echo "127.0.0.1:$port"
    exit 0
  fi
  kill -0 "$(cat "$dir/pid")" 2>/dev/null || break
  sleep 0.1
done
echo "kafka-start: the broker did not start; last lines of its logs:" >&2
tail -n 30 "$dir/stdout" "$dir/server.log" >&2 2>/dev/null || true
"$CONFORMANCE_DIR/bin/kafka-stop.sh" "$dir" || true
exit 1
