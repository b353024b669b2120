//! The dashboard's HTTP server (`tiny_http`, blocking, a few threads).
//!
//! Routes: `GET /` the page, `GET /live` its live section, `GET /events`
//! server-sent events (one `update` per change), `GET /api/state` the runs
//! as JSON, `GET /store/NAME.json` and `GET /history/FILE.jsonl` the stored
//! files; `POST /api/events` is the one write, a run's event, and needs the
//! token (`Authorization: Bearer TOKEN`). Anything else is 404 or 405.
//!
//! Why a token as well as loopback: any local process, and any web page the
//! user's browser opens, can reach a loopback port; a token only this user
//! can read (a 0600 file in the user's cache folder) keeps them all from
//! writing, and a custom header cannot be sent cross-site without a CORS
//! preflight, which this server never grants. Reads check the `Host`
//! header when bound to loopback, so a DNS-rebinding page cannot read the
//! dashboard through a name of its own.

use super::page::{self, Sources};
use super::state::{Live, Rejected};
use super::{Event, resolve_in_root};
use anyhow::{Result, anyhow};
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;
use tiny_http::{Header, Method, Request, Response};

/// Threads taking requests (event streams get a thread of their own).
const WORKERS: usize = 4;
/// Event streams open at once; more are refused with 503.
const MAX_STREAMS: usize = 32;
/// Largest push accepted (a case with many raw samples is well under it).
const MAX_PUSH_BYTES: u64 = 32 << 20;
/// A comment line on idle event streams, so dead clients are noticed.
const KEEPALIVE: Duration = Duration::from_secs(15);

