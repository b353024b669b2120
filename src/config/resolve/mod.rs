//! Layering: defaults < `--quick` profile < config file < its suite section
//! < CLI flags, and the plan of cases that results.

use super::file::{ConfigFile, LoadedConfig, PartialSettings, parse_toml};
use super::{QUICK_PROFILE, Settings};
use crate::plan::{self, Case, Filter, ParamValue, SuiteSpec};
use crate::suites::model_cases;
use crate::suites::{self, Suite, command};
use anyhow::{Result, bail};
use std::collections::BTreeMap;

/// What the command line says about a run (all optional: unset means "not given").
#[derive(Debug, Clone, Default)]
pub struct CliOverrides {
    /// `--suite` values (empty: the config's list, else every suite).
    pub suites: Vec<String>,
    /// FILTER, `--exact`, `--skip`.
    pub filter: Filter,
    /// Harness flags.
    pub harness: PartialSettings,
    /// `--quick`.
    pub quick: bool,
    /// `--threads`: the run's pool (a sweep's widest step).
    pub threads: Option<usize>,
    /// `--threads 1,2,4`: the steps of a thread sweep, each CPU case run
    /// once per step (empty: no sweep).
    pub thread_sweep: Vec<usize>,
    /// `--rounds`.
    pub rounds: Option<u32>,
    /// `--shuffle`.
    pub shuffle: bool,
    /// `--shard I/N`: keep every N-th case of the plan, starting at the I-th.
    pub shard: Option<Shard>,
    /// `--device`: where the cases run (CPU when empty).
    pub devices: Vec<crate::backend::Device>,
    /// `--model PATH`: the suite that runs model files runs only its model-file
    /// benchmark, on this file (`crate::suites::model_cases`).
    pub model: Option<String>,
    /// The model's `name.type` read from that file's header: its cases'
    /// `model` parameter, so baselines of two files never share an id.
    pub model_name: Option<String>,
}

/// The tests and depths chosen for a model file of the user's (`--model` or
/// the config's) by `run`'s llama-bench flags (`--tests`, `-p`, `-n`,
/// `--pg`, `-d`), kept apart from [`CliOverrides`] so the commands without
/// them build it as before.
#[derive(Debug, Clone, Default)]
pub struct ModelFileTests {
    /// The model-file benchmark's `test` values (empty: the config's, else the suite file's).
    pub tests: Vec<String>,
    /// Its `depth` values (empty: not given).
    pub depths: Vec<i64>,
    /// The first of these flags given (`--tests`, `--n-depth`, also
    /// `--repetitions`), for the error when there is no model for them.
    pub flag: Option<&'static str>,
}

/// One of N deterministic slices of a plan (`--shard I/N`, 1-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// Which slice, 1..=count.
    pub index: usize,
    /// How many slices.
    pub count: usize,
}

impl std::str::FromStr for Shard {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("`{s}` is not a shard like 2/4 (I/N with 1 <= I <= N)");
        let (i, n) = s.split_once('/').ok_or_else(bad)?;
        let (index, count) =
            (i.trim().parse::<usize>().map_err(|_| bad())?, n.trim().parse::<usize>().map_err(|_| bad())?);
        if count == 0 || index == 0 || index > count {
            return Err(bad());
        }
        Ok(Self { index, count })
    }
}

/// A resolved run: the cases in plan order and the settings for each suite.
#[derive(Clone)]
pub struct Resolved {
    /// Cases after grid overrides and filtering, in registry and file order.
    pub cases: Vec<Case>,
    /// Settings per suite name (only the suites selected).
    pub settings: BTreeMap<String, Settings>,
    /// Suites selected, in registry order.
    pub suites: Vec<&'static dyn Suite>,
    /// Each selected suite's spec after the config's grid overrides.
    pub specs: BTreeMap<String, SuiteSpec>,
    /// Worker threads for the rayon pool.
    pub threads: usize,
    /// Rounds over the plan.
    pub rounds: u32,
    /// Shuffle each round.
    pub shuffle: bool,
}

