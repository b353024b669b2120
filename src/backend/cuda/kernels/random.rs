//! The counter-based generator behind the `randn_f32` kernel
//! ([`super::source::TENSOR`]), replayed on the CPU: the uniforms of any
//! output pair, bit for bit, so a GPU `randn` case is checked element by
//! element against an f64 Box-Muller of the same uniforms, not only by its
//! moments.

/// splitmix64's finaliser: a bijection on u64, so distinct counters never
/// give the same hash.
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The two uniforms of output pair `i` (outputs `2i` and `2i + 1`) under
/// `seed`: `u1` in (0, 1] (never 0, so its log is finite) and `u2` in
/// [0, 1), 24 bits each, so both are exact in f32 on either side.
pub fn pair_uniforms(seed: u64, i: u64) -> (f32, f32) {
    let h = mix64(seed.wrapping_add((i + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)));
    const ULP: f32 = 1.0 / (1u32 << 24) as f32;
    (((h >> 40) + 1) as f32 * ULP, (h & 0xff_ffff) as f32 * ULP)
}

/// Output `k` of the generator under `seed`, in f64: Box-Muller on the
/// pair's uniforms (`r cos(2 pi u2)` for even `k`, `r sin(2 pi u2)` for odd).
pub fn normal_f64(seed: u64, k: u64) -> f64 {
    let (u1, u2) = pair_uniforms(seed, k / 2);
    let r = (-2.0 * (u1 as f64).ln()).sqrt();
    let t = 2.0 * std::f64::consts::PI * u2 as f64;
    if k.is_multiple_of(2) { r * t.cos() } else { r * t.sin() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniforms_stay_in_range_and_the_normals_look_normal() {
        let n = 200_000u64;
        let (mut sum, mut sq) = (0.0, 0.0);
        for k in 0..n {
            let (u1, u2) = pair_uniforms(7, k / 2);
            assert!(u1 > 0.0 && u1 <= 1.0 && (0.0..1.0).contains(&u2));
            let z = normal_f64(7, k);
            assert!(z.is_finite());
            sum += z;
            sq += z * z;
        }
        let mean = sum / n as f64;
        let var = sq / n as f64 - mean * mean;
        // 6-sigma bounds for n samples of N(0, 1).
        assert!(mean.abs() < 6.0 / (n as f64).sqrt(), "mean {mean}");
        assert!((var - 1.0).abs() < 6.0 * (2.0 / n as f64).sqrt(), "variance {var}");
        // Another seed, other values; the hash is a bijection.
        assert_ne!(normal_f64(7, 0), normal_f64(8, 0));
        assert_ne!(mix64(1), mix64(2));
        assert_eq!(mix64(0), 0);
    }
}
