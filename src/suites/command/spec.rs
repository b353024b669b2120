//! The `[[command]]` tables of a config file: what each key means, the
//! checks that refuse a bad table before anything runs, and the placeholder
//! substitution (`{param}`, `{tmpdir}`) that turns one table and one grid
//! point into the argv lists a case runs.

use crate::plan::{BenchmarkSpec, ParamValue};
use serde::Deserialize;
use std::collections::BTreeMap;

/// The placeholder every command may use besides its own parameters: a
/// fresh empty folder per case, removed when the case is done.
pub const TMPDIR: &str = "tmpdir";

/// A command line: a list is an argv run directly (no shell); a string is
/// a script run by `sh -c` (for `argv` only with `shell = true`).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum CommandLine {
    /// Program and arguments, run directly.
    Argv(Vec<String>),
    /// A shell script, run by `sh -c`.
    Script(String),
}

impl CommandLine {
    /// Every string of the line, for placeholder checks.
    fn parts(&self) -> Vec<&str> {
        match self {
            Self::Argv(v) => v.iter().map(String::as_str).collect(),
            Self::Script(s) => vec![s.as_str()],
        }
    }

    /// The argv to execute, after substitution: a script becomes
    /// `sh -c SCRIPT`.
    pub fn argv(&self, vars: &BTreeMap<String, String>) -> Vec<String> {
        match self {
            Self::Argv(v) => v.iter().map(|a| substitute(a, vars)).collect(),
            Self::Script(s) => vec!["sh".into(), "-c".into(), substitute(s, vars)],
        }
    }
}

/// One list of values or a single value, as in `params = { n = [1, 2] }`
/// or `params = { n = 1 }`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum Values {
    /// A list.
    Many(Vec<ParamValue>),
    /// One value.
    One(ParamValue),
}

impl Values {
    /// The values as a list.
    pub fn to_vec(&self) -> Vec<ParamValue> {
        match self {
            Self::Many(v) => v.clone(),
            Self::One(v) => vec![v.clone()],
        }
    }
}

/// One `[[command]]` table: a benchmark of the `command` suite.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CommandSpec {
    /// Benchmark name, the middle of the case ids (`command/NAME/...`).
    pub name: String,
    /// What `tfbench list` says about it.
    #[serde(default)]
    pub description: Option<String>,
    /// The timed command: a list run directly, or with `shell = true` one
    /// string run by `sh -c`.
    pub argv: CommandLine,
    /// Run `argv` through `sh -c` (its cost is then part of every sample).
    #[serde(default)]
    pub shell: bool,
    /// Run once per case before verification, untimed (must exit 0).
    #[serde(default)]
    pub setup: Option<CommandLine>,
    /// Run before every timed run, untimed (must exit 0).
    #[serde(default)]
    pub prepare: Option<CommandLine>,
    /// Run after every timed run, untimed (must exit 0).
    #[serde(default)]
    pub cleanup: Option<CommandLine>,
    /// Environment variables added for every command of the case.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The parameter grid: every combination is a case, each value
    /// substituted for `{name}`.
    #[serde(default)]
    pub params: BTreeMap<String, Values>,
    /// The exit code every run must end with.
    #[serde(default)]
    pub exit_code: i32,
    /// A regex the verification run's stdout must match (placeholders
    /// substituted first).
    #[serde(default)]
    pub stdout_regex: Option<String>,
    /// The SHA-256 (hex) the verification run's stdout must have.
    #[serde(default)]
    pub stdout_sha256: Option<String>,
}

/// A refusal of one table: which key, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct SpecError {
    /// Index of the `[[command]]` table (0-based).
    pub index: usize,
    /// The key the problem is about (`argv`, a parameter name, ...).
    pub key: String,
    /// What is wrong and what would be accepted.
    pub message: String,
}

