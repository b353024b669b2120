//! Description of the machine and toolchain a run happened on.
//!
//! Everything is read best-effort from `/proc`, `/sys` and `/etc`: a missing or
//! unreadable file leaves the field `None` or `"unknown"` and never fails, so the
//! same code serves Linux boxes, containers and other operating systems.

use serde::{Deserialize, Serialize};
use std::path::Path;

/// The machine, OS and build a run happened on.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
// Reports written before a field existed must still load as baselines.
#[serde(default)]
pub struct Environment {
    /// CPU model name.
    pub cpu_model: String,
    /// CPU vendor, e.g. `GenuineIntel`.
    pub cpu_vendor: String,
    /// Physical cores (distinct core ids over all packages), when known.
    pub physical_cores: Option<usize>,
    /// Logical CPUs (hardware threads) the OS knows about.
    pub logical_threads: usize,
    /// Logical CPUs this process may run on (affinity and cgroup limits applied).
    pub available_parallelism: usize,
    /// SIMD and matrix extensions present, with rustc `target_feature` names
    /// (e.g. `avx2`, `avx512f`, `amx-tile`).
    pub isa_flags: Vec<String>,
    /// The cap on the instruction sets tfbench's kernels used
    /// (`TFBENCH_MAX_ISA`: `scalar`, `avx2`, `avx512`, or `native` for none;
    /// see `crate::isa`). Results written before it existed ran uncapped.
    #[serde(default = "native")]
    pub max_isa: String,
    /// L1 data cache per core, bytes.
    pub l1d_cache_bytes: Option<u64>,
    /// L1 instruction cache per core, bytes.
    pub l1i_cache_bytes: Option<u64>,
    /// L2 cache as seen from CPU 0, bytes.
    pub l2_cache_bytes: Option<u64>,
    /// L3 cache as seen from CPU 0 (usually shared), bytes.
    pub l3_cache_bytes: Option<u64>,
    /// Total memory, bytes.
    pub total_memory_bytes: Option<u64>,
    /// Memory available to new allocations when the run started, bytes.
    pub available_memory_bytes: Option<u64>,
    /// Operating system, e.g. `Debian GNU/Linux 12 (bookworm)`.
    pub os_name: String,
    /// Kernel release, e.g. `6.1.0-18-amd64`.
    pub kernel_release: String,
    /// CPU architecture the binary was built for, e.g. `x86_64`.
    pub arch: String,
    /// cpufreq governor of CPU 0, e.g. `performance`, when exposed.
    pub cpu_governor: Option<String>,
    /// Whether turbo/boost frequencies are enabled, when exposed.
    pub turbo_enabled: Option<bool>,
    /// True when running under a hypervisor (a VM or cloud instance).
    pub hypervisor: bool,
    /// The kernel's transparent-huge-page mode (`always`, `madvise`, `never`)
    /// when readable: large kernel operands ask for huge pages, which only
    /// `always` and `madvise` grant.
    pub transparent_huge_pages: Option<String>,
    /// False when `TFBENCH_HUGE_PAGES=0` turned tfbench's huge-page requests
    /// off for this run (see `kernels::buffer`).
    pub huge_pages_requested: bool,
    /// The allocator under the counting allocator (`mimalloc`, or `system`
    /// with `TFBENCH_ALLOCATOR=system`): allocation-heavy workloads such as
    /// tokenization depend on it (see `crate::alloc`).
    pub allocator: String,
    /// tfbench version.
    pub tfbench_version: String,
    /// Git revision the binary was built from (`abc1234`, `abc1234-dirty` or `unknown`).
    pub git_revision: String,
    /// `rustc --version` of the compiler that built the binary.
    pub rustc_version: String,
    /// Cargo features enabled in the build.
    pub cargo_features: Vec<String>,
    /// Build profile: `debug` or `release`.
    pub build_profile: String,
    /// The `TFBENCH_INJECT_SLOWDOWN` test hook in force (`REGEX=FACTOR`),
    /// if any: results carrying it are not real measurements.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub injected_slowdown: Option<String>,
    /// The GPUs the run's GPU cases ran on (empty when none did): a GPU
    /// case's figures belong to its GPU as much as a CPU case's to the CPU.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<GpuEnvironment>,
    /// Set when another program measured these cases (a peer such as
    /// `scripts/torch_peer.py` writes `PyTorch 2.11.0`): the figures are its
    /// twins of tfbench's cases, so a shift of every case against tfbench's
    /// run is the two programs' difference, not the machine's drift.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer: Option<String>,
}

