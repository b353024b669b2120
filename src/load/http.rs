//! The client of OpenAI-compatible servers (`/v1/completions`,
//! `/v1/chat/completions`) with streaming: plain HTTP/1.1 over a
//! `TcpStream`, one connection and one thread per request (a blocking read
//! costs no CPU, so a thread per request keeps the client's own work small
//! and measurable), chunked transfer decoded, events through [`super::sse`].
//! Output tokens: the server's `usage` (asked for with
//! `stream_options.include_usage`), else the model's tokenizer over the
//! whole text, else one per streamed chunk; the log says which.
//!
//! Every way a request can go wrong (refused, timed out, an HTTP error, a
//! stream dropped before `[DONE]`, a malformed chunk) fails that request
//! with the reason; the run goes on. The client's own overhead is the CPU
//! time of each request's thread (its waits cost none), kept per request.

use super::sse::{Chunk, Parser};
use super::workload::Tokenize;
use super::{Event, Request, Target};
use anyhow::{Result, bail};
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Which OpenAI API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// `/v1/completions` (a prompt).
    Completions,
    /// `/v1/chat/completions` (one user message).
    Chat,
}

/// Where requests go.
#[derive(Debug, Clone, PartialEq)]
pub struct Endpoint {
    /// `host:port`.
    pub authority: String,
    /// Request path (`/v1/completions`).
    pub path: String,
    /// The API the path serves.
    pub api: Api,
}

impl Endpoint {
    /// Parses `http://host[:port][/path]`: a path ending in `completions`
    /// is used as it is (and decides the API), otherwise `api`'s path is
    /// appended. Only plain `http://` (no TLS).
    pub fn parse(url: &str, api: Api) -> Result<Self> {
        let Some(rest) = url.strip_prefix("http://") else {
            bail!("--endpoint {url}: only http:// URLs are supported (no TLS)");
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        if authority.is_empty() {
            bail!("--endpoint {url}: no host");
        }
        let authority =
            if authority.contains(':') { authority.to_string() } else { format!("{authority}:80") };
        let path = path.trim_end_matches('/');
        let (path, api) = if path.ends_with("/chat/completions") {
            (path.to_string(), Api::Chat)
        } else if path.ends_with("/completions") {
            (path.to_string(), Api::Completions)
        } else {
            let base = if path.ends_with("/v1") { path.to_string() } else { format!("{path}/v1") };
            let tail = if api == Api::Chat { "/chat/completions" } else { "/completions" };
            (base + tail, api)
        };
        Ok(Self { authority, path, api })
    }
}

/// An OpenAI-compatible server as a [`Target`].
pub struct HttpTarget {
    endpoint: Arc<Endpoint>,
    model: Option<String>,
    tokenizer: Option<Arc<dyn Tokenize + Send + Sync>>,
    timeout: Duration,
    /// CPU seconds of each request's client thread.
    overhead: Arc<Mutex<Vec<f64>>>,
    /// Send prompts as token ids, not text.
    prompt_ids: bool,
}

impl HttpTarget {
    /// A client of `endpoint`; `model` goes in the request's `model` field;
    /// `tokenizer` counts output tokens when the server sends no usage.
    pub fn new(
        endpoint: Endpoint,
        model: Option<String>,
        tokenizer: Option<Arc<dyn Tokenize + Send + Sync>>,
        timeout: Duration,
    ) -> Self {
        Self {
            endpoint: Arc::new(endpoint),
            model,
            tokenizer,
            timeout,
            overhead: Default::default(),
            prompt_ids: false,
        }
    }

    /// Sends each prompt as its token ids (the completions API's array
    /// form) instead of its text.
    pub fn with_prompt_ids(mut self, on: bool) -> Self {
        self.prompt_ids = on;
        self
    }
}

impl Target for HttpTarget {
    fn submit(&mut self, req: Request, events: &Sender<Event>) {
        let (ep, model, tok) = (self.endpoint.clone(), self.model.clone(), self.tokenizer.clone());
        let (ev, timeout, overhead) = (events.clone(), self.timeout, self.overhead.clone());
        let ids = self.prompt_ids;
        let id = req.id;
        let spawned = std::thread::Builder::new().name(format!("tfbench-client-{id}")).spawn(move || {
            let cpu0 = thread_cpu_s();
            let outcome = request(&ep, (model.as_deref(), ids), tok.as_deref(), &req, timeout, &ev);
            // Recorded before the last event goes out, so a run that has
            // seen every finish has every request's figure.
            if let Ok(mut o) = overhead.lock() {
                o.push(thread_cpu_s() - cpu0);
            }
            let last = outcome.unwrap_or_else(|reason| Event::Failed { id, at: Instant::now(), reason });
            let _ = ev.send(last);
        });
        if let Err(e) = spawned {
            let reason = format!("client: cannot start a thread: {e}");
            let _ = events.send(Event::Failed { id, at: Instant::now(), reason });
        }
    }

