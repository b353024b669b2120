//! The serving suite: serving under load (issue 49) as cases of the
//! ordinary harness. MLPerf LoadGen's offline, single-stream and server
//! scenarios run against tfbench's in-process continuous-batching engine
//! ([`crate::load::engine`]) over the model runtime's built-in decoder
//! configs, each sample one complete run of a fixed, seeded request set, so
//! samples compare and the harness's statistics, baselines, `compare` and
//! `ab` apply to them.
//!
//! | benchmark | file          | what one iteration is                                  |
//! |-----------|---------------|--------------------------------------------------------|
//! | `engine`  | `scenario.rs` | one run of `scenario` over `requests` seeded requests  |
//!
//! The scenarios, the driver, the summaries and the token check are
//! `tfbench load`'s own ([`crate::load`]); this suite only describes cases
//! and holds every run to the verified tokens.

use crate::load::summary::Slo;
use crate::model::config::{Arch, ModelConfig, PRESETS};
use crate::plan::{Case, ParamValue};
use crate::suites::{ParamRule, Suite, Workload};
use anyhow::Result;

mod scenario;

/// Serving scenarios on the in-process engine.
pub struct ServingSuite;

/// Benchmarks of `suites/serving.toml`, in file order, with what prepares each.
const BENCHMARKS: crate::suites::Benchmarks = &[("engine", scenario::prepare)];

/// The scenarios a case may run (LoadGen's names, as `tfbench load
/// --scenario` spells them with `_` for `-`).
pub(crate) const SCENARIOS: &[&str] = &["offline", "single_stream", "server"];

/// Largest request count, prompt or output length a case may ask for (the
/// request set and its logs are held in memory).
const MAX_COUNT: i64 = 100_000;

impl Suite for ServingSuite {
    fn name(&self) -> &'static str {
        "serving"
    }
    fn describe(&self) -> &'static str {
        "Serving under load: LoadGen's offline, single-stream and server scenarios on the in-process \
         continuous-batching engine (built-in decoders), TTFT/TPOT/E2E percentiles and goodput, every \
         request's tokens checked against one-request greedy decoding"
    }
    fn spec_toml(&self) -> &'static str {
        include_str!("../../../suites/serving.toml")
    }
    fn benchmarks(&self) -> Vec<&'static str> {
        crate::suites::names(BENCHMARKS)
    }
    fn param_rule(&self, _benchmark: &str, key: &str) -> Option<ParamRule> {
        Some(match key {
            "model" => ParamRule::Check(check_model),
            "scenario" => ParamRule::OneOf(SCENARIOS),
            "qps" => ParamRule::Check(|v| parse_qps(v).map(|_| ())),
            "slo" => ParamRule::Check(|v| parse_slo(v).map(|_| ())),
            "requests" | "input_len" | "output_len" => ParamRule::Int { min: 1, max: MAX_COUNT },
            "max_batch" => ParamRule::Int { min: 1, max: 1024 },
            "threads" => ParamRule::Threads,
            _ => return None,
        })
    }
    fn prepare(&self, case: &Case, ctx: &crate::backend::cpu::Context) -> Result<Box<dyn Workload>> {
        crate::suites::dispatch(self.name(), BENCHMARKS, case, ctx)
    }
}

/// The catalogue's decoders (the engine serves decoders only).
fn decoders() -> Vec<&'static str> {
    PRESETS.iter().copied().filter(|n| ModelConfig::preset(n).is_ok_and(|c| c.arch != Arch::Bert)).collect()
}

/// A built-in decoder config's name.
fn check_model(v: &ParamValue) -> Result<(), String> {
    let valid = decoders();
    match v {
        ParamValue::Str(s) if valid.contains(&s.as_str()) => Ok(()),
        _ => Err(format!("must be a built-in decoder config; valid: {}", valid.join(", "))),
    }
}

/// The server scenario's arrival rate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Qps {
    /// This multiple of the offline capacity (requests/s) measured when
    /// the case is prepared: the same relative load on every machine.
    Relative(f64),
    /// Requests per second.
    Absolute(f64),
}

/// `0.5x` (a multiple of the offline capacity) or a positive number of
/// requests per second.
pub(crate) fn parse_qps(v: &ParamValue) -> Result<Qps, String> {
    let why = || {
        "must be a positive multiple of the offline capacity (\"0.5x\") or a positive rate in \
         requests/s (20, 2.5)"
            .to_string()
    };
    let positive = |x: f64| (x.is_finite() && x > 0.0).then_some(x).ok_or_else(why);
    match v {
        ParamValue::Int(n) => positive(*n as f64).map(Qps::Absolute),
        ParamValue::Float(x) => positive(*x).map(Qps::Absolute),
        ParamValue::Str(s) => match s.trim().strip_suffix('x') {
            Some(f) => positive(f.trim().parse().map_err(|_| why())?).map(Qps::Relative),
            None => positive(s.trim().parse().map_err(|_| why())?).map(Qps::Absolute),
        },
        ParamValue::Bool(_) => Err(why()),
    }
}

