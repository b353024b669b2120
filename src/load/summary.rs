//! What a run's log says: per-request latencies (TTFT, TPOT, ITL, E2E) as
//! percentiles, throughput per user and in total, goodput under SLOs (the
//! share and rate of requests meeting every one, DistServe's definition),
//! failures by reason (never in the latencies), and the validity of a
//! server-scenario run against its bounds (LoadGen's p99 rule).

use super::driver::{QueryRecord, RunLog};
use serde::Serialize;
use std::collections::BTreeMap;

/// Percentiles of one quantity, in milliseconds (or the unit its name says).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Dist {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Mean.
    pub mean: f64,
    /// Largest.
    pub max: f64,
    /// Values.
    pub count: usize,
}

impl Dist {
    /// Nearest-rank percentiles of `v` (all zero when empty).
    pub fn of(mut v: Vec<f64>) -> Self {
        if v.is_empty() {
            return Self::default();
        }
        v.sort_by(f64::total_cmp);
        let p = |q| crate::model::steps::percentile(&v, q);
        Self {
            p50: p(50.0),
            p90: p(90.0),
            p99: p(99.0),
            mean: v.iter().sum::<f64>() / v.len() as f64,
            max: v[v.len() - 1],
            count: v.len(),
        }
    }
}

/// The nearest-rank `q` percentile of `v`.
pub fn ms_percentile(mut v: Vec<f64>, q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    crate::model::steps::percentile(&v, q)
}

/// Service-level objectives of goodput, in milliseconds.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Slo {
    /// Time to first token.
    pub ttft_ms: Option<f64>,
    /// Time per output token.
    pub tpot_ms: Option<f64>,
    /// End-to-end latency.
    pub e2e_ms: Option<f64>,
}

/// Requests meeting every SLO.
#[derive(Debug, Clone, Serialize)]
pub struct Goodput {
    /// The objectives.
    pub slo: Slo,
    /// Requests meeting all of them.
    pub met: usize,
    /// Their share of every request sent (failed ones count as missed).
    pub share: f64,
    /// Their rate, per second of the run.
    pub per_s: f64,
}

/// Everything a run's log gives.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// Requests sent.
    pub queries: usize,
    /// Requests finished without error.
    pub completed: usize,
    /// Requests failed (out of every latency below).
    pub failed: usize,
    /// Failures by reason (the text before the first colon).
    pub failures: BTreeMap<String, usize>,
    /// A few whole failure messages.
    pub failure_examples: Vec<String>,
    /// End to end, from the scheduled send to the last token (ms).
    pub e2e: Dist,
    /// Time to first token, from the scheduled send (ms).
    pub ttft: Dist,
    /// Time per output token after the first, per request (ms).
    pub tpot: Dist,
    /// Inter-token latency: gaps between streamed chunks, all requests (ms).
    pub itl: Dist,
    /// How late the driver sent each request against its schedule (ms).
    pub send_lag: Dist,
    /// Multi-stream: each query's latency, its slowest sample (ms).
    pub query_latency: Option<Dist>,
    /// Output tokens per second each user saw (its tokens over its E2E).
    pub user_tok_per_s: Dist,
    /// Seconds from the start to the last event.
    pub duration_s: f64,
    /// Completed requests per second.
    pub completed_per_s: f64,
    /// Output tokens per second, all requests.
    pub output_tok_per_s: f64,
    /// Prompt tokens per second, all requests.
    pub prompt_tok_per_s: f64,
    /// Output tokens of completed requests.
    pub output_tokens: u64,
    /// Prompt tokens of completed requests.
    pub prompt_tokens: u64,
    /// Share of completed requests whose output count is the server's own.
    pub server_counted: f64,
    /// Goodput, with SLOs given.
    pub goodput: Option<Goodput>,
}

fn tpot_ms(q: &QueryRecord) -> Option<f64> {
    let (first, end) = (q.first_token_s?, q.finished_s?);
    (q.output_tokens > 1).then(|| 1e3 * (end - first) / (q.output_tokens - 1) as f64)
}

