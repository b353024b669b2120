//! Serving under load (issue 49): MLPerf LoadGen's scenarios driven against
//! a server under test, either tfbench's own continuous-batching engine over
//! the model runtime ([`engine`]) or any OpenAI-compatible HTTP server
//! ([`http`]), with latencies measured from each request's scheduled send
//! time.
//!
//! | file | what it holds |
//! |---|---|
//! | `schedule.rs` | seeded arrival times (Poisson, gamma burstiness) |
//! | `workload.rs` | the requests: seeded prompt and output lengths, prompt text and ids |
//! | `driver.rs` | the scenarios (single-stream, multi-stream, server, offline) and the query log |
//! | `summary.rs` | TTFT, TPOT, ITL, E2E percentiles, throughput, goodput, validity |
//! | `search.rs` | the peak-QPS search (LoadGen's FindPeakPerformance) |
//! | `engine.rs` | the in-process server: continuous batching under a KV-cache budget |
//! | `http.rs`, `sse.rs` | the client of OpenAI-compatible servers (HTTP/1.1, server-sent events) |
//! | `usage.rs` | CPU time, energy (RAPL) and cost of a run |
//! | `server.rs` | the engine served over HTTP (`--serve`): OpenAI-compatible streaming completions |
//! | `pressure.rs` | memory pressure: a cgroup limit or a measured balloon (`--memory-pressure`) |
//!
//! A target (engine or HTTP client) implements [`Target`]: `submit` starts a
//! request and returns at once, and everything the request does afterwards
//! arrives as timestamped [`Event`]s on a channel, so the driver keeps its
//! schedule however slow the target is.

use std::sync::mpsc::Sender;
use std::time::Instant;

pub mod driver;
pub mod engine;
pub mod http;
pub mod pressure;
pub mod schedule;
pub mod search;
pub mod server;
pub mod sse;
pub mod summary;
pub mod usage;
pub mod workload;

/// One query: a prompt (its ids for the in-process engine, its text for an
/// HTTP server) and how many tokens to generate.
#[derive(Debug, Clone)]
pub struct Request {
    /// Index in the run (issue order).
    pub id: usize,
    /// Prompt text, when the workload has a tokenizer or a word list.
    pub text: Option<String>,
    /// Prompt token ids.
    pub ids: Vec<u32>,
    /// Output tokens asked for (generation ignores end-of-sequence, as
    /// `vllm bench serve --ignore-eos` does, so every request costs its length).
    pub max_tokens: usize,
}

/// What happened to a request, when (the receiver's clock).
#[derive(Debug, Clone)]
pub enum Event {
    /// `n` more output tokens arrived (one streamed chunk).
    Tokens {
        /// Request id.
        id: usize,
        /// Arrival time.
        at: Instant,
        /// Tokens in the chunk.
        n: u32,
        /// The token ids, where the target knows them (the in-process engine).
        ids: Vec<u32>,
    },
    /// The request finished; token counts the server reported, if any.
    Done {
        /// Request id.
        id: usize,
        /// Finish time.
        at: Instant,
        /// Prompt tokens by the server's count.
        prompt_tokens: Option<u32>,
        /// Output tokens: the server's count, or the client's tokenizer's.
        output_tokens: Option<u32>,
        /// Whether `output_tokens` is the server's own count.
        by_server: bool,
    },
    /// The request failed; it is reported apart and never enters latencies.
    Failed {
        /// Request id.
        id: usize,
        /// When the failure was seen.
        at: Instant,
        /// Why (`connection refused`, `stream ended before [DONE]`, ...).
        reason: String,
    },
}

impl Event {
    /// The request the event belongs to.
    pub fn id(&self) -> usize {
        match self {
            Self::Tokens { id, .. } | Self::Done { id, .. } | Self::Failed { id, .. } => *id,
        }
    }
}

/// A server under test, as the driver sees it.
pub trait Target {
    /// Starts `req` and returns without waiting for it; its events go to `events`.
    fn submit(&mut self, req: Request, events: &Sender<Event>);
    /// The run is over: cancel whatever is still running and return the
    /// target's own account of the run (JSON; `null` when it keeps none).
    fn end_run(&mut self, _t0: Instant) -> serde_json::Value {
        serde_json::Value::Null
    }
}
