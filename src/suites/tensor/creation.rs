//! Tensor creation: filling a buffer with zeros, ones or standard-normal samples.
//!
//! The buffer is allocated and faulted in during `prepare`, so the timed work is
//! the fill (a freshly `calloc`ed buffer would make `zeros` look free and move
//! the cost to first touch).

use super::{CHUNK, PAR_MIN, choice, elements, on_values, reference};
use crate::backend::ops::{Check, Fill, Inputs, Output, TensorOp, TensorWork};
use crate::plan::Case;
use crate::suites::{Throughput, Verification, Workload};
use anyhow::Result;
use rand::{SeedableRng, rngs::SmallRng};
use rand_distr::{Distribution, StandardNormal};
use rayon::prelude::*;

pub(super) const OPS: &[&str] = &["zeros", "ones", "randn"];

#[derive(Clone, Copy, Debug, PartialEq)]
enum Op {
    Zeros,
    Ones,
    Randn,
}

struct Creation {
    op: Op,
    out: Vec<f32>,
    seed: u64,
    /// Advances every iteration so each `randn` call draws fresh samples.
    counter: u64,
}

pub(crate) fn prepare(case: &Case) -> Result<Box<dyn Workload>> {
    let op = match choice(case, "op", OPS)? {
        "zeros" => Op::Zeros,
        "ones" => Op::Ones,
        _ => Op::Randn,
    };
    let n = elements(case)?;
    // NaN sentinel: written explicitly (pages faulted in) and caught by verify if left.
    Ok(Box::new(Creation { op, out: vec![f32::NAN; n], seed: super::seed(case), counter: 0 }))
}

/// Work one iteration does on `n` values: one write each.
fn throughput(n: usize) -> Vec<Throughput> {
    let n = n as f64;
    vec![Throughput::elements(n), Throughput::bytes(4.0 * n)]
}

/// The case as tensor work for a device backend (`crate::backend::ops`).
/// zeros and ones are checked value by value; randn draws from the
/// backend's own generator (not the CPU case's ziggurat), which the backend
/// checks against that generator's f64 twin before this check of the
/// N(0, 1) moments, with lag-1 autocorrelation (the device draws every
/// value from its own counter, not in chunks).
pub(crate) fn describe(case: &Case) -> Result<TensorWork> {
    let n = elements(case)?;
    let (value, check): (Fill, Check) = match choice(case, "op", OPS)? {
        op @ ("zeros" | "ones") => {
            let (value, v) = if op == "zeros" { (Fill::Zeros, 0.0) } else { (Fill::Ones, 1.0) };
            let check = move |_: &Inputs, out: Output<'_>| {
                on_values(out, |got| {
                    Verification::compare("every value equal to the fill value", got, &vec![v; n], 0.0, 0.0)
                })
            };
            (value, Box::new(check))
        }
        _ => (
            Fill::Randn { seed: super::seed(case) },
            Box::new(|_: &Inputs, out: Output<'_>| {
                on_values(out, |got| reference::check_standard_normal(got, 1))
            }),
        ),
    };
    Ok(TensorWork {
        id: case.id.clone(),
        op: TensorOp::Fill { value, len: n },
        inputs: Inputs::default(),
        throughput: throughput(n),
        check,
    })
}

/// Fills `out` with `v`, in parallel chunks for large buffers.
pub(crate) fn fill(out: &mut [f32], v: f32) {
    if out.len() < PAR_MIN {
        out.fill(v);
    } else {
        out.par_chunks_mut(CHUNK).for_each(|c| c.fill(v));
    }
}

/// Fills `out` with standard-normal samples (rand_distr's ziggurat sampler on
/// xoshiro256++). Each `CHUNK` draws from its own generator seeded from
/// `(seed, chunk index)`, so the result does not depend on the thread count.
pub(crate) fn randn_fill(out: &mut [f32], seed: u64) {
    let chunk = |(i, c): (usize, &mut [f32])| {
        let mut rng = SmallRng::seed_from_u64(seed ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        for x in c {
            *x = StandardNormal.sample(&mut rng);
        }
    };
    if out.len() < PAR_MIN {
        out.chunks_mut(CHUNK).enumerate().for_each(chunk);
    } else {
        out.par_chunks_mut(CHUNK).enumerate().for_each(chunk);
    }
}

impl Creation {
    fn once(&mut self) {
        match self.op {
            Op::Zeros => fill(&mut self.out, 0.0),
            Op::Ones => fill(&mut self.out, 1.0),
            Op::Randn => {
                self.counter += 1;
                randn_fill(
                    &mut self.out,
                    self.seed.wrapping_add(self.counter.wrapping_mul(0xd1b5_4a32_d192_ed03)),
                );
            }
        }
    }
}

impl Workload for Creation {
    fn verify(&mut self) -> Result<Verification> {
        self.out.fill(f32::NAN);
        self.once();
        match self.op {
            Op::Zeros | Op::Ones => {
                let want = if self.op == Op::Zeros { 0.0f32 } else { 1.0 };
                let bad = self.out.iter().position(|v| v.to_bits() != want.to_bits());
                Ok(match bad {
                    None => Verification {
                        passed: true,
                        reference: format!("every value is exactly {want:?}"),
                        max_error: Some(0.0),
                        detail: format!("{} values", self.out.len()),
                    },
                    Some(i) => Verification {
                        passed: false,
                        reference: format!("every value is exactly {want:?}"),
                        max_error: None,
                        detail: format!("value {i} is {}", self.out[i]),
                    },
                })
            }
            Op::Randn => {
                let first = self.out.clone();
                let v = reference::check_standard_normal(&self.out, CHUNK);
                self.once();
                if self.out == first {
                    return Ok(Verification {
                        passed: false,
                        reference: v.reference,
                        max_error: None,
                        detail: "two iterations produced identical samples".into(),
                    });
                }
                Ok(v)
            }
        }
    }

    fn throughput(&self) -> Vec<Throughput> {
        throughput(self.out.len())
    }

    fn run(&mut self, iters: u64) -> Result<()> {
        for _ in 0..iters {
            self.once();
            std::hint::black_box(&mut self.out);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn randn_is_normal_and_independent_of_chunking() {
        let mut a = vec![0.0f32; 3 * CHUNK + 17];
        randn_fill(&mut a, 42);
        let v = reference::check_standard_normal(&a, CHUNK);
        assert!(v.passed, "{}", v.detail);
        // Same seed, same values; serial path agrees with the parallel one per chunk.
        let mut b = vec![0.0f32; CHUNK + 5];
        randn_fill(&mut b, 42);
        assert_eq!(&a[..CHUNK], &b[..CHUNK]);
        assert_ne!(&a[..CHUNK], &a[CHUNK..2 * CHUNK]);
    }

    #[test]
    fn normal_check_rejects_uniform_and_shifted_data() {
        let u = crate::util::uniform(100_000, -1.7, 1.7, 1);
        assert!(!reference::check_standard_normal(&u, 0).passed);
        let mut s = crate::util::randn(100_000, 2);
        s.iter_mut().for_each(|x| *x += 0.05);
        assert!(!reference::check_standard_normal(&s, 0).passed);
        let mut rep = crate::util::randn(100_000, 3);
        rep.copy_within(0..50_000, 50_000);
        assert!(!reference::check_standard_normal(&rep, 50_000).passed);
    }

    #[test]
    fn fill_writes_every_value() {
        let mut a = vec![f32::NAN; PAR_MIN + 3];
        fill(&mut a, 1.0);
        assert!(a.iter().all(|&x| x == 1.0));
    }
}
