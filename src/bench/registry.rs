//! Where a bench target registers its benchmarks ([`Benches`]), and the
//! suite they become: one [`Suite`] named after the bench target, whose
//! suite file is generated from the registrations, so plans, config files,
//! filters, results and baselines treat it as they treat tfbench's own.

use super::closure::{Bencher, IntoRoutine};
use crate::plan::{Case, ParamValue, SuiteSpec};
use crate::suites::{ParamRule, Suite};
use crate::workload::Workload;
use anyhow::{Result, anyhow, bail};
use std::collections::BTreeMap;
use std::fmt::Display;

type Setup = Box<dyn Fn(&mut Bencher<'_>) -> Result<super::Routine> + Send + Sync>;

struct Registered {
    name: String,
    grid: BTreeMap<String, Vec<ParamValue>>,
    /// For typed inputs: the written values the setup can map back.
    choices: BTreeMap<String, &'static [&'static str]>,
    setup: Setup,
}

/// A grid of parameters for [`Benches::bench_grid`]: every combination of
/// the values is one case (`name/a=1,b=x`). A config file may replace a
/// parameter's values (`[suites.<target>.benchmarks.<name>]`).
#[derive(Debug, Clone, Default)]
pub struct Grid(BTreeMap<String, Vec<ParamValue>>);

impl Grid {
    /// An empty grid.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds parameter `name` with `values` (integers, floats, booleans, strings).
    pub fn param<V: Into<ParamValue>>(mut self, name: &str, values: impl IntoIterator<Item = V>) -> Self {
        self.0.insert(name.to_string(), values.into_iter().map(Into::into).collect());
        self
    }
}

macro_rules! param_from_int {
    ($($t:ty),*) => {$(
        impl From<$t> for ParamValue {
            fn from(v: $t) -> Self {
                i64::try_from(v).map_or_else(|_| ParamValue::Str(v.to_string()), ParamValue::Int)
            }
        }
    )*};
}
param_from_int!(i8, i16, i32, i64, u8, u16, u32, u64, usize, isize);

impl From<f64> for ParamValue {
    fn from(v: f64) -> Self {
        ParamValue::Float(v)
    }
}
impl From<f32> for ParamValue {
    fn from(v: f32) -> Self {
        ParamValue::Float(v as f64)
    }
}
impl From<bool> for ParamValue {
    fn from(v: bool) -> Self {
        ParamValue::Bool(v)
    }
}
impl From<&str> for ParamValue {
    fn from(v: &str) -> Self {
        ParamValue::Str(v.to_string())
    }
}
impl From<String> for ParamValue {
    fn from(v: String) -> Self {
        ParamValue::Str(v)
    }
}

/// The benchmarks of one bench target, registered in the closure given to
/// [`crate::main`]. Each registration is a benchmark; its setup closure
/// runs untimed when a case is prepared and returns the routine to time,
/// checked before it is timed.
pub struct Benches {
    name: String,
    benchmarks: Vec<Registered>,
    suites: Vec<&'static dyn Suite>,
    errors: Vec<String>,
}

impl Benches {
    /// An empty registry whose benchmarks form suite `name`.
    pub(crate) fn new(name: &str) -> Self {
        Self { name: name.to_string(), benchmarks: Vec::new(), suites: Vec::new(), errors: Vec::new() }
    }

