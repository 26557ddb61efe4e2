# syntax=docker/dockerfile:1
#
# Builds zrpc's example binaries (greeter-server, greeter-client, demo) and
# ships them in a small Debian image. Used by docker-compose.yml.
#
#   docker build -t zrpc-examples .
#   docker run --rm zrpc-examples demo

# ---- build stage -------------------------------------------------------------
FROM rust:1.95-bookworm AS build

# protoc + the well-known types for the generated greeter code.
RUN apt-get update \
 && apt-get install -y --no-install-recommends protobuf-compiler libprotobuf-dev \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /src
COPY . .

# The cache mounts keep the registry and target dir between builds.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p zrpc-examples --bins \
 && mkdir -p /out \
 && cp target/release/greeter-server target/release/greeter-client target/release/demo /out/

# ---- runtime stage -----------------------------------------------------------
FROM debian:bookworm-slim

RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates tini \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --no-create-home zrpc

COPY --from=build /out/ /usr/local/bin/
COPY examples/etc/ /etc/zrpc/

USER zrpc
# tini forwards SIGTERM to the server so its graceful shutdown (deregister,
# wrap up, drain) runs on `docker compose stop`.
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["greeter-server", "-f", "/etc/zrpc/greeter-server.yaml"]