fn meets(q: &QueryRecord, slo: &Slo) -> bool {
    let ok = |bound: Option<f64>, v: Option<f64>| bound.is_none_or(|b| v.is_some_and(|v| v <= b));
    q.ok()
        && ok(slo.ttft_ms, q.first_token_s.map(|t| 1e3 * (t - q.scheduled_s)))
        && ok(slo.tpot_ms, tpot_ms(q).or(Some(0.0)))
        && ok(slo.e2e_ms, q.finished_s.map(|t| 1e3 * (t - q.scheduled_s)))
}

impl Summary {
    /// The summary of `log`, with goodput under `slo` when given.
    pub fn of(log: &RunLog, slo: Option<&Slo>) -> Self {
        let qs = &log.queries;
        let ok: Vec<&QueryRecord> = qs.iter().filter(|q| q.ok()).collect();
        let mut failures = BTreeMap::new();
        let mut failure_examples = Vec::new();
        for q in qs.iter().filter(|q| !q.ok()) {
            let reason = q.error.clone().unwrap_or_else(|| "unfinished".into());
            let key = reason.split(':').next().unwrap_or("").trim().to_string();
            *failures.entry(key).or_insert(0) += 1;
            if failure_examples.len() < 5 {
                failure_examples.push(format!("request {}: {reason}", q.id));
            }
        }
        let since = |q: &QueryRecord, t: f64| 1e3 * (t - q.scheduled_s);
        let e2e: Vec<f64> = ok.iter().filter_map(|q| q.finished_s.map(|t| since(q, t))).collect();
        let ttft = ok.iter().filter_map(|q| q.first_token_s.map(|t| since(q, t))).collect();
        let tpot = ok.iter().filter_map(|q| tpot_ms(q)).collect();
        let itl =
            ok.iter().flat_map(|q| q.chunks.windows(2).map(|w| 1e3 * (w[1].0 - w[0].0))).collect::<Vec<_>>();
        let user = ok
            .iter()
            .filter_map(|q| {
                let e = q.finished_s? - q.scheduled_s;
                (e > 0.0).then(|| q.output_tokens as f64 / e)
            })
            .collect();
        let mut groups: BTreeMap<usize, Vec<&QueryRecord>> = BTreeMap::new();
        qs.iter().for_each(|q| groups.entry(q.group).or_default().push(q));
        let query_latency = groups.values().any(|g| g.len() > 1).then(|| {
            Dist::of(
                groups
                    .values()
                    .filter(|g| g.iter().all(|q| q.ok()))
                    .map(|g| g.iter().filter_map(|q| q.finished_s.map(|t| since(q, t))).fold(0.0, f64::max))
                    .collect(),
            )
        });
        let d = log.duration_s.max(1e-9);
        let output_tokens: u64 = ok.iter().map(|q| q.output_tokens as u64).sum();
        let prompt_tokens: u64 = ok.iter().map(|q| q.prompt_tokens as u64).sum();
        let goodput = slo.map(|s| {
            let met = qs.iter().filter(|q| meets(q, s)).count();
            Goodput { slo: s.clone(), met, share: met as f64 / qs.len().max(1) as f64, per_s: met as f64 / d }
        });
        Self {
            queries: qs.len(),
            completed: ok.len(),
            failed: qs.len() - ok.len(),
            failures,
            failure_examples,
            e2e: Dist::of(e2e),
            ttft: Dist::of(ttft),
            tpot: Dist::of(tpot),
            itl: Dist::of(itl),
            send_lag: Dist::of(qs.iter().map(|q| 1e3 * (q.sent_s - q.scheduled_s)).collect()),
            query_latency,
            user_tok_per_s: Dist::of(user),
            duration_s: log.duration_s,
            completed_per_s: ok.len() as f64 / d,
            output_tok_per_s: output_tokens as f64 / d,
            prompt_tok_per_s: prompt_tokens as f64 / d,
            output_tokens,
            prompt_tokens,
            server_counted: ok.iter().filter(|q| q.server_counted).count() as f64 / ok.len().max(1) as f64,
            goodput,
        }
    }
}

/// The bounds a server-scenario run must keep at the 99th percentile:
/// E2E latency, or for LLM runs TTFT and TPOT (LoadGen's llama tests).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Bounds {
    /// p99 end-to-end latency bound (ms).
    pub latency_ms: Option<f64>,
    /// p99 time-to-first-token bound (ms).
    pub ttft_ms: Option<f64>,
    /// p99 time-per-output-token bound (ms).
    pub tpot_ms: Option<f64>,
}

