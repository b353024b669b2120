//! The crate's benchmarks on the tfbench harness: `cargo bench -- --quick`.

use tfbench::bench::{Grid, Throughput, Verification};
use tfbench_example_bench::{dot, histogram};

// Optional: allocation counts and peak memory per case in the results.
#[global_allocator]
static ALLOC: tfbench::alloc::CountingAlloc = tfbench::alloc::CountingAlloc;

/// Deterministic pseudo-random values in [-1, 1) (no dependency needed).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut x = seed;
    (0..n)
        .map(|_| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (x >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

fn main() -> std::process::ExitCode {
    tfbench::bench::main(|c| {
        // One case per input: kernels/dot/n=1024, kernels/dot/n=65536.
        c.bench_with_input("dot", "n", [1024usize, 65536], |b, &n| {
            let (x, y) = (values(n, 1), values(n, 2)); // setup: untimed
            // The reference: a plain f64 loop, independent of dot's lanes.
            let want: f64 = x.iter().zip(&y).map(|(a, b)| *a as f64 * *b as f64).sum();
            b.throughput(Throughput::flops(2.0 * n as f64));
            b.iter(move || dot(&x, &y)).verify(move |got| {
                let err = (*got as f64 - want).abs();
                Verification::check("f64 loop", err <= 1e-4 * n as f64, format!("|error| {err:.2e}"))
            })
        });
        // A grid: every combination of the parameters is a case.
        c.bench_grid("histogram", Grid::new().param("kib", [64, 1024]), |b| {
            let bytes: Vec<u8> = values(b.case().usize("kib")? * 1024, 3).iter().map(|v| v.to_bits() as u8).collect();
            let mut want = [0u64; 256]; // reference: count a sorted copy's runs
            let mut sorted = bytes.clone();
            sorted.sort_unstable();
            sorted.chunk_by(|a, b| a == b).for_each(|run| want[run[0] as usize] = run.len() as u64);
            b.throughput(Throughput::bytes(bytes.len() as f64));
            Ok(b.iter(move || histogram(&bytes)).verify(move |got| Verification::equal("sorted runs", got, &want)))
        });
    })
}