/// One GPU a run used, as its results record it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(default)]
pub struct GpuEnvironment {
    /// `cuda:N`.
    pub device: String,
    /// The GPU's name (`NVIDIA H100 80GB HBM3`).
    pub name: String,
    /// Its UUID: which card, not which kind.
    pub uuid: String,
    /// Compute capability, `major.minor`.
    pub compute_capability: String,
    /// Device memory in bytes.
    pub memory_bytes: u64,
    /// The driver's CUDA version (`13.0`), if known.
    pub driver_cuda_version: Option<String>,
    /// The API it was driven through when not CUDA (`WebGPU through wgpu, Vulkan`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api: Option<String>,
    /// The kind of adapter when not a CUDA GPU (`discrete GPU`, or
    /// `CPU-emulated` for lavapipe: its figures are the host CPU's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_type: Option<String>,
}

impl GpuEnvironment {
    /// What makes two GPUs the same kind for comparing figures: name,
    /// compute capability and memory (GiB), like the CPU fingerprint's
    /// model, not the card's serial.
    pub fn kind(&self) -> String {
        if let Some(api) = &self.api {
            // A WebGPU adapter: no compute capability, no memory size.
            return format!(
                "{} ({api}, {})",
                self.name,
                self.device_type.as_deref().unwrap_or("unknown type")
            );
        }
        let gib = (self.memory_bytes as f64 / (1u64 << 30) as f64).round() as u64;
        format!("{} (compute {}, {gib} GiB)", self.name, self.compute_capability)
    }
}

impl Environment {
    /// Reads the environment of this process. Never fails: whatever cannot be
    /// read is left `None` or `"unknown"`.
    pub fn gather() -> Self {
        let cpuinfo = read_trimmed("/proc/cpuinfo").unwrap_or_default();
        let cpu = parse_cpuinfo(&cpuinfo);
        let meminfo = read_trimmed("/proc/meminfo").unwrap_or_default();
        let caches = read_caches(Path::new("/sys/devices/system/cpu/cpu0/cache"));
        let available_parallelism = std::thread::available_parallelism().map_or(1, |n| n.get());
        let os_name = ["/etc/os-release", "/usr/lib/os-release"]
            .iter()
            .find_map(|p| read_trimmed(p).and_then(|s| parse_os_release(&s)))
            .unwrap_or_else(|| std::env::consts::OS.to_string());
        Self {
            cpu_model: cpu.model.unwrap_or_else(unknown),
            cpu_vendor: cpu.vendor.unwrap_or_else(unknown),
            physical_cores: cpu
                .physical_cores
                .or_else(|| sysfs_physical_cores(Path::new("/sys/devices/system/cpu"))),
            logical_threads: cpu.logical_threads.unwrap_or(available_parallelism),
            available_parallelism,
            isa_flags: isa_flags(&cpu.flags),
            max_isa: crate::isa::cap().name().to_string(),
            l1d_cache_bytes: caches.l1d,
            l1i_cache_bytes: caches.l1i,
            l2_cache_bytes: caches.l2,
            l3_cache_bytes: caches.l3,
            total_memory_bytes: crate::util::meminfo_bytes(&meminfo, "MemTotal"),
            available_memory_bytes: crate::util::meminfo_bytes(&meminfo, "MemAvailable"),
            os_name,
            kernel_release: read_trimmed("/proc/sys/kernel/osrelease").unwrap_or_else(unknown),
            arch: std::env::consts::ARCH.to_string(),
            cpu_governor: read_trimmed("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"),
            turbo_enabled: turbo_enabled(),
            hypervisor: cpu.flags.iter().any(|f| f == "hypervisor")
                || read_trimmed("/sys/hypervisor/type").is_some(),
            transparent_huge_pages: crate::kernels::buffer::thp_mode(),
            huge_pages_requested: crate::kernels::buffer::huge_pages_wanted(),
            allocator: crate::alloc::backend().name().to_string(),
            tfbench_version: env!("CARGO_PKG_VERSION").to_string(),
            git_revision: env!("TFBENCH_GIT_REVISION").to_string(),
            rustc_version: env!("TFBENCH_RUSTC_VERSION").to_string(),
            cargo_features: env!("TFBENCH_FEATURES")
                .split(',')
                .filter(|f| !f.is_empty())
                .map(str::to_string)
                .collect(),
            build_profile: if cfg!(debug_assertions) { "debug" } else { "release" }.to_string(),
            // Set by `run` from the hook it parsed (the environment module
            // reads the machine, not the harness's hooks).
            injected_slowdown: None,
            gpus: Vec::new(),
            peer: None,
        }
    }

