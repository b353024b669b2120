//! Tests of `matmul.rs`, in their own file to keep that one short.

use super::*;
use crate::plan::ParamValue;
use std::collections::BTreeMap;

/// Whether this machine runs `imp` (AVX-512 for tfbench's kernel, a
/// loadable library for OpenBLAS); says why not on stderr.
fn runnable(imp: Impl) -> bool {
    match imp {
        Impl::Tfbench => crate::kernels::sgemm::runs_here(),
        Impl::TfbenchPacked => crate::kernels::sgemm::available(),
        Impl::OpenBlas => {
            crate::kernels::openblas::load().map_err(|e| eprintln!("skipping OpenBLAS: {e}")).is_ok()
        }
        Impl::MatrixMultiply | Impl::Gemm => true,
    }
}

fn pool(n: usize) -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new().num_threads(n).build().unwrap()
}

fn check(imp: Impl, threads: usize, dims: (usize, usize, usize)) {
    let (m, k, n) = dims;
    let a = util::randn(m * k, 1);
    let b = util::randn(k * n, 2);
    let mut c = vec![f32::NAN; m * n];
    pool(threads).install(|| matmul(imp, threads, dims, &a, &b, &mut c));
    let Checked { got: g, want: w, tol: t, entries: e } = check_product(&a, &b, &c, dims, 64, 3);
    assert_eq!(g.len(), m * n);
    let v = reference::compare_bounded("t", &g, &w, &t, |x| format!("{:?}", e[x]));
    assert!(v.passed, "{imp:?} threads={threads} {dims:?}: {}", v.detail);
}

#[test]
fn both_impls_match_f64_at_one_and_two_threads_on_odd_shapes() {
    for imp in [Impl::MatrixMultiply, Impl::Gemm, Impl::Tfbench, Impl::OpenBlas] {
        if !runnable(imp) {
            continue;
        }
        for threads in [1, 2] {
            for dims in
                [(7, 13, 5), (65, 33, 17), (1, 77, 45), (1, 300, 7), (3, 5, 100), (17, 1, 9), (129, 64, 130)]
            {
                check(imp, threads, dims);
            }
        }
    }
}

#[test]
fn bmm_matches_per_item_products() {
    for imp in [Impl::MatrixMultiply, Impl::Gemm, Impl::Tfbench, Impl::OpenBlas] {
        if !runnable(imp) {
            continue;
        }
        for threads in [1, 2] {
            let (bt, m, k, n) = (3, 9, 13, 11);
            let a = util::randn(bt * m * k, 4);
            let b = util::randn(bt * k * n, 5);
            let mut c = vec![f32::NAN; bt * m * n];
            pool(threads).install(|| bmm(imp, threads, (bt, m, k, n), &a, &b, &mut c));
            for t in 0..bt {
                let Checked { got: g, want: w, tol: tl, .. } = check_product(
                    &a[t * m * k..(t + 1) * m * k],
                    &b[t * k * n..(t + 1) * k * n],
                    &c[t * m * n..(t + 1) * m * n],
                    (m, k, n),
                    64,
                    6,
                );
                assert!(reference::compare_bounded("t", &g, &w, &tl, |x| x.to_string()).passed);
            }
        }
    }
}

#[test]
fn packed_impl_verifies_and_runs_and_bmm_refuses_it() {
    if let Some(why) = crate::isa::unavailable(&crate::kernels::sgemm::FEATURES) {
        eprintln!("SKIPPED: impl=tfbench-packed cannot run here: {why}");
        return;
    }
    let case = |bench: &str, shape: &str, threads: ParamValue| {
        let mut p = BTreeMap::new();
        p.insert("impl".to_string(), ParamValue::Str("tfbench-packed".into()));
        p.insert("shape".to_string(), ParamValue::Str(shape.into()));
        p.insert("threads".to_string(), threads);
        Case::new("tensor", bench, p)
    };
    for shape in ["1x77x45", "3x300x70", "65x33x130"] {
        for threads in [ParamValue::Int(1), ParamValue::Str("all".into())] {
            let mut w = {
                let c = case("matmul", shape, threads);
                prepare_matmul(&c, &crate::suites::test_context(&c))
            }
            .unwrap();
            let v = w.verify().unwrap();
            assert!(v.passed, "{shape}: {}", v.detail);
            w.run(2).unwrap();
        }
    }
    let err = {
        let c = case("bmm", "2x3x4x5", ParamValue::Int(1));
        prepare_bmm(&c, &crate::suites::test_context(&c))
    }
    .err()
    .expect("bmm refuses packed");
    assert!(err.to_string().contains("tfbench-packed"), "{err}");
}