    /// A benchmark without parameters (one case, `<target>/<name>`).
    pub fn bench_function<F, R>(&mut self, name: &str, setup: F) -> &mut Self
    where
        F: Fn(&mut Bencher<'_>) -> R + Send + Sync + 'static,
        R: IntoRoutine,
    {
        self.push(
            name,
            BTreeMap::new(),
            BTreeMap::new(),
            Box::new(move |b: &mut Bencher<'_>| setup(b).into_routine()),
        )
    }

    /// A benchmark over typed inputs: one case per input
    /// (`<target>/<name>/<param>=<input>`, the input as it displays), the
    /// setup given the input itself.
    pub fn bench_with_input<I, F, R>(
        &mut self,
        name: &str,
        param: &str,
        inputs: impl IntoIterator<Item = I>,
        setup: F,
    ) -> &mut Self
    where
        I: Display + Send + Sync + 'static,
        F: Fn(&mut Bencher<'_>, &I) -> R + Send + Sync + 'static,
        R: IntoRoutine,
    {
        let inputs: Vec<(String, I)> = inputs.into_iter().map(|i| (i.to_string(), i)).collect();
        let written: Vec<&'static str> =
            inputs.iter().map(|(w, _)| &*Box::leak(w.clone().into_boxed_str())).collect();
        let values = inputs.iter().map(|(w, _)| written_value(w)).collect();
        let param_name = param.to_string();
        let setup: Setup = Box::new(move |b: &mut Bencher<'_>| {
            let key = b.case().str(&param_name)?;
            let Some((_, input)) = inputs.iter().find(|(w, _)| *w == key) else {
                bail!("`{param_name}` = {key} is none of the registered inputs")
            };
            setup(b, input).into_routine()
        });
        self.push(
            name,
            BTreeMap::from([(param.to_string(), values)]),
            BTreeMap::from([(param.to_string(), &*Vec::leak(written))]),
            setup,
        )
    }

    /// A benchmark over a [`Grid`] of parameters: one case per combination,
    /// the setup reading the values from [`Bencher::case`] (with `?`: it
    /// returns a `Result`).
    pub fn bench_grid<F>(&mut self, name: &str, grid: Grid, setup: F) -> &mut Self
    where
        F: Fn(&mut Bencher<'_>) -> Result<super::Routine> + Send + Sync + 'static,
    {
        if grid.0.is_empty() {
            self.errors.push(format!("benchmark `{name}`: the grid has no parameter (use bench_function)"));
        }
        self.push(name, grid.0, BTreeMap::new(), Box::new(move |b: &mut Bencher<'_>| setup(b)))
    }

    /// A whole suite implementing [`Suite`] (its own suite file, benchmarks
    /// and `prepare`), run beside this target's benchmarks.
    pub fn suite(&mut self, suite: &'static dyn Suite) -> &mut Self {
        self.suites.push(suite);
        self
    }

    fn push(
        &mut self,
        name: &str,
        grid: BTreeMap<String, Vec<ParamValue>>,
        choices: BTreeMap<String, &'static [&'static str]>,
        setup: Setup,
    ) -> &mut Self {
        let what = format!("benchmark `{name}`");
        if let Err(e) = check_name(name) {
            self.errors.push(format!("{what}: {e}"));
        }
        if self.benchmarks.iter().any(|b| b.name == name) {
            self.errors.push(format!("{what} is registered twice"));
        }
        for (key, values) in &grid {
            if let Err(e) = check_name(key) {
                self.errors.push(format!("{what}: parameter `{key}`: {e}"));
            }
            if values.is_empty() {
                self.errors.push(format!("{what}: parameter `{key}` has no values"));
            }
            for v in values.iter().map(ToString::to_string).filter(|v| v.is_empty() || v.contains([',', '/']))
            {
                self.errors
                    .push(format!("{what}: parameter `{key}`: value `{v}` is empty or holds `,` or `/`"));
            }
        }
        self.benchmarks.push(Registered { name: name.to_string(), grid, choices, setup });
        self
    }

    /// The suites to run: this target's benchmarks as one suite (when there
    /// are any), then the added suites. Registration mistakes are reported
    /// together, naming each benchmark.
    pub(crate) fn into_registry(self) -> Result<Vec<&'static dyn Suite>> {
        let mut errors = self.errors;
        let mut out: Vec<&'static dyn Suite> = Vec::new();
        if !self.benchmarks.is_empty() {
            match ClosureSuite::new(&self.name, self.benchmarks) {
                Ok(s) => out.push(Box::leak(Box::new(s))),
                Err(e) => errors.push(format!("{e:#}")),
            }
        }
        for s in self.suites {
            if out.iter().any(|o| o.name() == s.name()) {
                errors.push(format!(
                    "suite `{}` is registered twice (a bench target's own suite takes its name)",
                    s.name()
                ));
            }
            out.push(s);
        }
        if out.is_empty() {
            errors.push("no benchmark is registered".into());
        }
        if !errors.is_empty() {
            bail!("{} (in the closure given to tfbench::main)", errors.join("; "));
        }
        Ok(out)
    }
}

/// A benchmark or parameter name: letters, digits, `_`, `-`, `.`; it is
/// part of case ids, so `/`, `,` and `=` would make them ambiguous.
fn check_name(name: &str) -> Result<(), String> {
    if !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c)) {
        Ok(())
    } else {
        Err(format!("`{name}` is not a name (letters, digits, `_`, `-` and `.` only)"))
    }
}

/// A typed input's written form as a parameter value: an integer when it is
/// one exactly (so a config file may write it as a number), else a string.
fn written_value(w: &str) -> ParamValue {
    match w.parse::<i64>() {
        Ok(i) if i.to_string() == w => ParamValue::Int(i),
        _ => ParamValue::Str(w.to_string()),
    }
}

/// The registered benchmarks as a suite.
struct ClosureSuite {
    name: &'static str,
    describe: &'static str,
    spec: &'static str,
    names: &'static [&'static str],
    benchmarks: Vec<Registered>,
}

