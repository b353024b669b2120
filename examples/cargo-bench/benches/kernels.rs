//! The crate's benchmarks on the tfbench harness: `cargo bench -- --quick`.

use tfbench::bench::{Grid, Throughput, Verification};
use tfbench_example_bench::{dot, histogram};

// Optional: allocation counts and peak memory per case in the results.
#[global_allocator]
static ALLOC: tfbench::alloc::CountingAlloc = tfbench::alloc::CountingAlloc;

/// Deterministic pseudo-random bits (a 64-bit LCG's high half; no
/// dependency needed).
fn bits(n: usize, seed: u64) -> Vec<u32> {
    let mut x = seed;
    (0..n)
        .map(|_| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (x >> 32) as u32
        })
        .collect()
}

/// Values in [-1, 1).
fn values(n: usize, seed: u64) -> Vec<f32> {
    bits(n, seed).iter().map(|&b| (b >> 8) as f32 / (1u32 << 23) as f32 - 1.0).collect()
}

fn main() -> std::process::ExitCode {
    tfbench::main(|c| {
        // One case per input: kernels/dot/n=1024, kernels/dot/n=65536.
        c.bench_with_input("dot", "n", [1024usize, 65536], |b, &n| {
            let (x, y) = (values(n, 1), values(n, 2)); // setup: untimed
            // The reference: a plain f64 loop, independent of dot's lanes,
            // within the rounding bound of f32 sums of n/8 + 8 terms.
            let want: f64 = x.iter().zip(&y).map(|(a, b)| *a as f64 * *b as f64).sum();
            let scale: f64 = x.iter().zip(&y).map(|(a, b)| (*a as f64 * *b as f64).abs()).sum();
            let bound = (n / 8 + 9) as f64 * f32::EPSILON as f64 * scale;
            b.throughput(Throughput::flops(2.0 * n as f64));
            b.iter(move || dot(&x, &y)).verify(move |got| {
                let err = (*got as f64 - want).abs();
                Verification::check("f64 loop", err <= bound, format!("|error| {err:.2e}, bound {bound:.2e}"))
            })
        });
        // A grid: every combination of the parameters is a case.
        c.bench_grid("histogram", Grid::new().param("kib", [64, 1024]), |b| {
            let bytes: Vec<u8> =
                bits(b.case().usize("kib")? * 1024, 3).iter().map(|b| (b >> 24) as u8).collect();
            let mut want = [0u64; 256]; // reference: count a sorted copy's runs
            let mut sorted = bytes.clone();
            sorted.sort_unstable();
            sorted.chunk_by(|a, b| a == b).for_each(|run| want[run[0] as usize] = run.len() as u64);
            b.throughput(Throughput::bytes(bytes.len() as f64));
            Ok(b.iter(move || histogram(&bytes))
                .verify(move |got| Verification::equal("sorted runs", got, &want)))
        });
    })
}
