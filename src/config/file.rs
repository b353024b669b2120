//! Config files: `--config FILE` in TOML or YAML (chosen by extension).
//!
//! Unknown keys are errors. Every error names the file, the line and column,
//! the bad key or value, and the valid choices.

use super::locate::{line_col, locate_in_item, locate_key, locate_value};
use super::{OutlierPolicy, Settings};
use crate::plan::ParamValue;
use anyhow::{Result, bail};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

/// Harness settings where every field is optional, for layering.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PartialSettings {
    /// See [`Settings::sample_size`].
    pub sample_size: Option<usize>,
    /// See [`Settings::warm_up_time`].
    pub warm_up_time: Option<f64>,
    /// See [`Settings::measurement_time`].
    pub measurement_time: Option<f64>,
    /// See [`Settings::max_time`].
    pub max_time: Option<f64>,
    /// See [`Settings::target_precision`].
    pub target_precision: Option<f64>,
    /// See [`Settings::confidence_level`].
    pub confidence_level: Option<f64>,
    /// See [`Settings::bootstrap_resamples`].
    pub bootstrap_resamples: Option<usize>,
    /// See [`Settings::seed`].
    pub seed: Option<u64>,
    /// See [`Settings::outliers`].
    pub outliers: Option<OutlierPolicy>,
    /// See [`Settings::placements`].
    pub placements: Option<usize>,
}

impl PartialSettings {
    /// Overwrites the fields of `s` that this layer sets.
    pub fn apply_to(&self, s: &mut Settings) {
        macro_rules! set {
            ($($f:ident),*) => { $( if let Some(v) = self.$f { s.$f = v; } )* };
        }
        set!(
            sample_size,
            warm_up_time,
            measurement_time,
            confidence_level,
            bootstrap_resamples,
            seed,
            outliers,
            placements
        );
        if self.max_time.is_some() {
            s.max_time = self.max_time;
        }
        if self.target_precision.is_some() {
            s.target_precision = self.target_precision;
        }
    }
}

/// Run-wide options a config file may set (the CLI wins over them).
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RunSection {
    /// Suites to run when `--suite` is not given.
    pub suites: Option<Vec<String>>,
    /// Case-id regex when no FILTER argument is given.
    pub filter: Option<String>,
    /// Case-id regex to exclude when `--skip` is not given.
    pub skip: Option<String>,
    /// Worker threads.
    pub threads: Option<usize>,
    /// Rounds over the whole plan.
    pub rounds: Option<u32>,
    /// Shuffle case order in each round.
    pub shuffle: Option<bool>,
    /// Baseline store folder (`--baseline-dir`).
    pub baseline_dir: Option<String>,
    /// Append every run to the history store (`--history`).
    pub history: Option<bool>,
    /// History store folder (`--history-dir`).
    pub history_dir: Option<String>,
}

/// One value or a list of values, so `shape = "64x64x64"` works like `["64x64x64"]`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum OneOrMany {
    /// A list of values.
    Many(Vec<ParamValue>),
    /// A single value.
    One(ParamValue),
}

impl OneOrMany {
    /// The values as a list.
    pub fn into_vec(self) -> Vec<ParamValue> {
        match self {
            Self::Many(v) => v,
            Self::One(v) => vec![v],
        }
    }
}

/// Per-suite section: harness overrides and parameter-grid overrides.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SuiteSection {
    /// Harness settings for this suite only.
    #[serde(default)]
    pub harness: PartialSettings,
    /// `benchmark name -> parameter -> values` replacing the suite file's grids.
    #[serde(default)]
    pub benchmarks: BTreeMap<String, BTreeMap<String, OneOrMany>>,
}

/// A whole config file.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// Run-wide options.
    #[serde(default)]
    pub run: RunSection,
    /// Harness settings for every suite.
    #[serde(default)]
    pub harness: PartialSettings,
    /// Per-suite overrides, by suite name.
    #[serde(default)]
    pub suites: BTreeMap<String, SuiteSection>,
    /// `[[command]]` tables: the benchmarks of the `command` suite.
    #[serde(default, rename = "command")]
    pub commands: Vec<crate::suites::command::CommandSpec>,
}

/// A config file with the text it came from, for locating later errors.
#[derive(Debug, Clone)]
pub struct LoadedConfig {
    /// The parsed file.
    pub config: ConfigFile,
    /// Where it came from (as given by the user).
    pub path: String,
    /// Its text.
    pub text: String,
}

impl LoadedConfig {
    /// An error about `key` in this file, located at the first line that
    /// defines it (a `key =`/`key:` line or a table header naming it).
    pub fn error_at(&self, key: &str, msg: impl std::fmt::Display) -> anyhow::Error {
        match locate_key(&self.text, key) {
            Some((line, col)) => anyhow::anyhow!("{}:{line}:{col}: {msg}", self.path),
            None => anyhow::anyhow!("{}: {msg}", self.path),
        }
    }