impl ClosureSuite {
    fn new(name: &str, benchmarks: Vec<Registered>) -> Result<Self> {
        #[derive(serde::Serialize)]
        struct Spec<'a> {
            benchmark: Vec<Bench<'a>>,
        }
        #[derive(serde::Serialize)]
        struct Bench<'a> {
            name: &'a str,
            description: String,
            #[serde(skip_serializing_if = "Vec::is_empty")]
            grid: Vec<&'a BTreeMap<String, Vec<ParamValue>>>,
        }
        let spec = Spec {
            benchmark: benchmarks
                .iter()
                .map(|b| Bench {
                    name: &b.name,
                    description: format!("`{}` of bench target {name} (registered in its code)", b.name),
                    grid: if b.grid.is_empty() { Vec::new() } else { vec![&b.grid] },
                })
                .collect(),
        };
        let text = toml::to_string(&spec).map_err(|e| anyhow!("bench target {name}: {e}"))?;
        // The generated file must read back as the suite files do.
        SuiteSpec::parse(name, &text)?;
        let names: Vec<&'static str> =
            benchmarks.iter().map(|b| &*Box::leak(b.name.clone().into_boxed_str())).collect();
        Ok(Self {
            name: Box::leak(name.to_string().into_boxed_str()),
            describe: Box::leak(format!("the benchmarks of bench target {name}").into_boxed_str()),
            spec: Box::leak(text.into_boxed_str()),
            names: Vec::leak(names),
            benchmarks,
        })
    }
}

impl Suite for ClosureSuite {
    fn name(&self) -> &'static str {
        self.name
    }
    fn describe(&self) -> &'static str {
        self.describe
    }
    fn spec_toml(&self) -> &'static str {
        self.spec
    }
    fn benchmarks(&self) -> Vec<&'static str> {
        self.names.to_vec()
    }
    fn prepare(&self, case: &Case, _ctx: &crate::backend::cpu::Context) -> Result<Box<dyn Workload>> {
        let Some(b) = self.benchmarks.iter().find(|b| b.name == case.benchmark) else {
            bail!(
                "bench target {} has no benchmark `{}`; valid: {}",
                self.name,
                case.benchmark,
                self.names.join(", ")
            )
        };
        let mut bencher = Bencher::new(case);
        Ok((b.setup)(&mut bencher)?.0)
    }
    fn param_rule(&self, benchmark: &str, key: &str) -> Option<ParamRule> {
        let b = self.benchmarks.iter().find(|b| b.name == benchmark)?;
        b.choices.get(key).copied().map(ParamRule::OneOf)
    }
}
