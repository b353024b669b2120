//! The CPU execution context: the one place that owns the CPU's threads.
//!
//! A run sizes one process-wide pool from `--threads` ([`configure_run_pool`]);
//! a case that asks for an explicit `threads = N` gets a dedicated pool of its
//! own ([`Context`]); kernels that split work ask how wide the pool they run
//! in is ([`current_threads`]). Nothing else in the crate reads rayon's
//! thread counts, so a capped context (a mobile profile's threads, later its
//! cores) is one change here, not one in every suite.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// How many threads a case asks for, read from its `threads` parameter by
/// the plan ([`crate::plan::Case::threads_request`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Threads {
    /// The run's own pool (`threads = "all"`, or no parameter): as wide as
    /// `--threads` made it.
    Run,
    /// A dedicated pool of exactly this many threads (`threads = N`).
    Exactly(usize),
}

/// What a case runs with on the CPU: its thread count and, for an explicit
/// count, the dedicated pool its iterations run in. Built by the harness for
/// every case and handed to [`crate::suites::Suite::prepare`].
#[derive(Clone)]
pub struct Context {
    threads: usize,
    pool: Option<Arc<rayon::ThreadPool>>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("threads", &self.threads)
            .field("dedicated", &self.pool.is_some())
            .finish()
    }
}

impl Context {
    /// The context of a case asking for `threads`: the run's pool, or a
    /// dedicated pool of that width (built here; an error when the system
    /// cannot start that many threads).
    pub fn new(threads: Threads) -> anyhow::Result<Context> {
        match threads {
            Threads::Run => Ok(Context::run()),
            Threads::Exactly(n) => {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(n.max(1))
                    .build()
                    .map_err(|e| anyhow::anyhow!("cannot start a pool of {n} threads: {e}"))?;
                Ok(Context { threads: n.max(1), pool: Some(Arc::new(pool)) })
            }
        }
    }

    /// The run's own pool, all of its threads.
    pub fn run() -> Context {
        Context { threads: run_threads(), pool: None }
    }

    /// Threads the case's work may use.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// The dedicated pool of an explicit `threads = N`, `None` on the run's
    /// pool. A workload keeps a clone to run its iterations in.
    pub fn pool(&self) -> Option<Arc<rayon::ThreadPool>> {
        self.pool.clone()
    }

    /// The width of the dedicated pool, `None` on the run's pool: the width
    /// the harness samples the case from ([`on_pool_of`]).
    pub fn dedicated_width(&self) -> Option<usize> {
        self.pool.as_ref().map(|_| self.threads)
    }

    /// Runs `f` with this context's threads ([`install`] on its pool).
    pub fn install<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        install(self.pool.as_deref(), f)
    }
}

/// The run pool's width once known (0: not asked yet).
static RUN_THREADS: AtomicUsize = AtomicUsize::new(0);

/// Sizes the run's pool (rayon's global pool) to `threads`; a second call
/// in one process keeps the first size (rayon builds the global pool once),
/// which is what tests running in one process want.
pub fn configure_run_pool(threads: usize) -> anyhow::Result<()> {
    let built = rayon::ThreadPoolBuilder::new().num_threads(threads).build_global();
    RUN_THREADS.store(global_width(), Ordering::Relaxed);
    match built {
        Ok(()) => Ok(()),
        Err(_) if run_threads() == threads => Ok(()),
        Err(e) => anyhow::bail!("cannot size the pool to {threads} threads: {e}"),
    }
}

/// Worker threads of the run's pool (what `threads = "all"` means), the
/// same answer from inside a case's dedicated pool as from outside it.
pub fn run_threads() -> usize {
    match RUN_THREADS.load(Ordering::Relaxed) {
        0 => {
            let n = global_width();
            RUN_THREADS.store(n, Ordering::Relaxed);
            n
        }
        n => n,
    }
}

/// The global pool's width: rayon answers for it outside any pool, so ask
/// from a thread of our own when the caller is inside one.
fn global_width() -> usize {
    if rayon::current_thread_index().is_none() {
        return rayon::current_num_threads();
    }
    std::thread::scope(|s| s.spawn(rayon::current_num_threads).join().unwrap_or(1))
}

/// The width of the pool the calling code runs in: what a kernel splits its
/// work over (inside a case's dedicated pool, that pool's width).
pub fn current_threads() -> usize {
    rayon::current_num_threads()
}

