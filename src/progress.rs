//! Progress on stderr: an indicatif bar on a terminal, one plain line per
//! case otherwise (CI logs), nothing with `--quiet`. Stdout is left to the
//! chosen output format.

use crate::harness::runner::Observer;
use crate::report;
use crate::report::summary::{self, RunSummary};
use crate::results::{CaseResult, CaseStatus, RunReport};
use crate::suites::Verification;
use crate::units;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::{IsTerminal, Write};

/// How much to show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verbosity {
    /// Nothing.
    Quiet,
    /// One line per case (or a bar on a TTY).
    Normal,
    /// Also each case's verification.
    Verbose,
}

/// Longest skip reason in a progress line, in characters (without --verbose).
const MAX_SKIP_REASON: usize = 72;

/// The end-of-run lines for stderr: every case counted with each skip
/// reason once (whole with `--verbose`), then the wall time and where the
/// results went (`written`). When the results table, which carries the same
/// counts under it, went to a terminal (`table_on_terminal`), the counts are
/// left out, so a person reads the summary once.
pub fn end_of_run(
    report: &RunReport,
    verbosity: Verbosity,
    table_on_terminal: bool,
    written: Option<&str>,
) -> String {
    if verbosity == Verbosity::Quiet {
        return String::new();
    }
    let s = RunSummary::of(report);
    let mut out = String::new();
    if !table_on_terminal {
        let max = if verbosity == Verbosity::Verbose { None } else { Some(MAX_SKIP_REASON * 2) };
        for line in summary::text_lines(&s, max) {
            out.push_str(&line);
            out.push('\n');
        }
    }
    out.push_str(&format!("wall time {:.1} s", report.wall_time_secs));
    if let Some(p) = written {
        out.push_str(&format!("; results written to {p}"));
    }
    out.push('\n');
    out
}

/// The progress observer used by `tfbench run`.
pub struct Progress {
    verbosity: Verbosity,
    bar: Option<ProgressBar>,
    finished: usize,
    total: usize,
    /// Write each finished case as a JSON line to stdout (`--format jsonl`).
    stream_jsonl: bool,
}

impl Progress {
    /// A progress display; a bar only when stderr is a terminal.
    pub fn new(verbosity: Verbosity, stream_jsonl: bool) -> Self {
        Self { verbosity, bar: None, finished: 0, total: 0, stream_jsonl }
    }

    fn line(&self, msg: &str) {
        match &self.bar {
            Some(b) => b.println(msg),
            None => eprintln!("{msg}"),
        }
    }

    /// Clears the bar, if any.
    pub fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

impl Observer for Progress {
    fn run_started(&mut self, cases: usize, rounds: u32) {
        self.total = cases;
        if self.verbosity == Verbosity::Quiet {
            return;
        }
        if std::io::stderr().is_terminal() {
            let bar = ProgressBar::with_draw_target(
                Some((cases * rounds as usize) as u64),
                ProgressDrawTarget::stderr(),
            );
            if let Ok(style) = ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} ETA {eta} {wide_msg}",
            ) {
                bar.set_style(style);
            }
            self.bar = Some(bar);
        } else {
            eprintln!("running {cases} case(s) x {rounds} round(s)");
        }
    }

    fn case_started(&mut self, id: &str, round: u32, done: usize, _total: usize) {
        if let Some(b) = &self.bar {
            b.set_position(done as u64);
            b.set_message(if round > 0 { format!("{id} (round {})", round + 1) } else { id.to_string() });
        }
    }

    fn case_verified(&mut self, id: &str, v: &Verification) {
        if self.verbosity == Verbosity::Verbose {
            let err = v.max_error.map(|e| format!(", max error {e:.3e}")).unwrap_or_default();
            self.line(&format!("  verified {id} against {}{err} {}", v.reference, v.detail));
        }
    }

    fn case_finished(&mut self, r: &CaseResult) {
        self.finished += 1;
        if self.stream_jsonl
            && let Ok(line) = report::jsonl::case_line(r)
        {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
        }
        if self.verbosity == Verbosity::Quiet {
            return;
        }
        let what = match &r.status {
            CaseStatus::Ok => {
                let time = r.estimates.as_ref().map(|e| units::format_time_ci(&e.median)).unwrap_or_default();
                let rate = report::primary_throughput(r)
                    .map(|t| format!("  {}", units::format_rate(t.rate.point, t.kind.rate_unit())))
                    .unwrap_or_default();
                format!("ok  {time}{rate}")
            }
            CaseStatus::Failed { phase, reason } => format!("FAILED in {phase}: {reason}"),
            // A skip reason can run to 600 characters (where a library was
            // looked for, how to get it) and repeats for every case of its
            // family: one line each here, whole with --verbose, in JSON and
            // once per reason in the summary.
            CaseStatus::Skipped { reason } => {
                let reason = summary::without_case_id(reason, &r.id);
                if self.verbosity == Verbosity::Verbose {
                    format!("skipped: {}", reason.replace('\n', " "))
                } else {
                    format!("skipped: {}", report::shorten(&reason, MAX_SKIP_REASON))
                }
            }
        };
        let mut msg = format!("[{}/{}] {} {what}", self.finished, self.total, r.id);
        if self.verbosity == Verbosity::Verbose && !r.notes.is_empty() {
            msg.push_str(&format!("  ({})", r.notes.join("; ")));
        }
        self.line(&msg);
    }
}