    /// The GPUs of the run as `device: kind` lines, sorted (empty: none).
    pub fn gpu_kinds(&self) -> Vec<String> {
        let mut v: Vec<String> = self.gpus.iter().map(|g| format!("{}: {}", g.device, g.kind())).collect();
        v.sort();
        v
    }

    /// A stable identifier of the machine, used to key cached probe results.
    ///
    /// Built only from what identifies the hardware and OS install (CPU model,
    /// logical threads, total memory rounded to GiB, OS name, arch), so it
    /// survives reboots, kernel updates, frequency changes and memory pressure.
    pub fn fingerprint(&self) -> String {
        const GIB: f64 = (1u64 << 30) as f64;
        // Rounded because the kernel's MemTotal moves by a few MiB between
        // kernel versions and boot parameters.
        let memory_gib = self.total_memory_bytes.map_or(0, |b| (b as f64 / GIB).round() as u64);
        let key = format!(
            "{}\x1f{}\x1f{}\x1f{}\x1f{}",
            self.cpu_model, self.logical_threads, memory_gib, self.os_name, self.arch
        );
        format!("{:016x}", fnv1a_64(key.as_bytes()))
    }
}

/// `max_isa` of results written before the field existed: they ran uncapped.
fn native() -> String {
    crate::isa::IsaLevel::Native.name().to_string()
}

fn unknown() -> String {
    "unknown".to_string()
}

/// File contents without surrounding whitespace; `None` when unreadable or empty.
fn read_trimmed(path: impl AsRef<Path>) -> Option<String> {
    let s = std::fs::read_to_string(path).ok()?;
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_string())
}

/// 64-bit FNV-1a: tiny, and unlike std's `DefaultHasher` it is specified, so
/// fingerprints stay equal across processes, builds and Rust versions.
fn fnv1a_64(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

#[derive(Debug, Default, PartialEq)]
struct CpuInfo {
    model: Option<String>,
    vendor: Option<String>,
    flags: Vec<String>,
    physical_cores: Option<usize>,
    logical_threads: Option<usize>,
}

/// Parses `/proc/cpuinfo`: one blank-line-separated block per logical CPU.
fn parse_cpuinfo(text: &str) -> CpuInfo {
    let mut info = CpuInfo::default();
    let mut processors = 0usize;
    let mut cores = std::collections::BTreeSet::new();
    let mut package: Option<String> = None;
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else { continue };
        let (key, value) = (key.trim(), value.trim());
        match key {
            "processor" => processors += 1,
            // "Hardware"/"Model" are what some ARM kernels print instead.
            "model name" | "Model" | "Hardware" if info.model.is_none() && !value.is_empty() => {
                info.model = Some(value.to_string())
            }
            "vendor_id" | "CPU implementer" if info.vendor.is_none() => info.vendor = Some(value.to_string()),
            "flags" | "Features" if info.flags.is_empty() => {
                info.flags = value.split_whitespace().map(str::to_string).collect()
            }
            "physical id" => package = Some(value.to_string()),
            "core id" => {
                cores.insert((package.clone().unwrap_or_default(), value.to_string()));
            }
            _ => {}
        }
    }
    info.logical_threads = (processors > 0).then_some(processors);
    info.physical_cores = (!cores.is_empty()).then_some(cores.len());
    info
}

/// Distinct (package, core) pairs from sysfs topology, for kernels whose
/// `/proc/cpuinfo` has no core ids (most ARM ones).
fn sysfs_physical_cores(cpu_dir: &Path) -> Option<usize> {
    let mut cores = std::collections::BTreeSet::new();
    for entry in std::fs::read_dir(cpu_dir).ok()?.flatten() {
        let name = entry.file_name();
        let Some(index) = name.to_str().and_then(|n| n.strip_prefix("cpu")) else { continue };
        if index.is_empty() || !index.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let topology = entry.path().join("topology");
        if let (Some(package), Some(core)) =
            (read_trimmed(topology.join("physical_package_id")), read_trimmed(topology.join("core_id")))
        {
            cores.insert((package, core));
        }
    }
    (!cores.is_empty()).then_some(cores.len())
}

#[derive(Debug, Default, PartialEq)]
struct Caches {
    l1d: Option<u64>,
    l1i: Option<u64>,
    l2: Option<u64>,
    l3: Option<u64>,
}