/// Runs `f` inside `pool`, or on the current (global) pool when `None`.
///
/// When the calling thread is already a worker of a pool as wide as `pool`
/// (the harness samples such a case from inside one, see [`on_pool_of`]),
/// `f` runs right here: its parallel loops get the same number of threads
/// either way, and nothing is handed to `pool`'s worker. Handing it over on
/// every iteration meant waking that worker each time; on a busy core the
/// wake-up waited for the scheduler's next tick, and a 64x64x64 matmul on
/// one thread measured 4.00 ms (one tick at 250 Hz) per iteration instead of
/// 17 us (issue 45).
pub fn install<R: Send>(pool: Option<&rayon::ThreadPool>, f: impl FnOnce() -> R + Send) -> R {
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

/// Runs `f` on a thread of the global rayon pool (the calling thread blocks
/// until it returns), so a workload's parallel loops start from inside the
/// pool. Called from outside, every `par_iter` would hand its job across to
/// a sleeping worker and wait for it to come back: two wake-ups per call,
/// which cost a model's token step (200 small matrix-vector products) about
/// a tenth of its time. Inside, the caller is itself a worker and the work
/// starts at once; with one thread nothing crosses threads at all.
pub fn on_pool<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    rayon::scope(|_| f())
}

/// [`on_pool`] for a case whose workload runs its iterations in a dedicated
/// pool of `threads` ([`Context::dedicated_width`]): `f` runs on a worker of
/// a harness pool of that width, where the workload's [`install`] runs each
/// iteration on the calling thread. From the global pool every iteration was
/// handed to the dedicated pool's worker and back, two wake-ups inside the
/// timed region; on a busy core each could wait for the scheduler's next
/// tick (issue 45: 4 ms per iteration of a 17 us case). `None`, or the
/// global pool's own width, is [`on_pool`].
pub fn on_pool_of<R: Send>(threads: Option<usize>, f: impl FnOnce() -> R + Send) -> R {
    match threads.filter(|&n| n >= 1 && n != rayon::current_num_threads()) {
        Some(n) => harness_pool(n).install(f),
        None => on_pool(f),
    }
}

/// The harness's pool of `n` threads, built on first use and kept for the
/// process (a run asks for a few widths at most; idle, its threads sleep).
fn harness_pool(n: usize) -> &'static rayon::ThreadPool {
    static POOLS: Mutex<Vec<(usize, &'static rayon::ThreadPool)>> = Mutex::new(Vec::new());
    let mut pools = POOLS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, p)) = pools.iter().find(|(w, _)| *w == n) {
        return p;
    }
    let built = rayon::ThreadPoolBuilder::new()
        .num_threads(n)
        .thread_name(move |i| format!("tfbench-case-{n}-{i}"))
        .build()
        // Out of threads: say so as the case's failure (the runner catches it).
        .unwrap_or_else(|e| panic!("cannot start a pool of {n} threads for the case: {e}"));
    let p: &'static rayon::ThreadPool = Box::leak(Box::new(built));
    pools.push((n, p));
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Case, ParamValue};
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
            let (ran_on, width) = install(Some(&inner), || (std::thread::current().id(), current_threads()));
            (caller, ran_on, width)
        });
        assert_eq!(ran_on, caller);
        assert_eq!(width, 1);
        // From a pool of another width, or from outside any pool, the work
        // goes to `inner`, so its loops keep `inner`'s width.
        let wide = pool(3);
        let (caller, ran_on, width) = wide.install(|| {
            let caller = std::thread::current().id();
            let (ran_on, width) = install(Some(&inner), || (std::thread::current().id(), current_threads()));
            (caller, ran_on, width)
        });
        assert_ne!(ran_on, caller);
        assert_eq!(width, 1);
        let outside = std::thread::current().id();
        assert_ne!(install(Some(&inner), || std::thread::current().id()), outside);
        assert_eq!(install(None, || std::thread::current().id()), outside);
    }

    /// A case's `threads` parameter becomes its context: an explicit count a
    /// dedicated pool that wide (run in by `install`), `all` or none the
    /// run's pool, with the run's width even when asked from inside a pool.
    #[test]
    fn a_cases_threads_parameter_becomes_its_context() {
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
            let ctx = Context::new(case(param).threads_request().unwrap()).unwrap();
            assert_eq!(ctx.dedicated_width(), want);
            assert_eq!(ctx.pool().map(|p| p.current_num_threads()), want);
            assert_eq!(ctx.install(current_threads), want.unwrap_or_else(run_threads));
        }
        let all = case(Some(ParamValue::Str("all".into()))).threads_request().unwrap();
        assert_eq!(all, Threads::Run);
        assert!(case(Some(ParamValue::Int(0))).threads_request().is_err());
        assert_eq!(pool(3).install(run_threads), run_threads(), "the run's width from inside a pool");
    }

    #[test]
    fn on_pool_of_runs_at_the_asked_width() {
        assert_eq!(on_pool_of(Some(1), current_threads), 1);
        assert_eq!(on_pool_of(Some(3), current_threads), 3);
        assert_eq!(on_pool_of(None, current_threads), run_threads());
    }
}
