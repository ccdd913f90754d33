#!/usr/bin/env bash
# Stops the broker kaas-start.sh started in DIR; the same protocol as for Apache Kafka.
exec "$(dirname "$0")/kafka-stop.sh" "$@"
