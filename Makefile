# kaas — the two commands a newcomer needs are `make run` and `make test`.

KAAS_CACHE ?= $(HOME)/.cache/kaas
export KAAS_CACHE
# The tests drive kafka-python from this virtualenv (created by `make deps`).
export PYTHON := $(KAAS_CACHE)/venv/bin/python3
CARGO ?= cargo

.PHONY: run test deps dev-build build bench bench-cleaner bench-zero-copy bench-scale chaos fuzz franzgo-kgo check-fmt clippy clean-data

# One build of the whole workspace, every target, in the dev profile. Everything `make test`
# runs uses it: the cargo tests, the e2e and operator binaries, crdgen, and the broker the
# conformance suite drives. A `cargo build -p X` unifies features differently and compiles
# the shared dependencies again, so no test target builds with `-p`.
DEV_BUILD = $(CARGO) build --locked --workspace --all-targets
DEBUG_BIN := $(or $(CARGO_TARGET_DIR),$(CURDIR)/target)/debug

## Run a local broker on 127.0.0.1:9092 with its data in ./kaas-data.
run:
	$(CARGO) run --release -p kaas -- $(ARGS)

# The control plane's first build (about 9 minutes of Go on 2 cores, niced) runs in the
# background while cargo builds and tests, on the cycles they leave idle; the e2e steps wait
# for it (and print its log). Once cached it takes a second.
E2E_BINS_STATE := $(KAAS_CACHE)/e2e-bins-background

## Install everything the tests need (Debian packages, kafka-python), then run every test.
test: deps
	@mkdir -p $(E2E_BINS_STATE) && rm -f $(E2E_BINS_STATE)/rc && \
	  { e2e/hack/bins.sh > $(E2E_BINS_STATE)/log 2>&1; echo $$? > $(E2E_BINS_STATE)/rc.tmp; mv $(E2E_BINS_STATE)/rc.tmp $(E2E_BINS_STATE)/rc; } &
	$(DEV_BUILD)
	$(CARGO) test --locked --workspace --no-fail-fast
	$(MAKE) franzgo-kgo
	@scripts/wait-background.sh "control plane build (e2e/hack/bins.sh)" $(E2E_BINS_STATE)
	$(MAKE) e2e-selftest
	$(MAKE) operator-test
	$(MAKE) images-e2e
	$(MAKE) e2e-scenarios
	$(MAKE) conformance-cluster
	$(MAKE) conformance
	$(MAKE) compat-table-check

deps:
	scripts/install-deps.sh

dev-build:
	$(DEV_BUILD)

# The release builds the benchmarks run, in one invocation: a `-p` set of its own would unify
# features differently and compile the shared crates again.
build:
	$(CARGO) build --release --locked -p kaas -p kaas-bench -p kaas-nfsfs

## Benchmark figures: a release broker on a temp dir, driven by kaas-bench (librdkafka).
bench: deps build
	scripts/bench.sh
	$(MAKE) bench-cleaner
	$(MAKE) bench-failover

## Fetch with and without `--fetch-zero-copy` (scripts/bench-zero-copy.sh): consumer rate and
## broker CPU for the same records, rounds alternating. About 2 minutes after the release build.
bench-zero-copy: build
	scripts/bench-zero-copy.sh $(BENCH_ZERO_COPY_ARGS)

## The log cleaner's rate (broker/kaas-storage/tests/cleaner_bench.rs): one pass over 256 MB of
## a compacted partition on a local disk, per key space and codec, with the memory it took.
## KAAS_CLEANER_BENCH_MB sets the size. About a minute after the release build.
bench-cleaner:
	$(CARGO) test --release --locked --workspace --test cleaner_bench -- --ignored --nocapture

## Scale figures (broker/kaas/tests/scale.rs): three in-process brokers in a release build with
## 2,000 topics × 5 partitions, 1,000 groups, 1,000 idempotent producers and 10,000 connections;
## prints memory and descriptors per partition, group, producer and connection, assignment.json
## and recompute time, Metadata time, produce latency over every partition, a broker's take-over
## and a cold start. Sizes: KAAS_SCALE_TOPICS, _PARTITIONS, _GROUPS, _PRODUCERS, _CONNECTIONS,
## _RATES (comma-separated msg/s), _SECONDS. README "Scale" says how long it takes.
bench-scale:
	$(CARGO) test --release --locked --workspace --test scale -- --ignored --nocapture

