# coroner: coronerd, the coroner CLI and a static (musl) coroner-agent in one image.
#   docker build -t coroner:0.1.0 .
# The image runs coronerd as user 10001 (not root). Kubernetes: deploy/kubernetes
# (docs/KUBERNETES.md); the agent binary is static, so a training pod can copy it out of this
# image into any training image (the examples do it with an init container).
# No Docker engine runs where coroner is developed: this file's steps were run by hand instead
# (the stub stage on a copy of the tree, the dependency build, the touch, the real build, for
# all three binaries; the binaries' sizes are in the README), not `docker build` itself.

# Stage 1: the workspace reduced to what decides the dependencies: the Cargo manifests, the lock
# file, the build scripts and what they read (proto/), and every crate root replaced by a stub.
# It is the same bytes until a manifest, the lock file or a proto changes, so the dependency
# layer below is rebuilt only then, not on every source edit.
FROM rust:1-bookworm AS plan
WORKDIR /src
COPY . .
RUN find . -type f ! -name Cargo.toml ! -name Cargo.lock ! -name lib.rs ! -name main.rs ! -name build.rs ! -path './proto/*' -delete \
 && find . -name lib.rs -exec sh -c 'for f; do : > "$f"; done' sh {} + \
 && find . -name main.rs -exec sh -c 'for f; do echo "fn main() { }" > "$f"; done' sh {} + \
 && find . -type d -empty -delete

# Stage 2: dependencies first (cached), then coroner itself.
FROM rust:1-bookworm AS build
# musl-gcc builds ring's C for the static agent.
RUN rustup target add x86_64-unknown-linux-musl \
 && apt-get update && apt-get install -y --no-install-recommends musl-tools \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY --from=plan /src/ ./
# The dependency layer: every dependency compiled, in the `dist` profile (Cargo.toml: stripped,
# fat LTO, one codegen unit), for the glibc binaries and for the static agent.
RUN cargo build --locked --profile dist -p coronerd -p coroner --bins \
 && cargo build --locked --profile dist -p coroner-agent --target x86_64-unknown-linux-musl
COPY . .
# `coroner_build_info{commit}`: pass `--build-arg CORONER_COMMIT=$(git rev-parse --short=12 HEAD)`
# (the build context may have no .git for coronerd's build.rs to read).
ARG CORONER_COMMIT=""
# COPY keeps the sources' own times, older than the stubs just built: touch them so cargo
# rebuilds coroner's crates from the real sources.
RUN find crates services tests -name '*.rs' -exec touch {} + \
 && cargo build --locked --profile dist -p coronerd -p coroner --bins \
 && cargo build --locked --profile dist -p coroner-agent --target x86_64-unknown-linux-musl \
 && mkdir -p /out \
 && cp target/dist/coronerd target/dist/coroner target/x86_64-unknown-linux-musl/dist/coroner-agent /out/

# Stage 3: the runtime. python3 runs the health check and the demo job (examples/ring_job.py).
FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends python3 ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 coroner \
 && useradd --system --uid 10001 --gid coroner --home-dir /var/lib/coroner --no-create-home --shell /usr/sbin/nologin coroner \
 && mkdir -p /var/lib/coroner && chown coroner:coroner /var/lib/coroner
COPY --from=build /out/ /usr/local/bin/
COPY examples /opt/coroner/examples
COPY deploy/docker/healthcheck.py /usr/local/lib/coroner/healthcheck.py
# coronerd refuses 0.0.0.0 without tokens: run with -e CORONER_WRITE_TOKEN=... -e CORONER_READ_TOKEN=...
ENV CORONER_DATA_DIR=/var/lib/coroner CORONER_GRPC_ADDR=0.0.0.0:7070 CORONER_HTTP_ADDR=0.0.0.0:7071
# Numeric, so Kubernetes' runAsNonRoot can check it.
USER 10001:10001
VOLUME /var/lib/coroner
EXPOSE 7070 7071
# GET /healthz (no token needed) on the HTTP address, over HTTPS when CORONER_TLS_CERT is set.
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 CMD ["python3", "/usr/local/lib/coroner/healthcheck.py"]
CMD ["coronerd"]
