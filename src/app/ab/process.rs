//! A worker process of `tfbench ab`: one build, started with the plan's
//! options, spoken to one JSON line at a time.

use super::protocol::{Hello, Reply, Request};
use anyhow::{Context, Result, anyhow, bail};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

/// Where the driver's time went, by what it waited for: the breakdown `ab`
/// prints beside its wall time, so its cost over two runs can be read off
/// a run instead of guessed (starting fresh workers, preparing every case
/// again in each round, warm-ups, and the samples themselves).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct Spent {
    /// Starting workers (spawn until their greeting).
    pub start: Duration,
    /// Preparing (and in the first round verifying) cases.
    pub prepare: Duration,
    /// Warming cases up.
    pub warm_up: Duration,
    /// Timing samples, the workers' round trips included.
    pub sample: Duration,
    /// Letting the other build's idle threads settle before each sample.
    pub settle: Duration,
    /// Finishing cases and quitting.
    pub finish: Duration,
}

impl std::ops::AddAssign for Spent {
    fn add_assign(&mut self, o: Self) {
        self.start += o.start;
        self.prepare += o.prepare;
        self.warm_up += o.warm_up;
        self.sample += o.sample;
        self.settle += o.settle;
        self.finish += o.finish;
    }
}

impl Spent {
    /// `wall` (the whole job) broken down, for the comparison's notes.
    pub fn describe(&self, wall: Duration) -> String {
        let listed = self.start + self.prepare + self.warm_up + self.sample + self.settle + self.finish;
        let s = |d: Duration| d.as_secs_f64();
        format!(
            "wall time {:.1} s: samples {:.1} s, preparing {:.1} s, warm-ups {:.1} s, settling between samples {:.1} s, starting workers {:.1} s, finishing {:.1} s, the driver {:.1} s",
            s(wall),
            s(self.sample),
            s(self.prepare),
            s(self.warm_up),
            s(self.settle),
            s(self.start),
            s(self.finish),
            s(wall.saturating_sub(listed))
        )
    }
}

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
    /// What this worker (and the ones it replaced) kept the driver waiting.
    pub(super) spent: Spent,
}

impl Worker {
    pub(super) fn start(
        label: &'static str,
        path: &Path,
        env: &[(String, String)],
        args: &[String],
    ) -> Result<Self> {
        let t0 = Instant::now();
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
            spent: Spent { start: t0.elapsed(), ..Spent::default() },
        })
    }

    /// The worker's process id.
    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `req` and reads the reply; a dead worker is an error. The
    /// wait is added to [`Worker::spent`] under the request's kind.
    pub(super) fn ask(&mut self, req: &Request) -> Result<Reply> {
        let t0 = Instant::now();
        let reply = self.exchange(req);
        let dt = t0.elapsed();
        let s = &mut self.spent;
        match req {
            Request::Prepare(_) | Request::PrepareVerified(_) => s.prepare += dt,
            Request::WarmUp(_) => s.warm_up += dt,
            Request::Sample(_) | Request::SampleTimed(_) => s.sample += dt,
            Request::Finish | Request::Quit => s.finish += dt,
        }
        reply
    }

    /// Waits `pause` (so the other build's idle threads settle), then times
    /// a sample of `iters` iterations.
    pub(super) fn sample_after(&mut self, pause: Duration, iters: u64) -> Result<Reply> {
        let t0 = Instant::now();
        std::thread::sleep(pause);
        self.spent.settle += t0.elapsed();
        let req = if self.hello.cpu_time { Request::SampleTimed(iters) } else { Request::Sample(iters) };
        self.ask(&req)
    }

    fn exchange(&mut self, req: &Request) -> Result<Reply> {
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
        let spent = self.spent;
        *self = Self::start(self.label, &self.path, &self.env, &self.args)?;
        self.spent += spent;
        Ok(())
    }

    /// Asks the worker to exit and waits for it; returns what it kept the
    /// driver waiting, its exit included.
    pub(super) fn quit(mut self) -> Spent {
        let t0 = Instant::now();
        let _ = self.exchange(&Request::Quit);
        let _ = self.child.wait();
        self.spent.finish += t0.elapsed();
        self.spent
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spent_adds_up_and_the_rest_is_the_driver_s() {
        let ms = Duration::from_millis;
        let mut a = Spent { start: ms(100), prepare: ms(2000), sample: ms(5000), ..Spent::default() };
        a += Spent { warm_up: ms(300), settle: ms(400), finish: ms(200), ..a };
        assert_eq!((a.start, a.prepare, a.sample), (ms(200), ms(4000), ms(10_000)));
        let text = a.describe(ms(15_500));
        assert!(
            text.starts_with("wall time 15.5 s: samples 10.0 s, preparing 4.0 s, warm-ups 0.3 s"),
            "{text}"
        );
        assert!(text.ends_with("starting workers 0.2 s, finishing 0.2 s, the driver 0.4 s"), "{text}");
        // Never a negative remainder, whatever the clocks say.
        assert!(a.describe(ms(1)).ends_with("the driver 0.0 s"));
    }
}