## The long fault campaign: 1,000 seeded faults (kill -9, SIGSTOP/SIGCONT, SIGTERM drain, the
## controller's death, EIO/ENOSPC/ESTALE/failed writeback/slow fsync on one broker's mount, stray files, the
## controller cut off from its Lease) on an in-process 3-broker cluster under an idempotent
## producer, a classic and a KIP-848 group committing, and a transactional read-process-write
## pipeline; prints the seed, the faults and each invariant's checks. `make test` runs the
## short one (6 faults). Replay a seed: make chaos KAAS_CHAOS_SEED=<seed>; pick fault kinds
## with KAAS_CHAOS_KINDS (comma list; empty: all), leave the pipeline out with
## KAAS_CHAOS_PIPELINE=0. About 5 s a fault on 2 cores (1,000 faults: ~85 min).
KAAS_CHAOS_FAULTS ?= 1000
KAAS_CHAOS_KINDS ?=
chaos: dev-build
	KAAS_CHAOS_FAULTS=$(KAAS_CHAOS_FAULTS) $(if $(KAAS_CHAOS_KINDS),KAAS_CHAOS_KINDS=$(KAAS_CHAOS_KINDS)) $(if $(KAAS_CHAOS_SEED),KAAS_CHAOS_SEED=$(KAAS_CHAOS_SEED)) \
		$(CARGO) test --locked --workspace --test chaos -- --nocapture

## Fuzz the request path (fuzz/fuzz_targets/request.rs: any frame through header parse, routing,
## decode and handler on an in-memory broker) with cargo fuzz on the nightly toolchain, under a
## 2 GiB RSS limit and a 256 MiB single-allocation limit. Installs cargo-fuzz if missing; the
## first build takes ~13 min, then KAAS_FUZZ_SECONDS of fuzzing (default 600). New inputs go to
## fuzz/corpus-work/ (the seeds in fuzz/corpus/ stay as committed), findings to fuzz/artifacts/;
## replay one with `cd fuzz && cargo +nightly fuzz run request <file>`.
KAAS_FUZZ_SECONDS ?= 600
fuzz:
	command -v cargo-fuzz >/dev/null || $(CARGO) install --locked cargo-fuzz
	mkdir -p fuzz/corpus-work/request
	cd fuzz && $(CARGO) +nightly fuzz run request corpus-work/request corpus/request -- \
		-max_total_time=$(KAAS_FUZZ_SECONDS) -rss_limit_mb=2048 -malloc_limit_mb=256 -max_len=65536

## franz-go's own integration tests (pkg/kgo) against a local kaas; tests that need what kaas
## lacks are listed with a reason in e2e/clients/franzgo-kgo/expected-failures.tsv. About 3 min;
## `e2e/clients/franzgo-kgo/run.sh --chaos` kills connections at random.
franzgo-kgo: dev-build
	KAAS_BIN=$(DEBUG_BIN)/kaas e2e/clients/franzgo-kgo/run.sh

clippy:
	$(CARGO) clippy --workspace --all-targets -- -D warnings

clean-data:
	rm -rf ./kaas-data

# The e2e harness: a real Kubernetes control plane and a process kubelet (e2e/README.md).
include e2e/e2e.mk

# OCI images of the broker and the operator without a base image or container engine, and the
# e2e scenario that runs them from the harness registry (e2e/images.mk, README "Images").
include e2e/images.mk

# The operator: generated CRDs/config, the OLM bundle, and its e2e scenarios (operator/README or
# operator/operator.mk).
include operator/operator.mk

# Apache Kafka as the reference: conformance suite and bench-compare (e2e/conformance/README.md).
# `make test` runs the suite last (above), so it is not a prerequisite of `test` here.
CONFORMANCE_IN_TEST := 0
include e2e/conformance/conformance.mk