/// Reads `index*/{level,type,size}` under a cpuN/cache directory.
fn read_caches(dir: &Path) -> Caches {
    let mut caches = Caches::default();
    let Ok(entries) = std::fs::read_dir(dir) else { return caches };
    for entry in entries.flatten() {
        let path = entry.path();
        if !entry.file_name().to_string_lossy().starts_with("index") {
            continue;
        }
        let (Some(level), Some(kind), Some(size)) = (
            read_trimmed(path.join("level")),
            read_trimmed(path.join("type")),
            read_trimmed(path.join("size")).and_then(|s| parse_size(&s)),
        ) else {
            continue;
        };
        let slot = match (level.as_str(), kind.as_str()) {
            ("1", "Data") => &mut caches.l1d,
            ("1", "Instruction") => &mut caches.l1i,
            ("2", _) => &mut caches.l2,
            ("3", _) => &mut caches.l3,
            _ => continue,
        };
        *slot = Some(size);
    }
    caches
}

/// Parses sysfs cache sizes such as `48K`, `2048K`, `1M` or `512`.
fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (digits, unit) = match s.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => s.split_at(i),
        None => (s, ""),
    };
    let n: u64 = digits.parse().ok()?;
    let factor = match unit.trim() {
        "" | "B" => 1,
        "K" | "KB" | "KiB" => 1 << 10,
        "M" | "MB" | "MiB" => 1 << 20,
        "G" | "GB" | "GiB" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(factor)
}

fn parse_os_release(text: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let value = line.strip_prefix("PRETTY_NAME=")?.trim();
        let value = value.trim_matches(|c| c == '"' || c == '\'').trim();
        (!value.is_empty()).then(|| value.to_string())
    })
}

/// intel_pstate reports the inverse ("no_turbo"); other drivers use "boost".
fn turbo_enabled() -> Option<bool> {
    if let Some(v) = read_trimmed("/sys/devices/system/cpu/intel_pstate/no_turbo") {
        return match v.as_str() {
            "0" => Some(true),
            "1" => Some(false),
            _ => None,
        };
    }
    match read_trimmed("/sys/devices/system/cpu/cpufreq/boost")?.as_str() {
        "1" => Some(true),
        "0" => Some(false),
        _ => None,
    }
}

/// The SIMD/matrix extensions from the list tfbench cares about that this CPU
/// has. std's detection also checks that the OS saves the wide registers, so it
/// is preferred; `/proc/cpuinfo` flags cover what std cannot detect on this
/// compiler (AMX is still unstable in std).
#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
fn isa_flags(cpuinfo_flags: &[String]) -> Vec<String> {
    let has = |flag: &str| cpuinfo_flags.iter().any(|f| f == flag);
    let mut found: Vec<(&str, bool)> = vec![
        ("sse", is_x86_feature_detected!("sse")),
        ("sse2", is_x86_feature_detected!("sse2")),
        ("sse3", is_x86_feature_detected!("sse3")),
        ("ssse3", is_x86_feature_detected!("ssse3")),
        ("sse4.1", is_x86_feature_detected!("sse4.1")),
        ("sse4.2", is_x86_feature_detected!("sse4.2")),
        ("avx", is_x86_feature_detected!("avx")),
        ("avx2", is_x86_feature_detected!("avx2")),
        ("fma", is_x86_feature_detected!("fma")),
        ("f16c", is_x86_feature_detected!("f16c")),
        ("avx512f", is_x86_feature_detected!("avx512f")),
        ("avx512bw", is_x86_feature_detected!("avx512bw")),
        ("avx512dq", is_x86_feature_detected!("avx512dq")),
        ("avx512vl", is_x86_feature_detected!("avx512vl")),
    ];
    found.extend([
        ("avx512vnni", is_x86_feature_detected!("avx512vnni")),
        ("avx512bf16", is_x86_feature_detected!("avx512bf16")),
        ("avx512fp16", is_x86_feature_detected!("avx512fp16")),
        ("avxvnni", is_x86_feature_detected!("avxvnni")),
    ]);
    found.extend([
        ("amx-tile", has("amx_tile")),
        ("amx-int8", has("amx_int8")),
        ("amx-bf16", has("amx_bf16")),
    ]);
    found.into_iter().filter(|&(_, present)| present).map(|(name, _)| name.to_string()).collect()
}

#[cfg(target_arch = "aarch64")]
fn isa_flags(_cpuinfo_flags: &[String]) -> Vec<String> {
    use std::arch::is_aarch64_feature_detected as detected;
    let found = [
        ("neon", detected!("neon")),
        ("fp16", detected!("fp16")),
        ("dotprod", detected!("dotprod")),
        ("i8mm", detected!("i8mm")),
        ("bf16", detected!("bf16")),
        ("sve", detected!("sve")),
        ("sve2", detected!("sve2")),
    ];
    found.into_iter().filter(|&(_, present)| present).map(|(name, _)| name.to_string()).collect()
}

