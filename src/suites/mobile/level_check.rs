//! A level's checks before it is timed.
//!
//! - Wiring and weights: a short input through the level's model (with an
//!   f32 KV cache) against the runtime's independent f64 forward pass of
//!   the same stored weights ([`crate::model::reference`]). f32 and Q4_0
//!   (f32 activations) match it to 2e-3; W8A8 rounds every projection's
//!   input to int8, an error that grows with depth (the 22-block 1B decoder:
//!   cosine 0.998, 6.8% of the largest logit), so it is held to a wiring
//!   bound instead, a cosine of 0.99 and 25% of the largest logit (a wrong
//!   tensor or layout gives a cosine near 0); its kernel is checked exactly
//!   against the integer product in `model::lowbit`'s tests, and the
//!   recompute check below holds it to 1e-3.
//! - The int8 KV cache: the same input through the int8 cache against the
//!   f32 cache on the same model (cosine 0.999).
//! - Decoders: one cached step at the case's depth against recomputing the
//!   whole sequence through the level's own cache kind (1e-3 of the largest
//!   logit, 4e-3 with an int8 cache: per-row activation codes and
//!   per-vector KV codes do not depend on how tokens are batched, so the
//!   two differ by the GEMM paths' rounding, and an int8 key a code apart).

use super::level_run::{LevelRun, Shape, new_cache};
use crate::model::linear::DType;
use crate::model::reference;
use crate::model::transformer::{KvCache, Workspace, WorkspaceSize};
use crate::suites::Verification;
use anyhow::{Result, bail};

/// The W8A8 wiring bound against the f64 reference: cosine floor and
/// largest error as a share of the largest value.
const W8A8_COS: f64 = 0.99;
const W8A8_SHARE: f64 = 0.25;

/// Cosine similarity and largest absolute difference of two outputs.
pub fn cosine_max(got: &[f32], want: &[f32]) -> (f64, f64) {
    let (mut d, mut ng, mut nw, mut max) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
    for (&g, &w) in got.iter().zip(want) {
        let (g, w) = (g as f64, w as f64);
        d += g * w;
        ng += g * g;
        nw += w * w;
        max = max.max((g - w).abs());
    }
    (d / (ng * nw).sqrt(), max)
}

/// A rounding check: cosine at least `min_cos` and the largest error at
/// most `share` of the reference's largest value.
fn rounding(what: &str, got: &[f32], want: &[f32], min_cos: f64, share: f64) -> Verification {
    let (cos, max) = cosine_max(got, want);
    let scale = want.iter().fold(0.0f64, |a, &v| a.max((v as f64).abs()));
    let ok = cos >= min_cos && max <= share * scale && got.iter().all(|v| v.is_finite());
    let mut v = Verification::check(
        what,
        ok,
        format!(
            "cosine {cos:.6} (floor {min_cos}), max abs error {max:.3e} = {:.2}% of the largest value (bound {:.0}%)",
            100.0 * max / scale.max(f64::MIN_POSITIVE),
            share * 100.0
        ),
    );
    v.max_error = Some(max);
    v
}

/// Runs every check of `r`; the first failure is the error.
pub fn run(r: &mut LevelRun) -> Result<Verification> {
    let mut notes = Vec::new();
    let wiring = match r.s.shape {
        Shape::Decode { .. } => decoder_reference(r, &mut notes)?,
        Shape::Encode { .. } => encoder_reference(r)?,
    }
    .into_result()?;
    if let Shape::Decode { depth, .. } = r.s.shape {
        notes.push(recompute(r, depth)?);
    } else {
        r.once();
        r.steps = crate::model::steps::Steps::new();
        if let Some(i) = r.ws.hidden(r.prompt.len(), r.s.cfg.hidden).iter().position(|x| !x.is_finite()) {
            bail!("encoder forward: hidden state {i} is not finite");
        }
        notes.push(format!("{} x {} forward: hidden states finite", r.s.batch, r.prompt.len() / r.s.batch));
    }
    let mut v = wiring;
    v.detail = format!("{}; {}", v.detail, notes.join("; "));
    Ok(v)
}

