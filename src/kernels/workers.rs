//! Persistent worker threads for the GEMM drivers, and a barrier to go
//! with them. Both wait by spinning for a short while before they sleep.
//!
//! Why not a fresh scoped thread per call: creating and joining one costs
//! 30-60 us here, and on a shared virtual machine an idle vCPU that must be
//! woken can take longer still. Measured in one process on the 2-core dev
//! machine (2026-11-23), in blocks of calls alternating between scoped
//! threads, these workers and one thread, the median two-thread time with
//! workers over that with scoped threads was 0.55 at 128^3, 0.67-0.77 at
//! 256^3, 0.82-0.87 at 128x768x768, 0.91-0.94 at 512^3 and 0.90-0.93 at
//! 1024^3 (two runs); at 128^3 two scoped threads were slower than one.
//! A worker that spins for a moment after each call is already running
//! when the next call comes, as OpenBLAS's and OpenMP's are.
//!
//! Why not rayon: the GEMM workers meet at barriers, and a rayon job that
//! blocks on a barrier can deadlock a pool whose other workers are busy (or
//! fewer than the barrier expects). These workers run one job at a time, all
//! of them, so a barrier among them always completes.
//!
//! One caller at a time owns the pool; a second concurrent caller (a test
//! thread, a caller inside a rayon pool) gets scoped threads instead, which
//! are slower to start but never wait for the pool.

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, TryLockError};
use std::time::{Duration, Instant};

/// How long a waiter spins before it sleeps. Longer than the gaps between
/// back-to-back GEMM calls and between a block's barriers (tens of us),
/// short enough that spinning after a product's last call costs other work
/// on the machine little.
const SPIN: Duration = Duration::from_micros(500);

/// Spin-then-sleep waiting on a condition that other threads make true.
#[derive(Default)]
struct Parking {
    lock: Mutex<()>,
    wake: Condvar,
    sleepers: AtomicUsize,
}

impl Parking {
    /// Returns once `done()` holds. `done` must read with `SeqCst`, and
    /// whoever makes it true must call [`Parking::notify`] after (also
    /// `SeqCst`): then either the waiter sees the change or the notifier
    /// sees the sleeper, and no wake-up is lost.
    fn wait_until(&self, done: impl Fn() -> bool) {
        let start = Instant::now();
        let mut spins = 0u32;
        while !done() {
            spins = spins.wrapping_add(1);
            // Reading the clock costs more than a spin; do it now and then.
            if spins.is_multiple_of(64) && start.elapsed() > SPIN {
                let mut guard = lock(&self.lock);
                self.sleepers.fetch_add(1, SeqCst);
                while !done() {
                    guard = self.wake.wait(guard).unwrap_or_else(|e| e.into_inner());
                }
                self.sleepers.fetch_sub(1, SeqCst);
                return;
            }
            std::hint::spin_loop();
        }
    }

    /// Wakes sleeping waiters; call after making their condition true.
    fn notify(&self) {
        if self.sleepers.load(SeqCst) > 0 {
            // Taking the lock orders this after a sleeper's check of the
            // condition, so the notification reaches it.
            drop(lock(&self.lock));
            self.wake.notify_all();
        }
    }
}

/// Locks a mutex that guards no data, so poisoning means nothing.
fn lock(m: &Mutex<()>) -> MutexGuard<'_, ()> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A reusable barrier for `n` threads that spins briefly before sleeping.
pub(crate) struct SpinBarrier {
    n: usize,
    arrived: AtomicUsize,
    generation: AtomicUsize,
    parking: Parking,
}

impl SpinBarrier {
    /// A barrier for `n >= 1` threads.
    pub(crate) fn new(n: usize) -> Self {
        Self {
            n: n.max(1),
            arrived: AtomicUsize::new(0),
            generation: AtomicUsize::new(0),
            parking: Parking::default(),
        }
    }

    /// Blocks until all `n` threads have called `wait` in this round; what
    /// each wrote before its call is visible to all after theirs.
    pub(crate) fn wait(&self) {
        let generation = self.generation.load(SeqCst);
        if self.arrived.fetch_add(1, SeqCst) + 1 == self.n {
            // Reset before releasing: nobody arrives for the next round
            // until it sees the new generation.
            self.arrived.store(0, SeqCst);
            self.generation.fetch_add(1, SeqCst);
            self.parking.notify();
        } else {
            self.parking.wait_until(|| self.generation.load(SeqCst) != generation);
        }
    }
}

