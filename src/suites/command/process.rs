//! Running one external process the way the `command` suite times it:
//! in a process group of its own (so a timeout kills everything it
//! started), stdin from /dev/null, output to /dev/null or a file, reaped
//! with `wait4` for its CPU time and peak RSS, and killed with its whole
//! group by a watchdog thread once it outlives its time limit.
//!
//! The watchdog does not poll: the timed thread blocks in `waitid`
//! (without reaping, so the group id cannot be reused while the watchdog
//! may still signal it), and the watchdog sleeps on a condition variable
//! until the deadline.

use anyhow::{Context, Result, bail};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Resources a finished process used, from its `rusage`.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Usage {
    /// User CPU time, ns.
    pub user_ns: f64,
    /// System CPU time, ns.
    pub sys_ns: f64,
    /// Peak resident set size, bytes.
    pub max_rss_bytes: f64,
}

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// It exited with this code.
    Exited(i32),
    /// A signal it did not handle ended it.
    Signaled(i32),
    /// It outlived its time limit and was killed with its process group.
    TimedOut,
}

/// Where a process's stdout or stderr goes.
pub enum Sink<'a> {
    /// Discarded.
    Null,
    /// Written to this file (created or truncated).
    File(&'a Path),
}

impl Sink<'_> {
    fn stdio(&self) -> Result<Stdio> {
        Ok(match self {
            Sink::Null => Stdio::null(),
            Sink::File(p) => Stdio::from(
                std::fs::File::create(p).with_context(|| format!("cannot create {}", p.display()))?,
            ),
        })
    }
}

/// What to run.
pub struct Spawn<'a> {
    /// Program and arguments (non-empty).
    pub argv: &'a [String],
    /// Variables added to the inherited environment.
    pub env: &'a [(String, String)],
    /// Where stdout goes.
    pub stdout: Sink<'a>,
    /// Where stderr goes.
    pub stderr: Sink<'a>,
}

/// Kills a process group once its deadline passes; one thread per
/// workload, asleep while nothing is armed.
pub struct Watchdog {
    shared: Arc<(Mutex<Armed>, Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

#[derive(Default)]
struct Armed {
    target: Option<(libc::pid_t, Instant)>,
    fired: bool,
    quit: bool,
}

impl Watchdog {
    /// Starts the watchdog thread.
    pub fn new() -> Result<Self> {
        let shared = Arc::new((Mutex::new(Armed::default()), Condvar::new()));
        let inner = shared.clone();
        let thread = std::thread::Builder::new()
            .name("tfbench-watchdog".into())
            .spawn(move || watch(&inner))
            .context("cannot start the watchdog thread")?;
        Ok(Self { shared, thread: Some(thread) })
    }

    fn arm(&self, pgid: libc::pid_t, deadline: Instant) {
        let (lock, cv) = &*self.shared;
        let mut s = lock.lock().unwrap_or_else(|p| p.into_inner());
        s.target = Some((pgid, deadline));
        s.fired = false;
        cv.notify_one();
    }

    /// Disarms; true when the deadline had passed and the group was killed.
    fn disarm(&self) -> bool {
        let (lock, _) = &*self.shared;
        let mut s = lock.lock().unwrap_or_else(|p| p.into_inner());
        s.target = None;
        std::mem::take(&mut s.fired)
    }
}

fn watch(shared: &(Mutex<Armed>, Condvar)) {
    let (lock, cv) = shared;
    let mut s = lock.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        if s.quit {
            return;
        }
        match s.target {
            None => s = cv.wait(s).unwrap_or_else(|p| p.into_inner()),
            Some((pgid, deadline)) => {
                let now = Instant::now();
                if now >= deadline {
                    // SAFETY: a plain syscall; the group's leader is not
                    // reaped before `disarm`, so `pgid` still names it.
                    unsafe { libc::killpg(pgid, libc::SIGKILL) };
                    s.fired = true;
                    s.target = None;
                } else {
                    s = cv.wait_timeout(s, deadline - now).unwrap_or_else(|p| p.into_inner()).0;
                }
            }
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        {
            let (lock, cv) = &*self.shared;
            lock.lock().unwrap_or_else(|p| p.into_inner()).quit = true;
            cv.notify_one();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Runs `spec` to its end (or its time limit, with `watchdog`) and returns
/// how it ended and what it used. Errors: it could not be started (the
/// message says whether the program was not found or not executable).
pub fn run(spec: &Spawn<'_>, limit: Option<(Duration, &Watchdog)>) -> Result<(Ended, Usage)> {
    let (program, args) = spec.argv.split_first().context("empty argv")?;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(spec.stdout.stdio()?)
        .stderr(spec.stderr.stdio()?)
        // Its own group: the timeout kills what it started, too.
        .process_group(0);
    let child = cmd.spawn().map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => anyhow::anyhow!("`{program}` not found (no such program on PATH)"),
        std::io::ErrorKind::PermissionDenied => anyhow::anyhow!("`{program}` is not executable ({e})"),
        _ => anyhow::anyhow!("cannot start `{program}`: {e}"),
    })?;
    let pid = child.id() as libc::pid_t;
    if let Some((d, w)) = limit {
        w.arm(pid, Instant::now() + d);
    }
    let waited = wait_exited(pid);
    let fired = limit.is_some_and(|(_, w)| w.disarm());
    let reaped = reap(pid);
    waited?;
    let (status, usage) = reaped?;
    let ended = if fired {
        Ended::TimedOut
    } else if libc::WIFEXITED(status) {
        Ended::Exited(libc::WEXITSTATUS(status))
    } else if libc::WIFSIGNALED(status) {
        Ended::Signaled(libc::WTERMSIG(status))
    } else {
        bail!("`{program}` ended with wait status {status:#x}")
    };
    Ok((ended, usage))
}

/// Blocks until `pid` has exited, leaving it a zombie (`WNOWAIT`).
fn wait_exited(pid: libc::pid_t) -> Result<()> {
    loop {
        // SAFETY: `info` is a plain struct the kernel fills.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let r =
            unsafe { libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, libc::WEXITED | libc::WNOWAIT) };
        if r == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e).context("waitid");
        }
    }
}

