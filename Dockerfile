# Multi-stage build of the tfbench image (the same `cargo build --release` as
# the README). Fetch the real data first; it goes into the image from .data/:
#   bash scripts/fetch-test-data.sh
#   docker build --network host -t tfbench .
#   docker run --rm tfbench run --suite tensor --quick --format json
# On a machine without a registry, scripts/docker-build.sh makes the two base
# images locally (debootstrap + the host's Rust toolchain), fetches the data,
# builds this file and smoke-tests the image (see docs/docker.md).
FROM rust:1-slim-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock build.rs ./
# A workspace member (tfbench::bench's example crate): cargo reads its manifest.
COPY examples/cargo-bench ./examples/cargo-bench
COPY src ./src
COPY suites ./suites
COPY configs ./configs
# Compiled into the binary by include_str! (the inference suite's MiniLM
# reference embeddings, the tokenizer suite's reference token ids).
COPY tests/fixtures ./tests/fixtures
RUN cargo build --release --locked && strip target/release/tfbench

FROM debian:bookworm-slim
RUN useradd --create-home bench && mkdir /work && chown bench /work
COPY --from=build /src/target/release/tfbench /usr/local/bin/tfbench
COPY suites /opt/tfbench/suites
COPY configs /opt/tfbench/configs
# Real inputs from scripts/fetch-test-data.sh (.dockerignore picks them):
# GPT-2, LLaMA-2 and BERT (MiniLM) vocabularies, the King James Bible corpus
# and OpenBLAS 0.3.34 (scipy-openblas32, self-contained) for the tensor
# suite's impl=openblas. The 88 MB of MiniLM weights are left out; mount them
# for the inference suite's embed cases (skipped without them):
#   -v "$PWD/.data/minilm/model.safetensors:/opt/tfbench/data/minilm/model.safetensors:ro"
COPY .data /opt/tfbench/data
ENV TFBENCH_DATA_DIR=/opt/tfbench/data
USER bench
# Baselines and history are written under the working folder (./baselines):
# mount one to keep them between jobs.
WORKDIR /work
# Probe results are cached per machine here; mount a volume to keep them.
ENV TFBENCH_CACHE_DIR=/home/bench/.cache/tfbench
ENTRYPOINT ["tfbench"]
CMD ["run", "--suite", "tensor", "--quick"]
