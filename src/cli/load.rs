//! `tfbench load`: serving under load (issue 49). Parsing only; the rules a
//! value must keep (a positive rate, duration or bound; a goodput SLO with
//! its unit; a price with its currency) are checked here, so a bad value
//! stops the command (exit 2, naming the flag and the rule) before anything
//! is loaded or run.

use clap::{Args, ValueEnum};
use std::path::PathBuf;

/// LoadGen's scenarios.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Scenario {
    /// The next query when the last finishes (p90 latency).
    SingleStream,
    /// Queries of --streams samples sent together, the next when all finish.
    MultiStream,
    /// Seeded arrivals at --qps (Poisson, or gamma with --burstiness), valid while p99 keeps its bounds.
    Server,
    /// Every query at once: throughput.
    Offline,
}

/// Which OpenAI API an endpoint serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ApiKind {
    /// `/v1/completions`.
    Completions,
    /// `/v1/chat/completions`.
    Chat,
}

/// How the engine's KV caches store keys and values (`--kv-cache`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum KvCacheKind {
    /// f32 keys and values (exact).
    F32,
    /// int8 codes with one f32 scale per token and head (mobile level O3's cache): about a third of
    /// f32's bytes at a head width of 64, so the KV budget holds more requests.
    Int8,
}

/// `tfbench load`.
#[derive(Debug, Args)]
pub struct LoadArgs {
    /// The scenario.
    #[arg(long, value_enum, default_value_t = Scenario::Server)]
    pub scenario: Scenario,
    /// The suite whose request model to load [only `serving` has one].
    #[arg(long, short = 's', value_name = "SUITE", default_value = "serving")]
    pub suite: String,
    /// A GGUF file or Hugging Face directory: the in-process engine's model, and the tokenizer of
    /// prompts and token counts with --endpoint.
    #[arg(long, value_name = "PATH")]
    pub model: Option<PathBuf>,
    /// A built-in model config with seeded weights, when no --model is given (gpt2-tiny, llama-tiny, gpt2, ...).
    #[arg(long, value_name = "NAME", default_value = "llama-tiny", conflicts_with = "model")]
    pub preset: String,
    /// Weight storage of a --preset model (f32, f16, bf16, q8_0, q4_0, ...).
    #[arg(long, value_name = "DTYPE", default_value = "f32")]
    pub dtype: String,
    /// Drive an OpenAI-compatible server at URL (http://host:port[/v1[/chat]/completions]) instead of
    /// the in-process engine.
    #[arg(long, value_name = "URL")]
    pub endpoint: Option<String>,
    /// Serve the in-process engine (--model or --preset) over HTTP at ADDR (host:port; port 0: a free
    /// one, printed) as an OpenAI-compatible streaming /v1/completions, until interrupted; no scenario
    /// runs. Its context fits --input-len/--output-len.
    #[arg(long, value_name = "ADDR", conflicts_with_all = ["endpoint", "find_peak", "output", "html", "memory_pressure"])]
    pub serve: Option<String>,
    /// Send each prompt to --endpoint as its token ids (the completions API's array form) instead of
    /// its text: exact prompts for a server without the client's tokenizer (`load --serve --preset`).
    #[arg(long, requires = "endpoint")]
    pub prompt_ids: bool,
    /// The API of --endpoint (a URL path ending in completions decides it).
    #[arg(long, value_enum, default_value_t = ApiKind::Completions)]
    pub api: ApiKind,
    /// The `model` field of each HTTP request.
    #[arg(long, value_name = "NAME")]
    pub served_model: Option<String>,
    /// Server scenario: the arrival rate (queries per second), or the search's start with --find-peak.
    #[arg(long, value_name = "QPS", default_value_t = 1.0, value_parser = positive, allow_negative_numbers = true)]
    pub qps: f64,
    /// Server scenario: search the highest valid rate (bracket, then bisect; LoadGen's FindPeakPerformance).
    #[arg(long)]
    pub find_peak: bool,
    /// The search stops when its bracket is narrower than PCT percent.
    #[arg(long, value_name = "PCT", default_value_t = 5.0, value_parser = positive, allow_negative_numbers = true)]
    pub search_tolerance: f64,
    /// The search makes at most N runs.
    #[arg(long, value_name = "N", default_value_t = 12, value_parser = clap::value_parser!(u32).range(1..))]
    pub search_steps: u32,
    /// Seconds of each run (server: of arrivals; single- and multi-stream: at least) [default: 10, --quick 5].
    #[arg(long, value_name = "SECS", value_parser = positive, allow_negative_numbers = true)]
    pub duration: Option<f64>,
    /// Queries at least (server, single- and multi-stream); offline: the queries sent [default: server 8,
    /// others 16].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub queries: Option<u32>,
    /// Gamma shape of inter-arrival gaps (1: Poisson; below 1 burstier, above more regular).
    #[arg(long, value_name = "B", default_value_t = 1.0, value_parser = positive, allow_negative_numbers = true)]
    pub burstiness: f64,
    /// Multi-stream: samples per query.
    #[arg(long, value_name = "N", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..))]
    pub streams: u32,
    /// Server validity: p99 end-to-end latency bound.
    #[arg(long, value_name = "MS", value_parser = positive, allow_negative_numbers = true)]
    pub latency_bound_ms: Option<f64>,
    /// Server validity (LLM): p99 time-to-first-token bound.
    #[arg(long, value_name = "MS", value_parser = positive, allow_negative_numbers = true)]
    pub ttft_bound_ms: Option<f64>,
    /// Server validity (LLM): p99 time-per-output-token bound.
    #[arg(long, value_name = "MS", value_parser = positive, allow_negative_numbers = true)]
    pub tpot_bound_ms: Option<f64>,
    /// Goodput SLOs, each KEY:VALUE with a unit (ttft:500ms tpot:200ms e2e:2s): requests meeting all.
    #[arg(long, value_name = "KEY:VALUE", num_args = 1.., value_parser = parse_slo)]
    pub goodput: Vec<(String, f64)>,
    /// Mean prompt length (tokens).
    #[arg(long, value_name = "N", default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..))]
    pub input_len: u32,
    /// Mean output length (tokens).
    #[arg(long, value_name = "N", default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..))]
    pub output_len: u32,
    /// Lengths are uniform within this fraction of their means.
    #[arg(long, value_name = "F", default_value_t = 0.5, value_parser = unit_interval)]
    pub len_spread: f64,
    /// Engine: sequences decoded together at most.
    #[arg(long, value_name = "N", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_batch: u32,
    /// Engine: KV-cache budget of the running requests (MiB); requests beyond it wait.
    #[arg(long, value_name = "MIB", default_value_t = 1024.0, value_parser = positive, allow_negative_numbers = true)]
    pub kv_budget_mib: f64,
    /// Engine: how each request's KV cache stores keys and values (the budget counts that
    /// storage's bytes; the self-check decodes on the same storage). With --endpoint: the cache of
    /// the reference the server's tokens are compared with.
    #[arg(long, value_enum, value_name = "KIND", default_value_t = KvCacheKind::F32)]
    pub kv_cache: KvCacheKind,
    /// Engine: worker threads [default: every logical CPU].
    #[arg(long, short = 'j', value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub threads: Option<u32>,
    /// A request with no finish this many seconds after its scheduled time fails.
    #[arg(long, value_name = "SECS", default_value_t = 60.0, value_parser = positive, allow_negative_numbers = true)]
    pub timeout: f64,
    /// Seed of arrivals, lengths and prompts.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Engine: requests whose tokens are checked against one-request greedy generation.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub check: u32,
    /// The machine's price per hour with its currency (0.42USD): cost per million tokens and per
    /// thousand queries.
    #[arg(long, value_name = "PRICE")]
    pub price_per_hour: Option<String>,
    /// Also meter this process's CPU time (the server behind --endpoint).
    #[arg(long, value_name = "PID")]
    pub server_pid: Option<u32>,
    /// Quick settings: 5 s runs, at most 8 search steps.
    #[arg(long)]
    pub quick: bool,
    /// Run the scenario twice, unpressured and then while this share of RAM (0 < SHARE < 1) is taken:
    /// a cgroup memory limit where one can be set, else a balloon of touched pages; reports the
    /// slowdown and whether the pressured run completed.
    #[arg(long, value_name = "SHARE", value_parser = open_unit_interval, allow_negative_numbers = true)]
    pub memory_pressure: Option<f64>,
    /// Write an HTML page of the results: each run's summary and its query log drawn (a timeline of
    /// every query: scheduled, sent, first token, tokens, finished; latencies over the run).
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Write the results (settings, summaries, query logs, usage) as JSON to FILE.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// A positive, finite number.
pub fn positive(s: &str) -> Result<f64, String> {
    let v: f64 = s.trim().parse().map_err(|_| format!("`{s}` is not a number"))?;
    if !(v.is_finite() && v > 0.0) {
        return Err(format!("must be a positive number, got {s}"));
    }
    Ok(v)
}

fn unit_interval(s: &str) -> Result<f64, String> {
    let v: f64 = s.trim().parse().map_err(|_| format!("`{s}` is not a number"))?;
    if !(0.0..1.0).contains(&v) {
        return Err(format!("must be in [0, 1), got {s}"));
    }
    Ok(v)
}

/// A share strictly between 0 and 1 (`--memory-pressure`).
pub fn open_unit_interval(s: &str) -> Result<f64, String> {
    let v: f64 = s.trim().parse().map_err(|_| format!("`{s}` is not a number"))?;
    if !(v > 0.0 && v < 1.0) {
        return Err(format!("a share of RAM must be in (0, 1), both ends excluded, got {s}"));
    }
    Ok(v)
}

/// `ttft:500ms` -> (`ttft`, 500.0 ms); the unit (us, ms, s) is required.
pub fn parse_slo(s: &str) -> Result<(String, f64), String> {
    let (key, value) = s.split_once(':').ok_or_else(|| format!("`{s}` is not KEY:VALUE (ttft:500ms)"))?;
    let key = key.trim().to_ascii_lowercase();
    if !matches!(key.as_str(), "ttft" | "tpot" | "e2e") {
        return Err(format!("`{key}` is not an SLO; valid: ttft, tpot, e2e"));
    }
    let v = value.trim();
    let ms = crate::util::parse_duration_ms(v).map_err(|e| {
        if e.contains("no unit") {
            format!("SLO `{s}` has no unit: write {key}:{v}ms (us, ms or s)")
        } else {
            format!("SLO `{s}`: {e}")
        }
    })?;
    Ok((key, ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slos_need_a_unit_and_a_positive_value() {
        assert_eq!(parse_slo("ttft:500ms").unwrap(), ("ttft".into(), 500.0));
        assert_eq!(parse_slo("TPOT:0.2s").unwrap(), ("tpot".into(), 200.0));
        assert_eq!(parse_slo("e2e:1500us").unwrap(), ("e2e".into(), 1.5));
        assert!(parse_slo("ttft:500").unwrap_err().contains("no unit"));
        assert!(parse_slo("ttft:-5ms").is_err());
        assert!(parse_slo("itl:5ms").is_err());
        assert!(parse_slo("5ms").is_err());
        assert!(open_unit_interval("0.5").is_ok() && open_unit_interval("1").is_err());
        assert!(open_unit_interval("0").is_err() && open_unit_interval("-0.1").is_err());
        assert!(positive("0").is_err() && positive("-1").is_err() && positive("inf").is_err());
    }
}
