//! The kernels run in every runtime this machine has, against plain Rust
//! loops; bad modules and traps are errors with the runtime's message.

use super::*;
use anyhow::Result;

/// The runtimes available here (wasmi always; node and wasmtime where
/// present), so the same checks run in each.
fn runtimes() -> Vec<WasmRuntime> {
    WasmRuntime::ALL.into_iter().filter(|r| r.availability().is_ok()).collect()
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

fn module(rt: WasmRuntime, name: &str) -> Result<Box<dyn Instance>> {
    load(rt, &assemble(source(name).expect("a kernel"))?)
}

fn data(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| ((i as u32).wrapping_mul(2654435761).wrapping_add(seed) % 2001) as f32 / 1000.0 - 1.0)
        .collect()
}

#[test]
fn every_kernel_assembles_and_validates_in_every_runtime() {
    for rt in runtimes() {
        for k in KERNELS {
            let mut inst =
                load(rt, &assemble(k.text).unwrap()).unwrap_or_else(|e| panic!("{}: {e:#}", k.name));
            assert_eq!(inst.memory_bytes().unwrap(), PAGE, "{}: one page to start", k.name);
            let p = inst.phases();
            assert!(p.compile_ns > 0.0 && p.instantiate_ns >= 0.0, "{p:?}");
        }
    }
}

#[test]
fn elementwise_dot_and_int8_match_rust_loops() {
    for rt in runtimes() {
        for n in [0usize, 3, 4, 37] {
            let (a, b) = (data(n, 1), data(n, 2));
            let mut m = module(rt, "elementwise").unwrap();
            m.ensure_memory(3 * 4 * n + 64).unwrap();
            m.write(0, &f32_bytes(&a)).unwrap();
            m.write(4 * n, &f32_bytes(&b)).unwrap();
            for (op, f) in [("add", (|x: f32, y: f32| x + y) as fn(f32, f32) -> f32), ("mul", |x, y| x * y)] {
                for v in ["scalar", "simd"] {
                    let args =
                        [Arg::I32(0), Arg::I32(4 * n as i32), Arg::I32(8 * n as i32), Arg::I32(n as i32)];
                    assert_eq!(m.call(&format!("{op}_{v}"), &args, 2).unwrap(), Ret::None);
                    let got = f32s(&m.read(8 * n, 4 * n).unwrap());
                    let want: Vec<f32> = a.iter().zip(&b).map(|(&x, &y)| f(x, y)).collect();
                    assert_eq!(got, want, "{rt:?} {op}_{v} n={n}");
                }
            }
            let mut d = module(rt, "dot").unwrap();
            d.ensure_memory(8 * n + 64).unwrap();
            d.write(0, &f32_bytes(&a)).unwrap();
            d.write(4 * n, &f32_bytes(&b)).unwrap();
            let want: f64 = a.iter().zip(&b).map(|(&x, &y)| x as f64 * y as f64).sum();
            for v in ["scalar", "simd"] {
                let got = d.call(
                    &format!("dot_{v}"),
                    &[Arg::I32(0), Arg::I32(4 * n as i32), Arg::I32(n as i32)],
                    1,
                );
                assert!((got.unwrap().f32().unwrap() as f64 - want).abs() < 1e-4, "{rt:?} dot_{v} n={n}");
            }
            let (qa, qb): (Vec<i8>, Vec<i8>) =
                (0..n).map(|i| ((i * 37 % 255) as i8, (i * 91 % 251) as i8)).unzip();
            d.write(0, &qa.iter().map(|&x| x as u8).collect::<Vec<_>>()).unwrap();
            d.write(n, &qb.iter().map(|&x| x as u8).collect::<Vec<_>>()).unwrap();
            let want = qa.iter().zip(&qb).fold(0i32, |s, (&x, &y)| s.wrapping_add(x as i32 * y as i32));
            for v in ["scalar", "simd"] {
                let got =
                    d.call(&format!("dot_i8_{v}"), &[Arg::I32(0), Arg::I32(n as i32), Arg::I32(n as i32)], 1);
                assert_eq!(got.unwrap(), Ret::I32(want), "{rt:?} dot_i8_{v} n={n}");
            }
        }
    }
}