/// Checks every table: names, argv, placeholders, parameters, checks.
pub fn validate(commands: &[CommandSpec]) -> Result<(), SpecError> {
    let mut seen = std::collections::BTreeSet::new();
    for (index, c) in commands.iter().enumerate() {
        let err = |key: &str, message: String| SpecError { index, key: key.into(), message };
        let valid_name = !c.name.is_empty()
            && c.name.chars().all(|ch| ch.is_ascii_alphanumeric() || matches!(ch, '_' | '-' | '.'));
        if !valid_name {
            return Err(err(
                "name",
                format!(
                    "name {:?} must be letters, digits, `_`, `-` or `.` (it is part of case ids)",
                    c.name
                ),
            ));
        }
        if !seen.insert(c.name.as_str()) {
            return Err(err("name", format!("a second command is named `{}`; names must be unique", c.name)));
        }
        match (&c.argv, c.shell) {
            (CommandLine::Argv(v), _) if v.is_empty() || v[0].trim().is_empty() => {
                return Err(err("argv", "argv is empty: give the program and its arguments, e.g. argv = [\"sort\", \"-n\", \"{tmpdir}/in.txt\"]".into()));
            }
            (CommandLine::Script(s), true) if s.trim().is_empty() => {
                return Err(err("argv", "argv is an empty script".into()));
            }
            (CommandLine::Script(s), false) => {
                return Err(err(
                    "argv",
                    format!(
                        "argv is one string ({s:?}): write it as a list ([\"prog\", \"arg\"]) to run it directly, or set shell = true to run it with sh -c"
                    ),
                ));
            }
            (CommandLine::Argv(_), true) => {
                return Err(err(
                    "shell",
                    "with shell = true, argv is one string: the script sh -c runs".into(),
                ));
            }
            _ => {}
        }
        for (key, line) in [("setup", &c.setup), ("prepare", &c.prepare), ("cleanup", &c.cleanup)] {
            if let Some(l) = line
                && l.parts().first().is_none_or(|p| p.trim().is_empty())
            {
                return Err(err(key, format!("{key} is empty: give a command, or leave the key out")));
            }
        }
        for (key, values) in &c.params {
            if !is_ident(key) || key == TMPDIR {
                return Err(err(
                    key,
                    format!(
                        "parameter name `{key}` must be an identifier (letters, digits, `_`) other than `{TMPDIR}`"
                    ),
                ));
            }
            if values.to_vec().is_empty() {
                return Err(err(key, format!("parameter `{key}` has no values")));
            }
        }
        // Every placeholder names a parameter (or tmpdir), and every
        // parameter is used: a typo on either side is refused.
        let mut texts: Vec<(&str, &str)> = c.argv.parts().into_iter().map(|p| ("argv", p)).collect();
        for (key, line) in [("setup", &c.setup), ("prepare", &c.prepare), ("cleanup", &c.cleanup)] {
            texts.extend(line.iter().flat_map(|l| l.parts()).map(|p| (key, p)));
        }
        texts.extend(c.env.values().map(|v| ("env", v.as_str())));
        texts.extend(c.stdout_regex.iter().map(|r| ("stdout_regex", r.as_str())));
        let mut used = std::collections::BTreeSet::new();
        for (key, text) in &texts {
            for name in placeholders(text) {
                if name != TMPDIR && !c.params.contains_key(&name) {
                    let mut valid: Vec<String> = c.params.keys().map(|k| format!("{{{k}}}")).collect();
                    valid.push(format!("{{{TMPDIR}}}"));
                    return Err(err(
                        key,
                        format!(
                            "placeholder {{{name}}} in {key} names no parameter; valid: {} (write {{{{ for a literal brace)",
                            valid.join(", ")
                        ),
                    ));
                }
                used.insert(name);
            }
        }
        if let Some(key) = c.params.keys().find(|k| !used.contains(*k)) {
            return Err(err(
                key,
                format!(
                    "parameter `{key}` is never used: write {{{key}}} in argv (or in setup, prepare, cleanup or env), or remove it"
                ),
            ));
        }
        if let Some(k) = c.env.keys().find(|k| k.is_empty() || k.contains('=')) {
            return Err(err("env", format!("environment variable name {k:?} is empty or holds `=`")));
        }
        if let Some(re) = &c.stdout_regex {
            // Checked with a neutral value for each placeholder.
            let vars =
                c.params.keys().chain([&TMPDIR.to_string()]).map(|k| (k.clone(), "x".into())).collect();
            if let Err(e) = regex::Regex::new(&substitute(re, &vars)) {
                return Err(err("stdout_regex", format!("stdout_regex is not a valid regex: {e}")));
            }
        }
        if let Some(h) = &c.stdout_sha256
            && !(h.len() == 64 && h.chars().all(|ch| ch.is_ascii_hexdigit()))
        {
            return Err(err(
                "stdout_sha256",
                format!("stdout_sha256 {h:?} is not a SHA-256 (64 hex digits, as sha256sum prints)"),
            ));
        }
    }
    Ok(())
}

/// The benchmark (name, description, one grid) a table stands for.
pub fn benchmark(c: &CommandSpec) -> BenchmarkSpec {
    let shown = match &c.argv {
        CommandLine::Argv(v) => shell_words(v),
        CommandLine::Script(s) => format!("sh -c {}", shell_words(std::slice::from_ref(s))),
    };
    let description = c.description.clone().unwrap_or_else(|| format!("Runs `{shown}` as a process"));
    let grid: BTreeMap<String, Vec<ParamValue>> =
        c.params.iter().map(|(k, v)| (k.clone(), v.to_vec())).collect();
    BenchmarkSpec {
        name: c.name.clone(),
        description,
        grids: if grid.is_empty() { vec![] } else { vec![grid] },
    }
}