/// 3 prompt tokens and one cached step against the f64 reference (f32
/// cache), then the same through the int8 cache against the f32 cache.
fn decoder_reference(r: &LevelRun, notes: &mut Vec<String>) -> Result<Verification> {
    let (model, p, v) = (&r.model, 3, r.s.cfg.vocab);
    let ids = crate::model::random_ids(p + 1, v, 77);
    let run = |cache: &mut KvCache| {
        let mut ws =
            Workspace::new(model, WorkspaceSize { batch: 1, tokens: p, keys: p + 1, threads: r.s.threads });
        let mut out = model.decode(&mut ws, cache, &ids[..p], p, true).unwrap_or_default();
        model.decode(&mut ws, cache, &ids[p..], 1, false);
        out.extend_from_slice(&ws.logits[..v]);
        out
    };
    let exact = run(&mut KvCache::new(&r.s.cfg, 1, p + 1));
    let want: Vec<f32> = reference::forward(model, &ids, None).iter().map(|&x| x as f32).collect();
    let what = format!(
        "f64 token-by-token reference of the stored weights, {p} prompt tokens + 1 cached step (f32 KV cache)"
    );
    let v_ = if r.s.spec.dtype == DType::W8A8 {
        rounding(
            &format!("{what}; int8 activations held to a wiring bound"),
            &exact,
            &want,
            W8A8_COS,
            W8A8_SHARE,
        )
    } else {
        Verification::compare(what, &exact, &want, 2e-3, 2e-3)
    };
    if r.s.spec.int8_kv {
        let got = run(&mut new_cache(&r.s, 1, p + 1));
        let kv =
            rounding("the int8 KV cache against the f32 cache", &got, &exact, 0.999, 0.05).into_result()?;
        notes.push(format!("int8 KV cache vs f32 cache on the same input: {}", kv.detail));
    }
    Ok(v_)
}

/// A short sequence through the encoder against the f64 reference.
fn encoder_reference(r: &LevelRun) -> Result<Verification> {
    let (model, cfg) = (&r.model, &r.s.cfg);
    let n = 8.min(cfg.max_positions);
    let ids = crate::model::random_ids(n, cfg.vocab, 77);
    let mask = vec![1u8; n];
    let mut ws = Workspace::new(model, WorkspaceSize { batch: 1, tokens: n, keys: n, threads: r.s.threads });
    model.encode(&mut ws, &ids, &mask, 1, n);
    let got = ws.hidden(n, cfg.hidden).to_vec();
    let want: Vec<f32> = reference::forward(model, &ids, Some(&mask)).iter().map(|&x| x as f32).collect();
    let what = format!("f64 reference of the stored weights: the final hidden states of {n} tokens");
    Ok(if r.s.spec.dtype == DType::W8A8 {
        rounding(
            &format!("{what}; int8 activations held to a wiring bound"),
            &got,
            &want,
            W8A8_COS,
            W8A8_SHARE,
        )
    } else {
        Verification::compare(what, &got, &want, 2e-3, 2e-3)
    })
}

/// One cached step at `depth` against feeding prompt + that token afresh.
fn recompute(r: &mut LevelRun, depth: usize) -> Result<String> {
    let (b, vocab) = (r.s.batch, r.s.cfg.vocab);
    r.cache.len = depth;
    r.model.decode(&mut r.ws, &mut r.cache, &r.first, 1, false);
    let cached = r.ws.logits[..b * vocab].to_vec();
    if let Some(i) = cached.iter().position(|x| !x.is_finite()) {
        bail!("decode step: logit {i} is not finite");
    }
    let mut seq = Vec::with_capacity(b * (depth + 1));
    for i in 0..b {
        seq.extend_from_slice(&r.prompt[i * depth..(i + 1) * depth]);
        seq.push(r.first[i]);
    }
    r.cache.len = 0;
    let mut chunk = Vec::new();
    crate::model::generate::feed(&r.model, &mut r.ws, &mut r.cache, &seq, b, depth + 1, &mut chunk);
    let full = &r.ws.logits[..b * vocab];
    // The step (one row) and the recompute (a prefill) run different GEMM
    // paths, whose rounding scales with the logits; an int8 cache may also
    // round a key one code apart between the two (0.4% of that vector).
    let scale = full.iter().fold(1.0f64, |a, &v| a.max((v as f64).abs()));
    let tol = 1e-3 * scale * if r.cache.is_int8() { 4.0 } else { 1.0 };
    let check = Verification::compare("full recompute", &cached, full, tol, 1e-3);
    if !check.passed {
        bail!("a cached decode step at depth {depth} differs from a full recompute: {}", check.detail);
    }
    let kind = if r.cache.is_int8() { "int8" } else { "f32" };
    Ok(format!(
        "cached step at depth {depth} vs full recompute of {} tokens ({kind} KV cache both): max logit error {:.2e} (tol {tol:.1e} + 1e-3 relative)",
        depth + 1,
        check.max_error.unwrap_or(0.0)
    ))
}
