//! The benchmarks of device work only, described for a device backend
//! (`crate::backend::ops`): `gpu_gemm` and `gpu_bmm` (GEMMs in
//! f32/tf32/f16/bf16), `transfer` (host and device copies) and `launch`
//! (the smallest kernel). Their inputs, work counts and checks are written
//! here once; cuBLAS, the copies and the launches are the backend's.

use super::{choice, on_values, reference, seed};
use crate::backend::ops::{
    DIRECTIONS, DTYPES, GemmDtype, Inputs, LAUNCH_MODES, MEMORY, Output, TensorOp, TensorWork,
};
use crate::plan::Case;
use crate::suites::{Throughput, Verification};
use crate::util;
use anyhow::{Result, bail};
use rand::{RngExt, SeedableRng, rngs::SmallRng};

/// The benchmarks that run on a device only (never on the CPU).
pub(super) const GPU_ONLY: &[&str] = &["gpu_gemm", "gpu_bmm", "transfer", "launch"];

/// The case of a device-only benchmark as tensor work.
pub(super) fn describe(case: &Case) -> Result<TensorWork> {
    match case.benchmark.as_str() {
        "gpu_gemm" => gemm(case, false),
        "gpu_bmm" => gemm(case, true),
        "transfer" => transfer(case),
        "launch" => launch(case),
        other => bail!("tensor/{other} is not a device-only benchmark; they are: {}", GPU_ONLY.join(", ")),
    }
}

/// A GEMM (`batched`: `BATCHxMxKxN`, else `MxKxN`) of normal inputs rounded
/// as `dtype` stores them; verified on sampled entries against f64 dot
/// products of the stored inputs, as the CPU GEMMs are
/// (`super::matmul::check_product_with`), with each type's tolerance
/// ([`GemmDtype::tolerance`]).
fn gemm(case: &Case, batched: bool) -> Result<TensorWork> {
    let dtype = GemmDtype::parse(choice(case, "dtype", DTYPES)?)?;
    let shape = case.shape("shape")?;
    let (batch, m, k, n) = match (batched, shape.as_slice()) {
        (false, &[m, k, n]) => (1, m, k, n),
        (true, &[bt, m, k, n]) => (bt, m, k, n),
        _ => bail!("case {}: shape must be {}", case.id, if batched { "BATCHxMxKxN" } else { "MxKxN" }),
    };
    let s = seed(case);
    let a: Vec<f32> = util::randn(batch * m * k, s).into_iter().map(|x| dtype.store(x)).collect();
    let b: Vec<f32> = util::randn(batch * k * n, s ^ 1).into_iter().map(|x| dtype.store(x)).collect();
    let bt = batch as f64;
    let throughput = vec![
        Throughput::flops(2.0 * bt * (m * n * k) as f64),
        Throughput::bytes(bt * (dtype.bytes() * (m * k + k * n + m * n)) as f64),
    ];
    let check = move |inp: &Inputs, out: Output<'_>| {
        on_values(out, |c| {
            let (a, b) = (&inp.values[0], &inp.values[1]);
            let samples = if batch == 1 { 64 } else { 16 };
            let dt = dtype;
            let (mut got, mut want, mut tol, mut labels) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
            for t in 0..batch {
                let ch = super::matmul::check_product_with(
                    &a[t * m * k..(t + 1) * m * k],
                    &b[t * k * n..(t + 1) * k * n],
                    &c[t * m * n..(t + 1) * m * n],
                    (m, k, n),
                    samples,
                    s ^ t as u64,
                    |abs, w| dt.tolerance(k, abs, w),
                );
                got.extend(ch.got);
                want.extend(ch.want);
                tol.extend(ch.tol);
                labels.extend(ch.entries.into_iter().map(|(i, j)| (t, i, j)));
            }
            let what = if m * k * n <= 1 << 24 {
                "every entry".to_string()
            } else {
                format!("{samples} sampled entries")
            };
            reference::compare_bounded(
                format!(
                    "f64 dot products of the stored {dt:?} inputs, {what} per batch item ({dt:?} tolerance)"
                ),
                &got,
                &want,
                &tol,
                |x| {
                    let (t, i, j) = labels[x];
                    format!("C[{t}][{i},{j}]")
                },
            )
        })
    };
    Ok(TensorWork {
        id: case.id.clone(),
        op: TensorOp::Gemm { dtype, batched, batch, m, k, n },
        inputs: Inputs { values: vec![a, b], bytes: Vec::new() },
        throughput,
        check: Box::new(check),
    })
}

/// `transfer`: random bytes copied host-to-device, device-to-host (from
/// pageable or pinned host memory) or device-to-device, compared byte by
/// byte. A device copy reads and writes each byte (as PyTorch's copy
/// bandwidth counts it); a transfer moves each byte once.
fn transfer(case: &Case) -> Result<TensorWork> {
    let direction = choice(case, "direction", DIRECTIONS)?;
    let bytes = case.usize("bytes")?;
    if bytes == 0 {
        bail!("case {}: `bytes` must be positive", case.id);
    }
    let d2d = direction == "d2d";
    // d2d has no host memory, and its cases need no `memory` parameter.
    let pinned = !d2d && choice(case, "memory", MEMORY)? == "pinned";
    let mut rng = SmallRng::seed_from_u64(seed(case));
    let mut pattern = vec![0u8; bytes];
    for c in pattern.chunks_mut(8) {
        let r = rng.random::<u64>().to_le_bytes();
        c.copy_from_slice(&r[..c.len()]);
    }
    let moved = if d2d { 2 * bytes } else { bytes };
    let check = move |inp: &Inputs, out: Output<'_>| {
        let Output::Bytes(got) = out else {
            return Verification::check(
                "the bytes sent",
                false,
                format!("the device returned {}", out.kind()),
            );
        };
        let sent = &inp.bytes;
        let bad = got.iter().zip(sent).position(|(a, b)| a != b);
        Verification::check(
            "the random bytes sent, compared byte by byte",
            got.len() == sent.len() && bad.is_none(),
            match bad {
                None => format!("{bytes} bytes arrived intact"),
                Some(i) => format!("byte {i}: got {}, sent {}", got[i], sent[i]),
            },
        )
    };
    Ok(TensorWork {
        id: case.id.clone(),
        op: TensorOp::Transfer { direction, pinned },
        inputs: Inputs { values: Vec::new(), bytes: pattern },
        throughput: vec![Throughput::bytes(moved as f64)],
        check: Box::new(check),
    })
}

/// The value `launch`'s kernel writes.
const LAUNCH_VALUE: f32 = 42.0;

/// `launch`: a kernel writing one value, 1 block of 1 thread;
/// `launch_sync` waits for the device after every launch (what a tiny op
/// costs a program that needs its result), `launch_only` queues launches
/// back to back.
fn launch(case: &Case) -> Result<TensorWork> {
    let sync = choice(case, "mode", LAUNCH_MODES)? == "launch_sync";
    let check = |_: &Inputs, out: Output<'_>| {
        on_values(out, |got| match got.first() {
            Some(v) => Verification::equal("the value the kernel writes", v, &LAUNCH_VALUE),
            None => Verification::check("the value the kernel writes", false, "no value came back"),
        })
    };
    Ok(TensorWork {
        id: case.id.clone(),
        op: TensorOp::Launch { sync, value: LAUNCH_VALUE },
        inputs: Inputs::default(),
        throughput: vec![Throughput::items(1.0)],
        check: Box::new(check),
    })
}
