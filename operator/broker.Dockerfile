# The broker image, released independently of the operator. Build from the repository root:
#   docker build -f operator/broker.Dockerfile -t ghcr.io/kaas/kaas:0.1.0 .
# (Kept beside the operator's until the broker owns its packaging; the StatefulSet the operator
# renders runs the entrypoint with configuration in KAAS_* environment variables.)
FROM rust:1.95-bookworm AS build
WORKDIR /src
RUN apt-get update && apt-get install -y --no-install-recommends cmake && rm -rf /var/lib/apt/lists/*
COPY . .
RUN cargo build --release --locked -p kaas --bin kaas

FROM gcr.io/distroless/cc-debian12:nonroot
# The runtime layout, stated rather than inherited: `make images` assembles the same one without
# a base image (e2e/imagebuild), and its check compares the built image with these lines.
USER 65532:65532
WORKDIR /home/nonroot
ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
COPY --from=build /src/target/release/kaas /kaas
ENTRYPOINT ["/kaas"]