#[test]
fn the_every_entry_check_sums_like_dot_entry_and_catches_a_wrong_entry() {
    let dims = (3, 37, 21);
    let (m, k, n) = dims;
    let a = util::randn(m * k, 11);
    let b = util::randn(k * n, 12);
    let mut c = vec![0.0; m * n];
    matmul(Impl::Gemm, 1, dims, &a, &b, &mut c);
    let Checked { got: g, want: w, tol: t, entries: e } = check_product(&a, &b, &c, dims, 64, 13);
    assert_eq!(e.len(), m * n);
    for (x, &(i, j)) in e.iter().enumerate() {
        let (s, abs) = reference::dot_entry(&a, &b, k, n, i, j);
        assert_eq!((g[x], w[x], t[x]), (c[i * n + j], s, reference::dot_tolerance(k, abs)), "C[{i},{j}]");
    }
    assert!(reference::compare_bounded("t", &g, &w, &t, |x| x.to_string()).passed);
    c[n + 5] += 1e-2;
    let Checked { got: g, want: w, tol: t, .. } = check_product(&a, &b, &c, dims, 64, 13);
    assert!(!reference::compare_bounded("t", &g, &w, &t, |x| x.to_string()).passed);
}

#[test]
fn openblas_refuses_dimensions_past_its_32_bit_interface_before_allocating() {
    if !runnable(Impl::OpenBlas) {
        return;
    }
    let mut p = BTreeMap::new();
    p.insert("impl".to_string(), ParamValue::Str("openblas".into()));
    // 2^31 columns of A: 8 GiB it must refuse before allocating.
    p.insert("shape".to_string(), ParamValue::Str("1x2147483648x1".into()));
    p.insert("threads".to_string(), ParamValue::Int(1));
    let err = {
        let c = Case::new("tensor", "matmul", p);
        prepare_matmul(&c, &crate::suites::test_context(&c))
    }
    .err()
    .expect("refused");
    let msg = err.to_string();
    assert!(
        msg.contains("impl=openblas") && msg.contains("32-bit") && msg.contains("1x2147483648x1"),
        "{msg}"
    );
}

#[test]
fn sampled_check_catches_a_wrong_entry() {
    let dims = (300, 200, 300);
    let (m, k, n) = dims;
    let a = util::randn(m * k, 7);
    let b = util::randn(k * n, 8);
    let mut c = vec![0.0; m * n];
    matmul(Impl::Gemm, 1, dims, &a, &b, &mut c);
    // Above 2^24 M*K*N: sampled; the corner (m-1, n-1) is always sampled.
    let Checked { got: g, want: w, tol: t, .. } = check_product(&a, &b, &c, dims, 64, 9);
    assert!(g.len() < 80);
    assert!(reference::compare_bounded("t", &g, &w, &t, |x| x.to_string()).passed);
    c[m * n - 1] += 1e-2;
    let Checked { got: g, want: w, tol: t, .. } = check_product(&a, &b, &c, dims, 64, 9);
    let v = reference::compare_bounded("t", &g, &w, &t, |x| x.to_string());
    assert!(!v.passed && v.detail.contains("tolerance"), "{}", v.detail);
}

#[test]
fn dedicated_pool_for_explicit_thread_counts_only() {
    let mut p = BTreeMap::new();
    p.insert("impl".to_string(), ParamValue::Str("gemm".into()));
    p.insert("shape".to_string(), ParamValue::Str("8x8x8".into()));
    p.insert("threads".to_string(), ParamValue::Int(1));
    let ctx = |p: &BTreeMap<String, ParamValue>| {
        let case = Case::new("tensor", "matmul", p.clone());
        crate::backend::cpu::Context::new(case.threads_request().unwrap()).unwrap()
    };
    let one = ctx(&p);
    assert_eq!((one.pool().map(|p| p.current_num_threads()), one.threads()), (Some(1), 1));
    p.insert("threads".to_string(), ParamValue::Str("all".into()));
    let all = ctx(&p);
    assert!(all.pool().is_none());
    assert_eq!(all.threads(), crate::backend::cpu::run_threads());
}

/// Not a test: prints GFLOP/s at 1024^3 per impl and thread count.
/// `cargo test --release --lib suites::tensor::matmul::tests::gflops -- --ignored --nocapture`
#[test]
#[ignore]
fn gflops() {
    let mut out = String::new();
    for shape in ["1024x1024x1024", "2048x2048x2048", "128x768x3072", "1x4096x4096"] {
        for imp in IMPLS {
            for threads in [ParamValue::Int(1), ParamValue::Str("all".into())] {
                let mut p = BTreeMap::new();
                p.insert("impl".to_string(), ParamValue::Str(imp.to_string()));
                p.insert("shape".to_string(), ParamValue::Str(shape.into()));
                p.insert("threads".to_string(), threads.clone());
                let case = Case::new("tensor", "matmul", p);
                let mut w = match prepare_matmul(&case, &crate::suites::test_context(&case)) {
                    Ok(w) => w,
                    Err(e) => {
                        out += &format!("{}: skipped: {e}\n", case.id);
                        continue;
                    }
                };
                assert!(w.verify().unwrap().passed);
                let flops = w.throughput()[0].per_iteration;
                let t = std::time::Instant::now();
                w.run(1).unwrap();
                let iters = ((0.2 / t.elapsed().as_secs_f64()) as u64).max(1);
                let mut best = f64::MAX;
                for _ in 0..5 {
                    let t = std::time::Instant::now();
                    w.run(iters).unwrap();
                    best = best.min(t.elapsed().as_secs_f64() / iters as f64);
                }
                out += &format!("{}: {:.1} GFLOP/s\n", case.id, flops / best / 1e9);
            }
        }
    }
    println!("{out}");
}
