# Sourced by scripts/docker-build.sh and scripts/docker-smoke.sh: picks the
# container engine and the flags its containers need on this machine.
#
#   engine      podman (preferred) or docker; $TFBENCH_ENGINE overrides
#   eflags      extra `run`/`build` flags that make containers start here,
#               found by detect_engine_flags IMAGE (empty on a usual host)
#
# Why flags: in a sandbox without CAP_SYS_RESOURCE (this project's dev VMs),
# crun and runc fail to apply podman's default rlimits (`setrlimit RLIMIT_NPROC:
# Operation not permitted`), and crun refuses the hybrid cgroup v1/v2 layout
# (`cgroups in hybrid mode not supported`). runc with the rlimits the engine
# already runs under (open files: `ulimit -Hn`; processes: the smaller of
# `ulimit -Hu` and kernel.pid_max, podman's own cap) starts. Each candidate is
# tried with a trivial container, so a usual host keeps the engine's defaults.

engine_die() { echo "docker: error: $*" >&2; exit 1; }

engine="${TFBENCH_ENGINE:-}"
if [ -z "$engine" ]; then
    if command -v podman >/dev/null; then
        engine=podman
    elif command -v docker >/dev/null && docker info >/dev/null 2>&1; then
        engine=docker
    else
        engine_die "neither podman nor a running docker daemon found; install one (apt-get install -y podman runc)"
    fi
fi
case "$engine" in
    podman | docker) command -v "$engine" >/dev/null || engine_die "$engine is not installed" ;;
    *) engine_die "TFBENCH_ENGINE must be podman or docker, not '$engine'" ;;
esac

eflags=()
detect_engine_flags() {
    local image="$1" nofile nproc pid_max err
    nofile="$(ulimit -Hn)"
    nproc="$(ulimit -Hu)"
    pid_max="$(cat /proc/sys/kernel/pid_max 2>/dev/null || echo "$nproc")"
    if [ "$nproc" = unlimited ] || { [ "$pid_max" != unlimited ] && [ "$pid_max" -lt "$nproc" ]; }; then
        nproc="$pid_max"
    fi
    local limits=(--ulimit "nofile=$nofile:$nofile" --ulimit "nproc=$nproc:$nproc")
    local -a candidates=("")
    # `docker build` takes --ulimit but no --runtime; podman takes both.
    candidates+=("${limits[*]}")
    if [ "$engine" = podman ] && command -v runc >/dev/null; then
        candidates+=("--runtime runc ${limits[*]}")
    fi
    for c in "${candidates[@]}"; do
        # shellcheck disable=SC2206 # the candidates are flag lists without spaces inside a flag
        local -a flags=($c)
        if err="$("$engine" run --rm --network none "${flags[@]}" --entrypoint true "$image" 2>&1)"; then
            eflags=("${flags[@]}")
            [ -z "$c" ] || echo "docker: $engine containers start here with: $c" >&2
            return 0
        fi
        echo "docker: $engine run ${c:-(defaults)}: ${err##*$'\n'}" >&2
    done
    if [ "$engine" = podman ] && ! command -v runc >/dev/null; then
        engine_die "no container starts with $engine here; try installing runc (apt-get install -y runc)"
    fi
    engine_die "no container starts with $engine here (attempts above)"
}
