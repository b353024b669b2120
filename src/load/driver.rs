//! The scenarios of MLPerf LoadGen (`test_settings.h`) and the query log.
//!
//! - single-stream: the next query is sent when the last one finishes;
//! - multi-stream: queries of `streams` samples each, sent together, the
//!   next query when all of them have finished;
//! - server: queries sent at seeded arrival times ([`super::schedule`]),
//!   whatever the server is doing (open loop);
//! - offline: every query sent at once.
//!
//! Every latency is measured from a query's **scheduled** send time, never
//! from the moment it was actually sent: a driver that falls behind its
//! schedule (or a server that makes it wait) would otherwise hide the
//! queueing from the tail (coordinated omission). The log keeps both times.

use super::{Event, Request, Target};
use serde::Serialize;
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

/// How queries are sent.
#[derive(Debug, Clone, PartialEq)]
pub enum Mode {
    /// Open loop: query `i` is scheduled `times[i]` seconds after the start.
    Open(Vec<f64>),
    /// Closed loop: `group` queries at a time, the next group when the last
    /// has finished, until `min_queries` are done and `min_duration` has
    /// passed, or `max_queries` were sent.
    Closed {
        /// Samples per query (1: single-stream).
        group: usize,
        /// Queries to finish at least.
        min_queries: usize,
        /// Seconds to run at least.
        min_duration: f64,
        /// Queries to send at most.
        max_queries: usize,
    },
}

/// One query of the log; times in seconds from the start of the run.
#[derive(Debug, Clone, Serialize, Default)]
pub struct QueryRecord {
    /// Index in issue order.
    pub id: usize,
    /// The multi-stream query it belongs to (its own id otherwise).
    pub group: usize,
    /// When it should have been sent.
    pub scheduled_s: f64,
    /// When the driver handed it to the target.
    pub sent_s: f64,
    /// First output token.
    pub first_token_s: Option<f64>,
    /// Every streamed chunk: `[time, tokens in it]`.
    pub chunks: Vec<(f64, u32)>,
    /// Last event (the finish).
    pub finished_s: Option<f64>,
    /// Prompt tokens (the server's count where it gives one, else ours).
    pub prompt_tokens: u32,
    /// Output tokens (the server's count where it gives one, else the chunks').
    pub output_tokens: u32,
    /// Whether `output_tokens` is the server's own count.
    pub server_counted: bool,
    /// Why it failed; failed queries stay out of every latency.
    pub error: Option<String>,
    /// Output token ids, where the target reports them (the engine, and
    /// servers that stream `token_ids`); absent from the JSON otherwise.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub token_ids: Vec<u32>,
}

impl QueryRecord {
    /// Finished without error.
    pub fn ok(&self) -> bool {
        self.error.is_none() && self.finished_s.is_some()
    }
    /// Neither finished nor failed yet.
    fn pending(&self) -> bool {
        self.error.is_none() && self.finished_s.is_none()
    }
}

/// The log of one run.
#[derive(Debug, Clone, Serialize)]
pub struct RunLog {
    /// Every query, in issue order.
    pub queries: Vec<QueryRecord>,
    /// Seconds from the start to the last event.
    pub duration_s: f64,
    /// The target's own account (the engine's KV bytes over time).
    pub target: serde_json::Value,
}

/// When an open-loop run may stop early: once more than `allowed` queries
/// have missed a bound (or can no longer keep it), the run's p99 is over
/// the bound whatever the rest do, so waiting for them only costs time.
#[derive(Debug, Clone, Default)]
pub struct Abandon {
    /// Time-to-first-token bound (ms).
    pub ttft_ms: Option<f64>,
    /// Time-per-output-token bound (ms).
    pub tpot_ms: Option<f64>,
    /// End-to-end bound (ms).
    pub e2e_ms: Option<f64>,
    /// Queries that may miss (for a p99 bound over `n`: `n - ceil(0.99 n)`).
    pub allowed: usize,
}

impl Abandon {
    /// The misses a nearest-rank p99 over `n` values tolerates.
    pub fn p99_allowance(n: usize) -> usize {
        n - (0.99 * n as f64).ceil() as usize
    }