impl std::fmt::Debug for Resolved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resolved")
            .field("suites", &self.suites.iter().map(|s| s.name()).collect::<Vec<_>>())
            .field("cases", &self.cases.len())
            .field("settings", &self.settings)
            .field("threads", &self.threads)
            .field("rounds", &self.rounds)
            .field("shuffle", &self.shuffle)
            .finish()
    }
}

/// Resolves the layers into a plan over tfbench's own suites. Errors name
/// the file, line and the choices.
pub fn resolve(config: Option<&LoadedConfig>, cli: &CliOverrides) -> Result<Resolved> {
    resolve_in(suites::registry(), config, cli)
}

/// [`resolve`] over the suites of `registry` instead of tfbench's own (a
/// `cargo bench` target's benchmarks, see [`crate::bench`]): the names a
/// config file and `--suite` may use are those of `registry`.
pub fn resolve_in(
    registry: &[&'static dyn Suite],
    config: Option<&LoadedConfig>,
    cli: &CliOverrides,
) -> Result<Resolved> {
    resolve_model(registry, config, cli, &ModelFileTests::default())
}

/// [`resolve_in`] with the model's tests and depths from `run`'s
/// llama-bench flags, which replace the config's. The steps, in order:
/// the config's commands, the suites, then per suite its settings, its
/// spec and its cases; the shard; the model flags' checks; the run options.
pub fn resolve_model(
    registry: &[&'static dyn Suite],
    config: Option<&LoadedConfig>,
    cli: &CliOverrides,
    model: &ModelFileTests,
) -> Result<Resolved> {
    let empty = ConfigFile::default();
    let file = config.map_or(&empty, |c| &c.config);
    let commands = command_suite(config, file)?;
    let selected = select_suites(registry, commands, config, file, cli)?;
    let layers = Layers { config, file, quick: quick_profile(cli)?, cli, model };
    let mut settings = BTreeMap::new();
    let mut specs = BTreeMap::new();
    let mut cases = Vec::new();
    let devices =
        if cli.devices.is_empty() { vec![crate::backend::Device::Cpu] } else { cli.devices.clone() };
    let filter = Filter {
        pattern: cli.filter.pattern.clone().or_else(|| file.run.filter.clone()),
        exact: cli.filter.exact,
        skip: cli.filter.skip.clone().or_else(|| file.run.skip.clone()),
    }
    .compile()?;
    for suite in &selected {
        settings.insert(suite.name().to_string(), layers.settings(*suite)?);
        let spec = layers.spec(*suite)?;
        for b in &spec.benchmarks {
            let expanded = layers.applicable(*suite, plan::expand(suite.name(), b))?;
            // Cases x the chosen devices this benchmark runs on.
            let kinds = suite.devices(&b.name);
            for &device in devices.iter().filter(|d| kinds.contains(&d.kind())) {
                let on_device = expanded.iter().map(|c| c.clone().on(device)).collect();
                cases.extend(
                    plan::sweep_all(on_device, &cli.thread_sweep)
                        .into_iter()
                        .filter(|c| filter.matches(&c.id)),
                );
            }
        }
        specs.insert(suite.name().to_string(), spec);
    }
    if let Some(shard) = cli.shard {
        // Round-robin over the filtered plan: balanced slices whose union is
        // the whole plan, the same on every machine given the same config.
        cases = cases
            .into_iter()
            .enumerate()
            .filter(|(i, _)| i % shard.count == shard.index - 1)
            .map(|(_, c)| c)
            .collect();
    }
    check_model_choice(file, cli, model, &selected)?;
    let threads = cli.threads.or(file.run.threads).unwrap_or_else(default_threads);
    if threads == 0 {
        bail!("threads must be at least 1");
    }
    let rounds = cli.rounds.or(file.run.rounds).unwrap_or(1);
    if rounds == 0 {
        return Err(error_at(config, "rounds", "rounds must be at least 1".to_string()));
    }
    let shuffle = cli.shuffle || file.run.shuffle.unwrap_or(false);
    Ok(Resolved { cases, settings, suites: selected, specs, threads, rounds, shuffle })
}

/// An error about `key` of the config file, located in it when there is
/// one.
fn error_at(config: Option<&LoadedConfig>, key: &str, msg: String) -> anyhow::Error {
    match config {
        Some(c) => c.error_at(key, msg),
        None => anyhow::anyhow!(msg),
    }
}

/// The config's `[[command]]` tables, checked, as the `command` suite. The
/// plan holds suites as `&'static` (the registry's are statics); this one
/// lives as long as the process, like the config it came from.
fn command_suite(config: Option<&LoadedConfig>, file: &ConfigFile) -> Result<Option<&'static dyn Suite>> {
    if file.commands.is_empty() {
        return Ok(None);
    }
    let suite = command::CommandSuite::from_config(file.commands.clone()).map_err(|e| match config {
        Some(c) => c.error_in_command(e.index, &e.key, &e.message),
        None => anyhow::anyhow!("[[command]] #{} `{}`: {}", e.index + 1, e.key, e.message),
    })?;
    Ok(Some(Box::leak(Box::new(suite))))
}

/// The suites to run, in registry order: the CLI's, else the model file's
/// suite (`--model`), else the config's, else the commands a config
/// defines, else every built-in suite. Unknown names (there or in the
/// config's `[suites]`) are errors listing the known ones.
fn select_suites(
    registry: &[&'static dyn Suite],
    commands: Option<&'static dyn Suite>,
    config: Option<&LoadedConfig>,
    file: &ConfigFile,
    cli: &CliOverrides,
) -> Result<Vec<&'static dyn Suite>> {
    let builtin: Vec<&str> = registry.iter().map(|s| s.name()).collect();
    let mut known = builtin.clone();
    known.push(command::NAME);
    let find = |n: &str| {
        registry.iter().copied().find(|s| s.name() == n).or(if n == command::NAME { commands } else { None })
    };
    let names: Vec<String> = if !cli.suites.is_empty() {
        cli.suites.clone()
    } else if cli.model.is_some() {
        vec![model_cases::SUITE.to_string()]
    } else if let Some(list) = &file.run.suites {
        list.clone()
    } else if commands.is_some() {
        vec![command::NAME.to_string()]
    } else {
        builtin.iter().map(|s| s.to_string()).collect()
    };
    let mut selected: Vec<&'static dyn Suite> = Vec::new();
    for n in &names {
        match find(n) {
            Some(s) if !selected.iter().any(|x| x.name() == s.name()) => selected.push(s),
            Some(_) => {}
            None if n == command::NAME => {
                let msg = "suite `command` has no commands: define [[command]] tables in the --config file (see docs/commands.md)";
                return Err(if cli.suites.is_empty() {
                    error_at(config, "suites", msg.into())
                } else {
                    anyhow::anyhow!(msg)
                });
            }
            None if cli.suites.is_empty() => {
                return Err(error_at(
                    config,
                    "suites",
                    format!("unknown suite `{n}`; known suites: {}", known.join(", ")),
                ));
            }
            None => bail!("unknown suite `{n}`; known suites: {}", known.join(", ")),
        }
    }
    selected.sort_by_key(|s| known.iter().position(|k| *k == s.name()));
    for name in file.suites.keys() {
        if find(name).is_none() && name != command::NAME {
            return Err(error_at(
                config,
                name,
                format!("unknown suite `{name}` in [suites]; known suites: {}", known.join(", ")),
            ));
        }
    }
    Ok(selected)
}

/// The `--quick` profile as a config of its own, when asked for.
fn quick_profile(cli: &CliOverrides) -> Result<Option<LoadedConfig>> {
    if !cli.quick {
        return Ok(None);
    }
    let path = "configs/quick.toml";
    Ok(Some(LoadedConfig {
        config: parse_toml(path, QUICK_PROFILE)?,
        path: path.into(),
        text: QUICK_PROFILE.into(),
    }))
}

/// The layers a suite's settings and spec are made of, lowest first.
struct Layers<'a> {
    config: Option<&'a LoadedConfig>,
    file: &'a ConfigFile,
    quick: Option<LoadedConfig>,
    cli: &'a CliOverrides,
    model: &'a ModelFileTests,
}