    fn end_run(&mut self, _t0: Instant) -> serde_json::Value {
        let cpu: Vec<f64> = self.overhead.lock().map(|mut o| std::mem::take(&mut *o)).unwrap_or_default();
        let us: Vec<f64> = cpu.iter().map(|s| s * 1e6).collect();
        let d = super::summary::Dist::of(us);
        serde_json::json!({
            "kind": "OpenAI-compatible HTTP server",
            "url_path": self.endpoint.path,
            "client_cpu_us_per_request": d,
            "client_cpu_s_total": cpu.iter().sum::<f64>(),
        })
    }
}

/// CPU seconds the calling thread has used (`CLOCK_THREAD_CPUTIME_ID`).
pub fn thread_cpu_s() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec we own.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0.0;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// The JSON body of `req`; its prompt as token ids with `ids`.
fn body(api: Api, model: Option<&str>, ids: bool, req: &Request) -> String {
    let text = req.text.clone().unwrap_or_default();
    let mut v = serde_json::json!({
        "max_tokens": req.max_tokens,
        "stream": true,
        "stream_options": {"include_usage": true},
        "temperature": 0.0,
        // Every request costs its length (vllm bench serve's --ignore-eos).
        "ignore_eos": true,
    });
    match api {
        Api::Completions if ids => v["prompt"] = req.ids.clone().into(),
        Api::Completions => v["prompt"] = text.into(),
        Api::Chat => v["messages"] = serde_json::json!([{"role": "user", "content": text}]),
    }
    if let Some(m) = model {
        v["model"] = m.into();
    }
    v.to_string()
}

fn io_reason(what: &str, e: &std::io::Error) -> String {
    use std::io::ErrorKind::*;
    match e.kind() {
        ConnectionRefused => format!("connection refused: {what}: {e}"),
        TimedOut | WouldBlock => format!("timed out: {what}: no data within the request's timeout"),
        ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof => {
            format!("stream dropped: {what}: {e}")
        }
        _ => format!("I/O error: {what}: {e}"),
    }
}

/// Sends one request and streams its answer into `events`; returns its
/// finishing event, or the reason it failed.
fn request(
    ep: &Endpoint,
    (model, ids): (Option<&str>, bool),
    tok: Option<&(dyn Tokenize + Send + Sync)>,
    req: &Request,
    timeout: Duration,
    events: &Sender<Event>,
) -> Result<Event, String> {
    let deadline = Instant::now() + timeout;
    let addr = ep
        .authority
        .to_socket_addrs()
        .map_err(|e| format!("connection refused: cannot resolve {}: {e}", ep.authority))?
        .next()
        .ok_or_else(|| format!("connection refused: {} has no address", ep.authority))?;
    let stream = TcpStream::connect_timeout(&addr, timeout).map_err(|e| io_reason("connect", &e))?;
    let _ = stream.set_nodelay(true);
    let body = body(ep.api, model, ids, req);
    let head = format!(
        "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nAccept: text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        ep.path,
        ep.authority,
        body.len()
    );
    (&stream).write_all((head + &body).as_bytes()).map_err(|e| io_reason("send", &e))?;
    let mut r = BufReader::new(&stream);
    let left = |d: Instant| d.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
    stream.set_read_timeout(Some(left(deadline))).map_err(|e| io_reason("socket", &e))?;
    let mut line = String::new();
    r.read_line(&mut line).map_err(|e| io_reason("status line", &e))?;
    let status: u16 = line.split_whitespace().nth(1).and_then(|s| s.parse().ok()).ok_or_else(|| {
        if line.is_empty() {
            "stream dropped: connection closed before a status line".to_string()
        } else {
            format!("malformed response: status line {:?}", line.trim_end())
        }
    })?;
    let (mut chunked, mut length) = (false, None::<usize>);
    loop {
        line.clear();
        r.read_line(&mut line).map_err(|e| io_reason("headers", &e))?;
        let h = line.trim_end();
        if h.is_empty() {
            break;
        }
        let lower = h.to_ascii_lowercase();
        if lower.starts_with("transfer-encoding:") && lower.contains("chunked") {
            chunked = true;
        } else if let Some(v) = lower.strip_prefix("content-length:") {
            length = v.trim().parse().ok();
        }
    }
    let mut body = Body { r, chunked, left: length, chunk_left: 0, ended: false };
    if status != 200 {
        let mut text = Vec::new();
        let _ = body.read_some(&mut text, 512);
        return Err(format!("HTTP {status}: {}", String::from_utf8_lossy(&text).trim()));
    }
    let mut p = Parser::default();
    let mut st = Stream { text: String::new(), chunks: 0, prompt: None, completion: None };
    let mut buf = Vec::with_capacity(8192);
    loop {
        stream.set_read_timeout(Some(left(deadline))).map_err(|e| io_reason("socket", &e))?;
        buf.clear();
        let n = body.read_some(&mut buf, 8192).map_err(|e| io_reason("stream", &e))?;
        let at = Instant::now();
        let mut evs = p.feed(&buf[..n]);
        if n == 0 {
            evs.extend(p.finish());
        }
        for data in evs {
            if st.apply(Chunk::parse(&data)?, req.id, at, events) {
                let output =
                    st.completion.or_else(|| tok.and_then(|t| t.ids(&st.text).ok()).map(|v| v.len() as u32));
                let by_server = st.completion.is_some();
                return Ok(Event::Done {
                    id: req.id,
                    at,
                    prompt_tokens: st.prompt,
                    output_tokens: output,
                    by_server,
                });
            }
        }
        if n == 0 {
            return Err(format!("stream dropped: the stream ended before [DONE] after {} chunks", st.chunks));
        }
    }
}

/// What a stream has said so far.
struct Stream {
    text: String,
    chunks: u32,
    prompt: Option<u32>,
    completion: Option<u32>,
}

impl Stream {
    /// Applies one chunk; `true` at `[DONE]`.
    fn apply(&mut self, c: Chunk, id: usize, at: Instant, events: &Sender<Event>) -> bool {
        let (text, ids) = match c {
            Chunk::Done => return true,
            Chunk::Text(t, ids) => (t, ids),
            Chunk::Usage { prompt, completion, text } => {
                self.prompt = prompt.or(self.prompt);
                self.completion = completion.or(self.completion);
                (text, Vec::new())
            }
        };
        // A chunk is one token unless it names its tokens.
        let n = if ids.is_empty() { u32::from(!text.is_empty()) } else { ids.len() as u32 };
        if n > 0 {
            self.chunks += 1;
            self.text.push_str(&text);
            let _ = events.send(Event::Tokens { id, at, n, ids });
        }
        false
    }
}

/// An HTTP body: `Content-Length`, chunked, or until the connection closes.
struct Body<R> {
    r: R,
    chunked: bool,
    left: Option<usize>,
    chunk_left: usize,
    ended: bool,
}

impl<R: BufRead> Body<R> {
    /// Appends up to `max` body bytes to `out`; 0 at the body's end.
    fn read_some(&mut self, out: &mut Vec<u8>, max: usize) -> std::io::Result<usize> {
        if self.ended {
            return Ok(0);
        }
        if self.chunked && self.chunk_left == 0 {
            let mut line = String::new();
            if self.r.read_line(&mut line)? == 0 {
                self.ended = true;
                return Ok(0);
            }
            if line.trim().is_empty() {
                // The CRLF after a chunk's data.
                line.clear();
                if self.r.read_line(&mut line)? == 0 {
                    self.ended = true;
                    return Ok(0);
                }
            }
            let size =
                usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16).map_err(|_| {
                    std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("bad chunk size {:?}", line.trim()),
                    )
                })?;
            if size == 0 {
                self.ended = true;
                return Ok(0);
            }
            self.chunk_left = size;
        }
        let mut want = max;
        if self.chunked {
            want = want.min(self.chunk_left);
        }
        if let Some(l) = self.left {
            want = want.min(l);
            if l == 0 {
                self.ended = true;
                return Ok(0);
            }
        }
        let start = out.len();
        out.resize(start + want, 0);
        let n = self.r.read(&mut out[start..])?;
        out.truncate(start + n);
        if n == 0 {
            self.ended = true;
        }
        if self.chunked {
            self.chunk_left -= n;
        }
        if let Some(l) = &mut self.left {
            *l -= n;
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests;
