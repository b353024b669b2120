//! The AVX-512 GEMM against the f64 triple loop ([`crate::kernels::naive_matmul`]).
//!
//! Tolerance: `|got - want| <= 4 sqrt(k) eps32 * sum_p |a_ip b_pj| + 1e-30`,
//! the usual forward-error bound of a length-k f32 dot product with a
//! safety factor (blocked summation grows like sqrt(k) for random data).

use super::*;
use crate::kernels::naive_matmul;

fn check(threads: usize, (m, k, n): (usize, usize, usize), layout: Layout, accumulate: bool) {
    let a = crate::util::randn(m * k, (m * 131 + k) as u64);
    let b = crate::util::randn(k * n, (k * 7 + n) as u64);
    let c0 = crate::util::randn(m * n, 5);
    let mut c = if accumulate { c0.clone() } else { vec![f32::NAN; m * n] };
    assert!(matmul_into(threads, (m, k, n), &a, &b, layout, &mut c, accumulate));
    let want = naive_matmul((m, k, n), &a, &b, layout);
    for i in 0..m {
        for j in 0..n {
            let mut abs = 0.0f64;
            for p in 0..k {
                let bv = match layout {
                    Layout::KxN => b[p * n + j],
                    Layout::NxK => b[j * k + p],
                };
                abs += (a[i * k + p] as f64 * bv as f64).abs();
            }
            let base = if accumulate { c0[i * n + j] as f64 } else { 0.0 };
            let w = want[i * n + j] as f64 + base;
            let tol = 4.0 * (k as f64).sqrt() * f32::EPSILON as f64 * (abs + base.abs()) + 1e-30;
            let g = c[i * n + j] as f64;
            assert!(
                (g - w).abs() <= tol,
                "threads={threads} {m}x{k}x{n} {layout:?} acc={accumulate}: C[{i},{j}] = {g}, want {w} (tol {tol})"
            );
        }
    }
}

fn skip() -> bool {
    // Without AVX-512 the kernel declines; matmul_into's fallback covers it.
    match crate::isa::unavailable(&FEATURES) {
        Some(why) => {
            eprintln!("SKIPPED: tfbench's AVX-512 GEMM cannot run here: {why}");
            true
        }
        None => !available(),
    }
}

/// Under a cap below AVX-512 the kernel declines without touching C, and
/// `PackedB` declines too, so callers take their other GEMM: the contract
/// the suites' fallbacks rely on, checked on any machine.
#[test]
fn below_an_avx512_cap_the_kernel_and_packing_decline() {
    for level in [crate::isa::IsaLevel::Scalar, crate::isa::IsaLevel::Avx2] {
        crate::isa::with_cap(level, || {
            assert!(!available());
            let (a, b) = (vec![1.0f32; 6], vec![1.0f32; 6]);
            let mut c = vec![7.0f32; 4];
            let done = matmul_into(1, (2, 3, 2), &a, &b, Layout::KxN, &mut c, false);
            // Under the AVX2 cap the AVX2 kernel takes over (where the CPU
            // has AVX2 and FMA); under the scalar cap nothing runs.
            assert_eq!(done, runs_here());
            if done {
                assert_eq!(dispatch_isa(), "avx2");
                assert_eq!(c, [3.0; 4], "the AVX2 kernel's product");
            } else {
                assert_eq!(c, [7.0; 4], "C untouched when declined");
                assert!(unavailable_reason().is_some());
            }
            assert!(PackedB::from_nxk(&b, 2, 3).is_none());
        });
    }
    // And the cap is lifted again: on an AVX-512 machine the kernel runs.
    assert_eq!(available(), crate::isa::unavailable(&FEATURES).is_none());
}

#[test]
fn every_small_shape_matches_in_both_layouts() {
    if skip() {
        return;
    }
    // All of 1..=67 in one dimension with small odd others, crossing the
    // MR = 12 and NR = 32 panel edges in every position.
    for d in 1..=67 {
        for layout in [Layout::KxN, Layout::NxK] {
            check(1, (d, 5, 7), layout, false);
            check(1, (3, d, 9), layout, false);
            check(1, (13, 3, d), layout, false);
        }
    }
}

#[test]
fn primes_unit_dims_and_accumulate_on_one_and_two_threads() {
    if skip() {
        return;
    }
    let shapes = [
        (1, 1, 1),
        (1, 67, 1),
        (67, 1, 67),
        (1, 257, 131),
        (131, 257, 1),
        (37, 61, 59),
        (61, 67, 53),
        (97, 263, 101),
        (12, 32, 32),
        (24, 512, 64),
        (127, 300, 129),
    ];
    for &dims in &shapes {
        for layout in [Layout::KxN, Layout::NxK] {
            for threads in [1, 2] {
                for accumulate in [false, true] {
                    check(threads, dims, layout, accumulate);
                }
            }
        }
    }
}

