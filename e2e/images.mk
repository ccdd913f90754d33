# OCI images of the broker (ghcr.io/kaas/kaas) and the operator (ghcr.io/kaas/kaas-operator, also
# the volume agent's image), assembled without a base image or a container engine by
# e2e/cmd/imagebuild (go-containerregistry): the binary, the shared libraries `ldd` lists and the
# loader, CA certificates, /etc/passwd and /etc/group with the nonroot user 65532, a writable
# /tmp; the runtime layout of operator/Dockerfile and operator/broker.Dockerfile, checked against
# them at every build. Included from the top-level Makefile. See README.md, "Images".
#
#   make images                      release binaries → OCI layouts in build/images/{kaas,kaas-operator}
#   make images IMAGES_PUSH=host:5000/kaas   ... and push them to host:5000/kaas/kaas, .../kaas-operator
#   make bundle images-bundle        the OLM bundle image of bundle/ → build/images/kaas-operator-bundle
#   make bundle images-catalog       the file-based catalog of that bundle → build/catalog, and its
#                                    image → build/images/kaas-operator-catalog
#   make images-push IMAGES_PUSH=...  push the layouts already built (bundle and catalog too, if built)
#   make images-e2e                  the broker and operator pods run from images pulled from the
#                                    harness registry (e2e/images), produce/consume through them;
#                                    and the broker on a real kubelet with containerd (TestRealKubelet)
#
# Tags: the crate version (broker/kaas, operator) and version-<12 hex of the commit>, with
# -dirty when the work tree had changes. IMAGES_CARGO= (empty) takes the binaries in
# IMAGES_BIN_DIR as they are; IMAGES_PROFILE=debug uses the dev build's.

IMAGES_DIR ?= build/images
IMAGES_PROFILE ?= release
IMAGES_BIN_DIR ?= $(or $(CARGO_TARGET_DIR),$(CURDIR)/target)/$(IMAGES_PROFILE)
IMAGES_REPOSITORY ?= ghcr.io/kaas
IMAGES_SOURCE ?= https://github.com/kaas/kaas
IMAGES_PUSH ?=
IMAGES_CARGO ?= $(if $(filter debug,$(IMAGES_PROFILE)),$(DEV_BUILD),$(CARGO) build --release --locked -p kaas -p kaas-operator)

BROKER_VERSION ?= $(shell sed -n 's/^version = "\(.*\)"/\1/p' broker/kaas/Cargo.toml | head -1)
IMAGES_REVISION ?= $(shell git rev-parse HEAD)$(shell git diff --quiet HEAD -- 2>/dev/null || echo -dirty)
IMAGES_CREATED ?= $(shell git log -1 --format=%ct)
IMAGEBUILD ?= $(KAAS_CACHE)/e2e-tools/imagebuild

.PHONY: images images-tool images-bundle images-catalog images-push images-e2e

images-tool:
	@mkdir -p $(dir $(IMAGEBUILD))
	cd e2e && nice -n 19 go build -o $(IMAGEBUILD) ./cmd/imagebuild

images: images-tool
	$(IMAGES_CARGO)
	$(IMAGEBUILD) build -dockerfile operator/broker.Dockerfile -binary $(IMAGES_BIN_DIR)/kaas \
		-repo $(IMAGES_REPOSITORY)/kaas -version $(BROKER_VERSION) -revision $(IMAGES_REVISION) \
		-created $(IMAGES_CREATED) -source $(IMAGES_SOURCE) -out $(IMAGES_DIR)/kaas \
		$(if $(IMAGES_PUSH),-push $(IMAGES_PUSH)/kaas)
	$(IMAGEBUILD) build -dockerfile operator/Dockerfile -binary $(IMAGES_BIN_DIR)/kaas-operator \
		-repo $(IMAGES_REPOSITORY)/kaas-operator -version $(OPERATOR_VERSION) -revision $(IMAGES_REVISION) \
		-created $(IMAGES_CREATED) -source $(IMAGES_SOURCE) -out $(IMAGES_DIR)/kaas-operator \
		$(if $(IMAGES_PUSH),-push $(IMAGES_PUSH)/kaas-operator)

