//! The runs a dashboard has been told about, in memory only: the dashboard
//! writes nothing (the run itself saves baselines and history).

use super::Event;
use crate::results::RunReport;
use serde::Serialize;

/// Runs kept (oldest dropped first): enough to see the previous run beside
/// the current one, bounded so a long-lived dashboard does not grow.
const KEEP_RUNS: usize = 4;

/// One streamed run.
#[derive(Debug, Clone)]
pub struct LiveRun {
    /// The run's report: its skeleton with the cases finished so far, in
    /// finishing order.
    pub report: RunReport,
    /// Case ids the run plans, in plan order.
    pub planned: Vec<String>,
    /// Rounds of the plan.
    pub rounds: u32,
    /// The case running now, with its round.
    pub current: Option<(String, u32)>,
    /// Case-rounds finished and in the run.
    pub progress: (usize, usize),
    /// Whether `run_finished` arrived.
    pub finished: bool,
}

/// Why an event was not taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejected {
    /// An event for a run whose `run_started` never came.
    UnknownRun(String),
    /// More finished cases than the run planned.
    TooManyCases,
}

/// Every run streamed, newest last, and a counter bumped by every event so
/// watchers can tell something changed.
#[derive(Debug, Default, Clone)]
pub struct Live {
    /// The runs, oldest first.
    pub runs: Vec<LiveRun>,
    /// Events taken so far.
    pub seq: u64,
}

/// What `/api/state` returns: enough to follow a run without the page.
#[derive(Debug, Serialize)]
pub struct StateView<'a> {
    /// Events taken so far.
    pub seq: u64,
    /// The runs, newest first.
    pub runs: Vec<RunView<'a>>,
}

/// One run in [`StateView`].
#[derive(Debug, Serialize)]
pub struct RunView<'a> {
    /// The run id.
    pub run_id: &'a str,
    /// When it started (RFC 3339).
    pub started_at: &'a str,
    /// Cases planned.
    pub planned: usize,
    /// Case-rounds finished and in the run.
    pub done: usize,
    /// Case-rounds in the run.
    pub total: usize,
    /// Whether it is over.
    pub finished: bool,
    /// The case running now.
    pub current: Option<&'a str>,
    /// `(id, status)` of every finished case, in finishing order
    /// (`ok`, `failed` or `skipped`).
    pub cases: Vec<(&'a str, &'static str)>,
}

impl Live {
    /// Takes one event.
    pub fn apply(&mut self, event: Event) -> Result<(), Rejected> {
        match event {
            Event::RunStarted { report, planned, rounds } => {
                let mut report = *report;
                report.cases.clear();
                let total = planned.len() * rounds.max(1) as usize;
                self.runs.retain(|r| r.report.run_id != report.run_id);
                self.runs.push(LiveRun {
                    report,
                    planned,
                    rounds,
                    current: None,
                    progress: (0, total),
                    finished: false,
                });
                if self.runs.len() > KEEP_RUNS {
                    self.runs.remove(0);
                }
            }
            Event::CaseStarted { run_id, id, round, done, total } => {
                let run = self.run_mut(&run_id)?;
                run.current = Some((id, round));
                run.progress = (done, total);
            }
            Event::CaseFinished { run_id, result } => {
                let run = self.run_mut(&run_id)?;
                let again = run.report.cases.iter().any(|c| c.id == result.id);
                if !again && run.report.cases.len() >= run.planned.len() {
                    return Err(Rejected::TooManyCases);
                }
                if run.current.as_ref().is_some_and(|(id, _)| *id == result.id) {
                    run.current = None;
                }
                run.report.cases.retain(|c| c.id != result.id);
                run.report.cases.push(*result);
            }
            Event::RunFinished { run_id, wall_time_secs, targets } => {
                let run = self.run_mut(&run_id)?;
                run.report.wall_time_secs = wall_time_secs;
                run.report.targets = targets;
                run.current = None;
                run.progress.0 = run.progress.1;
                run.finished = true;
            }
        }
        self.seq += 1;
        Ok(())
    }

    fn run_mut(&mut self, run_id: &str) -> Result<&mut LiveRun, Rejected> {
        self.runs
            .iter_mut()
            .find(|r| r.report.run_id == run_id)
            .ok_or_else(|| Rejected::UnknownRun(run_id.to_string()))
    }

    /// The state as `/api/state` shows it.
    pub fn view(&self) -> StateView<'_> {
        StateView {
            seq: self.seq,
            runs: self
                .runs
                .iter()
                .rev()
                .map(|r| RunView {
                    run_id: &r.report.run_id,
                    started_at: &r.report.started_at,
                    planned: r.planned.len(),
                    done: r.progress.0,
                    total: r.progress.1,
                    finished: r.finished,
                    current: r.current.as_ref().map(|(id, _)| id.as_str()),
                    cases: r
                        .report
                        .cases
                        .iter()
                        .map(|c| {
                            let status = match c.status {
                                crate::results::CaseStatus::Ok => "ok",
                                crate::results::CaseStatus::Failed { .. } => "failed",
                                crate::results::CaseStatus::Skipped { .. } => "skipped",
                            };
                            (c.id.as_str(), status)
                        })
                        .collect(),
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn started(run_id: &str) -> Event {
        let mut report = crate::report::fixture();
        report.run_id = run_id.into();
        let planned = vec![report.cases[0].id.clone()];
        Event::RunStarted { report: Box::new(report), planned, rounds: 1 }
    }

    #[test]
    fn runs_and_cases_are_bounded() {
        let mut live = Live::default();
        for i in 0..KEEP_RUNS + 2 {
            live.apply(started(&format!("r{i}"))).unwrap();
        }
        assert_eq!(live.runs.len(), KEEP_RUNS, "the oldest runs are dropped");
        assert_eq!(live.runs[0].report.run_id, "r2");
        let case = crate::report::fixture().cases[0].clone();
        let finished = |c: &crate::results::CaseResult| Event::CaseFinished {
            run_id: "r5".into(),
            result: Box::new(c.clone()),
        };
        live.apply(finished(&case)).unwrap();
        // The same case again replaces it; one more than planned is refused.
        live.apply(finished(&case)).unwrap();
        assert_eq!(live.runs.last().unwrap().report.cases.len(), 1);
        let mut other = case.clone();
        other.id.push_str(",x=1");
        assert_eq!(live.apply(finished(&other)), Err(Rejected::TooManyCases));
        assert_eq!(live.view().runs[0].cases, vec![(case.id.as_str(), "ok")]);
    }
}
