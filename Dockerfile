# Multi-stage build of the tfbench image used in CI:
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
RUN useradd --create-home bench
COPY --from=build /src/target/release/tfbench /usr/local/bin/tfbench
COPY configs /opt/tfbench/configs
COPY baselines /opt/tfbench/baselines
USER bench
WORKDIR /home/bench
# Probe results are cached per machine here; mount a volume to keep them.
ENV TFBENCH_CACHE_DIR=/home/bench/.cache/tfbench
ENTRYPOINT ["tfbench"]
CMD ["run", "--suite", "tensor", "--quick"]
