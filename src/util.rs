//! Small shared helpers: seeded random data, atomic file writes and the
//! `/proc/meminfo` reader.

use rand::SeedableRng;
use rand::rngs::StdRng;
use rand_distr::{Distribution, StandardNormal, Uniform};

/// A reproducible random generator from a seed.
pub fn rng(seed: u64) -> StdRng {
    StdRng::seed_from_u64(seed)
}

/// Values per independently seeded chunk of [`randn`] and [`uniform`]: the
/// data depends only on the seed, never on the thread count.
const CHUNK: usize = 1 << 16;

/// The seed of chunk `k` of a stream seeded with `seed` (SplitMix64 step).
fn chunk_seed(seed: u64, k: usize) -> u64 {
    let mut z = seed.wrapping_add((k as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Values below which a fill stays on the calling pool: a pool hand-off
/// costs more than generating them.
const WIDE_FILL_MIN: usize = 1 << 18;

/// Fills `n` values chunk by chunk in parallel, each chunk from its own seed,
/// on [`fill_pool`] when there is one and the fill is large.
fn fill_chunks(n: usize, seed: u64, f: impl Fn(&mut StdRng, &mut [f32]) + Sync + Send) -> Vec<f32> {
    use rayon::prelude::*;
    let fill = move || {
        let mut out = vec![0.0f32; n];
        out.par_chunks_mut(CHUNK).enumerate().for_each(|(k, chunk)| f(&mut rng(chunk_seed(seed, k)), chunk));
        out
    };
    match fill_pool() {
        Some(pool)
            if n >= WIDE_FILL_MIN && pool.current_num_threads() > crate::backend::cpu::current_threads() =>
        {
            pool.install(fill)
        }
        _ => fill(),
    }
}

/// A pool with every CPU this process may use, for generating seeded inputs
/// whatever `--threads` says: preparation is never timed, and with
/// `configs/ci.toml`'s one thread, generating the inputs of the 4096x4096
/// cases on one core was most of what `ab` spent outside its samples (each
/// round prepares every case again in fresh processes). `None` on a machine
/// with several NUMA nodes, where the threads that first touch a page decide
/// its node: there the timing pool generates its own data, so a run on fewer
/// threads keeps its memory where its threads run.
fn fill_pool() -> Option<&'static rayon::ThreadPool> {
    static POOL: std::sync::OnceLock<Option<rayon::ThreadPool>> = std::sync::OnceLock::new();
    POOL.get_or_init(|| {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let numa = std::path::Path::new("/sys/devices/system/node/node1").exists();
        if cpus < 2 || numa {
            return None;
        }
        rayon::ThreadPoolBuilder::new()
            .num_threads(cpus)
            .thread_name(|i| format!("tfbench-fill-{i}"))
            .build()
            .ok()
    })
    .as_ref()
}

/// `n` standard-normal f32 values from `seed`.
pub fn randn(n: usize, seed: u64) -> Vec<f32> {
    fill_chunks(n, seed, |r, c| c.iter_mut().for_each(|x| *x = StandardNormal.sample(r)))
}

/// `n` values uniform in `[lo, hi)` from `seed`.
pub fn uniform(n: usize, lo: f32, hi: f32, seed: u64) -> Vec<f32> {
    // lo < hi is the caller's contract; fall back to a point mass otherwise.
    match Uniform::new(lo, hi) {
        Ok(d) => fill_chunks(n, seed, |r, c| c.iter_mut().for_each(|x| *x = d.sample(r))),
        Err(_) => vec![lo; n],
    }
}

/// `count` distinct-ish indices in `0..n` from `seed` (always including the
/// first and last index so edges are exercised): which values a check
/// samples, shared by the suites' references and a backend's own checks.
pub fn sample_indices(n: usize, count: usize, seed: u64) -> Vec<usize> {
    use rand::RngExt;
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let mut v: Vec<usize> = (0..count.saturating_sub(2)).map(|_| rng.random_range(0..n)).collect();
    v.push(0);
    v.push(n - 1);
    v.sort_unstable();
    v.dedup();
    v
}

/// Writes `bytes` to `path` atomically: a temporary file in the same folder,
/// flushed to disk, then renamed over the target. A crash leaves either the
/// old file or the new one, never half of one.
pub fn write_atomic(path: &std::path::Path, bytes: &[u8]) -> anyhow::Result<()> {
    use anyhow::Context;
    use std::io::Write;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("output");
    // Process id + a process-wide counter make the temporary name unique
    // among concurrent writers; `create_new` refuses to share one regardless.
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let tmp = dir.join(format!(".{name}.{}.{n}.{nanos}.tmp", std::process::id()));
    let result = (|| {
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.with_context(|| format!("cannot write {}", path.display()))
}

/// A `/proc/meminfo` entry in bytes (the file says `kB` but means KiB).
pub fn meminfo_bytes(meminfo: &str, key: &str) -> Option<u64> {
    meminfo.lines().find_map(|line| {
        let (k, rest) = line.split_once(':')?;
        if k.trim() != key {
            return None;
        }
        let mut parts = rest.split_whitespace();
        let n: u64 = parts.next()?.parse().ok()?;
        match parts.next() {
            Some("kB") => n.checked_mul(1024),
            None => Some(n),
            Some(_) => None,
        }
    })
}

/// `MemAvailable` from /proc/meminfo in bytes (None where unreadable): what
/// suites check before sizing large buffers, so a case that would swap is
/// skipped instead.
pub fn mem_available() -> Option<u64> {
    meminfo_bytes(&std::fs::read_to_string("/proc/meminfo").ok()?, "MemAvailable")
}

/// A duration written with its unit (`500ms`, `0.2s`, `1500us`) in
/// milliseconds: the one parser of latency bounds with units (`load
/// --goodput`, the serving suite's `slo`). The unit is required and the
/// value must be positive and finite; the error says which rule failed.
pub fn parse_duration_ms(text: &str) -> Result<f64, String> {
    let v = text.trim();
    let (num, scale) = if let Some(n) = v.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = v.strip_suffix("us") {
        (n, 1e-3)
    } else if let Some(n) = v.strip_suffix('s') {
        (n, 1e3)
    } else {
        return Err(format!("`{v}` has no unit (us, ms or s)"));
    };
    let x: f64 = num.trim().parse().map_err(|_| format!("`{v}`: `{num}` is not a number"))?;
    if !(x.is_finite() && x > 0.0) {
        return Err(format!("`{v}`: must be a positive number"));
    }
    Ok(x * scale)
}

#[cfg(test)]
mod tests {
    #[test]
    fn durations_need_a_unit_and_a_positive_value() {
        use super::parse_duration_ms as p;
        assert_eq!(p("500ms"), Ok(500.0));
        assert_eq!(p(" 0.2s"), Ok(200.0));
        assert_eq!(p("1500us"), Ok(1.5));
        assert!(p("500").unwrap_err().contains("no unit"));
        assert!(p("-5ms").unwrap_err().contains("positive"));
        assert!(p("0s").unwrap_err().contains("positive"));
        assert!(p("fastms").unwrap_err().contains("not a number"));
    }

    #[test]
    fn parses_meminfo() {
        let meminfo =
            "MemTotal:       24684084 kB\nMemFree:        21866888 kB\nMemAvailable:   24313572 kB\n";
        assert_eq!(super::meminfo_bytes(meminfo, "MemTotal"), Some(24_684_084 * 1024));
        assert_eq!(super::meminfo_bytes(meminfo, "MemAvailable"), Some(24_313_572 * 1024));
        assert_eq!(super::meminfo_bytes(meminfo, "Missing"), None);
    }

    #[test]
    fn seeded_data_is_reproducible_and_not_constant() {
        let a = super::randn(1000, 7);
        assert_eq!(a, super::randn(1000, 7));
        assert_ne!(a, super::randn(1000, 8));
        let mean: f32 = a.iter().sum::<f32>() / 1000.0;
        assert!(mean.abs() < 0.15, "mean {mean}");
        let u = super::uniform(1000, 1.0, 2.0, 3);
        assert!(u.iter().all(|&x| (1.0..2.0).contains(&x)));
        // Across chunk boundaries the stream is not repeated.
        let big = super::randn(3 * super::CHUNK, 5);
        assert_ne!(big[..100], big[super::CHUNK..super::CHUNK + 100]);
        assert_eq!(big, super::randn(3 * super::CHUNK, 5));
    }

    #[test]
    fn seeded_data_does_not_depend_on_the_pool_that_fills_it() {
        // Inside a one-thread pool a large fill moves to the wide fill pool
        // (on a machine with several CPUs and one NUMA node); the values
        // must be those the calling pool would have made.
        let n = super::WIDE_FILL_MIN + 7;
        let one = rayon::ThreadPoolBuilder::new().num_threads(1).build().expect("a pool");
        let inside = one.install(|| (super::randn(n, 9), super::uniform(n, -1.0, 3.0, 4)));
        let serial: Vec<f32> = (0..n.div_ceil(super::CHUNK))
            .flat_map(|k| {
                let len = super::CHUNK.min(n - k * super::CHUNK);
                let mut r = super::rng(super::chunk_seed(9, k));
                (0..len).map(move |_| rand_distr::Distribution::sample(&rand_distr::StandardNormal, &mut r))
            })
            .collect();
        assert_eq!(inside.0, serial);
        assert_eq!(inside.0, super::randn(n, 9));
        assert_eq!(inside.1, super::uniform(n, -1.0, 3.0, 4));
    }
}
