//! The int8 decode kernels' activation quantization ([`super::w4a8`],
//! [`super::q6k`], [`super::w8a8`], [`super::lanes`]), rule for rule
//! llama.cpp's. ggml's CPU matmul converts each activation row to the weight
//! type's `vec_dot_type` before its dot products; these rules give the same
//! codes and scales bit for bit, so tfbench's int8 decode multiplies what
//! llama.cpp multiplies and the two programs differ by f32 rounding order
//! alone, not by two independent draws of rounding noise.
//!
//! - [`ActQuant::Q8_0`] (`block_q8_0`; Q4_0 and Q8_0 weights): blocks of 32,
//!   `amax = max |x|`, codes `rne(x * (127 / amax))`, scale
//!   `d = f16(amax / 127)`. This is ggml-cpu's x86 `quantize_row_q8_0`, the
//!   AVX2 code that AVX-512 builds run too (there is no AVX-512 variant): it
//!   multiplies by `127 / amax`, not by `1 / d`, and rounds ties to even
//!   (`_mm256_round_ps`), unlike the scalar `_ref` (`roundf`, ties away).
//! - [`ActQuant::Q8_1`] (`block_q8_1`; Q4_1): Q8_0's codes and `d`, and the
//!   block sum `s = f16(d' * sum(q))` with `d' = amax / 127` before its f16
//!   rounding; the Q4_1 dot multiplies `s` by the weight block's minimum.
//! - [`ActQuant::Q8K`] (`block_q8_K`; Q4_K and Q6_K): blocks of 256, `max`
//!   the first value of largest magnitude (with its sign),
//!   `iscale = -127 / max`, codes `min(127, rne(iscale * x))`, scale
//!   `d = 1 / iscale` in f32 (`quantize_row_q8_K_ref`, which x86 builds
//!   call). `d` is negative when `max` is: the codes carry the opposite sign
//!   and every product `d * q` is the one a positive scale would give.
//!
//! No rule depends on the CPU: the same scalar code runs under every ISA
//! level, and the kernels after it sum the codes exactly in i32.

use super::{clamp_to_i32, rne};
use half::f16;

/// Values per scale of the Q8_0 / Q8_1 blocks (and the kernels' block).
pub const QB: usize = 32;
/// Values per Q8_K scale.
pub const QB_K: usize = 256;

/// How activations are quantized: llama.cpp's `vec_dot_type` of the weight
/// format they are multiplied with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActQuant {
    /// `block_q8_0`: Q4_0 and Q8_0 weights.
    Q8_0,
    /// `block_q8_1`: Q4_1 weights.
    Q8_1,
    /// `block_q8_K`: Q4_K and Q6_K weights.
    Q8K,
}

impl ActQuant {
    /// Values per scale: 32, or 256 for Q8_K.
    pub fn block(self) -> usize {
        match self {
            Self::Q8K => QB_K,
            Self::Q8_0 | Self::Q8_1 => QB,
        }
    }

    /// ggml's name of the block type.
    pub fn name(self) -> &'static str {
        match self {
            Self::Q8_0 => "q8_0",
            Self::Q8_1 => "q8_1",
            Self::Q8K => "q8_K",
        }
    }
}

/// Quantizes one row `x` (a multiple of `quant.block()` values) to codes `q`
/// in value order, with per block of 32 the scale `d` (a Q8_K scale repeated
/// over its 8 blocks) and the block sum `s` the offset terms multiply:
/// Q8_1's f16 `s`, otherwise `d * sum(q)` in f32.
///
/// # Panics
/// When `x` is not whole blocks or `q`, `d`, `s` do not match its length.
pub fn quantize_row(quant: ActQuant, x: &[f32], q: &mut [i8], d: &mut [f32], s: &mut [f32]) {
    let nb = x.len() / QB;
    assert!(
        x.len().is_multiple_of(quant.block()) && q.len() == x.len() && d.len() == nb && s.len() == nb,
        "actq::quantize_row: {} values are not whole {} blocks with matching outputs",
        x.len(),
        quant.name()
    );
    match quant {
        ActQuant::Q8_0 | ActQuant::Q8_1 => {
            for (b, (xs, qs)) in x.chunks_exact(QB).zip(q.chunks_exact_mut(QB)).enumerate() {
                let (d16, d32, sum) = q8_0_block(xs, qs);
                d[b] = d16;
                s[b] = match quant {
                    ActQuant::Q8_1 => f16::from_f32(d32 * sum as f32).to_f32(),
                    _ => d16 * sum as f32,
                };
            }
        }
        ActQuant::Q8K => {
            for (sb, (xs, qs)) in x.chunks_exact(QB_K).zip(q.chunks_exact_mut(QB_K)).enumerate() {
                let dk = q8_k_block(xs, qs);
                for (j, c) in qs.chunks_exact(QB).enumerate() {
                    let sum: i32 = c.iter().map(|&v| i32::from(v)).sum();
                    d[8 * sb + j] = dk;
                    s[8 * sb + j] = dk * sum as f32;
                }
            }
        }
    }
}