    fn missed(&self, q: &QueryRecord, now: f64) -> bool {
        let late = |bound: Option<f64>, at: Option<f64>| {
            bound.is_some_and(|b| 1e3 * (at.unwrap_or(now) - q.scheduled_s) > b)
        };
        if q.error.is_some() {
            return true;
        }
        let tpot = match (self.tpot_ms, q.first_token_s, q.finished_s) {
            (Some(b), Some(f), Some(e)) if q.output_tokens > 1 => {
                1e3 * (e - f) / (q.output_tokens - 1) as f64 > b
            }
            _ => false,
        };
        late(self.ttft_ms, q.first_token_s) || late(self.e2e_ms, q.finished_s) || tpot
    }
}

/// Runs `mode` against `target`; `make(i)` builds query `i`; a query with
/// no finish `timeout` seconds after its scheduled time is failed.
pub fn run(
    target: &mut dyn Target,
    mode: &Mode,
    make: &mut dyn FnMut(usize) -> Request,
    timeout: f64,
) -> RunLog {
    run_with(target, mode, make, timeout, None)
}

/// [`run`], stopping an open-loop run early by `abandon`'s rule: the
/// queries not yet finished then fail as abandoned.
pub fn run_with(
    target: &mut dyn Target,
    mode: &Mode,
    make: &mut dyn FnMut(usize) -> Request,
    timeout: f64,
    abandon: Option<&Abandon>,
) -> RunLog {
    let (tx, rx) = channel();
    let mut d = Driver { rx, log: Vec::new(), t0: Instant::now(), timeout };
    match mode {
        Mode::Open(times) => {
            let over = |log: &[QueryRecord], now: f64| {
                abandon.is_some_and(|a| log.iter().filter(|q| a.missed(q, now)).count() > a.allowed)
            };
            let mut gave_up = false;
            for (i, &at) in times.iter().enumerate() {
                d.wait_until(Some(d.t0 + Duration::from_secs_f64(at)), |_| false);
                if over(&d.log, d.t0.elapsed().as_secs_f64()) {
                    gave_up = true;
                    break;
                }
                d.send(target, make(i), at, i, &tx);
            }
            if !gave_up {
                let t0 = d.t0;
                d.wait_until(None, |log| {
                    !log.iter().any(QueryRecord::pending) || over(log, t0.elapsed().as_secs_f64())
                });
            }
            if d.log.len() < times.len() || d.log.iter().any(QueryRecord::pending) {
                let why = "abandoned: the run had already missed its bounds";
                d.log.iter_mut().filter(|q| q.pending()).for_each(|q| q.error = Some(why.into()));
                // Never sent: in the log as abandoned, so the run counts every query.
                let sent = d.log.len();
                for (i, &at) in times.iter().enumerate().skip(sent) {
                    let error = Some(why.into());
                    let q = QueryRecord {
                        id: i,
                        group: i,
                        scheduled_s: at,
                        sent_s: at,
                        error,
                        ..Default::default()
                    };
                    d.log.push(q);
                }
            }
        }
        Mode::Closed { group, min_queries, min_duration, max_queries } => {
            let mut i = 0;
            while i < *max_queries && (i < *min_queries || d.t0.elapsed().as_secs_f64() < *min_duration) {
                let now = d.t0.elapsed().as_secs_f64();
                let first = i;
                for _ in 0..*group {
                    d.send(target, make(i), now, first, &tx);
                    i += 1;
                }
                d.wait_until(None, |log| !log[first..].iter().any(QueryRecord::pending));
            }
        }
    }
    let end = d.log.iter().filter_map(|q| q.finished_s.or(q.first_token_s)).fold(0.0, f64::max);
    let target_report = target.end_run(d.t0);
    RunLog { queries: d.log, duration_s: end.max(1e-9), target: target_report }
}

struct Driver {
    rx: Receiver<Event>,
    log: Vec<QueryRecord>,
    t0: Instant,
    timeout: f64,
}

impl Driver {
    fn secs(&self, at: Instant) -> f64 {
        at.saturating_duration_since(self.t0).as_secs_f64()
    }

    fn send(
        &mut self,
        target: &mut dyn Target,
        req: Request,
        scheduled: f64,
        group: usize,
        tx: &std::sync::mpsc::Sender<Event>,
    ) {
        let rec = QueryRecord {
            id: req.id,
            group,
            scheduled_s: scheduled,
            sent_s: self.t0.elapsed().as_secs_f64(),
            prompt_tokens: req.ids.len() as u32,
            ..Default::default()
        };
        debug_assert_eq!(req.id, self.log.len(), "queries are made in issue order");
        self.log.push(rec);
        target.submit(req, tx);
    }

