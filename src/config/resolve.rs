//! Layering: defaults < `--quick` profile < config file < its suite section
//! < CLI flags, and the plan of cases that results.

use super::file::{ConfigFile, LoadedConfig, PartialSettings, parse_toml};
use super::{QUICK_PROFILE, Settings};
use crate::plan::{self, Case, Filter, ParamValue, SuiteSpec};
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
    /// `--threads`.
    pub threads: Option<usize>,
    /// `--rounds`.
    pub rounds: Option<u32>,
    /// `--shuffle`.
    pub shuffle: bool,
    /// `--shard I/N`: keep every N-th case of the plan, starting at the I-th.
    pub shard: Option<Shard>,
    /// `--device`: where the cases run (CPU when empty).
    pub devices: Vec<crate::backend::Device>,
    /// `--model PATH`: the inference suite runs only its `gguf` benchmark, on this file.
    pub model: Option<String>,
    /// The model's `name.type` read from that file's header: its cases'
    /// `model` parameter, so baselines of two files never share an id.
    pub model_name: Option<String>,
}

/// `run`'s llama-bench flags for the model of `--model` or of the config
/// (`--tests`, `-p`, `-n`, `--pg`, `-d`), kept apart from [`CliOverrides`]
/// so the commands without them build it as before.
#[derive(Debug, Clone, Default)]
pub struct ModelTests {
    /// The `gguf` benchmark's `test` values (empty: the config's, else the suite file's).
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
    resolve_model(registry, config, cli, &ModelTests::default())
}

