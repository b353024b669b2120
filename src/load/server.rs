//! The in-process engine served over HTTP (`tfbench load --serve ADDR`):
//! an OpenAI-compatible `POST /v1/completions` with streaming (server-sent
//! events), so one scenario can run against the engine in-process, through
//! tfbench's own HTTP client against this server, and against any other
//! server (llama-server) through the same client; the difference between
//! the first two is what the client and the socket cost.
//!
//! tiny_http parses requests (as for the dashboard); each streamed answer
//! is written raw, one HTTP chunk per event, flushed after every token,
//! since tiny_http's chunked writer would hold 8 KiB before sending. Each request becomes one engine
//! request: greedy, end-of-sequence ignored (`ignore_eos` is implied,
//! `temperature` is not honoured), `max_tokens` tokens (16 when absent).
//! A prompt is text (through the model's tokenizer) or token ids (the
//! completions API's array form: exact prompts for a model without a
//! tokenizer, such as a `--preset`). Every chunk carries its `token_ids`
//! (vLLM's name for them) besides its text, so a client can check the
//! served tokens against the model runtime's own.
//!
//! Also `GET /health` (`{"status":"ok"}`, as llama-server) and
//! `GET /v1/models`. A request dropped by its client still runs to its end
//! in the engine (there is no cancel), and is counted.

use super::engine::Engine;
use super::{Event, Request, Target};
use crate::model::tokenizer::FileTokenizer;
use anyhow::{Result, anyhow};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::channel;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Threads taking requests off the socket; a stream then has its own.
const WORKERS: usize = 4;
/// Streams answered at once at most; more get HTTP 503.
const MAX_STREAMS: usize = 512;
/// Largest request body read (a prompt of many thousand tokens fits).
const MAX_BODY: usize = 4 << 20;
/// Largest `max_tokens` taken (the engine refuses what its context cannot hold).
const MAX_TOKENS: u64 = 1 << 20;

/// What the server shares between its threads.
struct Shared {
    engine: Mutex<Engine>,
    tokenizer: Option<Arc<FileTokenizer>>,
    vocab: usize,
    name: String,
    next_id: AtomicUsize,
    streams: AtomicUsize,
    served: AtomicUsize,
}

/// The engine behind a bound socket.
pub struct ModelServer {
    server: Arc<tiny_http::Server>,
    shared: Arc<Shared>,
    addr: SocketAddr,
}

impl ModelServer {
    /// Binds `addr` (port 0: a free port) in front of `engine`; `name` is
    /// the `model` it answers with, `vocab` bounds prompt ids.
    pub fn bind(
        addr: SocketAddr,
        engine: Engine,
        tokenizer: Option<Arc<FileTokenizer>>,
        vocab: usize,
        name: String,
    ) -> Result<Self> {
        let server = tiny_http::Server::http(addr).map_err(|e| anyhow!("--serve {addr}: {e}"))?;
        let addr = server.server_addr().to_ip().ok_or_else(|| anyhow!("not bound to an IP address"))?;
        let shared = Arc::new(Shared {
            engine: Mutex::new(engine),
            tokenizer,
            vocab,
            name,
            next_id: AtomicUsize::new(0),
            streams: AtomicUsize::new(0),
            served: AtomicUsize::new(0),
        });
        Ok(Self { server: Arc::new(server), shared, addr })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves until `stop` is set (checked a few times a second); returns
    /// the requests answered.
    pub fn serve(self, stop: &AtomicBool) -> usize {
        std::thread::scope(|s| {
            for _ in 0..WORKERS {
                let (server, shared) = (&self.server, &self.shared);
                s.spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        match server.recv_timeout(Duration::from_millis(200)) {
                            Ok(Some(req)) => handle(req, shared),
                            Ok(None) => {}
                            Err(_) => std::thread::sleep(Duration::from_millis(50)),
                        }
                    }
                });
            }
        });
        self.shared.served.load(Ordering::Relaxed)
    }
}

fn respond(req: tiny_http::Request, status: u16, body: &Value) {
    let header = tiny_http::Header::from_bytes("Content-Type", "application/json");
    let mut r = tiny_http::Response::from_string(body.to_string()).with_status_code(status);
    if let Ok(h) = header {
        r = r.with_header(h);
    }
    let _ = req.respond(r);
}