#[test]
fn gemm_softmax_layernorm_gelu_match_f64_references() {
    for rt in runtimes() {
        let (m, k, n) = (8usize, 5usize, 16usize);
        let (a, b) = (data(m * k, 3), data(k * n, 4));
        let mut g = module(rt, "gemm").unwrap();
        g.write(0, &f32_bytes(&a)).unwrap();
        g.write(4 * m * k, &f32_bytes(&b)).unwrap();
        let c = 4 * (m * k + k * n);
        for v in ["scalar", "simd"] {
            let args = [0, 4 * m * k, c, m, k, n].map(|x| Arg::I32(x as i32));
            g.call(&format!("gemm_{v}"), &args, 1).unwrap();
            let got = f32s(&g.read(c, 4 * m * n).unwrap());
            for i in 0..m {
                for j in 0..n {
                    let want: f64 = (0..k).map(|p| a[i * k + p] as f64 * b[p * n + j] as f64).sum();
                    assert!((got[i * n + j] as f64 - want).abs() < 1e-5, "{rt:?} gemm_{v} [{i},{j}]");
                }
            }
        }
        // gemm_simd traps on a shape it cannot tile, with the runtime's word for it.
        let err = g.call("gemm_simd", &[0, 0, 0, 3, 1, 8].map(Arg::I32), 1).unwrap_err().to_string();
        assert!(err.contains("gemm_simd") && err.to_lowercase().contains("unreachable"), "{rt:?}: {err}");

        let (rows, cols) = (3usize, 11usize);
        let x: Vec<f32> = data(rows * cols, 5).iter().map(|v| v * 8.0).collect();
        let mut nn = module(rt, "nn").unwrap();
        nn.write(0, &f32_bytes(&x)).unwrap();
        let out = 4 * rows * cols;
        for v in ["scalar", "simd"] {
            nn.call(&format!("softmax_{v}"), &[0, out, rows, cols].map(|x| Arg::I32(x as i32)), 1).unwrap();
            let got = f32s(&nn.read(out, 4 * rows * cols).unwrap());
            for r in x.chunks(cols).zip(got.chunks(cols)) {
                let max = r.0.iter().fold(f64::MIN, |m, &v| m.max(v as f64));
                let sum: f64 = r.0.iter().map(|&v| (v as f64 - max).exp()).sum();
                for (&xv, &g) in r.0.iter().zip(r.1) {
                    assert!((g as f64 - (xv as f64 - max).exp() / sum).abs() < 1e-6, "{rt:?} softmax_{v}");
                }
            }
            nn.call(&format!("gelu_{v}"), &[0, out, rows * cols].map(|x| Arg::I32(x as i32)), 1).unwrap();
            let got = f32s(&nn.read(out, 4 * rows * cols).unwrap());
            for (&xv, &g) in x.iter().zip(&got) {
                let xv = xv as f64;
                let want = 0.5
                    * xv
                    * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (xv + 0.044715 * xv.powi(3))).tanh());
                assert!((g as f64 - want).abs() < 1e-5 * (1.0 + want.abs()), "{rt:?} gelu_{v} x={xv}");
            }
        }
        let (gamma, beta) = (data(cols, 6), data(cols, 7));
        let gp = out + 4 * rows * cols;
        nn.write(gp, &f32_bytes(&gamma)).unwrap();
        nn.write(gp + 4 * cols, &f32_bytes(&beta)).unwrap();
        for v in ["scalar", "simd"] {
            let mut args: Vec<Arg> =
                [0, gp, gp + 4 * cols, out, rows, cols].iter().map(|&x| Arg::I32(x as i32)).collect();
            args.push(Arg::F32(1e-5));
            nn.call(&format!("layernorm_{v}"), &args, 1).unwrap();
            let got = f32s(&nn.read(out, 4 * rows * cols).unwrap());
            for (row, grow) in x.chunks(cols).zip(got.chunks(cols)) {
                let mean = row.iter().map(|&v| v as f64).sum::<f64>() / cols as f64;
                let var = row.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / cols as f64;
                for j in 0..cols {
                    let want =
                        (row[j] as f64 - mean) / (var + 1e-5).sqrt() * gamma[j] as f64 + beta[j] as f64;
                    assert!((grow[j] as f64 - want).abs() < 1e-4, "{rt:?} layernorm_{v}");
                }
            }
        }
    }
}

