# Apache Kafka as the reference; the top-level Makefile includes this file. See
# e2e/conformance/README.md.
#
#   make conformance        the conformance suite against Apache Kafka and kaas (part of `make test`)
#   make conformance-deps   fetch what it needs: Kafka jars (Maven), franz-go modules, JDK/Maven
#   make bench-compare      side-by-side benchmark (BENCH_SECONDS=3 for a quick run)
#   make kafka-up / kafka-down   an Apache Kafka broker in the background, for trying things by hand
#
# Everything heavy runs under `nice -n 10`: the machine is shared with Rust builds.

CONFORMANCE_DIR := $(patsubst %/,%,$(dir $(lastword $(MAKEFILE_LIST))))
CONFORMANCE_ARGS ?=
KAFKA_UP_DIR ?= /tmp/kaas-kafka-up

.PHONY: conformance conformance-deps bench-compare kafka-up kafka-down compat-table compat-table-check

conformance-deps: deps
	@$(CONFORMANCE_DIR)/bin/install-deps.sh

## The conformance suite: fails on any Apache Kafka failure, on a kaas failure not listed in
## e2e/conformance/expected-failures.tsv, and on a listed one that now passes.
## It drives the dev build of kaas (correctness, not speed: `make test` then compiles the
## workspace once); KAAS_BIN=target/release/kaas after `make build` runs it on the release build.
conformance: conformance-deps dev-build
	KAAS_BIN=$${KAAS_BIN:-$(DEBUG_BIN)/kaas} nice -n 10 python3 $(CONFORMANCE_DIR)/conformance.py $(CONFORMANCE_ARGS)

## The README's compatibility table, from the last `make conformance` and `make
## conformance-cluster` results (target/conformance/*.json); `make test` checks that the README
## says what they show.
compat-table:
	python3 $(CONFORMANCE_DIR)/compat_table.py --write README.md

compat-table-check:
	python3 $(CONFORMANCE_DIR)/compat_table.py --check README.md

## kaas vs Apache Kafka (defaults and flush.messages=1): ProducerPerformance, ConsumerPerformance,
## kaas-bench, end-to-end latency. About 15 min with the default BENCH_SECONDS=10.
bench-compare: conformance-deps build
	python3 $(CONFORMANCE_DIR)/bench_compare.py

kafka-up: conformance-deps
	@rm -rf $(KAFKA_UP_DIR) && $(CONFORMANCE_DIR)/bin/kafka-start.sh $(KAFKA_UP_DIR)

kafka-down:
	@$(CONFORMANCE_DIR)/bin/kafka-stop.sh $(KAFKA_UP_DIR) && rm -rf $(KAFKA_UP_DIR)

# `make test` runs the suite too (after `deps`, before the cargo tests); CONFORMANCE_IN_TEST=0
# leaves it out, e.g. for a quick local run of the Rust tests alone.
CONFORMANCE_IN_TEST ?= 1
ifeq ($(CONFORMANCE_IN_TEST),1)
test: conformance
endif
