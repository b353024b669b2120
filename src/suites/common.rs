//! Parameter helpers every suite uses: a reproducible seed per case, a
//! string parameter from a fixed set, element counts, 2-D shapes, and a
//! case's thread pool (sized against [`crate::device::cpu`]). They
//! live here, not in a suite, so that no suite imports another.

use crate::plan::{Case, ParamValue};
use anyhow::{Result, bail};

/// A reproducible seed derived from the case id (FNV-1a).
pub(crate) fn seed(case: &Case) -> u64 {
    case.id.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
}

/// The string parameter `key`, which must be one of `valid`.
pub(crate) fn choice<'a>(case: &Case, key: &str, valid: &[&'a str]) -> Result<&'a str> {
    let got = case.str(key)?;
    match valid.iter().find(|v| **v == got) {
        Some(v) => Ok(v),
        None => bail!("case {}: `{key}` = `{got}` is not valid; valid: {}", case.id, valid.join(", ")),
    }
}

/// The positive integer parameter `elements`.
pub(crate) fn elements(case: &Case) -> Result<usize> {
    let n = case.usize("elements")?;
    if n == 0 {
        bail!("case {}: `elements` must be positive", case.id);
    }
    Ok(n)
}

/// A two-dimensional `shape` parameter, `ROWSxCOLS`.
pub(crate) fn shape2(case: &Case) -> Result<(usize, usize)> {
    match case.shape("shape")?.as_slice() {
        &[r, c] => Ok((r, c)),
        other => bail!("case {}: `shape` must be ROWSxCOLS, got {} dimensions", case.id, other.len()),
    }
}

/// A dedicated pool when `threads` is an explicit count, `None` (the global
/// pool) when it is `all`, together with the thread count to use.
pub(crate) fn thread_pool(case: &Case) -> Result<(Option<rayon::ThreadPool>, usize)> {
    let threads = case.threads()?;
    match case.params.get("threads") {
        Some(ParamValue::Int(_)) => {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build()?;
            Ok((Some(pool), threads))
        }
        _ => Ok((None, threads)),
    }
}

/// The width of the dedicated pool [`thread_pool`] builds for `case` (an
/// explicit `threads = N`), `None` when the case runs on the run's own pool:
/// the default of [`crate::suites::Suite::pool_threads`].
pub(crate) fn explicit_threads(case: &Case) -> Option<usize> {
    match case.params.get("threads") {
        Some(ParamValue::Int(n)) if *n >= 1 => Some(*n as usize),
        _ => None,
    }
}

/// Runs `f` inside `pool`, or on the current (global) pool when `None`.
///
/// When the calling thread is already a worker of a pool as wide as `pool`
/// (the harness samples such a case from inside one, see
/// [`crate::harness::sampler::on_pool_of`]), `f` runs right here: its
/// parallel loops get the same number of threads either way, and nothing
/// is handed to `pool`'s worker. Handing it over on every iteration meant
/// waking that worker each time; on a busy core the wake-up waited for the
/// scheduler's next tick, and a 64x64x64 matmul on one thread measured
/// 4.00 ms (one tick at 250 Hz) per iteration instead of 17 us (issue 45).
pub(crate) fn install<R: Send>(pool: Option<&rayon::ThreadPool>, f: impl FnOnce() -> R + Send) -> R {
    match pool {
        Some(p) if !runs_here(p) => p.install(f),
        _ => f(),
    }
}

/// Whether work for `pool` may run on the calling thread as it is: the
/// thread is a rayon worker and its pool has `pool`'s width.
fn runs_here(pool: &rayon::ThreadPool) -> bool {
    rayon::current_thread_index().is_some() && rayon::current_num_threads() == pool.current_num_threads()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn pool(n: usize) -> rayon::ThreadPool {
        rayon::ThreadPoolBuilder::new().num_threads(n).build().expect("a pool")
    }

    #[test]
    fn install_runs_on_the_calling_worker_of_a_pool_as_wide() {
        let (outer, inner) = (pool(1), pool(1));
        // Inside a one-thread pool, the case's own one-thread pool is not
        // woken: the work runs on the calling thread, still one thread wide.
        let (caller, ran_on, width) = outer.install(|| {
            let caller = std::thread::current().id();
            let (ran_on, width) =
                install(Some(&inner), || (std::thread::current().id(), rayon::current_num_threads()));
            (caller, ran_on, width)
        });
        assert_eq!(ran_on, caller);
        assert_eq!(width, 1);
        // From a pool of another width, or from outside any pool, the work
        // goes to `inner`, so its loops keep `inner`'s width.
        let wide = pool(3);
        let (caller, ran_on, width) = wide.install(|| {
            let caller = std::thread::current().id();
            let (ran_on, width) =
                install(Some(&inner), || (std::thread::current().id(), rayon::current_num_threads()));
            (caller, ran_on, width)
        });
        assert_ne!(ran_on, caller);
        assert_eq!(width, 1);
        let outside = std::thread::current().id();
        assert_ne!(install(Some(&inner), || std::thread::current().id()), outside);
        assert_eq!(install(None, || std::thread::current().id()), outside);
    }

    #[test]
    fn explicit_threads_mirrors_thread_pool() {
        let case = |threads: Option<ParamValue>| {
            let mut p = BTreeMap::new();
            if let Some(t) = threads {
                p.insert("threads".to_string(), t);
            }
            Case::new("tensor", "matmul", p)
        };
        for (param, want) in
            [(Some(ParamValue::Int(1)), Some(1)), (Some(ParamValue::Int(3)), Some(3)), (None, None)]
        {
            let c = case(param);
            assert_eq!(explicit_threads(&c), want);
            let (built, _) = thread_pool(&c).unwrap();
            assert_eq!(built.map(|p| p.current_num_threads()), want);
        }
        assert_eq!(explicit_threads(&case(Some(ParamValue::Str("all".into())))), None);
    }
}
