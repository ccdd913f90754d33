# The kaas operator: generated CRDs/config, the OLM bundle, and the operator e2e scenarios.
# Included from the top-level Makefile (`include operator/operator.mk`).

OPERATOR_VERSION ?= $(shell sed -n 's/^version = "\(.*\)"/\1/p' operator/Cargo.toml | head -1)
OPERATOR_IMAGE ?= ghcr.io/kaas/kaas-operator:$(OPERATOR_VERSION)
BUNDLE_DIR ?= bundle
BUNDLE_CHANNEL ?= alpha

.PHONY: crds bundle bundle-validate operator-e2e operator-test

## Regenerate crds/ and the generated parts of config/ from the Rust types.
crds: dev-build
	$(DEBUG_BIN)/crdgen write .

## Generate the OLM bundle into $(BUNDLE_DIR)/ and validate it with operator-framework/api.
bundle: dev-build
	rm -rf $(BUNDLE_DIR)
	$(DEBUG_BIN)/crdgen bundle $(BUNDLE_DIR) $(OPERATOR_IMAGE) $(BUNDLE_CHANNEL)
	$(MAKE) bundle-validate

bundle-validate:
	cd operator/bundle-validate && nice -n 10 go run . $(abspath $(BUNDLE_DIR))

## The operator on the e2e control plane: config/ applied with kubectl, the operator and its
## volume agents run as Deployments from target/debug/kaas-operator (real kaas brokers from target/debug/kaas).
operator-e2e: e2e-bins
	$(DEV_BUILD)
	cd e2e && nice -n 10 go test -count=1 -timeout 15m ./operator/

## What `make test` should run for the operator (cargo tests run with the workspace).
operator-test: bundle images-catalog operator-e2e
