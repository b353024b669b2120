//! The mobile and WebAssembly suite: work under device profiles (threads,
//! ISA cap and memory budget imposed for real, clock and bandwidth not),
//! sustained load, simulated thermal throttling, and kernels and memory
//! patterns in real WebAssembly runtimes (the `wasm` backend), and WGSL
//! kernels on a WebGPU adapter (the `webgpu` backend).
//!
//! | benchmark | file |
//! |---|---|
//! | `capped`, `sustained`, `thermal_simulated` | `capped.rs` (profiles: `profile.rs`, model: `thermal.rs`) |
//! | `levels` (O0-O3 over the model runtime) | `levels.rs` (work: `level_run.rs`, checks: `level_check.rs`, accuracy vs O0: `level_accuracy.rs`) |
//! | `adapt` (device adaptation: a search over levels, threads, batch) | `adapt.rs` |
//! | `wasm_kernel` | `wasm_kernel.rs` |
//! | `wasm_memory` | `wasm_memory.rs` |
//! | `webgpu_kernel` (WGSL kernels on a WebGPU adapter, `--device webgpu`) | `webgpu_kernel.rs` |

use crate::backend::DeviceKind;
use crate::plan::{Case, ParamValue};
use crate::suites::{Context, ParamRule, Suite, Threads, Workload};
use anyhow::Result;

pub mod adapt;
mod capped;
#[cfg(feature = "models")]
mod level_accuracy;
#[cfg(feature = "models")]
mod level_check;
#[cfg(feature = "models")]
mod level_run;
mod levels;
pub mod profile;
mod thermal;
mod wasm_kernel;
mod wasm_memory;
mod webgpu_kernel;

/// Device profiles, sustained load, simulated throttling, WebAssembly.
pub struct MobileSuite;

/// Benchmarks of `suites/mobile.toml`, in file order, with what prepares each.
const BENCHMARKS: crate::suites::Benchmarks = &[
    ("capped", capped::prepare),
    ("sustained", capped::prepare),
    ("thermal_simulated", capped::prepare),
    ("levels", levels::prepare),
    ("adapt", adapt::prepare),
    ("wasm_kernel", |c, _| wasm_kernel::prepare(c)),
    ("wasm_memory", |c, _| wasm_memory::prepare(c)),
    ("webgpu_kernel", |c, _| webgpu_kernel::prepare(c)),
];

/// A non-negative number of seconds.
fn seconds(v: &ParamValue) -> Result<(), String> {
    match v {
        ParamValue::Int(i) if *i >= 0 => Ok(()),
        ParamValue::Float(f) if *f >= 0.0 && f.is_finite() => Ok(()),
        _ => Err("must be a non-negative number of seconds".into()),
    }
}

/// A number above zero (a latency target).
fn positive_number(v: &ParamValue) -> Result<(), String> {
    match v {
        ParamValue::Int(i) if *i > 0 => Ok(()),
        ParamValue::Float(f) if *f > 0.0 && f.is_finite() => Ok(()),
        _ => Err("must be a number above zero".into()),
    }
}

/// A non-negative number (0 = the profile's own figure).
fn seconds_like_non_negative(v: &ParamValue) -> Result<(), String> {
    seconds(v).map_err(|_| "must be a non-negative number (0: the profile's budget)".into())
}

/// A number from 0 to 1 (a cosine floor).
fn unit_interval(v: &ParamValue) -> Result<(), String> {
    match v {
        ParamValue::Int(i) if (0..=1).contains(i) => Ok(()),
        ParamValue::Float(f) if (0.0..=1.0).contains(f) => Ok(()),
        _ => Err("must be a number from 0 to 1".into()),
    }
}

/// A catalogue model of the family a key takes: `encoder` a BERT-family
/// one, `model` a decoder (levels decode with a KV cache; adapt searches it).
fn family(v: &ParamValue, encoder: bool) -> Result<(), String> {
    let fits = |n: &str| {
        crate::model::config::ModelConfig::preset(n)
            .is_ok_and(|c| (c.arch == crate::model::config::Arch::Bert) == encoder)
    };
    let valid: Vec<&str> = crate::model::config::PRESETS.iter().copied().filter(|n| fits(n)).collect();
    crate::suites::params::one_of(v, &valid)
}

/// A shape of positive integers joined by x (its rank is checked by op).
fn shape(v: &ParamValue) -> Result<(), String> {
    match v {
        ParamValue::Int(n) if *n >= 1 => Ok(()),
        ParamValue::Str(s) if crate::plan::parse_shape(s).is_ok() => Ok(()),
        _ => Err("must be positive integers joined by x".into()),
    }
}

impl Suite for MobileSuite {
    fn name(&self) -> &'static str {
        "mobile"
    }
    fn describe(&self) -> &'static str {
        "Mobile & WebAssembly: device profiles (emulated), sustained load, simulated throttling, wasm kernels and memory, WebGPU kernels"
    }
    fn spec_toml(&self) -> &'static str {
        include_str!("../../../suites/mobile.toml")
    }
    fn benchmarks(&self) -> Vec<&'static str> {
        crate::suites::names(BENCHMARKS)
    }
    fn devices(&self, benchmark: &str) -> &'static [DeviceKind] {
        match benchmark {
            "wasm_kernel" | "wasm_memory" => &[DeviceKind::Wasm],
            "webgpu_kernel" => &[DeviceKind::WebGpu],
            _ => crate::backend::CPU_ONLY,
        }
    }
    fn threads(&self, case: &Case) -> Result<Threads> {
        if case.benchmark == "adapt" {
            // The search builds a context per candidate; the chosen
            // configuration's threads are its `chosen_threads` metric.
            Ok(Threads::Run)
        } else if case.benchmark == "levels" {
            levels::threads(case)
        } else if case.params.contains_key("profile") {
            capped::threads_of(case)
        } else {
            case.threads_request()
        }
    }
    fn param_rule(&self, benchmark: &str, key: &str) -> Option<ParamRule> {
        Some(match key {
            "op" if benchmark == "webgpu_kernel" => ParamRule::OneOf(crate::backend::webgpu::OPS),
            "profile" => ParamRule::Check(profile::check_param),
            "powersave" => ParamRule::Int { min: 0, max: 2 },
            "threads" => ParamRule::Threads,
            "shape" | "rows" => ParamRule::Check(shape),
            "seconds" | "window" | "cooldown" | "slice" => ParamRule::Check(seconds),
            "windows" | "n" | "pages" | "bytes" | "steps" => ParamRule::POSITIVE,
            "op" => ParamRule::OneOf(wasm_kernel::OPS),
            "level" => ParamRule::OneOf(levels::LEVELS),
            "model" => ParamRule::Check(|v| family(v, false)),
            "encoder" => ParamRule::Check(|v| family(v, true)),
            "seq" => ParamRule::POSITIVE,
            "depth" => ParamRule::NON_NEGATIVE,
            "latency_ms" => ParamRule::Check(positive_number),
            "memory_mib" => ParamRule::Check(seconds_like_non_negative),
            "min_cosine" => ParamRule::Check(unit_interval),
            "gen" => ParamRule::POSITIVE,
            "simd" => ParamRule::OneOf(wasm_kernel::VARIANTS),
            "pattern" => ParamRule::OneOf(wasm_memory::PATTERNS),
            _ => return None,
        })
    }
    fn prepare(&self, case: &Case, ctx: &Context) -> Result<Box<dyn Workload>> {
        crate::suites::dispatch(self.name(), BENCHMARKS, case, ctx)
    }
}

#[cfg(test)]
mod tests;