/// A job as the workers see it: its lifetime is erased, which is sound
/// because [`run`] does not return until every worker is done with it.
type JobRef = *const (dyn Fn(usize) + Sync + 'static);

/// State shared by the caller that owns the pool and its workers.
#[derive(Default)]
struct Shared {
    /// The current job's number, bumped (under the `job` lock) to publish
    /// it; workers wait for it to pass the last one they saw.
    epoch: AtomicUsize,
    /// The current job, consistent with `epoch` when read under its lock.
    job: Mutex<Published>,
    /// Workers still running the current job.
    remaining: AtomicUsize,
    /// The payload of the first worker panic in the current job, re-raised
    /// by the caller so the original message reaches whoever catches it.
    panic: Mutex<Option<Box<dyn Any + Send>>>,
    /// Where workers wait for a job.
    idle: Parking,
    /// Where the caller waits for the workers.
    done: Parking,
}

/// One job as published to the workers.
#[derive(Default, Clone, Copy)]
struct Published {
    epoch: usize,
    /// Workers with an index below this take part.
    participants: usize,
    /// `None` once the job is over.
    job: Option<SendJob>,
}

#[derive(Clone, Copy)]
struct SendJob(JobRef);
// SAFETY: the pointee is `Sync`, and `run` keeps it alive while it is shared.
unsafe impl Send for SendJob {}

/// The process's pool: its shared state and how many workers it started.
struct Pool {
    shared: Arc<Shared>,
    /// Held by the caller that owns the pool for one job; guards the count
    /// of workers started.
    owner: Mutex<usize>,
}

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| Pool { shared: Arc::new(Shared::default()), owner: Mutex::new(0) })
}

/// A worker's life: wait for a job after `seen`, run its part if it takes
/// part, repeat. `seen` is read by the spawner: the thread may start only
/// after the job it was spawned for has been published.
fn worker(shared: Arc<Shared>, index: usize, mut seen: usize) {
    loop {
        // `>`, not `!=`: a worker that sat out one job may read the next
        // one's snapshot and must not run it twice.
        shared.idle.wait_until(|| shared.epoch.load(SeqCst) > seen);
        let published = *lock_job(&shared);
        seen = published.epoch;
        let Some(job) = published.job.filter(|_| index < published.participants) else { continue };
        // SAFETY: `run` keeps the job alive until `remaining` reaches 0,
        // which needs this worker's decrement below.
        if let Err(payload) = catch_unwind(AssertUnwindSafe(|| unsafe { (*job.0)(index) })) {
            shared.panic.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert(payload);
        }
        shared.remaining.fetch_sub(1, SeqCst);
        shared.done.notify();
    }
}

fn lock_job(shared: &Shared) -> std::sync::MutexGuard<'_, Published> {
    shared.job.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `f(0)`, ..., `f(threads - 1)` at once, `f(0)` on the calling thread,