/// `argv` as a shell would show it (quoting what needs it), for messages.
pub fn shell_words(argv: &[String]) -> String {
    argv.iter()
        .map(|a| {
            let plain =
                !a.is_empty() && a.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%{}".contains(c));
            if plain { a.clone() } else { format!("'{}'", a.replace('\'', "'\\''")) }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn is_ident(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The `{name}` placeholders of `text` (identifiers only: `{64}` in a
/// regex is a repetition, not a placeholder; `{{` is a literal brace).
pub fn placeholders(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    scan(text, |name| {
        out.push(name.to_string());
        None
    });
    out
}

/// `text` with every `{name}` placeholder of `vars` replaced and `{{`/`}}`
/// turned into single braces; other braces are kept as written.
pub fn substitute(text: &str, vars: &BTreeMap<String, String>) -> String {
    scan(text, |name| vars.get(name).cloned())
}

/// Walks `text`, calling `f` for each `{identifier}`; returns the text with
/// the placeholders `f` gives a value for replaced.
fn scan(text: &str, mut f: impl FnMut(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find(['{', '}']) {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        if tail.starts_with("{{") || tail.starts_with("}}") {
            out.push(tail.as_bytes()[0] as char);
            rest = &tail[2..];
            continue;
        }
        if let Some(end) = tail.find('}')
            && tail.starts_with('{')
            && is_ident(&tail[1..end])
        {
            let name = &tail[1..end];
            match f(name) {
                Some(v) => out.push_str(&v),
                None => out.push_str(&tail[..=end]),
            }
            rest = &tail[end + 1..];
            continue;
        }
        out.push(tail.as_bytes()[0] as char);
        rest = &tail[1..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(extra: &str) -> Vec<CommandSpec> {
        #[derive(Deserialize)]
        struct File {
            command: Vec<CommandSpec>,
        }
        let text = format!("[[command]]\nname = \"c\"\n{extra}\n");
        toml::from_str::<File>(&text).map(|f| f.command).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn placeholders_are_identifiers_and_double_braces_escape() {
        let vars: BTreeMap<String, String> =
            [("n".to_string(), "10".to_string()), ("tmpdir".into(), "/t".into())].into();
        assert_eq!(substitute("{tmpdir}/in.{n}.txt", &vars), "/t/in.10.txt");
        assert_eq!(substitute("^[0-9a-f]{64} {{n}} {m}", &vars), "^[0-9a-f]{64} {n} {m}");
        assert_eq!(placeholders("a{n}b{64}{{x}}{tmpdir}"), ["n", "tmpdir"]);
    }

    #[test]
    fn good_tables_pass_and_expand_to_a_grid() {
        let c = spec(
            "argv = [\"sort\", \"-n\", \"{tmpdir}/in\"]\nsetup = \"seq {n} > {tmpdir}/in\"\nparams = { n = [10, 20] }",
        );
        validate(&c).unwrap();
        let b = benchmark(&c[0]);
        assert_eq!(crate::plan::expand("command", &b).len(), 2);
        assert!(b.description.contains("sort -n {tmpdir}/in"), "{}", b.description);
        let c = spec(
            "argv = \"yes | head -n {n}\"\nshell = true\nparams = { n = 5 }\nstdout_regex = '^(y\\n){5}$'",
        );
        validate(&c).unwrap();
        let vars = [("n".to_string(), "5".to_string())].into();
        assert_eq!(c[0].argv.argv(&vars), ["sh", "-c", "yes | head -n 5"]);
    }

    #[test]
    fn bad_tables_name_the_key() {
        let cases = [
            ("argv = []", "argv", "argv is empty"),
            ("argv = \"sort -n x\"", "argv", "shell = true"),
            ("argv = [\"a\"]\nshell = true", "shell", "one string"),
            ("argv = [\"echo\"]\nparams = { n = [1] }", "n", "never used"),
            ("argv = [\"echo\", \"{m}\"]\nparams = { n = [1] }", "argv", "{m}"),
            ("argv = [\"echo\"]\nprepare = []", "prepare", "empty"),
            ("argv = [\"echo\"]\nstdout_sha256 = \"abc\"", "stdout_sha256", "64 hex"),
            ("argv = [\"echo\"]\nstdout_regex = \"(\"", "stdout_regex", "not a valid regex"),
        ];
        for (extra, key, says) in cases {
            let e = validate(&spec(extra)).expect_err(extra);
            assert_eq!(e.key, key, "{extra}: {e:?}");
            assert!(e.message.contains(says), "{extra}: {}", e.message);
        }
        let mut two = spec("argv = [\"true\"]");
        two.push(two[0].clone());
        let e = validate(&two).unwrap_err();
        assert_eq!((e.index, e.key.as_str()), (1, "name"));
    }
}
