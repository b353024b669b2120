//! A benchmark written as closures: the setup (run untimed when the case is
//! prepared), the timed routine and the check of its result, turned into a
//! [`Workload`] the harness runs like any suite's.

use crate::plan::Case;
use crate::workload::{Throughput, Verification, Workload};
use anyhow::Result;
use std::marker::PhantomData;

/// What a benchmark's setup closure is given: the case being prepared (its
/// parameters) and where it declares the work one call of the routine does.
pub struct Bencher<'a> {
    case: &'a Case,
    throughput: Vec<Throughput>,
}

impl<'a> Bencher<'a> {
    pub(super) fn new(case: &'a Case) -> Self {
        Self { case, throughput: Vec::new() }
    }

    /// The case being prepared: its id and parameter values
    /// ([`Case::usize`], [`Case::str`], [`Case::shape`]).
    pub fn case(&self) -> &Case {
        self.case
    }

    /// Declares work one call of the routine does (elements, bytes, FLOPs,
    /// items, tokens); results then show it as a rate. May be called once
    /// per kind.
    pub fn throughput(&mut self, t: Throughput) -> &mut Self {
        self.throughput.push(t);
        self
    }

    /// The routine to time. Its output goes through [`std::hint::black_box`]
    /// so the work cannot be optimised away; it is dropped inside the timed
    /// region. Finish with [`Timed::verify`]: a benchmark checks its result
    /// before it is timed.
    pub fn iter<O, F>(&mut self, routine: F) -> Timed<F, O>
    where
        F: FnMut() -> O + Send + 'static,
        O: 'static,
    {
        Timed { routine, throughput: std::mem::take(&mut self.throughput), output: PhantomData }
    }
}

/// A routine waiting for the check of its result ([`Timed::verify`]).
#[must_use = "a benchmark must check its result: call .verify(...)"]
pub struct Timed<F, O> {
    routine: F,
    throughput: Vec<Throughput>,
    output: PhantomData<fn() -> O>,
}

impl<F, O> Timed<F, O>
where
    F: FnMut() -> O + Send + 'static,
    O: 'static,
{
    /// The check: called once, on the output of one call of the routine,
    /// before anything is timed, against a reference the routine does not
    /// share (a closed form, a naive loop, a known value). A failed
    /// [`Verification`] (or an `Err`) fails the benchmark with its detail,
    /// and it is never timed.
    pub fn verify<V, R>(self, check: V) -> Routine
    where
        V: FnMut(&O) -> R + Send + 'static,
        R: IntoVerification + 'static,
    {
        Routine(Box::new(ClosureWorkload {
            routine: self.routine,
            check,
            throughput: self.throughput,
            output: PhantomData,
        }))
    }
}

/// A prepared benchmark: what a setup closure returns.
pub struct Routine(pub(super) Box<dyn Workload>);

impl Routine {
    /// A routine from a hand-written [`Workload`] (its own `verify`,
    /// `throughput` and `run`), for work the closure form does not fit.
    pub fn from_workload(w: impl Workload + 'static) -> Self {
        Self(Box::new(w))
    }
}

/// What a setup closure may return: a [`Routine`], or a `Result` of one (an
/// `Err` fails the case; [`crate::workload::skip`] skips it).
#[diagnostic::on_unimplemented(
    message = "a benchmark's setup must return a Routine: finish `b.iter(...)` with `.verify(...)`"
)]
pub trait IntoRoutine {
    /// The routine, or why there is none.
    fn into_routine(self) -> Result<Routine>;
}

impl IntoRoutine for Routine {
    fn into_routine(self) -> Result<Routine> {
        Ok(self)
    }
}

impl<E: Into<anyhow::Error>> IntoRoutine for std::result::Result<Routine, E> {
    fn into_routine(self) -> Result<Routine> {
        self.map_err(Into::into)
    }
}

/// What a check may return: a [`Verification`], or a `Result` of one.
pub trait IntoVerification {
    /// The verification, or the error that failed it.
    fn into_verification(self) -> Result<Verification>;
}

impl IntoVerification for Verification {
    fn into_verification(self) -> Result<Verification> {
        Ok(self)
    }
}

impl<E: Into<anyhow::Error>> IntoVerification for std::result::Result<Verification, E> {
    fn into_verification(self) -> Result<Verification> {
        self.map_err(Into::into)
    }
}

struct ClosureWorkload<F, V, O> {
    routine: F,
    check: V,
    throughput: Vec<Throughput>,
    output: PhantomData<fn() -> O>,
}

impl<F, V, O, R> Workload for ClosureWorkload<F, V, O>
where
    F: FnMut() -> O + Send + 'static,
    V: FnMut(&O) -> R + Send + 'static,
    R: IntoVerification,
    O: 'static,
{
    fn verify(&mut self) -> Result<Verification> {
        let out = (self.routine)();
        (self.check)(&out).into_verification()
    }
    fn throughput(&self) -> Vec<Throughput> {
        self.throughput.clone()
    }
    fn run(&mut self, iters: u64) -> Result<()> {
        // Monomorphic loop: the routine is inlined, so the harness adds no
        // call through a pointer per iteration.
        for _ in 0..iters {
            std::hint::black_box((self.routine)());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_routine_is_checked_on_its_own_output_and_runs_as_asked() {
        let case = Case::new("s", "b", Default::default());
        let mut b = Bencher::new(&case);
        let calls = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let c = calls.clone();
        b.throughput(Throughput::elements(10.0));
        let mut w = b
            .iter(move || {
                c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                (0..10u64).sum::<u64>()
            })
            .verify(|s| Verification::equal("n(n-1)/2", s, &45))
            .0;
        let v = w.verify().unwrap();
        assert!(v.passed, "{}", v.detail);
        assert_eq!(w.throughput(), vec![Throughput::elements(10.0)]);
        w.run(7).unwrap();
        assert_eq!(calls.load(std::sync::atomic::Ordering::Relaxed), 8, "1 check + 7 timed calls");

        let mut wrong =
            Bencher::new(&case).iter(|| 44u64).verify(|s| Verification::equal("n(n-1)/2", s, &45)).0;
        let v = wrong.verify().unwrap();
        assert!(!v.passed && v.detail.contains("got 44, expected 45"), "{}", v.detail);
        let mut err = Bencher::new(&case)
            .iter(|| 1)
            .verify(|_| anyhow::Result::<Verification>::Err(anyhow::anyhow!("no reference")))
            .0;
        assert!(err.verify().unwrap_err().to_string().contains("no reference"));
    }
}
