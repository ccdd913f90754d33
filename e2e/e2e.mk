# e2e harness targets; the top-level Makefile includes this file. See e2e/README.md.
#
#   make e2e-bins      build the control-plane binaries into the cache (only what is missing)
#   make e2e-selftest  run the harness self-test (builds what is missing first)
#   make e2e-scenarios the seeds' flows against a real kaas cluster on kaas-nfsfs mounts
#   make conformance-cluster  the conformance suite (e2e/conformance) against that cluster
#   make e2e-up        start a harness in the background, print the kubeconfig path
#   make e2e-down      stop it
#
# Binaries are cached in $(KAAS_CACHE) (default ~/.cache/kaas) by version; Go builds run under
# `nice -n 19` because the machine is shared with Rust builds.

E2E_DIR := $(patsubst %/,%,$(dir $(lastword $(MAKEFILE_LIST))))
E2E_GOTEST_FLAGS ?= -count=1 -timeout=20m
# Where the cluster benchmarks find the release builds they run (`make build`: kaas, kaas-nfsfs).
E2E_RELEASE = $(or $(CARGO_TARGET_DIR),$(CURDIR)/target)/release

.PHONY: e2e-bins e2e-selftest e2e-scenarios conformance-cluster bench-failover bench-scaleout bench-scale-cluster e2e-up e2e-down

e2e-bins:
	@$(E2E_DIR)/hack/bins.sh >/dev/null

# Compile the tests under nice first; the run itself is not niced, so that a busy machine does
# not starve the control plane into timeouts.
e2e-selftest: e2e-bins
	cd $(E2E_DIR) && nice -n 19 go vet ./...
	cd $(E2E_DIR) && go test $(E2E_GOTEST_FLAGS) -v ./harness/... ./kubelet/... ./clusterdns/... ./svcproxy/... ./imagebuild/... ./selftest/...

# The operator, three real brokers and franz-go on the control plane, each node's pods on its own
# kaas-nfsfs mount of one export (e2e/scenarios, its own Go module for the Kafka client).
# TestConformance is left to conformance-cluster: it needs the conformance suite's JDK, jars and
# kafka-python.
e2e-scenarios: e2e-bins
	$(DEV_BUILD)
	cd $(E2E_DIR)/scenarios && nice -n 19 go vet .
	cd $(E2E_DIR)/scenarios && go test $(E2E_GOTEST_FLAGS) -v -skip '^TestConformance$$' .

# The conformance suite (Kafka's CLI tools, the Java client, franz-go, kafka-python) against the
# same kind of cluster, judged by e2e/conformance/expected-failures-cluster.tsv; about 2 min
# (cluster up in ~20 s, the suite ~50 s). Table: target/conformance/cluster-results.md.
# conformance-deps comes from e2e/conformance/conformance.mk.
conformance-cluster: e2e-bins conformance-deps
	$(DEV_BUILD)
	cd $(E2E_DIR)/scenarios && nice -n 19 go vet .
	cd $(E2E_DIR)/scenarios && go test $(E2E_GOTEST_FLAGS) -v -run '^TestConformance$$' .

# Failover figures on the same cluster (BenchmarkFailover): unavailability after kill -9,
# SIGSTOP and SIGTERM drain of a leader, and after kill -9 with a 1 GiB active segment.
bench-failover: e2e-bins build
	$(DEV_BUILD)
	cd $(E2E_DIR)/scenarios && KAAS_BIN=$(E2E_RELEASE)/kaas \
		KAAS_NFSFS_BIN=$(E2E_RELEASE)/kaas-nfsfs \
		go test -count=1 -timeout 30m -run '^$$' -bench Failover -benchtime 1x .

# Aggregate produce throughput as the load spreads over 1, 2 and 3 brokers of that cluster, with
# each broker's durable bytes and syncs per second on the shared volume (BenchmarkScaleOut). The
# brokers and kaas-nfsfs run their release builds (`make build`); KAAS_SCALEOUT_SECONDS per
# step (default 20).
bench-scaleout: e2e-bins build
	$(DEV_BUILD)
	cd $(E2E_DIR)/scenarios && KAAS_BIN=$(E2E_RELEASE)/kaas \
		KAAS_NFSFS_BIN=$(E2E_RELEASE)/kaas-nfsfs \
		go test -count=1 -timeout 30m -run '^$$' -bench ScaleOut -benchtime 1x .

# 10,000 partitions on that cluster (BenchmarkScaleCluster): creation through the operator, each
# broker's memory and descriptors, Metadata, produce latency over every partition, a pause and a
# kill -9 of a broker leading a third of them. Release builds of the broker and of kaas-nfsfs
# (the volume's server: in its debug build it took most of a core at this scale, more than any
# broker); sizes from KAAS_SCALE_TOPICS, KAAS_SCALE_PARTITIONS, KAAS_SCALE_RATE, KAAS_SCALE_SECONDS.
bench-scale-cluster: e2e-bins build
	$(DEV_BUILD)
	cd $(E2E_DIR)/scenarios && KAAS_BIN=$(E2E_RELEASE)/kaas \
		KAAS_NFSFS_BIN=$(E2E_RELEASE)/kaas-nfsfs \
		go test -count=1 -timeout 60m -run '^$$' -bench ScaleCluster -benchtime 1x .

e2e-up: e2e-bins
	@$(E2E_DIR)/hack/up.sh

e2e-down:
	@$(E2E_DIR)/hack/down.sh