fn error(req: tiny_http::Request, status: u16, message: &str) {
    respond(req, status, &json!({"error": {"message": message, "type": "invalid_request_error"}}));
}

fn handle(mut req: tiny_http::Request, sh: &Arc<Shared>) {
    let path = req.url().split('?').next().unwrap_or("").trim_end_matches('/').to_string();
    match (req.method(), path.as_str()) {
        (tiny_http::Method::Get, "/health") => respond(req, 200, &json!({"status": "ok"})),
        (tiny_http::Method::Get, "/v1/models") => respond(
            req,
            200,
            &json!({"object": "list", "data": [{"id": sh.name, "object": "model", "owned_by": "tfbench"}]}),
        ),
        (tiny_http::Method::Post, "/v1/completions") => {
            let mut body = Vec::new();
            let read = req.as_reader().take(MAX_BODY as u64 + 1).read_to_end(&mut body);
            if read.is_err() || body.len() > MAX_BODY {
                return error(req, 413, "request body unreadable or over 4 MiB");
            }
            match parse(&body, sh) {
                Ok(job) => completion(req, sh, job),
                Err(why) => error(req, 400, &why),
            }
        }
        (_, "/v1/chat/completions") => {
            error(req, 404, "tfbench serves /v1/completions only (no chat template)")
        }
        _ => error(req, 404, "not found: POST /v1/completions, GET /health, GET /v1/models"),
    }
}

/// A parsed completion request.
#[derive(Debug, PartialEq)]
struct Job {
    ids: Vec<u32>,
    max_tokens: usize,
    stream: bool,
    usage: bool,
}

/// Reads a completion request's JSON: `prompt` as text or ids,
/// `max_tokens`, `stream`, `stream_options.include_usage`.
fn parse(body: &[u8], sh: &Shared) -> Result<Job, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("request body is not JSON: {e}"))?;
    let ids = match &v["prompt"] {
        Value::String(text) => {
            let tok = sh.tokenizer.as_ref().ok_or_else(|| {
                "this model has no tokenizer: send the prompt as token ids (an array of integers)".to_string()
            })?;
            tok.encode(text).map_err(|e| format!("prompt: {e:#}"))?
        }
        Value::Array(a) => a
            .iter()
            .map(|x| x.as_u64().filter(|&i| i < sh.vocab as u64).map(|i| i as u32))
            .collect::<Option<Vec<u32>>>()
            .ok_or_else(|| {
                format!("prompt: token ids must be integers below the vocabulary's {}", sh.vocab)
            })?,
        Value::Null => return Err("no prompt".into()),
        _ => return Err("prompt: a string or an array of token ids (one prompt per request)".into()),
    };
    if ids.is_empty() {
        return Err("prompt: empty".into());
    }
    let max_tokens = match &v["max_tokens"] {
        Value::Null => 16,
        m => m.as_u64().filter(|&n| (1..=MAX_TOKENS).contains(&n)).ok_or("max_tokens: a positive integer")?,
    } as usize;
    let stream = v["stream"].as_bool().unwrap_or(false);
    let usage = !stream || v["stream_options"]["include_usage"].as_bool().unwrap_or(false);
    Ok(Job { ids, max_tokens, stream, usage })
}

/// Text of a response so far: the tokenizer's decoding of every id, with
/// a last incomplete UTF-8 character held back until it completes.
struct Text<'a> {
    tok: Option<&'a FileTokenizer>,
    ids: Vec<u32>,
    sent: usize,
}

impl Text<'_> {
    fn push(&mut self, ids: &[u32]) -> String {
        self.ids.extend_from_slice(ids);
        let Some(t) = self.tok else { return String::new() };
        let Ok(all) = t.decode(&self.ids) else { return String::new() };
        if all.ends_with('\u{FFFD}') || all.len() < self.sent || !all.is_char_boundary(self.sent) {
            return String::new();
        }
        let new = all[self.sent..].to_string();
        self.sent = all.len();
        new
    }
}