/// Goodput's objectives, `KEY:DURATION` joined by `+` (`ttft:2s+tpot:200ms`;
/// keys `ttft`, `tpot`, `e2e`; each duration with its unit, as `tfbench
/// load --goodput` takes them).
pub(crate) fn parse_slo(v: &ParamValue) -> Result<Slo, String> {
    let form = "must be objectives KEY:DURATION joined by + (ttft:2s+tpot:200ms; keys ttft, tpot, e2e; \
                units us, ms, s)";
    let ParamValue::Str(s) = v else { return Err(form.into()) };
    let mut slo = Slo::default();
    for part in s.split('+') {
        let Some((key, value)) = part.split_once(':') else { return Err(format!("`{part}`: {form}")) };
        let ms = crate::util::parse_duration_ms(value).map_err(|e| format!("{e}; {form}"))?;
        let slot = match key.trim() {
            "ttft" => &mut slo.ttft_ms,
            "tpot" => &mut slo.tpot_ms,
            "e2e" => &mut slo.e2e_ms,
            other => return Err(format!("`{other}` is not an objective; {form}")),
        };
        if slot.replace(ms).is_some() {
            return Err(format!("`{}` is given twice; {form}", key.trim()));
        }
    }
    Ok(slo)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::suites::params::check_value;

    fn s(v: &str) -> ParamValue {
        ParamValue::Str(v.into())
    }

    #[test]
    fn rates_are_positive_multiples_or_positive_numbers() {
        assert_eq!(parse_qps(&s("0.5x")), Ok(Qps::Relative(0.5)));
        assert_eq!(parse_qps(&s("2 x")), Ok(Qps::Relative(2.0)));
        assert_eq!(parse_qps(&ParamValue::Int(20)), Ok(Qps::Absolute(20.0)));
        assert_eq!(parse_qps(&ParamValue::Float(2.5)), Ok(Qps::Absolute(2.5)));
        assert_eq!(parse_qps(&s("12.5")), Ok(Qps::Absolute(12.5)));
        for bad in [
            s("0x"),
            s("-1x"),
            s("x"),
            s("fast"),
            s("infx"),
            ParamValue::Int(0),
            ParamValue::Int(-3),
            ParamValue::Float(f64::NAN),
            ParamValue::Bool(true),
        ] {
            let err = check_value(&ServingSuite, "engine", "qps", &bad).unwrap_err();
            assert!(err.contains("parameter `qps`") && err.contains("positive multiple"), "{bad}: {err}");
        }
    }

    #[test]
    fn unknown_scenarios_models_and_objectives_are_refused_naming_the_rule() {
        let err = check_value(&ServingSuite, "engine", "scenario", &s("multi_stream")).unwrap_err();
        assert!(err.contains("`scenario`") && err.contains("valid: offline, single_stream, server"), "{err}");
        for ok in SCENARIOS {
            assert!(check_value(&ServingSuite, "engine", "scenario", &s(ok)).is_ok());
        }
        let err = check_value(&ServingSuite, "engine", "model", &s("bert-tiny")).unwrap_err();
        let valid = err.split_once("valid: ").map_or("", |(_, v)| v);
        assert!(err.contains("decoder") && valid.contains("gpt2-tiny") && !valid.contains("bert"), "{err}");
        assert_eq!(
            parse_slo(&s("ttft:2s+tpot:200ms")),
            Ok(Slo { ttft_ms: Some(2000.0), tpot_ms: Some(200.0), e2e_ms: None })
        );
        for (bad, why) in [
            ("ttft:500", "no unit"),
            ("ttft:-1ms", "positive"),
            ("itl:5ms", "not an objective"),
            ("ttft:1s+ttft:2s", "twice"),
            ("500ms", "KEY:DURATION"),
        ] {
            let err = check_value(&ServingSuite, "engine", "slo", &s(bad)).unwrap_err();
            assert!(err.contains("parameter `slo`") && err.contains(why), "{bad}: {err}");
        }
        for (key, bad) in [("requests", 0), ("max_batch", 0), ("output_len", -4), ("requests", 1_000_000)] {
            assert!(check_value(&ServingSuite, "engine", key, &ParamValue::Int(bad)).is_err(), "{key}={bad}");
        }
    }
}