#[cfg(not(any(target_arch = "x86", target_arch = "x86_64", target_arch = "aarch64")))]
fn isa_flags(_cpuinfo_flags: &[String]) -> Vec<String> {
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprint_is_stable_across_gathers() {
        let (a, b) = (Environment::gather(), Environment::gather());
        assert_eq!(a.fingerprint(), b.fingerprint());
        assert_eq!(a.fingerprint().len(), 16);
        assert!(a.fingerprint().chars().all(|c| c.is_ascii_hexdigit()));
    }

    #[test]
    fn fingerprint_ignores_volatile_fields() {
        let a = Environment::gather();
        let mut b = a.clone();
        b.available_memory_bytes = b.available_memory_bytes.map(|m| m / 2).or(Some(1));
        b.kernel_release.push_str("-rebuilt");
        b.cpu_governor = Some("powersave".into());
        b.turbo_enabled = Some(false);
        b.git_revision = "0000000-dirty".into();
        // A few MiB of MemTotal drift between kernels must not matter.
        b.total_memory_bytes = a.total_memory_bytes.map(|m| m.saturating_sub(8 << 20));
        assert_eq!(a.fingerprint(), b.fingerprint());
        b.logical_threads += 1;
        assert_ne!(a.fingerprint(), b.fingerprint());
    }

    #[test]
    fn fnv1a_matches_reference_vectors() {
        assert_eq!(fnv1a_64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a_64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a_64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn gather_reads_build_facts() {
        let env = Environment::gather();
        assert_eq!(env.tfbench_version, env!("CARGO_PKG_VERSION"));
        assert!(!env.git_revision.is_empty() && !env.rustc_version.is_empty());
        assert!(env.logical_threads >= 1 && env.available_parallelism >= 1);
        assert_eq!(env.arch, std::env::consts::ARCH);
    }

    #[test]
    fn parses_cpuinfo_blocks() {
        let text = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Test CPU\nphysical id\t: 0\n\
                    core id\t: 0\nflags\t\t: fpu sse avx512f hypervisor\n\n\
                    processor\t: 1\nvendor_id\t: GenuineIntel\nmodel name\t: Test CPU\nphysical id\t: 0\n\
                    core id\t: 0\nflags\t\t: fpu sse avx512f hypervisor\n\n\
                    processor\t: 2\nphysical id\t: 0\ncore id\t: 1\n";
        let info = parse_cpuinfo(text);
        assert_eq!(info.model.as_deref(), Some("Test CPU"));
        assert_eq!(info.vendor.as_deref(), Some("GenuineIntel"));
        assert_eq!(info.logical_threads, Some(3));
        assert_eq!(info.physical_cores, Some(2));
        assert!(info.flags.iter().any(|f| f == "avx512f"));
        assert_eq!(parse_cpuinfo(""), CpuInfo::default());
    }

    #[test]
    fn parses_sizes_and_os_release() {
        assert_eq!(parse_size("48K"), Some(48 << 10));
        assert_eq!(parse_size("107520K"), Some(107_520 << 10));
        assert_eq!(parse_size("1M"), Some(1 << 20));
        assert_eq!(parse_size("512"), Some(512));
        assert_eq!(parse_size("x"), None);
        // The /proc/meminfo parser's assertions live with it in util.rs.
        let os = "NAME=\"Debian GNU/Linux\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n";
        assert_eq!(parse_os_release(os).as_deref(), Some("Debian GNU/Linux 12 (bookworm)"));
        assert_eq!(parse_os_release("NAME=x"), None);
    }

    #[test]
    fn sysfs_core_count_matches_cpuinfo_when_both_exist() {
        let from_cpuinfo = parse_cpuinfo(&read_trimmed("/proc/cpuinfo").unwrap_or_default()).physical_cores;
        let from_sysfs = sysfs_physical_cores(Path::new("/sys/devices/system/cpu"));
        if let (Some(a), Some(b)) = (from_cpuinfo, from_sysfs) {
            assert_eq!(a, b);
        }
        assert_eq!(sysfs_physical_cores(Path::new("/nonexistent/tfbench")), None);
    }

    #[test]
    fn missing_sysfs_gives_none() {
        assert_eq!(read_caches(Path::new("/nonexistent/tfbench/cache")), Caches::default());
        assert_eq!(read_trimmed("/nonexistent/tfbench/file"), None);
    }

    #[test]
    fn old_reports_still_deserialize() {
        let env: Environment =
            serde_json::from_str(r#"{"cpu_model":"Old CPU"}"#).expect("partial JSON loads");
        assert_eq!(env.cpu_model, "Old CPU");
        assert_eq!(env.logical_threads, 0);
        assert_eq!(env.max_isa, "native", "results from before the ISA cap ran uncapped");
    }
}