impl Bounds {
    /// Whether any bound is set.
    pub fn any(&self) -> bool {
        self.latency_ms.is_some() || self.ttft_ms.is_some() || self.tpot_ms.is_some()
    }

    /// Why a run with `s` is invalid under these bounds (empty: valid).
    pub fn violations(&self, s: &Summary) -> Vec<String> {
        let mut why = Vec::new();
        if s.completed == 0 {
            why.push("no request completed".to_string());
        }
        let abandoned = s.failures.get("abandoned").copied().unwrap_or(0);
        if abandoned > 0 {
            why.push(format!(
                "stopped early, {abandoned} of {} requests abandoned: more had missed a bound than p99 allows",
                s.queries
            ));
        }
        if s.failed > abandoned {
            why.push(format!("{} of {} requests failed", s.failed - abandoned, s.queries));
        }
        let mut check = |name: &str, bound: Option<f64>, got: f64| {
            if let Some(b) = bound
                && got > b
            {
                why.push(format!("p99 {name} {got:.1} ms over the bound of {b} ms"));
            }
        };
        check("latency", self.latency_ms, s.e2e.p99);
        check("TTFT", self.ttft_ms, s.ttft.p99);
        check("TPOT", self.tpot_ms, s.tpot.p99);
        why
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(id: usize, sched: f64, first: f64, end: f64, tokens: u32) -> QueryRecord {
        let step = if tokens > 1 { (end - first) / (tokens - 1) as f64 } else { 0.0 };
        QueryRecord {
            id,
            group: id,
            scheduled_s: sched,
            sent_s: sched,
            first_token_s: Some(first),
            chunks: (0..tokens).map(|i| (first + i as f64 * step, 1)).collect(),
            finished_s: Some(end),
            prompt_tokens: 10,
            output_tokens: tokens,
            ..Default::default()
        }
    }

    #[test]
    fn latencies_by_hand_and_failures_kept_apart() {
        let mut bad = q(2, 0.0, 0.0, 0.0, 1);
        bad.error = Some("stream dropped: connection closed after 3 chunks".into());
        bad.finished_s = None;
        let log = RunLog {
            // TTFT 100 and 300 ms; TPOT (0.5-0.1)/4 = 100 ms and (1.3-0.3)/4 = 250 ms.
            queries: vec![q(0, 0.0, 0.1, 0.5, 5), q(1, 0.0, 0.3, 1.3, 5), bad],
            duration_s: 2.0,
            target: serde_json::Value::Null,
        };
        let slo = Slo { ttft_ms: Some(200.0), tpot_ms: Some(200.0), e2e_ms: None };
        let s = Summary::of(&log, Some(&slo));
        assert_eq!((s.completed, s.failed), (2, 1));
        assert_eq!(s.failures.get("stream dropped"), Some(&1));
        assert!((s.ttft.p50 - 100.0).abs() < 1e-9 && (s.ttft.p99 - 300.0).abs() < 1e-9);
        assert!((s.tpot.max - 250.0).abs() < 1e-9 && (s.tpot.p50 - 100.0).abs() < 1e-9);
        assert!((s.e2e.max - 1300.0).abs() < 1e-9);
        assert_eq!(s.itl.count, 8);
        assert_eq!(s.output_tokens, 10);
        assert!((s.output_tok_per_s - 5.0).abs() < 1e-12);
        let g = s.goodput.as_ref().unwrap();
        assert_eq!(g.met, 1, "only the first meets both SLOs; the failed one never does");
        assert!((g.share - 1.0 / 3.0).abs() < 1e-12 && (g.per_s - 0.5).abs() < 1e-12);
        let b = Bounds { tpot_ms: Some(200.0), ..Default::default() };
        let why = b.violations(&s);
        assert!(why.iter().any(|w| w.contains("TPOT 250.0")) && why.iter().any(|w| w.contains("1 of 3")));
        let ok = Bounds { tpot_ms: Some(300.0), ..Default::default() };
        let good = RunLog { queries: log.queries[..2].to_vec(), ..log };
        assert!(ok.violations(&Summary::of(&good, None)).is_empty());
    }
}