    /// Applies events until `deadline` (or, with none, until `done` holds),
    /// failing queries past their timeout on the way.
    fn wait_until(&mut self, deadline: Option<Instant>, done: impl Fn(&[QueryRecord]) -> bool) {
        loop {
            self.expire();
            if deadline.is_none() && done(&self.log) {
                return;
            }
            let now = Instant::now();
            // Wake for the deadline, or the earliest query timeout.
            let next_timeout = self
                .log
                .iter()
                .filter(|q| q.pending())
                .map(|q| self.t0 + Duration::from_secs_f64(q.scheduled_s + self.timeout))
                .min();
            let wake = match (deadline, next_timeout) {
                (Some(a), Some(b)) => a.min(b),
                (Some(a), None) => a,
                (None, Some(b)) => b,
                // Nothing pending and nothing to wait for.
                (None, None) => return,
            };
            if let Some(d) = deadline
                && now >= d
            {
                self.drain();
                return;
            }
            match self.rx.recv_timeout(wake.saturating_duration_since(now)) {
                Ok(ev) => {
                    self.apply(ev);
                    self.drain();
                }
                Err(RecvTimeoutError::Timeout) => {}
                // The driver holds a sender: unreachable, but never spin.
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
    }

    fn drain(&mut self) {
        while let Ok(ev) = self.rx.try_recv() {
            self.apply(ev);
        }
    }

    fn expire(&mut self) {
        let now = self.t0.elapsed().as_secs_f64();
        let limit = self.timeout;
        for q in self.log.iter_mut().filter(|q| q.pending()) {
            if now >= q.scheduled_s + limit {
                q.error = Some(format!("timed out: no finish within {limit} s of its scheduled time"));
            }
        }
    }

    fn apply(&mut self, ev: Event) {
        let t = match &ev {
            Event::Tokens { at, .. } | Event::Done { at, .. } | Event::Failed { at, .. } => self.secs(*at),
        };
        let Some(q) = self.log.get_mut(ev.id()) else { return };
        // Events after a timeout (or a second finish) are not the run's.
        if !q.pending() {
            return;
        }
        match ev {
            Event::Tokens { n, ids, .. } => {
                q.first_token_s.get_or_insert(t);
                q.chunks.push((t, n));
                q.output_tokens += n;
                q.token_ids.extend(ids);
            }
            Event::Done { prompt_tokens, output_tokens, by_server, .. } => {
                q.finished_s = Some(t);
                if let Some(p) = prompt_tokens {
                    q.prompt_tokens = p;
                }
                if let Some(o) = output_tokens {
                    q.output_tokens = o;
                    q.server_counted = by_server;
                }
                if q.first_token_s.is_none() {
                    q.error = Some("finished without any output token".into());
                }
            }
            Event::Failed { reason, .. } => q.error = Some(reason),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::summary::{Summary, ms_percentile};
    use std::sync::mpsc::Sender;

    /// A server that works on one request at a time for `service` each,
    /// `tokens` tokens spread over it, in a thread of its own: requests
    /// queue inside it, the driver is never held up.
    struct Serial {
        tx: Sender<(Request, Sender<Event>)>,
    }

    impl Serial {
        fn new(service: Duration, tokens: u32) -> Self {
            let (tx, rx) = channel::<(Request, Sender<Event>)>();
            std::thread::spawn(move || {
                for (req, ev) in rx {
                    for _ in 0..tokens {
                        std::thread::sleep(service / tokens);
                        let _ = ev.send(Event::Tokens { id: req.id, at: Instant::now(), n: 1, ids: vec![] });
                    }
                    let _ = ev.send(Event::Done {
                        id: req.id,
                        at: Instant::now(),
                        prompt_tokens: None,
                        output_tokens: None,
                        by_server: false,
                    });
                }
            });
            Self { tx }
        }
    }

    impl Target for Serial {
        fn submit(&mut self, req: Request, events: &Sender<Event>) {
            let _ = self.tx.send((req, events.clone()));
        }
    }

    /// A synchronous server: `submit` itself takes `service` (a naive
    /// blocking client), so the driver falls behind its schedule.
    struct Blocking(Duration);

    impl Target for Blocking {
        fn submit(&mut self, req: Request, events: &Sender<Event>) {
            std::thread::sleep(self.0);
            let at = Instant::now();
            let _ = events.send(Event::Tokens { id: req.id, at, n: 1, ids: vec![] });
            let _ = events.send(Event::Done {
                id: req.id,
                at,
                prompt_tokens: None,
                output_tokens: None,
                by_server: false,
            });
        }
    }

    fn make(i: usize) -> Request {
        Request { id: i, text: None, ids: vec![1, 2, 3], max_tokens: 4 }
    }

    /// Arrivals every 10 ms at a server needing 25 ms each: the queue grows
    /// by 15 ms per query, so the last of 40 waits about 0.6 s. Measured from
    /// the scheduled time the tail shows it; measured from the send it would
    /// not (the blocking server's time from send is its service time).
    #[test]
    fn the_tail_shows_the_queueing_of_a_slow_server() {
        let times: Vec<f64> = (0..40).map(|i| i as f64 * 0.010).collect();
        let service = Duration::from_millis(25);
        for target in [&mut Serial::new(service, 5) as &mut dyn Target, &mut Blocking(service)] {
            let log = run(target, &Mode::Open(times.clone()), &mut make, 30.0);
            assert!(log.queries.iter().all(QueryRecord::ok), "{:?}", log.queries);
            let s = Summary::of(&log, None);
            // Queueing alone adds 15 ms x 39 = 585 ms to the last query; a
            // busy machine only makes the service slower, the queue longer.
            assert!(s.e2e.p99 > 400.0, "p99 from the schedule {} ms hides the queue", s.e2e.p99);
            let from_sent: Vec<f64> =
                log.queries.iter().map(|q| 1e3 * (q.finished_s.unwrap() - q.sent_s)).collect();
            let lag =
                ms_percentile(log.queries.iter().map(|q| 1e3 * (q.sent_s - q.scheduled_s)).collect(), 99.0);
            // The blocking target hides its queue from a send-time clock: the
            // driver itself was late (the lag) instead.
            if lag > 200.0 {
                assert!(ms_percentile(from_sent, 50.0) < 0.5 * s.e2e.p99);
            }
        }
    }

    #[test]
    fn closed_loops_wait_for_each_query_or_group() {
        let mut t = Serial::new(Duration::from_millis(4), 2);
        let mode = Mode::Closed { group: 3, min_queries: 6, min_duration: 0.0, max_queries: 100 };
        let log = run(&mut t, &mode, &mut make, 30.0);
        assert_eq!(log.queries.len(), 6);
        for g in log.queries.chunks(3) {
            assert!(g.iter().all(|q| q.group == g[0].id && q.scheduled_s == g[0].scheduled_s));
        }
        // The second group is scheduled after the first has finished.
        let end_first = log.queries[..3].iter().map(|q| q.finished_s.unwrap()).fold(0.0, f64::max);
        assert!(log.queries[3].scheduled_s >= end_first);
        assert!(log.queries.iter().all(|q| q.output_tokens == 2 && q.chunks.len() == 2));
    }

    /// A server too slow for a TTFT bound: the run stops once more queries
    /// missed it than a p99 allows, the rest counted abandoned.
    #[test]
    fn an_open_run_past_its_bounds_is_abandoned_early() {
        let times: Vec<f64> = (0..200).map(|i| i as f64 * 0.005).collect();
        let mut t = Serial::new(Duration::from_millis(50), 1);
        let a = Abandon { ttft_ms: Some(100.0), allowed: Abandon::p99_allowance(200), ..Default::default() };
        assert_eq!(a.allowed, 2);
        let start = Instant::now();
        let log = run_with(&mut t, &Mode::Open(times), &mut make, 60.0, Some(&a));
        // 200 queries at 50 ms each would take 10 s; the run ends in about one.
        assert!(start.elapsed() < Duration::from_secs(8), "{:?}", start.elapsed());
        assert_eq!(log.queries.len(), 200);
        let abandoned = log
            .queries
            .iter()
            .filter(|q| q.error.as_deref().is_some_and(|e| e.starts_with("abandoned")))
            .count();
        assert!(abandoned > 100, "{abandoned}");
    }

    /// A server that never answers: every query fails with a timeout, the
    /// run still ends.
    #[test]
    fn unanswered_queries_time_out_and_the_run_ends() {
        struct Silent;
        impl Target for Silent {
            fn submit(&mut self, _: Request, _: &Sender<Event>) {}
        }
        let t = Instant::now();
        let log = run(&mut Silent, &Mode::Open(vec![0.0, 0.01, 0.02]), &mut make, 0.2);
        assert!(t.elapsed() < Duration::from_secs(5));
        assert!(log.queries.iter().all(|q| q.error.as_deref().is_some_and(|e| e.contains("timed out"))));
    }
}