/// One block of 32 by ggml-cpu's x86 Q8_0 / Q8_1 rule: returns `d` as
/// stored (rounded to f16), `d` before that rounding, and the sum of codes.
/// Codes are clamped to +-127 (for finite input the rule never leaves that
/// range; the clamp only keeps NaN and infinities in it).
#[inline]
fn q8_0_block(x: &[f32], q: &mut [i8]) -> (f32, f32, i32) {
    let amax = x.iter().fold(0.0f32, |a, &v| a.max(v.abs()));
    let d = amax / 127.0;
    let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
    let mut sum = 0;
    for (q, &v) in q.iter_mut().zip(x) {
        let c = clamp_to_i32(rne(v * id), -127.0, 127.0);
        *q = c as i8;
        sum += c;
    }
    (f16::from_f32(d).to_f32(), d, sum)
}

/// One block of 256 by ggml's Q8_K rule (`quantize_row_q8_K_ref`): returns
/// `d = 1 / iscale` (zero, with zero codes, for an all-zero block).
#[inline]
fn q8_k_block(x: &[f32], q: &mut [i8]) -> f32 {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax == 0.0 {
        q.fill(0);
        return 0.0;
    }
    let iscale = -127.0 / max;
    for (q, &v) in q.iter_mut().zip(x) {
        *q = clamp_to_i32(rne(iscale * v), -127.0, 127.0) as i8;
    }
    1.0 / iscale
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [ActQuant; 3] = [ActQuant::Q8_0, ActQuant::Q8_1, ActQuant::Q8K];

    fn quantize(quant: ActQuant, x: &[f32]) -> (Vec<i8>, Vec<f32>, Vec<f32>) {
        let nb = x.len() / QB;
        let (mut q, mut d, mut s) = (vec![0i8; x.len()], vec![0.0; nb], vec![0.0; nb]);
        quantize_row(quant, x, &mut q, &mut d, &mut s);
        (q, d, s)
    }

    /// Against f64: every value within half a step of its block's ideal
    /// scale `amax / 127`, plus what the stored scale's rounding (f16 for
    /// Q8_0 / Q8_1, the f32 `1 / iscale` for Q8_K) moves the largest code,
    /// plus the f32 rounding of `x * id` (2^-24 relative, a fraction of a
    /// step); the largest magnitude gets code +-127; the stored scale and
    /// `s` are ggml's expressions.
    #[test]
    fn codes_lie_within_half_a_step_and_scales_are_ggmls() {
        let mut x = crate::util::randn(4 * QB_K, 11);
        // Blocks with wide dynamic range, a zero block, and a block whose
        // largest magnitude is negative.
        for v in &mut x[..QB] {
            *v *= 1e-3;
        }
        x[40] = 900.0;
        x[QB_K..QB_K + QB].fill(0.0);
        x[2 * QB_K + 7] = -50.0;
        for quant in ALL {
            let (q, d, s) = quantize(quant, &x);
            let bs = quant.block();
            for (blk, xs) in x.chunks_exact(bs).enumerate() {
                let amax = xs.iter().fold(0.0f64, |a, &v| a.max(f64::from(v).abs()));
                let step = amax / 127.0;
                let db = f64::from(d[blk * bs / QB]);
                let qs = &q[blk * bs..(blk + 1) * bs];
                assert!(
                    d[blk * bs / QB..(blk + 1) * bs / QB].iter().all(|&v| f64::from(v) == db),
                    "one scale"
                );
                let tol =
                    step / 2.0 + 127.0 * (db.abs() - step).abs() + 127.0 * step * f64::from(f32::EPSILON);
                for (&v, &c) in xs.iter().zip(qs) {
                    let err = (f64::from(v) - db * f64::from(c)).abs();
                    assert!(
                        err <= tol,
                        "{} block {blk}: {v} -> {c} x {db} (err {err:e} > {tol:e})",
                        quant.name()
                    );
                }
                if amax == 0.0 {
                    assert!(db == 0.0 && qs.iter().all(|&c| c == 0), "{} zero block", quant.name());
                    continue;
                }
                let top = xs.iter().position(|&v| f64::from(v).abs() == amax).unwrap();
                assert_eq!(
                    i32::from(qs[top]).abs(),
                    127,
                    "{} block {blk}: the largest magnitude",
                    quant.name()
                );
                match quant {
                    ActQuant::Q8K => {
                        let iscale = -127.0f32 / xs[top];
                        assert_eq!(db as f32, 1.0 / iscale, "Q8_K's d = 1 / iscale");
                        assert_eq!(i32::from(qs[top]), -127, "Q8_K maps max to -127");
                    }
                    _ => {
                        assert_eq!(db as f32, f16::from_f32(amax as f32 / 127.0).to_f32(), "f16(amax / 127)")
                    }
                }
            }
            for b in 0..x.len() / QB {
                let sum: i32 = q[b * QB..(b + 1) * QB].iter().map(|&c| i32::from(c)).sum();
                let want = match quant {
                    ActQuant::Q8_1 => {
                        let amax = x[b * QB..(b + 1) * QB].iter().fold(0.0f32, |a, &v| a.max(v.abs()));
                        f16::from_f32(amax / 127.0 * sum as f32).to_f32()
                    }
                    _ => d[b] * sum as f32,
                };
                assert_eq!(s[b], want, "{} block {b}: s", quant.name());
            }
        }
    }

    /// Ties go to even, as ggml's x86 rounding (`_mm256_round_ps`, the
    /// `nearest_int` float trick) does, not away from zero (`roundf`): with
    /// `amax = 127` the codes are `x` itself.
    #[test]
    fn ties_round_to_even() {
        let mut x = vec![0.0f32; QB_K];
        x[0] = -127.0;
        x[1..7].copy_from_slice(&[2.5, 3.5, -2.5, -0.5, 0.5, 126.5]);
        for quant in ALL {
            let (q, d, _) = quantize(quant, &x);
            // Q8_K: max = -127, so iscale = -127 / max = 1 as well.
            assert_eq!(d[0], 1.0, "{}", quant.name());
            let want = [-127, 2, 4, -2, 0, 0, 126];
            assert_eq!(q[..7].iter().map(|&c| i32::from(c)).collect::<Vec<_>>(), want, "{}", quant.name());
        }
    }

    /// Q8_0 / Q8_1 multiply by `127 / amax` as ggml's x86 code does; `1 / d`
    /// (`amax / 127` inverted) differs from it in the last bit for some
    /// `amax`, and then rounds a value next to a tie the other way. The test
    /// searches for such an `amax` and value, so it proves it tells the two apart.
    #[test]
    fn q8_0_multiplies_by_127_over_amax() {
        let mut found = None;
        'search: for i in 0..10_000 {
            let amax = 1.0 + i as f32 * 3.7e-4;
            let (ggml, inv) = (127.0 / amax, 1.0 / (amax / 127.0));
            if ggml == inv {
                continue;
            }
            let mid = (50.5 / ggml).to_bits();
            for b in mid - 16..mid + 16 {
                let x = f32::from_bits(b);
                if (x * ggml).round_ties_even() != (x * inv).round_ties_even() {
                    found = Some((amax, x));
                    break 'search;
                }
            }
        }
        let (amax, x) = found.expect("an amax and a value that 127 / amax and 1 / d round apart");
        let mut block = [0.0f32; QB];
        block[..2].copy_from_slice(&[amax, x]);
        for quant in [ActQuant::Q8_0, ActQuant::Q8_1] {
            let (q, _, _) = quantize(quant, &block);
            assert_eq!(
                f32::from(q[1]),
                (x * (127.0 / amax)).round_ties_even(),
                "{}: {x} of {amax}",
                quant.name()
            );
        }
    }
}
