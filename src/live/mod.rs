//! The live dashboard: `tfbench serve` shows the report of the stored
//! baselines and history, and a running `tfbench run` streams its progress
//! and each finished case to it, so the page updates as the run goes.
//!
//! ```text
//! tfbench run ── Observer ──> push::Streaming ──(channel)──> push thread ──POST /api/events──┐
//!                                                                                           v
//! browser <── GET / (report::html::render_served), /live, /events (SSE) ── server ── state::Live
//! ```
//!
//! - `push`: the run's side. Events go through a channel to a background
//!   thread that POSTs them with short timeouts; the runner waits for the
//!   queue to drain (bounded) only between cases, so no network I/O happens
//!   while a case is timed, and a dashboard that is gone costs nothing.
//! - `server`: a `tiny_http` server, loopback only unless `--bind` says
//!   otherwise; read-only for clients (the one write is the push, which needs
//!   the token of [`DashboardFile`]); no file outside the store is served.
//! - `state`: the runs streamed so far (the last few, in memory only).
//! - `page`: the live section and the script that refreshes it.
//! - `compared`: the newest run against the one before it, by `compare`'s
//!   rules (a run is never compared with itself).
//! - `files`: mapping a URL path to a file inside the store, refusing
//!   anything else (`..`, encoded dots, absolute paths, symlinks out).

mod compared;
mod files;
mod page;
pub mod push;
pub mod server;
mod state;

pub use files::resolve_in_root;
pub use page::Sources;

use crate::results::{CaseResult, RunReport, TargetCheck};
use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The port `serve` listens on and `run` looks for a dashboard at.
pub const DEFAULT_PORT: u16 = 8080;

/// What a run pushes to the dashboard, one JSON object per POST.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// The run starts: its report without cases (environment, harness,
    /// machine limits) and the ids it will run.
    RunStarted {
        /// The report skeleton; its `run_id` names the run in later events.
        report: Box<RunReport>,
        /// Case ids in plan order.
        planned: Vec<String>,
        /// Rounds of the plan.
        rounds: u32,
    },
    /// A case starts (`done` case-rounds finished of `total`).
    CaseStarted {
        /// The run.
        run_id: String,
        /// The case.
        id: String,
        /// Round, from 0.
        round: u32,
        /// Case-rounds finished so far.
        done: usize,
        /// Case-rounds in the run.
        total: usize,
    },
    /// A case's final result.
    CaseFinished {
        /// The run.
        run_id: String,
        /// The result, as in the results JSON.
        result: Box<CaseResult>,
    },
    /// The run is over.
    RunFinished {
        /// The run.
        run_id: String,
        /// Wall time of the whole run.
        wall_time_secs: f64,
        /// The target checks.
        targets: Vec<TargetCheck>,
    },
}

impl Event {
    /// The run the event belongs to.
    pub fn run_id(&self) -> &str {
        match self {
            Event::RunStarted { report, .. } => &report.run_id,
            Event::CaseStarted { run_id, .. }
            | Event::CaseFinished { run_id, .. }
            | Event::RunFinished { run_id, .. } => run_id,
        }
    }
}

/// An `http://HOST:PORT` address of a dashboard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// Host name or IP address (IPv6 without brackets).
    pub host: String,
    /// TCP port.
    pub port: u16,
}