impl Layers<'_> {
    /// The cases of `expanded` whose parameters work together
    /// ([`Suite::check_case`]). One that does not is dropped when the
    /// parameter it names has the suite file's values (its grids pair them
    /// only where they apply; another key's override made the case), and
    /// refused, at the value, when the config or the quick profile sets it.
    fn applicable(&self, suite: &dyn Suite, expanded: Vec<Case>) -> Result<Vec<Case>> {
        let mut kept = Vec::with_capacity(expanded.len());
        for case in expanded {
            let Err((key, why)) = suite.check_case(&case) else {
                kept.push(case);
                continue;
            };
            let at = (suite.name(), case.benchmark.as_str(), key);
            let sets = |f: &ConfigFile| {
                f.suites.get(at.0).and_then(|s| s.benchmarks.get(at.1)).is_some_and(|p| p.contains_key(key))
            };
            let value = case.params.get(key).cloned().unwrap_or(ParamValue::Bool(false));
            let msg = format!(
                "benchmark {}/{}: parameter `{key}` = {value} cannot run case {}: {why}",
                at.0, at.1, case.id
            );
            if sets(self.file) {
                return Err(match self.config {
                    Some(c) => c.error_at_value(at, &value, msg),
                    None => anyhow::anyhow!(msg),
                });
            }
            if let Some(q) = self.quick.as_ref().filter(|q| sets(&q.config)) {
                return Err(q.error_at_value(at, &value, msg));
            }
        }
        Ok(kept)
    }

    /// A suite's harness settings: defaults < quick profile < config file <
    /// its suite section < CLI flags, validated; an error names the flag or
    /// the config key that set the bad value.
    fn settings(&self, suite: &dyn Suite) -> Result<Settings> {
        let mut s = Settings::default();
        if let Some(q) = &self.quick {
            q.config.harness.apply_to(&mut s);
        }
        self.file.harness.apply_to(&mut s);
        if let Some(sec) = self.file.suites.get(suite.name()) {
            sec.harness.apply_to(&mut s);
        }
        self.cli.harness.apply_to(&mut s);
        if let Err((key, msg)) = s.validate() {
            let from_cli = field_set(&self.cli.harness, key);
            return Err(if from_cli {
                anyhow::anyhow!("--{}: {msg}", key.replace('_', "-"))
            } else {
                error_at(self.config, key, format!("{key} {msg}"))
            });
        }
        Ok(s)
    }

    /// A suite's spec: its file, the quick profile's grids (small models
    /// only), the config's grids (which still win), then the model file of
    /// `--model` and llama-bench's flags; every value checked, an error
    /// saying where the value came from.
    fn spec(&self, suite: &dyn Suite) -> Result<SuiteSpec> {
        let mut spec = suite.spec()?;
        if let Some(q) = &self.quick
            && let Some(qsec) = q.config.suites.get(suite.name())
        {
            for (bench, params) in &qsec.benchmarks {
                let params = params.iter().map(|(k, v)| (k.clone(), v.clone().into_vec())).collect();
                spec.override_params(suite.name(), bench, &params)
                    .map_err(|e| anyhow::anyhow!("configs/quick.toml: {e}"))?;
                check_values(suite, bench, &params, |key, v, msg| {
                    q.error_at_value((suite.name(), bench, key), v, msg)
                })?;
            }
        }
        if let Some(sec) = self.file.suites.get(suite.name()) {
            for (bench, params) in &sec.benchmarks {
                let params = params.iter().map(|(k, v)| (k.clone(), v.clone().into_vec())).collect();
                spec.override_params(suite.name(), bench, &params).map_err(|e| {
                    let key = params_key_hint(&e.to_string(), bench);
                    error_at(self.config, &key, e.to_string())
                })?;
                check_values(suite, bench, &params, |key, v, msg| match self.config {
                    Some(c) => c.error_at_value((suite.name(), bench, key), v, msg),
                    None => anyhow::anyhow!(msg),
                })?;
            }
        }
        // --model: the user's file replaces the model suite's plan, and
        // llama-bench's flags its tests and depths, over the config's.
        if suite.name() == model_cases::SUITE {
            let path = self.cli.model.as_deref().map(|p| (p, self.cli.model_name.as_deref()));
            model_cases::apply(&mut spec, path, &self.model.tests, &self.model.depths)?;
        }
        // What is left unchecked came from the built-in suite file.
        for b in &spec.benchmarks {
            for grid in &b.grids {
                check_values(suite, &b.name, grid, |_, _, msg| {
                    anyhow::anyhow!("suites/{}.toml (built in): {msg}", suite.name())
                })?;
            }
        }
        Ok(spec)
    }
}