# The bundle make bundle wrote (BUNDLE_DIR, operator.mk), as bundle/bundle.Dockerfile describes it
# (FROM scratch, its labels, manifests/ and metadata/), checked against metadata/annotations.yaml.
images-bundle: images-tool
	@test -f $(BUNDLE_DIR)/bundle.Dockerfile || { echo "no $(BUNDLE_DIR)/bundle.Dockerfile: run make bundle first"; exit 2; }
	$(IMAGEBUILD) bundle -dir $(BUNDLE_DIR) -repo $(IMAGES_REPOSITORY)/kaas-operator-bundle \
		-version $(OPERATOR_VERSION) -revision $(IMAGES_REVISION) -created $(IMAGES_CREATED) \
		-source $(IMAGES_SOURCE) -out $(IMAGES_DIR)/kaas-operator-bundle \
		$(if $(IMAGES_PUSH),-push $(IMAGES_PUSH)/kaas-operator-bundle)

# The file-based catalog of the bundle make bundle wrote, rendered as `opm render` renders a
# bundle (olm.package, olm.channel per channel with the CSV's replaces/skips/olm.skipRange,
# olm.bundle naming the bundle image by tag) and validated (imagebuild.Catalog.Validate: the
# checks of `opm validate` one package can fail) into $(CATALOG_DIR)/kaas-operator/catalog.json,
# and the catalog image: FROM scratch, /configs, the operators.operatorframework.io.index.configs.v1
# label. OLM v1 serves it as it is (a ClusterCatalog); OLM v0's CatalogSource runs the image and
# needs opm in it, which is not built here (the Go module proxy refuses operator-registry).
CATALOG_DIR ?= build/catalog
images-catalog: images-tool
	@test -f $(BUNDLE_DIR)/metadata/annotations.yaml || { echo "no $(BUNDLE_DIR)/metadata/annotations.yaml: run make bundle first"; exit 2; }
	$(IMAGEBUILD) catalog -bundle-dir $(BUNDLE_DIR) \
		-bundle-image $(IMAGES_REPOSITORY)/kaas-operator-bundle:$(OPERATOR_VERSION) \
		-repo $(IMAGES_REPOSITORY)/kaas-operator-catalog -version $(OPERATOR_VERSION) -revision $(IMAGES_REVISION) \
		-created $(IMAGES_CREATED) -source $(IMAGES_SOURCE) -render $(CATALOG_DIR) \
		-out $(IMAGES_DIR)/kaas-operator-catalog $(if $(IMAGES_PUSH),-push $(IMAGES_PUSH)/kaas-operator-catalog)

images-push: images-tool
	@test -n "$(IMAGES_PUSH)" || { echo "set IMAGES_PUSH=host[:port]/path"; exit 2; }
	$(IMAGEBUILD) push -layout $(IMAGES_DIR)/kaas -to $(IMAGES_PUSH)/kaas
	$(IMAGEBUILD) push -layout $(IMAGES_DIR)/kaas-operator -to $(IMAGES_PUSH)/kaas-operator
	if [ -f $(IMAGES_DIR)/kaas-operator-bundle/index.json ]; then \
		$(IMAGEBUILD) push -layout $(IMAGES_DIR)/kaas-operator-bundle -to $(IMAGES_PUSH)/kaas-operator-bundle; fi
	if [ -f $(IMAGES_DIR)/kaas-operator-catalog/index.json ]; then \
		$(IMAGEBUILD) push -layout $(IMAGES_DIR)/kaas-operator-catalog -to $(IMAGES_PUSH)/kaas-operator-catalog; fi

# Builds its images from the dev build's binaries itself (or takes KAAS_E2E_IMAGES_DIR, e.g.
# build/images after `make images`).
images-e2e: e2e-bins
	$(DEV_BUILD)
	cd e2e && nice -n 19 go vet ./images/ ./imagebuild/ ./cmd/imagebuild/ ./cmd/pause/
	cd e2e && go test $(E2E_GOTEST_FLAGS) -v ./images/