/// Sent with every answer: nothing is cached, sniffed, framed or referred,
/// and the page may only talk to this server.
const SECURITY_HEADERS: [(&str, &str); 5] = [
    ("Cache-Control", "no-store"),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("X-Frame-Options", "DENY"),
    (
        "Content-Security-Policy",
        "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; connect-src 'self'; \
         img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    ),
];

struct Shared {
    live: Mutex<Live>,
    changed: Condvar,
    sources: Sources,
    token: String,
    /// `Host` values a read may carry; `None` when bound to a
    /// non-loopback address (the user chose to expose it).
    hosts: Option<Vec<String>>,
    loopback_only: bool,
    streams: AtomicUsize,
}

/// A bound dashboard, ready to serve.
pub struct Dashboard {
    server: Arc<tiny_http::Server>,
    shared: Arc<Shared>,
    addr: SocketAddr,
}

impl Dashboard {
    /// Binds `addr` (port 0: any free port).
    pub fn bind(addr: SocketAddr, sources: Sources, token: String) -> Result<Self> {
        let server = tiny_http::Server::http(addr).map_err(|e| anyhow!("{e}"))?;
        let bound = server.server_addr().to_ip().ok_or_else(|| anyhow!("not bound to an IP address"))?;
        let loopback_only = bound.ip().is_loopback();
        let hosts = loopback_only.then(|| {
            let p = bound.port();
            vec![format!("127.0.0.1:{p}"), format!("localhost:{p}"), format!("[::1]:{p}"), format!("{bound}")]
        });
        let shared = Arc::new(Shared {
            live: Mutex::new(Live::default()),
            changed: Condvar::new(),
            sources,
            token,
            hosts,
            loopback_only,
            streams: AtomicUsize::new(0),
        });
        Ok(Self { server: Arc::new(server), shared, addr: bound })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves until `stop` is set (checked a few times a second).
    pub fn serve(self, stop: &'static AtomicBool) {
        let workers: Vec<_> = (0..WORKERS)
            .filter_map(|i| {
                let (server, shared) = (Arc::clone(&self.server), Arc::clone(&self.shared));
                std::thread::Builder::new()
                    .name(format!("tfbench-serve-{i}"))
                    .spawn(move || {
                        while !stop.load(Ordering::Relaxed) {
                            match server.recv_timeout(Duration::from_millis(250)) {
                                Ok(Some(req)) => handle(req, &shared),
                                Ok(None) => {}
                                Err(_) => std::thread::sleep(Duration::from_millis(50)),
                            }
                        }
                    })
                    .ok()
            })
            .collect();
        for w in workers {
            let _ = w.join();
        }
        self.shared.changed.notify_all();
    }
}

fn header(name: &str, value: &str) -> Option<Header> {
    Header::from_bytes(name.as_bytes(), value.as_bytes()).ok()
}

fn respond(req: Request, code: u16, content_type: &str, body: String) {
    let mut r = Response::from_string(body).with_status_code(code);
    for (k, v) in SECURITY_HEADERS.iter().copied().chain([("Content-Type", content_type)]) {
        if let Some(h) = header(k, v) {
            r = r.with_header(h);
        }
    }
    let _ = req.respond(r);
}

fn text(req: Request, code: u16, body: &str) {
    respond(req, code, "text/plain; charset=utf-8", format!("{body}\n"));
}

fn header_value<'a>(req: &'a Request, name: &'static str) -> Option<&'a str> {
    req.headers().iter().find(|h| h.field.equiv(name)).map(|h| h.value.as_str())
}

/// Equal strings, compared in time independent of where they differ.
fn same_secret(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn handle(req: Request, sh: &Arc<Shared>) {
    if sh.loopback_only && !req.remote_addr().is_some_and(|a| a.ip().is_loopback()) {
        return text(req, 403, "this dashboard takes loopback connections only (serve --bind to change it)");
    }
    if let (Some(hosts), Some(host)) = (&sh.hosts, header_value(&req, "Host"))
        && !hosts.iter().any(|h| h.eq_ignore_ascii_case(host))
    {
        return text(req, 403, "unexpected Host header: this dashboard answers to its loopback address only");
    }
    let url = req.url().to_string();
    let path = url.split(['?', '#']).next().unwrap_or("");
    let read = matches!(req.method(), Method::Get | Method::Head);
    match path {
        "/" if read => {
            let live = snapshot(sh);
            respond(req, 200, "text/html; charset=utf-8", page::full(&live, &sh.sources));
        }
        "/live" if read => {
            let live = snapshot(sh);
            respond(req, 200, "text/html; charset=utf-8", page::fragment(&live));
        }
        "/api/state" if read => {
            let live = snapshot(sh);
            let body = serde_json::to_string(&live.view()).unwrap_or_else(|_| "{}".into());
            respond(req, 200, "application/json", body);
        }
        "/events" if read => stream(req, sh),
        "/api/events" if *req.method() == Method::Post => push(req, sh),
        p if read && p.starts_with("/store/") => file(req, &sh.sources.baselines, &p["/store/".len()..]),
        p if read && p.starts_with("/history/") => file(req, &sh.sources.history, &p["/history/".len()..]),
        "/" | "/live" | "/api/state" | "/events" | "/api/events" => {
            text(req, 405, "method not allowed: the dashboard is read-only")
        }
        _ if read => text(req, 404, "not found"),
        _ => text(req, 405, "method not allowed: the dashboard is read-only"),
    }
}

/// A copy of the live state, so pages render without holding the lock a
/// run's push needs.
fn snapshot(sh: &Shared) -> Live {
    sh.live.lock().map(|l| l.clone()).unwrap_or_default()
}

fn file(req: Request, root: &std::path::Path, raw: &str) {
    // Every refusal reads the same: nothing is said about what exists.
    let Ok(path) = resolve_in_root(root, raw) else { return text(req, 404, "not found") };
    match std::fs::read_to_string(&path) {
        Ok(body) => {
            let ct = if raw.ends_with(".jsonl") { "application/x-ndjson" } else { "application/json" };
            respond(req, 200, ct, body);
        }
        Err(_) => text(req, 404, "not found"),
    }
}

fn push(mut req: Request, sh: &Arc<Shared>) {
    let authorized = header_value(&req, "Authorization")
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|t| same_secret(t.trim(), &sh.token));
    if !authorized {
        return text(req, 401, "a push needs the dashboard's token (Authorization: Bearer TOKEN)");
    }
    let mut body = Vec::new();
    if req.as_reader().take(MAX_PUSH_BYTES + 1).read_to_end(&mut body).is_err() {
        return text(req, 400, "cannot read the request body");
    }
    if body.len() as u64 > MAX_PUSH_BYTES {
        return text(req, 413, "event too large");
    }
    let event: Event = match serde_json::from_slice(&body) {
        Ok(e) => e,
        Err(e) => return text(req, 400, &format!("not a tfbench event: {e}")),
    };
    let applied = match sh.live.lock() {
        Ok(mut live) => live.apply(event),
        Err(_) => return text(req, 500, "state unavailable"),
    };
    match applied {
        Ok(()) => {
            sh.changed.notify_all();
            let _ = req.respond(Response::empty(204));
        }
        Err(Rejected::UnknownRun(id)) => text(req, 409, &format!("no run `{id}` started here")),
        Err(Rejected::TooManyCases) => text(req, 409, "more cases than the run planned"),
    }
}

/// Server-sent events: an `update` now and after every change, a comment
/// line when idle; the stream ends when the client goes.
fn stream(req: Request, sh: &Arc<Shared>) {
    if sh.streams.fetch_add(1, Ordering::SeqCst) >= MAX_STREAMS {
        sh.streams.fetch_sub(1, Ordering::SeqCst);
        return text(req, 503, "too many open event streams");
    }
    let counter = Arc::clone(sh);
    let sh = Arc::clone(sh);
    let spawned = std::thread::Builder::new().name("tfbench-sse".into()).spawn(move || {
        // tiny_http's chunked writer buffers 8 KiB before sending: the
        // stream is written raw, flushed after every event.
        let mut w = req.into_writer();
        let mut head =
            String::from("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n");
        for (k, v) in SECURITY_HEADERS {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\nretry: 2000\n\n");
        let mut seq = sh.live.lock().map(|l| l.seq).unwrap_or(0);
        let mut msg = format!("id: {seq}\nevent: update\ndata: {seq}\n\n");
        let mut ok = w.write_all(head.as_bytes()).is_ok();
        while ok {
            ok = w.write_all(msg.as_bytes()).and_then(|_| w.flush()).is_ok();
            let Ok(live) = sh.live.lock() else { break };
            let Ok((live, _)) = sh.changed.wait_timeout_while(live, KEEPALIVE, |l| l.seq == seq) else {
                break;
            };
            msg = if live.seq != seq {
                seq = live.seq;
                format!("id: {seq}\nevent: update\ndata: {seq}\n\n")
            } else {
                ": idle\n\n".into()
            };
        }
        sh.streams.fetch_sub(1, Ordering::SeqCst);
    });
    if spawned.is_err() {
        // The closure (and the request in it) is gone; count the stream back.
        counter.streams.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_compare_whole() {
        assert!(same_secret("abc", "abc"));
        assert!(!same_secret("abc", "abd"));
        assert!(!same_secret("abc", "abcd"));
        assert!(!same_secret("", "a"));
    }
}
