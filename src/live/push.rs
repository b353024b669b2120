//! The run's side of the dashboard: best-effort pushes that can neither fail
//! nor slow a run.
//!
//! The runner's observer callbacks only put events on a channel; a
//! background thread POSTs them (connect 250 ms, read and write 1 s). The
//! callbacks at case boundaries then wait for the queue to drain, for at
//! most [`DRAIN_WAIT`], so no push is in flight while a case is prepared,
//! warmed up or sampled; a dashboard that does not answer costs that wait
//! once. The first push that fails ends streaming for the run (one warning
//! when the dashboard was asked for by `--live`; a dashboard found through
//! its file is a guess, so its absence is quiet).
//!
//! The client is a few lines over `TcpStream` rather than an HTTP crate: it
//! only ever sends one fixed request shape to tfbench's own server.

use super::{DEFAULT_PORT, DashboardFile, Endpoint, Event};
use crate::harness::runner::Observer;
use crate::results::CaseResult;
use crate::suites::Verification;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// Longest the runner waits, between cases, for queued pushes to go out.
pub const DRAIN_WAIT: Duration = Duration::from_millis(200);
const CONNECT_TIMEOUT: Duration = Duration::from_millis(250);
const IO_TIMEOUT: Duration = Duration::from_secs(1);

/// Where a run streams to, and how it got there.
#[derive(Debug, Clone)]
pub struct Target {
    /// The dashboard.
    pub endpoint: Endpoint,
    /// The push token, when known.
    pub token: Option<String>,
    /// `--live` asked for it (failures are warned about), rather than found.
    pub explicit: bool,
}

impl Target {
    /// The dashboard of a run: `--live URL` (or `--live` alone: the default
    /// port on loopback), else the one whose file says it listens on the
    /// default port, else none (`--no-live`: none). The token comes from the
    /// dashboard file of that port when its address matches, else from
    /// `TFBENCH_LIVE_TOKEN`.
    pub fn choose(live: Option<&str>, no_live: bool) -> anyhow::Result<Option<Target>> {
        if no_live {
            return Ok(None);
        }
        let env_token = std::env::var("TFBENCH_LIVE_TOKEN").ok().filter(|t| !t.is_empty());
        let Some(url) = live else {
            return Ok(DashboardFile::read(DEFAULT_PORT).and_then(|f| {
                Some(Target {
                    endpoint: Endpoint::parse(&f.url).ok()?,
                    token: Some(f.token),
                    explicit: false,
                })
            }));
        };
        let endpoint = Endpoint::parse(url).map_err(|e| anyhow::anyhow!("--live {e}"))?;
        let from_file = DashboardFile::read(endpoint.port)
            .filter(|f| Endpoint::parse(&f.url).is_ok_and(|e| same_place(&e, &endpoint)))
            .map(|f| f.token);
        Ok(Some(Target { endpoint, token: from_file.or(env_token), explicit: true }))
    }
}

/// Whether two endpoints name the same listener (loopback spellings alike).
fn same_place(a: &Endpoint, b: &Endpoint) -> bool {
    let loopback = |h: &str| matches!(h, "127.0.0.1" | "localhost" | "::1");
    a.port == b.port && (a.host == b.host || (loopback(&a.host) && loopback(&b.host)))
}

/// Pushes queued but not yet sent (or given up on).
struct Pending {
    count: Mutex<usize>,
    drained: Condvar,
}

