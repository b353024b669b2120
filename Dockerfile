# Multi-stage build of the tfbench image used in CI (the same `cargo build
# --release` as the README):
#   docker build -t tfbench .
#   docker run --rm tfbench run --suite tensor --quick --format json
FROM rust:1-slim-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock build.rs ./
COPY src ./src
COPY suites ./suites
COPY configs ./configs
RUN cargo build --release --locked && strip target/release/tfbench

FROM debian:bookworm-slim
# OpenBLAS for the tensor suite's impl=openblas (loaded at run time; its
# cases are skipped without it).
RUN apt-get update && apt-get install -y --no-install-recommends libopenblas0-pthread \
    && rm -rf /var/lib/apt/lists/*
RUN useradd --create-home bench && mkdir /work && chown bench /work
COPY --from=build /src/target/release/tfbench /usr/local/bin/tfbench
COPY suites /opt/tfbench/suites
COPY configs /opt/tfbench/configs
USER bench
# Baselines and history are written under the working folder (./baselines):
# mount one to keep them between jobs.
WORKDIR /work
# Probe results are cached per machine here; mount a volume to keep them.
ENV TFBENCH_CACHE_DIR=/home/bench/.cache/tfbench
ENTRYPOINT ["tfbench"]
CMD ["run", "--suite", "tensor", "--quick"]