#[test]
fn several_blocks_in_every_dimension_with_two_threads() {
    if skip() {
        return;
    }
    // Past KC_MAX, MC and NC (each block boundary crossed with a ragged rest),
    // large enough that two threads really split the work.
    // The third shape has two A blocks under a per-worker column split on
    // two threads (one shared range on three).
    for &dims in &[(MC + 13, KC_MAX + 29, 70), (30, 2 * KC_MAX + 3, NC + 45), (MC + 5, 40, 4 * NR + 3)] {
        for layout in [Layout::KxN, Layout::NxK] {
            check(2, dims, layout, true);
            check(3, dims, layout, false);
        }
    }
}

#[test]
fn up_to_four_rows_read_b_in_place_in_both_layouts() {
    if skip() {
        return;
    }
    // Every row count of the streaming path, k around its 4-row passes and
    // the 16-float vectors, n around the vectors and the 512 / 64-column
    // tasks; the last two are big enough for two threads to split.
    for m in 1..=small::ROWS {
        for k in [1, 3, 4, 5, 15, 16, 17, 67] {
            for n in [1, 15, 16, 17, 63, 64, 65, 513] {
                for layout in [Layout::KxN, Layout::NxK] {
                    check(1, (m, k, n), layout, k % 2 == 1);
                }
            }
        }
        for dims in [(m, 700, 1600), (m, 1031, 1025)] {
            for layout in [Layout::KxN, Layout::NxK] {
                check(2, dims, layout, false);
                check(3, dims, layout, true);
            }
        }
    }
    // The first row count past the path still takes the packed kernel.
    check(2, (small::ROWS + 1, 700, 1600), Layout::KxN, false);
}

#[test]
fn empty_dims() {
    if skip() {
        return;
    }
    let mut c = vec![3.0f32; 6];
    assert!(matmul_into(2, (2, 0, 3), &[], &[], Layout::KxN, &mut c, true));
    assert!(c.iter().all(|&x| x == 3.0));
    assert!(matmul_into(2, (2, 0, 3), &[], &[], Layout::NxK, &mut c, false));
    assert!(c.iter().all(|&x| x == 0.0));
    assert!(matmul_into(2, (0, 4, 3), &[], &[0.0; 12], Layout::KxN, &mut [], false));
}

#[test]
fn k_blocks_are_as_few_and_as_even_as_kc_max_allows() {
    assert_eq!(k_block(1024), 512);
    assert_eq!(k_block(768), 384);
    assert_eq!(k_block(KC_MAX + 1), (KC_MAX + 1).div_ceil(2).next_multiple_of(8));
    for k in 1..3000 {
        let step = k_block(k);
        let blocks = k.div_ceil(step);
        assert!((1..=KC_MAX).contains(&step), "k {k}: step {step}");
        assert_eq!(blocks, k.div_ceil(KC_MAX), "k {k}: {blocks} blocks of {step}");
        // The last block is never a short tail: at least half the others
        // once the steps round up, or the whole of k.
        let last = k - (blocks - 1) * step;
        assert!(blocks == 1 || last + 8 * blocks >= step, "k {k}: last block {last} of step {step}");
    }
}

/// 128-row products of a layer on 16 and 64 threads (cut by rows and
/// columns, `split`) give the single-thread product bit for bit: the k
/// blocking, and so every tile's summation order, does not depend on the
/// threads. Both drivers: the per-call one and `PackedB`'s shared-A path.
#[test]
fn layer_products_on_16_and_64_threads_equal_one_thread() {
    if skip() {
        return;
    }
    let (m, k, n) = (128, 96, 768);
    let a = crate::util::randn(m * k, 11);
    let w = crate::util::randn(n * k, 12);
    let mut one = vec![0.0f32; m * n];
    assert!(matmul_into(1, (m, k, n), &a, &w, Layout::NxK, &mut one, false));
    let packed = PackedB::from_nxk(&w, n, k).expect("AVX-512 is present");
    let mut packed_one = vec![0.0f32; m * n];
    packed.matmul_into(1, m, &a, &mut packed_one, false);
    for threads in [16, 64] {
        let mut c = vec![f32::NAN; m * n];
        assert!(matmul_into(threads, (m, k, n), &a, &w, Layout::NxK, &mut c, false));
        assert!(c == one, "per-call driver on {threads} threads differs from one thread");
        // PackedB splits over the current rayon pool: one of that width.
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("a pool");
        let mut c = vec![f32::NAN; m * n];
        pool.install(|| packed.matmul_into(threads, m, &a, &mut c, false));
        assert!(c == packed_one, "PackedB on {threads} threads differs from one thread");
    }
}
