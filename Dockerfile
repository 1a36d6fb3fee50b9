# coroner: coronerd, coroner-agent and the coroner CLI in one image.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --bins \
 && mkdir -p /out && cp target/release/coronerd target/release/coroner-agent target/release/coroner /out/

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends python3 ca-certificates && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/ /usr/local/bin/
COPY examples /opt/coroner/examples
# coronerd refuses 0.0.0.0 without tokens: run with -e CORONER_WRITE_TOKEN=... -e CORONER_READ_TOKEN=...
ENV CORONER_DATA_DIR=/var/lib/coroner CORONER_GRPC_ADDR=0.0.0.0:7070 CORONER_HTTP_ADDR=0.0.0.0:7071
VOLUME /var/lib/coroner
EXPOSE 7070 7071
CMD ["coronerd"]