#[test]
fn bad_modules_traps_and_the_4gib_ceiling_are_errors() {
    // Assembles: the type error is the validator's to find, at load.
    assert!(assemble("(module (func (export \"f\") (result i32) i64.const 1))").is_ok());
    for rt in runtimes() {
        // Fails validation: an i64 where an i32 result is declared.
        let bad = assemble(
            "(module (memory (export \"memory\") 1) (func (export \"f\") (result i32) i64.const 1))",
        )
        .unwrap();
        let e = load(rt, &bad).err().expect("refused").to_string();
        assert!(e.contains("type") || e.contains("invalid") || e.contains("valid"), "{rt:?}: {e}");
        // Out of bounds: an add whose output lies past the one page.
        let mut m = module(rt, "elementwise").unwrap();
        let e = m.call("add_scalar", &[0, 0, 65536 - 4, 2].map(Arg::I32), 1).unwrap_err().to_string();
        assert!(e.contains("add_scalar") && e.to_lowercase().contains("out of bounds"), "{rt:?}: {e}");
        // The module still answers after a trap.
        m.write(0, &f32_bytes(&[1.0, 2.0])).unwrap();
        m.call("add_scalar", &[0, 0, 8, 2].map(Arg::I32), 1).unwrap();
        assert_eq!(f32s(&m.read(8, 8).unwrap()), [2.0, 4.0]);
        // memory.grow past 65536 pages returns -1; the host refuses 4 GiB + 1.
        let mut mem = module(rt, "memory").unwrap();
        assert_eq!(mem.call("grow", &[Arg::I32(65536)], 1).unwrap(), Ret::I32(-1), "{rt:?}");
        assert_eq!(mem.call("grow", &[Arg::I32(1)], 1).unwrap(), Ret::I32(1), "{rt:?}");
        let e = mem.ensure_memory(WASM32_MAX_BYTES + 1).unwrap_err().to_string();
        assert!(e.contains("4 GiB"), "{e}");
        assert!(mem.read(2 * PAGE - 4, 8).is_err(), "reads past the end are refused");
    }
    let e = assemble("(module (func (export \"f\") (i32.bogus)))").unwrap_err().to_string();
    assert!(e.contains("does not assemble") && e.contains("bogus"), "{e}");
}

#[test]
fn memory_pattern_allocators_hand_out_disjoint_aligned_blocks() {
    for rt in runtimes() {
        let mut m = module(rt, "memory").unwrap();
        let (base, steps, log) = (64usize, 500usize, 8 * PAGE);
        m.ensure_memory(log + 16 * steps).unwrap();
        for kind in [0, 1] {
            let allocs = m
                .call("pattern", &[kind, base as i32, steps as i32, 7, log as i32].map(Arg::I32), 1)
                .unwrap()
                .i32()
                .unwrap();
            let raw = m.read(log, 16 * steps).unwrap();
            let ops: Vec<[i32; 4]> = raw
                .chunks_exact(16)
                .map(|c| std::array::from_fn(|i| i32::from_le_bytes(c[4 * i..4 * i + 4].try_into().unwrap())))
                .collect();
            let mut live: Vec<Option<(usize, usize)>> = vec![None; 64];
            let mut seen = 0;
            for [op, slot, p, size] in ops {
                let (slot, p, size) = (slot as usize, p as usize, size as usize);
                if op == 1 {
                    seen += 1;
                    assert!(
                        p % 8 == 0 && p >= base + 1024 && p + size <= log,
                        "{rt:?} kind {kind}: block at {p}"
                    );
                    for (q, qs) in live.iter().flatten() {
                        assert!(p + size <= *q || q + qs <= p, "{rt:?} kind {kind}: overlap");
                    }
                    live[slot] = Some((p, size));
                } else {
                    assert_eq!(live[slot], Some((p, size)));
                    live[slot] = None;
                }
            }
            assert_eq!(seen, allocs);
        }
    }
}