/// and returns when all are done. A panic in any part is re-raised here
/// after every part has finished.
pub(crate) fn run(threads: usize, f: &(dyn Fn(usize) + Sync)) {
    if threads <= 1 {
        f(0);
        return;
    }
    let pool = pool();
    let mut started = match pool.owner.try_lock() {
        Ok(guard) => guard,
        Err(TryLockError::Poisoned(e)) => e.into_inner(),
        Err(TryLockError::WouldBlock) => return run_scoped(threads, f),
    };
    while *started < threads - 1 {
        let (shared, index) = (Arc::clone(&pool.shared), *started + 1);
        let seen = lock_job(&shared).epoch;
        let spawned = std::thread::Builder::new()
            .name(format!("tfbench-gemm-{index}"))
            .spawn(move || worker(shared, index, seen));
        if spawned.is_err() {
            // Out of threads: the scoped path reports it the usual way.
            drop(started);
            return run_scoped(threads, f);
        }
        *started += 1;
    }
    let shared = &pool.shared;
    // SAFETY: only the lifetime is erased; every worker is done with the
    // job before this function returns or unwinds (below).
    let job: JobRef = unsafe { std::mem::transmute::<*const (dyn Fn(usize) + Sync + '_), JobRef>(f) };
    shared.remaining.store(threads - 1, SeqCst);
    {
        let mut published = lock_job(shared);
        let epoch = published.epoch + 1;
        *published = Published { epoch, participants: threads, job: Some(SendJob(job)) };
        shared.epoch.store(epoch, SeqCst);
    }
    shared.idle.notify();
    let mine = catch_unwind(AssertUnwindSafe(|| f(0)));
    shared.done.wait_until(|| shared.remaining.load(SeqCst) == 0);
    lock_job(shared).job = None;
    let theirs = shared.panic.lock().unwrap_or_else(|e| e.into_inner()).take();
    drop(started);
    if let Some(payload) = mine.err().or(theirs) {
        resume_unwind(payload);
    }
}

/// [`run`] on freshly spawned scoped threads.
fn run_scoped(threads: usize, f: &(dyn Fn(usize) + Sync)) {
    std::thread::scope(|s| {
        for t in 1..threads {
            s.spawn(move || f(t));
        }
        f(0);
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;
    use std::sync::mpsc::{RecvTimeoutError, channel};

    /// Runs `body` on a thread of its own and fails if it has not finished
    /// within a minute: a lost wake-up would otherwise hang the test binary
    /// instead of failing. A panic in `body` is re-raised as it was.
    fn finishes(body: impl FnOnce() + Send + 'static) {
        let (done, finished) = channel();
        let handle = std::thread::spawn(move || {
            body();
            let _ = done.send(());
        });
        match finished.recv_timeout(Duration::from_secs(60)) {
            Ok(()) => {}
            Err(RecvTimeoutError::Timeout) => panic!("still waiting after 60 s: a lost wake-up?"),
            Err(RecvTimeoutError::Disconnected) => {
                if let Err(payload) = handle.join() {
                    resume_unwind(payload);
                }
            }
        }
    }

    #[test]
    fn every_part_runs_once_per_call() {
        finishes(|| {
            for threads in 1..=4 {
                for _ in 0..50 {
                    let hits: Vec<AtomicUsize> = (0..threads).map(|_| AtomicUsize::new(0)).collect();
                    run(threads, &|t| {
                        hits[t].fetch_add(1, SeqCst);
                    });
                    assert!(hits.iter().all(|h| h.load(SeqCst) == 1), "{threads} threads");
                }
            }
        });
    }

    #[test]
    fn barrier_separates_rounds() {
        finishes(|| {
            // Each round every part writes its slot, meets the others, and
            // then checks that all slots hold this round's value.
            let threads = 3;
            let slots: Vec<AtomicU64> = (0..threads).map(|_| AtomicU64::new(0)).collect();
            let barrier = SpinBarrier::new(threads);
            let bad = AtomicUsize::new(0);
            run(threads, &|t| {
                for round in 1..=200u64 {
                    slots[t].store(round, SeqCst);
                    barrier.wait();
                    if slots.iter().any(|s| s.load(SeqCst) != round) {
                        bad.fetch_add(1, SeqCst);
                    }
                    barrier.wait();
                }
            });
            assert_eq!(bad.load(SeqCst), 0);
        });
    }

    #[test]
    fn workers_that_slept_wake_for_the_next_job() {
        finishes(|| {
            let count = AtomicUsize::new(0);
            for _ in 0..3 {
                run(2, &|_| {
                    count.fetch_add(1, SeqCst);
                });
                // Well past the spin time: the worker is asleep now.
                std::thread::sleep(SPIN * 4);
            }
            assert_eq!(count.load(SeqCst), 6);
        });
    }

    #[test]
    fn concurrent_callers_all_complete() {
        finishes(|| {
            let total = AtomicUsize::new(0);
            std::thread::scope(|s| {
                for _ in 0..4 {
                    s.spawn(|| {
                        for _ in 0..50 {
                            run(2, &|_| {
                                total.fetch_add(1, SeqCst);
                            });
                        }
                    });
                }
            });
            assert_eq!(total.load(SeqCst), 4 * 50 * 2);
        });
    }

    #[test]
    fn a_panicking_part_is_reported_and_the_pool_still_works() {
        finishes(|| {
            for bad_part in [0, 1] {
                let caught = catch_unwind(|| {
                    run(2, &|t| {
                        if t == bad_part {
                            panic!("part {t} fails");
                        }
                    })
                });
                assert!(caught.is_err(), "part {bad_part}");
                // The original message, from the caller's part or a worker's.
                let payload = caught.expect_err("a panic");
                let message = payload.downcast_ref::<String>().map(String::as_str).unwrap_or_default();
                assert_eq!(message, format!("part {bad_part} fails"));
            }
            let count = AtomicUsize::new(0);
            run(2, &|_| {
                count.fetch_add(1, SeqCst);
            });
            assert_eq!(count.load(SeqCst), 2);
        });
    }
}