/// `--model` and llama-bench's flags need the suite that runs a model file
/// selected, and the flags a model to run (`--model`, or a config that
/// names a file).
fn check_model_choice(
    file: &ConfigFile,
    cli: &CliOverrides,
    model: &ModelFileTests,
    selected: &[&'static dyn Suite],
) -> Result<()> {
    let suite = model_cases::SUITE;
    let runs_models = selected.iter().any(|s| s.name() == suite);
    if cli.model.is_some() && !runs_models {
        bail!("--model runs in the {suite} suite; add `--suite {suite}`");
    }
    if let Some(flag) = model.flag {
        let in_config = model_cases::names_a_file(
            file.suites.get(suite).and_then(|s| s.benchmarks.get(model_cases::BENCHMARK)),
        );
        if cli.model.is_none() && !in_config {
            bail!(
                "{flag} chooses the tests of a model of your own: give --model PATH (a GGUF file or a Hugging Face directory), or a --config whose [suites.{suite}.benchmarks.{}] sets `{}`",
                model_cases::BENCHMARK,
                model_cases::FILE_PARAM
            );
        }
        if !runs_models {
            bail!("{flag} chooses the tests of the {suite} suite's model; add `--suite {suite}`");
        }
    }
    Ok(())
}

impl Resolved {
    /// The selected suite named `name`: a built-in one, or one built from
    /// the config (`command`). The runner prepares cases through it.
    pub fn suite(&self, name: &str) -> Option<&'static dyn Suite> {
        self.suites.iter().copied().find(|s| s.name() == name)
    }
}