/// [`resolve_in`] with the model's tests and depths from `run`'s
/// llama-bench flags, which replace the config's.
pub fn resolve_model(
    registry: &[&'static dyn Suite],
    config: Option<&LoadedConfig>,
    cli: &CliOverrides,
    model: &ModelTests,
) -> Result<Resolved> {
    let empty = ConfigFile::default();
    let file = config.map_or(&empty, |c| &c.config);
    let at = |key: &str, msg: String| match config {
        Some(c) => c.error_at(key, msg),
        None => anyhow::anyhow!(msg),
    };
    let builtin: Vec<&str> = registry.iter().map(|s| s.name()).collect();
    let mut known = builtin.clone();
    known.push(command::NAME);

    // The config's [[command]] tables, checked, as the `command` suite. The
    // plan holds suites as `&'static` (the registry's are statics); this one
    // lives as long as the process, like the config it came from.
    let commands: Option<&'static dyn Suite> = if file.commands.is_empty() {
        None
    } else {
        let suite = command::CommandSuite::from_config(file.commands.clone()).map_err(|e| match config {
            Some(c) => c.error_in_command(e.index, &e.key, &e.message),
            None => anyhow::anyhow!("[[command]] #{} `{}`: {}", e.index + 1, e.key, e.message),
        })?;
        Some(Box::leak(Box::new(suite)))
    };
    let find = |n: &str| {
        registry.iter().copied().find(|s| s.name() == n).or(if n == command::NAME { commands } else { None })
    };

    // Suites: CLI, else config, else the commands a config defines, else
    // every built-in suite.
    let names: Vec<String> = if !cli.suites.is_empty() {
        cli.suites.clone()
    } else if cli.model.is_some() {
        vec!["inference".to_string()]
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
                    at("suites", msg.into())
                } else {
                    anyhow::anyhow!(msg)
                });
            }
            None if cli.suites.is_empty() => {
                return Err(at("suites", format!("unknown suite `{n}`; known suites: {}", known.join(", "))));
            }
            None => bail!("unknown suite `{n}`; known suites: {}", known.join(", ")),
        }
    }
    selected.sort_by_key(|s| known.iter().position(|k| *k == s.name()));
    for name in file.suites.keys() {
        if find(name).is_none() && name != command::NAME {
            return Err(at(
                name,
                format!("unknown suite `{name}` in [suites]; known suites: {}", known.join(", ")),
            ));
        }
    }

    let quick = if cli.quick {
        let path = "configs/quick.toml";
        Some(LoadedConfig {
            config: parse_toml(path, QUICK_PROFILE)?,
            path: path.into(),
            text: QUICK_PROFILE.into(),
        })
    } else {
        None
    };
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
        let section = file.suites.get(suite.name());
        let mut s = Settings::default();
        if let Some(q) = &quick {
            q.config.harness.apply_to(&mut s);
        }
        file.harness.apply_to(&mut s);
        if let Some(sec) = section {
            sec.harness.apply_to(&mut s);
        }
        cli.harness.apply_to(&mut s);
        if let Err((key, msg)) = s.validate() {
            let from_cli = field_set(&cli.harness, key);
            return Err(if from_cli {
                anyhow::anyhow!("--{}: {msg}", key.replace('_', "-"))
            } else {
                at(key, format!("{key} {msg}"))
            });
        }
        settings.insert(suite.name().to_string(), s);

        let mut spec = suite.spec()?;
        // The quick profile may shrink a suite's grids (small models only);
        // a config file's own grid overrides still win.
        if let Some(q) = &quick
            && let Some(qsec) = q.config.suites.get(suite.name())
        {
            for (bench, params) in &qsec.benchmarks {
                let params = params.iter().map(|(k, v)| (k.clone(), v.clone().into_vec())).collect();
                spec.override_params(suite.name(), bench, &params)
                    .map_err(|e| anyhow::anyhow!("configs/quick.toml: {e}"))?;
                check_values(*suite, bench, &params, |key, v, msg| {
                    q.error_at_value((suite.name(), bench, key), v, msg)
                })?;
            }
        }
        if let Some(sec) = section {
            for (bench, params) in &sec.benchmarks {
                let params = params.iter().map(|(k, v)| (k.clone(), v.clone().into_vec())).collect();
                spec.override_params(suite.name(), bench, &params).map_err(|e| {
                    let key = params_key_hint(&e.to_string(), bench);
                    at(&key, e.to_string())
                })?;
                check_values(*suite, bench, &params, |key, v, msg| match config {
                    Some(c) => c.error_at_value((suite.name(), bench, key), v, msg),
                    None => anyhow::anyhow!(msg),
                })?;
            }
        }
        // --model: the user's file replaces the inference suite's plan.
        if let Some(path) = &cli.model
            && suite.name() == "inference"
        {
            let mut file: std::collections::BTreeMap<_, _> =
                [("file".to_string(), vec![crate::plan::ParamValue::Str(path.clone())])].into();
            if let Some(n) = &cli.model_name {
                file.insert("model".to_string(), vec![crate::plan::ParamValue::Str(n.clone())]);
            }
            spec.override_params(suite.name(), "gguf", &file)?;
            spec.benchmarks.retain(|b| b.name == "gguf");
        }
        // llama-bench's flags replace the model's tests and depths, over the config's.
        if suite.name() == "inference" {
            let mut p = BTreeMap::new();
            if !model.tests.is_empty() {
                p.insert("test".to_string(), model.tests.iter().cloned().map(ParamValue::Str).collect());
            }
            if !model.depths.is_empty() {
                p.insert("depth".to_string(), model.depths.iter().copied().map(ParamValue::Int).collect());
            }
            if !p.is_empty() {
                spec.override_params(suite.name(), "gguf", &p)?;
            }
        }
        // What is left unchecked came from the built-in suite file.
        for b in &spec.benchmarks {
            for grid in &b.grids {
                check_values(*suite, &b.name, grid, |_, _, msg| {
                    anyhow::anyhow!("suites/{}.toml (built in): {msg}", suite.name())
                })?;
            }
        }
        for b in &spec.benchmarks {
            // Cases x the chosen devices this benchmark runs on.
            let kinds = suite.devices(&b.name);
            for &device in devices.iter().filter(|d| kinds.contains(&d.kind())) {
                cases.extend(
                    plan::expand(suite.name(), b)
                        .into_iter()
                        .map(|c| c.on(device))
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
    if cli.model.is_some() && !selected.iter().any(|s| s.name() == "inference") {
        bail!("--model runs in the inference suite; add `--suite inference`");
    }
    if let Some(flag) = model.flag {
        let in_config = file
            .suites
            .get("inference")
            .and_then(|s| s.benchmarks.get("gguf"))
            .is_some_and(|p| p.contains_key("file"));
        if cli.model.is_none() && !in_config {
            bail!(
                "{flag} chooses the tests of a model of your own: give --model PATH (a GGUF file or a Hugging Face directory), or a --config whose [suites.inference.benchmarks.gguf] sets `file`"
            );
        }
        if !selected.iter().any(|s| s.name() == "inference") {
            bail!("{flag} chooses the tests of the inference suite's model; add `--suite inference`");
        }
    }
    let threads = cli.threads.or(file.run.threads).unwrap_or_else(default_threads);
    if threads == 0 {
        bail!("threads must be at least 1");
    }
    let rounds = cli.rounds.or(file.run.rounds).unwrap_or(1);
    if rounds == 0 {
        return Err(at("rounds", "rounds must be at least 1".to_string()));
    }
    let shuffle = cli.shuffle || file.run.shuffle.unwrap_or(false);
    Ok(Resolved { cases, settings, suites: selected, specs, threads, rounds, shuffle })
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
mod tests {
    use super::*;
    use crate::config::file::parse_toml;

    fn loaded(text: &str) -> LoadedConfig {
        LoadedConfig { config: parse_toml("x.toml", text).unwrap(), path: "x.toml".into(), text: text.into() }
    }

    #[test]
    fn layers_apply_in_order() {
        let cfg = loaded(
            "[harness]\nsample_size = 30\nwarm_up_time = 0.2\n[suites.tensor.harness]\nsample_size = 40\n",
        );
        let cli = CliOverrides {
            quick: true,
            harness: PartialSettings { warm_up_time: Some(0.1), ..Default::default() },
            ..Default::default()
        };
        let r = resolve(Some(&cfg), &cli).unwrap();
        let s = &r.settings["tensor"];
        assert_eq!(s.sample_size, 40, "suite section beats the file's harness");
        assert_eq!(s.warm_up_time, 0.1, "CLI beats the file");
        assert_eq!(s.max_time, Some(0.5), "quick profile applies under the file");
    }

    #[test]
    fn unknown_suites_and_params_are_located() {
        let err = resolve(
            Some(&loaded("[run]\nthreads = 1\n\n[suites.tensr.harness]\nsample_size = 3\n")),
            &Default::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(err.starts_with("x.toml:4:9:") && err.contains("known suites: tensor"), "{err}");
        let cli = CliOverrides { suites: vec!["nope".into()], ..Default::default() };
        let err = resolve(None, &cli).unwrap_err().to_string();
        assert!(err.contains("unknown suite `nope`") && err.contains("tensor"), "{err}");
        let err = resolve(Some(&loaded("[harness]\nconfidence_level = 1.5\n")), &Default::default())
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("x.toml:2:1:") && err.contains("(0, 1)"), "{err}");
    }

    #[test]
    fn bad_parameter_values_name_their_line_and_the_choices() {
        let text = "[run]\nthreads = 1\n\n[suites.inference.benchmarks.decode]\ndtype = [\"f32\", \"f33\"]\n";
        let err = resolve(Some(&loaded(text)), &Default::default()).unwrap_err().to_string();
        assert!(err.starts_with("x.toml:5:18: benchmark inference/decode:"), "{err}");
        assert!(err.contains("`dtype` = \"f33\" is not valid; valid: f32, f16, bf16, int8, q4_0"), "{err}");
        let text = "[suites.optim.benchmarks.zero]\nstage = 1\nranks = [2, 0]\n";
        let err = resolve(Some(&loaded(text)), &Default::default()).unwrap_err().to_string();
        assert!(
            err.starts_with("x.toml:3:13:") && err.contains("`ranks` = 0") && err.contains("positive"),
            "{err}"
        );
        // A suite the run does not select is not checked, as its keys are not.
        let cli = CliOverrides { suites: vec!["tensor".into()], ..Default::default() };
        resolve(Some(&loaded(text)), &cli).unwrap();
        // The quick profile's values are checked too, and pass.
        resolve(None, &CliOverrides { quick: true, ..Default::default() }).unwrap();
    }

    #[test]
    fn shards_partition_the_plan() {
        let all = resolve(None, &Default::default()).unwrap().cases;
        let mut union = Vec::new();
        for index in 1..=3 {
            let cli = CliOverrides { shard: Some(Shard { index, count: 3 }), ..Default::default() };
            let part = resolve(None, &cli).unwrap().cases;
            assert!(part.len() >= all.len() / 3 && part.len() <= all.len() / 3 + 1);
            union.extend(part);
        }
        union.sort_by(|a, b| a.id.cmp(&b.id));
        let mut sorted = all.clone();
        sorted.sort_by(|a, b| a.id.cmp(&b.id));
        assert_eq!(union, sorted);
        assert!(
            "0/3".parse::<Shard>().is_err()
                && "4/3".parse::<Shard>().is_err()
                && "x".parse::<Shard>().is_err()
        );
        assert_eq!("2/5".parse::<Shard>(), Ok(Shard { index: 2, count: 5 }));
    }

    #[test]
    fn shipped_profiles_resolve() {
        for (name, text) in [
            ("configs/quick.toml", include_str!("../../configs/quick.toml")),
            ("configs/ci.toml", include_str!("../../configs/ci.toml")),
        ] {
            let c = LoadedConfig {
                config: parse_toml(name, text).unwrap(),
                path: name.into(),
                text: text.into(),
            };
            resolve(Some(&c), &Default::default()).unwrap_or_else(|e| panic!("{name}: {e:#}"));
        }
        let text = include_str!("../../configs/full.yaml");
        let c = LoadedConfig {
            config: crate::config::parse_yaml("configs/full.yaml", text).unwrap(),
            path: "configs/full.yaml".into(),
            text: text.into(),
        };
        resolve(Some(&c), &Default::default()).unwrap_or_else(|e| panic!("full.yaml: {e:#}"));
    }

    #[test]
    fn the_commands_example_resolves_to_only_its_commands() {
        let name = "configs/commands.toml";
        let text = include_str!("../../configs/commands.toml");
        let c =
            LoadedConfig { config: parse_toml(name, text).unwrap(), path: name.into(), text: text.into() };
        let r = resolve(Some(&c), &Default::default()).unwrap_or_else(|e| panic!("{e:#}"));
        assert_eq!(r.suites.iter().map(|s| s.name()).collect::<Vec<_>>(), ["command"]);
        let ids: Vec<&str> = r.cases.iter().map(|c| c.id.as_str()).collect();
        assert!(ids.contains(&"command/sort/n=1000000") && ids.contains(&"command/gzip/level=6"), "{ids:?}");
        assert_eq!(r.suite("command").map(|s| s.name()), Some("command"));
        // Beside a built-in suite when asked, and refused when there are none.
        let both = CliOverrides { suites: vec!["command".into(), "tensor".into()], ..Default::default() };
        let r = resolve(Some(&c), &both).unwrap();
        assert_eq!(r.suites.iter().map(|s| s.name()).collect::<Vec<_>>(), ["tensor", "command"]);
        let alone = CliOverrides { suites: vec!["command".into()], ..Default::default() };
        let err = resolve(None, &alone).unwrap_err().to_string();
        assert!(err.contains("[[command]]"), "{err}");
    }

    #[test]
    fn model_flags_replace_the_configs_tests_and_need_a_model() {
        let cfg = loaded("[suites.inference.benchmarks.gguf]\nfile = [\"m.gguf\"]\ntest = [\"tg64\"]\n");
        let filter = Filter { pattern: Some("gguf/".into()), ..Default::default() };
        let cli = CliOverrides { suites: vec!["inference".into()], filter, ..Default::default() };
        let m = ModelTests {
            tests: vec!["pp8".into(), "pg4,2".into()],
            depths: vec![0, 16],
            flag: Some("--tests"),
        };
        let r = resolve_model(suites::registry(), Some(&cfg), &cli, &m).unwrap();
        let ids: Vec<&str> = r.cases.iter().map(|c| c.id.as_str()).collect();
        let want: Vec<String> = [(0, "pp8"), (0, "pg4,2"), (16, "pp8"), (16, "pg4,2")]
            .iter()
            .map(|(d, t)| format!("inference/gguf/depth={d},file=m.gguf,model=from-file,test={t}"))
            .collect();
        assert_eq!(ids, want);
        // No model to apply them to: refused, naming the flag.
        let err = resolve_model(suites::registry(), None, &cli, &m).unwrap_err().to_string();
        assert!(
            err.starts_with("--tests chooses the tests of a model") && err.contains("--model PATH"),
            "{err}"
        );
    }

    #[test]
    fn devices_multiply_only_the_benchmarks_that_run_there() {
        use crate::backend::Device;
        let cpu =
            resolve(None, &CliOverrides { suites: vec!["tensor".into()], quick: true, ..Default::default() })
                .unwrap();
        assert!(cpu.cases.iter().all(|c| c.device == Device::Cpu && !c.id.contains("device=")));
        // Asking for a GPU too adds the tensor benchmarks that run there,
        // with `device=cuda:0` ids; the CPU cases stay as they were.
        let both = CliOverrides {
            suites: vec!["tensor".into()],
            quick: true,
            devices: vec![Device::Cpu, Device::Cuda(0)],
            ..Default::default()
        };
        let all = resolve(None, &both).unwrap().cases;
        let (gpu_cases, cpu_cases): (Vec<_>, Vec<_>) =
            all.into_iter().partition(|c| c.device == Device::Cuda(0));
        assert_eq!(cpu_cases, cpu.cases);
        assert!(gpu_cases.iter().all(|c| c.id.ends_with(",device=cuda:0")));
        let benches: std::collections::BTreeSet<&str> =
            gpu_cases.iter().map(|c| c.benchmark.as_str()).collect();
        assert!(
            benches.contains("binary") && benches.contains("gpu_gemm") && !benches.contains("matmul"),
            "{benches:?}"
        );
        // A CPU-only suite asked for a GPU alone selects nothing.
        let gpu = CliOverrides { devices: vec![Device::Cuda(0)], suites: vec!["quant".into()], ..both };
        assert!(resolve(None, &gpu).unwrap().cases.is_empty());
    }
}