/// Reaps `pid`, returning its wait status and resource usage.
fn reap(pid: libc::pid_t) -> Result<(i32, Usage)> {
    loop {
        let mut status = 0;
        // SAFETY: `ru` is a plain struct the kernel fills.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
        if r == pid {
            let ns = |t: libc::timeval| t.tv_sec as f64 * 1e9 + t.tv_usec as f64 * 1e3;
            // Linux reports ru_maxrss in KiB.
            let usage = Usage {
                user_ns: ns(ru.ru_utime),
                sys_ns: ns(ru.ru_stime),
                max_rss_bytes: ru.ru_maxrss as f64 * 1024.0,
            };
            return Ok((status, usage));
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e).context("wait4");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(words: &[&str]) -> Vec<String> {
        words.iter().map(|s| s.to_string()).collect()
    }

    fn spawn(a: &[String]) -> Spawn<'_> {
        Spawn { argv: a, env: &[], stdout: Sink::Null, stderr: Sink::Null }
    }

    #[test]
    fn exit_codes_signals_and_missing_programs() {
        let a = argv(&["sh", "-c", "exit 3"]);
        assert_eq!(run(&spawn(&a), None).unwrap().0, Ended::Exited(3));
        let a = argv(&["sh", "-c", "kill -TERM $$"]);
        assert_eq!(run(&spawn(&a), None).unwrap().0, Ended::Signaled(libc::SIGTERM));
        let a = argv(&["tfbench-no-such-program"]);
        let e = run(&spawn(&a), None).unwrap_err().to_string();
        assert!(e.contains("`tfbench-no-such-program` not found"), "{e}");
    }

    #[test]
    fn usage_counts_the_childs_cpu_time_and_memory() {
        // A shell loop burns user CPU in the child, not here.
        let a = argv(&["sh", "-c", "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done"]);
        let (ended, u) = run(&spawn(&a), None).unwrap();
        assert_eq!(ended, Ended::Exited(0));
        assert!(u.user_ns + u.sys_ns > 1e6, "{u:?}");
        assert!(u.max_rss_bytes > 100e3, "{u:?}");
    }

    #[test]
    fn a_timeout_kills_the_whole_group() {
        let dir = std::env::temp_dir().join(format!("tfbench-proc-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pidfile = dir.join("pid");
        // The grandchild would outlive a kill of the shell alone.
        let script = format!("sleep 30 & echo $! > {}; wait", pidfile.display());
        let a = argv(&["sh", "-c", &script]);
        let w = Watchdog::new().unwrap();
        let t = Instant::now();
        let (ended, _) = run(&spawn(&a), Some((Duration::from_millis(300), &w))).unwrap();
        assert_eq!(ended, Ended::TimedOut);
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
        let pid: i32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
        // The grandchild is gone (or a zombie awaiting init, never running).
        std::thread::sleep(Duration::from_millis(100));
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        assert!(state.is_empty() || state.contains(") Z"), "grandchild still alive: {state}");
        // The watchdog is reusable and does not fire for a quick run.
        let a = argv(&["true"]);
        assert_eq!(run(&spawn(&a), Some((Duration::from_secs(5), &w))).unwrap().0, Ended::Exited(0));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