/// Logical CPUs available to this process.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn field_set(p: &PartialSettings, key: &str) -> bool {
    match key {
        "sample_size" => p.sample_size.is_some(),
        "warm_up_time" => p.warm_up_time.is_some(),
        "measurement_time" => p.measurement_time.is_some(),
        "max_time" => p.max_time.is_some(),
        "target_precision" => p.target_precision.is_some(),
        "confidence_level" => p.confidence_level.is_some(),
        "bootstrap_resamples" => p.bootstrap_resamples.is_some(),
        "placements" => p.placements.is_some(),
        _ => false,
    }
}

/// Checks every value of `params` against the rules `suite` declares for
/// `bench`; `locate` turns a refusal into an error saying where the value is.
fn check_values(
    suite: &dyn Suite,
    bench: &str,
    params: &BTreeMap<String, Vec<ParamValue>>,
    locate: impl Fn(&str, &ParamValue, String) -> anyhow::Error,
) -> Result<()> {
    for (key, values) in params {
        for v in values {
            suites::params::check_value(suite, bench, key, v).map_err(|msg| locate(key, v, msg))?;
        }
    }
    Ok(())
}

/// The key an override error is about: the bad parameter if named, else the benchmark.
fn params_key_hint(msg: &str, bench: &str) -> String {
    msg.split('`').nth(1).filter(|k| !k.is_empty()).unwrap_or(bench).to_string()
}

#[cfg(test)]
mod tests;
