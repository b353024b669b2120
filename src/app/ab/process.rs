//! A worker process of `tfbench ab`: one build, started with the plan's
//! options, spoken to one JSON line at a time.

use super::protocol::{Hello, Reply, Request};
use anyhow::{Context, Result, anyhow, bail};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

/// One running worker.
pub(super) struct Worker {
    pub(super) label: &'static str,
    path: std::path::PathBuf,
    env: Vec<(String, String)>,
    args: Vec<String>,
    child: Child,
    input: ChildStdin,
    output: BufReader<ChildStdout>,
    pub(super) hello: Hello,
}

impl Worker {
    pub(super) fn start(
        label: &'static str,
        path: &Path,
        env: &[(String, String)],
        args: &[String],
    ) -> Result<Self> {
        let mut child = Command::new(path)
            .arg("ab-worker")
            .args(args)
            .envs(env.iter().cloned())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("cannot start the {label} build {}", path.display()))?;
        let (Some(input), Some(out)) = (child.stdin.take(), child.stdout.take()) else {
            bail!("no pipes to the {label} build");
        };
        let mut output = BufReader::new(out);
        let mut line = String::new();
        output.read_line(&mut line).ok();
        let hello: Hello = serde_json::from_str(line.trim()).map_err(|_| {
            let _ = child.kill();
            let status = child.wait().map(|s| s.to_string()).unwrap_or_default();
            anyhow!(
                "the {label} build {} does not speak `tfbench ab`'s protocol (it {status}; built before `ab` existed, or its plan options failed: see its message above)",
                path.display()
            )
        })?;
        Ok(Self {
            label,
            path: path.into(),
            env: env.to_vec(),
            args: args.to_vec(),
            child,
            input,
            output,
            hello,
        })
    }

    /// Sends `req` and reads the reply; a dead worker is an error.
    pub(super) fn ask(&mut self, req: &Request) -> Result<Reply> {
        let text = serde_json::to_string(req)?;
        writeln!(self.input, "{text}").and_then(|_| self.input.flush()).with_context(|| self.gone())?;
        let mut line = String::new();
        if self.output.read_line(&mut line).unwrap_or(0) == 0 {
            bail!("{}", self.gone());
        }
        serde_json::from_str(line.trim())
            .with_context(|| format!("bad reply from the {} build: {line:?}", self.label))
    }

    fn gone(&mut self) -> String {
        let status = self
            .child
            .try_wait()
            .ok()
            .flatten()
            .map_or("is not answering".into(), |s| format!("exited ({s})"));
        format!("the {} build {} {status}", self.label, self.path.display())
    }

    /// A fresh worker after this one died.
    pub(super) fn restart(&mut self) -> Result<()> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        *self = Self::start(self.label, &self.path, &self.env, &self.args)?;
        Ok(())
    }

    pub(super) fn quit(mut self) {
        let _ = self.ask(&Request::Quit);
        let _ = self.child.wait();
    }
}

pub(super) fn parse_env(list: &[String], flag: &str) -> Result<Vec<(String, String)>> {
    list.iter()
        .map(|kv| match kv.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
            _ => bail!("{flag} {kv:?}: expected KEY=VALUE"),
        })
        .collect()
}

pub(super) fn check_executable(path: &Path, flag: &str) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path).with_context(|| format!("{flag} {}: no such file", path.display()))?;
    if !meta.is_file() || meta.permissions().mode() & 0o111 == 0 {
        bail!("{flag} {}: not an executable file", path.display());
    }
    Ok(())
}