/// The background pusher of one run.
pub struct Pusher {
    tx: Option<Sender<Event>>,
    pending: Arc<Pending>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Pusher {
    /// Starts the background thread for `target`; `announce`: say on stderr
    /// when the first push went through.
    pub fn start(target: Target, announce: bool) -> Self {
        let (tx, rx) = channel::<Event>();
        let pending = Arc::new(Pending { count: Mutex::new(0), drained: Condvar::new() });
        let p = Arc::clone(&pending);
        let thread = std::thread::Builder::new()
            .name("tfbench-live".into())
            .spawn(move || {
                let (mut alive, mut announced) = (true, !announce);
                for event in rx {
                    let sent = if alive { post(&target, &event) } else { Ok(()) };
                    if alive && sent.is_ok() && !announced {
                        announced = true;
                        eprintln!(
                            "streaming progress to the dashboard at {}/{}",
                            target.endpoint.url(),
                            if target.explicit { "" } else { " (found listening on the default port; --no-live turns it off)" }
                        );
                    }
                    if let Err(why) = sent {
                        alive = false;
                        if target.explicit {
                            eprintln!(
                                "warning: the live dashboard at {} did not take the run's progress ({why}); the run goes on without it",
                                target.endpoint.url()
                            );
                        }
                    }
                    if let Ok(mut n) = p.count.lock() {
                        *n = n.saturating_sub(1);
                        p.drained.notify_all();
                    }
                }
            })
            .ok();
        Self { tx: thread.as_ref().map(|_| tx), pending, thread }
    }

    /// Queues `event` (never blocks).
    pub fn send(&self, event: Event) {
        let Some(tx) = &self.tx else { return };
        if let Ok(mut n) = self.pending.count.lock() {
            *n += 1;
        }
        if tx.send(event).is_err()
            && let Ok(mut n) = self.pending.count.lock()
        {
            *n = n.saturating_sub(1);
        }
    }

    /// Waits until every queued push went out or failed, at most `limit`.
    pub fn drain(&self, limit: Duration) {
        let Ok(n) = self.pending.count.lock() else { return };
        let _ = self.pending.drained.wait_timeout_while(n, limit, |n| *n > 0);
    }

    /// Sends what is queued and stops. The run is over, so this may wait
    /// for one whole push (a dashboard that is gone refuses at once).
    pub fn finish(mut self) {
        self.drain(CONNECT_TIMEOUT + IO_TIMEOUT);
        self.tx = None;
        // A thread still stuck on a dashboard that does not answer is left
        // to the process exit rather than waited for.
        let idle = self.pending.count.lock().map(|n| *n == 0).unwrap_or(false);
        if let Some(t) = self.thread.take()
            && idle
        {
            let _ = t.join();
        }
    }
}

/// One POST of `event` to `/api/events`; an error says what went wrong.
fn post(target: &Target, event: &Event) -> Result<(), String> {
    let body = serde_json::to_vec(event).map_err(|e| e.to_string())?;
    let addr = (target.endpoint.host.as_str(), target.endpoint.port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {}: {e}", target.endpoint.host))?
        .next()
        .ok_or("no address")?;
    let mut s = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT).map_err(|e| e.to_string())?;
    let _ = s.set_write_timeout(Some(IO_TIMEOUT));
    let _ = s.set_read_timeout(Some(IO_TIMEOUT));
    let _ = s.set_nodelay(true);
    let auth = target.token.as_deref().map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    let head = format!(
        "POST /api/events HTTP/1.1\r\nHost: {}:{}\r\nContent-Type: application/json\r\n{auth}Content-Length: {}\r\nConnection: close\r\n\r\n",
        target.endpoint.host,
        target.endpoint.port,
        body.len()
    );
    s.write_all(head.as_bytes()).and_then(|_| s.write_all(&body)).map_err(|e| e.to_string())?;
    let mut status = [0u8; 12];
    s.read_exact(&mut status).map_err(|e| format!("no answer: {e}"))?;
    let code = std::str::from_utf8(&status[9..12]).unwrap_or("???");
    match code {
        "204" | "200" => Ok(()),
        "401" => Err("HTTP 401: wrong or missing token; the run reads it from the dashboard's file in the \
                      tfbench cache folder, else from TFBENCH_LIVE_TOKEN"
            .into()),
        other => Err(format!("HTTP {other}")),
    }
}

/// An observer that passes everything on to `inner` and streams it.
pub struct Streaming<'a> {
    /// What shows progress on the terminal.
    pub inner: &'a mut dyn Observer,
    /// The pusher.
    pub pusher: &'a Pusher,
    /// The run's id.
    pub run_id: String,
}

impl Observer for Streaming<'_> {
    fn run_started(&mut self, cases: usize, rounds: u32) {
        self.inner.run_started(cases, rounds);
    }

    fn case_started(&mut self, id: &str, round: u32, done: usize, total: usize) {
        self.pusher.send(Event::CaseStarted {
            run_id: self.run_id.clone(),
            id: id.to_string(),
            round,
            done,
            total,
        });
        // The case's work starts when this returns: nothing may be in flight.
        self.pusher.drain(DRAIN_WAIT);
        self.inner.case_started(id, round, done, total);
    }

    fn case_verified(&mut self, id: &str, v: &Verification) {
        self.inner.case_verified(id, v);
    }

    fn case_finished(&mut self, result: &CaseResult) {
        self.inner.case_finished(result);
        self.pusher
            .send(Event::CaseFinished { run_id: self.run_id.clone(), result: Box::new(result.clone()) });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dashboard_that_is_gone_costs_no_time_and_no_error() {
        // A port nothing listens on: bind one, note it, close it.
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let target =
            Target { endpoint: Endpoint { host: "127.0.0.1".into(), port }, token: None, explicit: false };
        let pusher = Pusher::start(target, false);
        let t0 = std::time::Instant::now();
        for i in 0..50 {
            pusher.send(Event::RunFinished { run_id: format!("r{i}"), wall_time_secs: 0.0, targets: vec![] });
            pusher.drain(DRAIN_WAIT);
        }
        pusher.finish();
        assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    }

    #[test]
    fn loopback_spellings_name_one_place() {
        let at = |h: &str, p| Endpoint { host: h.into(), port: p };
        assert!(same_place(&at("localhost", 1), &at("127.0.0.1", 1)));
        assert!(!same_place(&at("localhost", 1), &at("127.0.0.1", 2)));
        assert!(!same_place(&at("10.0.0.1", 1), &at("127.0.0.1", 1)));
    }
}