impl Endpoint {
    /// Parses `http://HOST:PORT[/]` or `HOST:PORT`; the dashboard speaks
    /// plain HTTP only, so `https://` and paths are refused with the reason.
    pub fn parse(text: &str) -> Result<Self> {
        let rest = match text.split_once("://") {
            Some(("http", rest)) => rest,
            Some((scheme, _)) => {
                bail!("`{text}`: the dashboard speaks plain http:// (on loopback), not {scheme}://")
            }
            None => text,
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.contains('/') {
            bail!("`{text}`: give the dashboard's address only (http://HOST:PORT), without a path");
        }
        let (host, port) = rest
            .rsplit_once(':')
            .with_context(|| format!("`{text}` is not an address like http://127.0.0.1:{DEFAULT_PORT}"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let port: u16 =
            port.parse().ok().filter(|p| *p != 0).with_context(|| format!("`{text}`: bad port `{port}`"))?;
        if host.is_empty() {
            bail!("`{text}`: no host; e.g. http://127.0.0.1:{DEFAULT_PORT}");
        }
        Ok(Self { host: host.to_string(), port })
    }

    /// `http://HOST:PORT`.
    pub fn url(&self) -> String {
        if self.host.contains(':') {
            format!("http://[{}]:{}", self.host, self.port)
        } else {
            format!("http://{}:{}", self.host, self.port)
        }
    }
}

/// What `serve` leaves for runs of the same user: where it listens and the
/// token a push must carry. The file is in the user's tfbench cache folder
/// (mode 0600), one per port, so only this user's runs can push.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct DashboardFile {
    /// `http://HOST:PORT` of the dashboard.
    pub url: String,
    /// The push token (hex).
    pub token: String,
    /// Process id of the serving tfbench.
    pub pid: u32,
}

impl DashboardFile {
    /// Where the file of the dashboard on `port` lives.
    pub fn path(port: u16) -> PathBuf {
        crate::probe::cache_dir().join(format!("dashboard-{port}.json"))
    }

    /// Reads the file of the dashboard on `port`, if there is a readable one.
    pub fn read(port: u16) -> Option<Self> {
        let text = std::fs::read_to_string(Self::path(port)).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// Writes it for `port`, readable by this user only, atomically
    /// (a temporary file created 0600, then renamed).
    pub fn write(&self, port: u16) -> Result<PathBuf> {
        let path = Self::path(port);
        let dir = path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let tmp = dir.join(format!(".dashboard-{port}.{}.tmp", std::process::id()));
        let text = serde_json::to_string_pretty(self)?;
        let written = (|| {
            use std::io::Write;
            let mut opts = std::fs::OpenOptions::new();
            opts.write(true).create(true).truncate(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
            let mut f = opts.open(&tmp)?;
            f.write_all(text.as_bytes())?;
            f.sync_all()?;
            std::fs::rename(&tmp, &path)
        })();
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        written.with_context(|| format!("cannot write the dashboard file {}", path.display()))?;
        Ok(path)
    }
}

/// A fresh random push token: 128 bits from the operating system's
/// generator, in hex.
pub fn new_token() -> Result<String> {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .context("cannot read /dev/urandom for the dashboard's push token")?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse_or_say_why() {
        let e = Endpoint::parse("http://127.0.0.1:8080/").unwrap();
        assert_eq!(e, Endpoint { host: "127.0.0.1".into(), port: 8080 });
        assert_eq!(e.url(), "http://127.0.0.1:8080");
        assert_eq!(Endpoint::parse("localhost:9").unwrap().port, 9);
        assert_eq!(Endpoint::parse("http://[::1]:81").unwrap().url(), "http://[::1]:81");
        for (bad, why) in [
            ("https://127.0.0.1:8080", "plain http"),
            ("http://127.0.0.1:8080/x", "without a path"),
            ("tensor", "not an address"),
            ("http://127.0.0.1:0", "bad port"),
            ("http://:80", "no host"),
        ] {
            let e = Endpoint::parse(bad).unwrap_err().to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn events_round_trip_as_tagged_json() {
        let e = Event::CaseStarted { run_id: "r".into(), id: "a/b/x=1".into(), round: 0, done: 1, total: 3 };
        let text = serde_json::to_string(&e).unwrap();
        assert!(text.contains("\"event\":\"case_started\""), "{text}");
        let back: Event = serde_json::from_str(&text).unwrap();
        assert_eq!(back.run_id(), "r");
    }

    #[test]
    fn tokens_are_fresh_hex() {
        let (a, b) = (new_token().unwrap(), new_token().unwrap());
        assert_eq!(a.len(), 32);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}