    /// An error about `key` of the `index`-th `[[command]]` table (0-based),
    /// located inside that table (else at the table, else the file).
    pub fn error_in_command(&self, index: usize, key: &str, msg: impl std::fmt::Display) -> anyhow::Error {
        match locate_in_item(&self.text, "command", index, key) {
            Some((line, col)) => anyhow::anyhow!("{}:{line}:{col}: [[command]] `{key}`: {msg}", self.path),
            None => anyhow::anyhow!("{}: [[command]] #{} `{key}`: {msg}", self.path, index + 1),
        }
    }

    /// An error about one value of parameter `key` of `suite`'s benchmark
    /// `bench`, located at that value (else at the key, else at the
    /// benchmark) inside the benchmark's section.
    pub fn error_at_value(
        &self,
        (suite, bench, key): (&str, &str, &str),
        value: &ParamValue,
        msg: impl std::fmt::Display,
    ) -> anyhow::Error {
        match locate_value(&self.text, &["suites", suite, "benchmarks", bench], key, &value.to_string()) {
            Some((line, col)) => anyhow::anyhow!("{}:{line}:{col}: {msg}", self.path),
            None => self.error_at(bench, msg),
        }
    }
}

/// Reads and parses a config file; the format follows the extension.
pub fn load(path: &Path) -> Result<LoadedConfig> {
    let shown = path.display().to_string();
    let text =
        std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("cannot read config file {shown}: {e}"))?;
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("").to_ascii_lowercase();
    let config = match ext.as_str() {
        "toml" => parse_toml(&shown, &text)?,
        "yaml" | "yml" => parse_yaml(&shown, &text)?,
        _ => bail!("config file {shown}: unknown extension `.{ext}`; valid: .toml, .yaml, .yml"),
    };
    Ok(LoadedConfig { config, path: shown, text })
}

/// Parses TOML config text; errors carry `file:line:col`.
pub fn parse_toml(path: &str, text: &str) -> Result<ConfigFile> {
    toml::from_str(text).map_err(|e| {
        let (line, col) = e.span().map(|s| line_col(text, s.start)).unwrap_or((1, 1));
        anyhow::anyhow!("{path}:{line}:{col}: {}", e.message().trim_end())
    })
}

/// Parses YAML config text; errors carry `file:line:col`.
pub fn parse_yaml(path: &str, text: &str) -> Result<ConfigFile> {
    if text.trim().is_empty() {
        return Ok(ConfigFile::default());
    }
    serde_saphyr::from_str(text).map_err(|e| {
        let loc =
            e.location().map(|l| format!("{}:{}", l.line(), l.column())).unwrap_or_else(|| "1:1".into());
        let msg = e.to_string();
        // saphyr's message may carry its own snippet; keep the first line.
        let first = msg.lines().next().unwrap_or("invalid YAML").to_string();
        anyhow::anyhow!("{path}:{loc}: {first}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toml_and_yaml_give_the_same_config() {
        let t = parse_toml(
            "a.toml",
            "[harness]\nsample_size = 20\nwarm_up_time = 0.5\n[suites.tensor.benchmarks.matmul]\nshape = \"64x64x64\"\nthreads = [1, \"all\"]\n",
        )
        .unwrap();
        let y = parse_yaml(
            "a.yaml",
            "harness:\n  sample_size: 20\n  warm_up_time: 0.5\nsuites:\n  tensor:\n    benchmarks:\n      matmul:\n        shape: 64x64x64\n        threads: [1, all]\n",
        )
        .unwrap();
        assert_eq!(t, y);
        assert_eq!(t.harness.sample_size, Some(20));
        let mm = &t.suites["tensor"].benchmarks["matmul"];
        assert_eq!(mm["shape"].clone().into_vec(), vec![ParamValue::Str("64x64x64".into())]);
        assert_eq!(mm["threads"].clone().into_vec(), vec![ParamValue::Int(1), ParamValue::Str("all".into())]);
    }

    #[test]
    fn unknown_keys_name_line_column_and_choices() {
        let err =
            parse_toml("c.toml", "[harness]\nsample_size = 10\nsampel_time = 3\n").unwrap_err().to_string();
        assert!(err.starts_with("c.toml:3:1:"), "{err}");
        assert!(err.contains("sampel_time") && err.contains("measurement_time"), "{err}");
        let err = parse_yaml("c.yaml", "harness:\n  sample_size: 10\n  bogus: 1\n").unwrap_err().to_string();
        assert!(err.starts_with("c.yaml:3:"), "{err}");
        assert!(err.contains("bogus"), "{err}");
        let err = parse_toml("c.toml", "[harness]\nsample_size = \"many\"\n").unwrap_err().to_string();
        assert!(err.starts_with("c.toml:2:15:"), "{err}");
    }

    #[test]
    fn layers_apply_only_what_they_set() {
        let mut s = Settings::default();
        let p = PartialSettings { sample_size: Some(7), max_time: Some(2.0), ..Default::default() };
        p.apply_to(&mut s);
        assert_eq!(s.sample_size, 7);
        assert_eq!(s.max_time, Some(2.0));
        assert_eq!(s.measurement_time, Settings::default().measurement_time);
    }
}