fn unix_s() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Runs `job` on the engine and answers: a stream of chunks, or one body.
fn completion(req: tiny_http::Request, sh: &Arc<Shared>, job: Job) {
    if sh.streams.fetch_add(1, Ordering::SeqCst) >= MAX_STREAMS {
        sh.streams.fetch_sub(1, Ordering::SeqCst);
        return error(req, 503, "too many requests in flight");
    }
    let sh2 = Arc::clone(sh);
    let spawned = std::thread::Builder::new().name("tfbench-serve-req".into()).spawn(move || {
        answer(req, &sh2, job);
        sh2.streams.fetch_sub(1, Ordering::SeqCst);
    });
    if spawned.is_err() {
        sh.streams.fetch_sub(1, Ordering::SeqCst);
    }
}

fn answer(req: tiny_http::Request, sh: &Shared, job: Job) {
    let id = sh.next_id.fetch_add(1, Ordering::Relaxed);
    let (tx, rx) = channel();
    let prompt_tokens = job.ids.len();
    let r = Request { id, text: None, ids: job.ids, max_tokens: job.max_tokens };
    match sh.engine.lock() {
        Ok(mut e) => e.submit(r, &tx),
        Err(_) => return error(req, 500, "the engine is gone"),
    }
    drop(tx);
    let head = |text: &str, ids: &[u32], finish: Value| {
        json!({
            "id": format!("cmpl-{id}"), "object": "text_completion", "created": unix_s(), "model": sh.name,
            "choices": [{"index": 0, "text": text, "token_ids": ids, "logprobs": null, "finish_reason": finish}],
        })
    };
    let mut text = Text { tok: sh.tokenizer.as_deref(), ids: Vec::new(), sent: 0 };
    let usage = |n: usize| json!({"prompt_tokens": prompt_tokens, "completion_tokens": n, "total_tokens": prompt_tokens + n});
    if !job.stream {
        let mut failed = None;
        for ev in rx.iter() {
            match ev {
                Event::Tokens { ids, .. } => {
                    text.push(&ids);
                }
                Event::Done { .. } => break,
                Event::Failed { reason, .. } => failed = Some(reason),
            }
        }
        if let Some(why) = failed {
            return respond(req, 500, &json!({"error": {"message": why, "type": "server_error"}}));
        }
        let all = text.tok.and_then(|t| t.decode(&text.ids).ok()).unwrap_or_default();
        let mut v = head(&all, &text.ids, "length".into());
        v["usage"] = usage(text.ids.len());
        sh.served.fetch_add(1, Ordering::Relaxed);
        return respond(req, 200, &v);
    }
    // Chunked transfer encoding: the body's end is its last chunk, so the
    // connection may stay open (tiny_http reads the next request on it).
    let mut w = req.into_writer();
    let head_bytes: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n";
    if w.write_all(head_bytes).and_then(|_| w.flush()).is_err() {
        return;
    }
    let mut send = |data: &str| {
        let event = if data.is_empty() { String::new() } else { format!("data: {data}\n\n") };
        w.write_all(format!("{:x}\r\n{event}\r\n", event.len()).as_bytes()).and_then(|_| w.flush()).is_ok()
    };
    for ev in rx.iter() {
        let ok = match ev {
            Event::Tokens { ids, .. } => {
                let t = text.push(&ids);
                send(&head(&t, &ids, Value::Null).to_string())
            }
            Event::Done { .. } => {
                let mut ok = send(&head("", &[], "length".into()).to_string());
                if job.usage {
                    let u = json!({"id": format!("cmpl-{id}"), "object": "text_completion", "model": sh.name,
                        "choices": [], "usage": usage(text.ids.len())});
                    ok = ok && send(&u.to_string());
                }
                // `[DONE]`, then the empty last chunk.
                if ok && send("[DONE]") && send("") {
                    sh.served.fetch_add(1, Ordering::Relaxed);
                }
                return;
            }
            Event::Failed { reason, .. } => {
                let _ = send(&json!({"error": {"message": reason, "type": "server_error"}}).to_string());
                let _ = send("");
                return;
            }
        };
        if !ok {
            // The client went; the engine finishes the request regardless.
            return;
        }
    }
    let _ = send(&json!({"error": {"message": "the engine stopped", "type": "server_error"}}).to_string());
    let _ = send("");
}
