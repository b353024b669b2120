//! The served page: the report of the store (the same renderer as `tfbench
//! report`), with the live runs among its results files, a live section on
//! top, and a script that only refreshes that section.
//!
//! Without scripts the page is the static report, and while a run streams it
//! reloads itself every few seconds (`<noscript>` refresh). With scripts, an
//! `EventSource` on `/events` says when something changed and the script
//! fetches the small `/live` fragment (at most one request in flight), so
//! the browser and the server do little work while the run measures on the
//! same machine; the charts of a run come with a reload once it is over.

use super::compared::{self, Shown::*, Side};
use super::state::{Live, LiveRun};
use crate::baseline::Store;
use crate::history::{self, HistoryStore};
use crate::report::cells;
use crate::report::html::{self, HtmlInput, Served, case_id_html, escape};
use crate::report::summary::RunSummary;
use std::fmt::Write as _;
use std::path::PathBuf;

/// What the page is made of besides the live runs.
#[derive(Debug, Clone)]
pub struct Sources {
    /// Page title.
    pub title: String,
    /// The baseline store.
    pub baselines: PathBuf,
    /// The history store.
    pub history: PathBuf,
    /// This machine's fingerprint (whose history is shown).
    pub fingerprint: String,
}

const CSS: &str = "\
section.live{background:#f3f8ff;border:1px solid #c8ddf5;padding:8px 14px;margin:1em 0}\
section.live h2{margin-top:.3em}section.live progress{width:100%;height:14px}\
table.livecases{width:100%;font-size:13px}table.livecases td.id{overflow-wrap:anywhere}\
table.livecases tr.new td{background:#eaf6ea}";

/// Refreshes `#live` from `/live` whenever `/events` says something changed.
/// Kept in a CDATA section so the page stays well-formed XML.
const SCRIPT: &str = "//<![CDATA[
(function () {
  if (!window.EventSource || !window.fetch) return;
  var busy = false, again = false;
  function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    fetch('/live', {cache: 'no-store'}).then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        var el = document.getElementById('live');
        if (html !== null && el) el.outerHTML = html;
      })
      .catch(function () {})
      .then(function () { busy = false; if (again) { again = false; setTimeout(refresh, 250); } });
  }
  var es = new EventSource('/events');
  es.addEventListener('update', refresh);
  document.documentElement.setAttribute('data-live', 'on');
})();
//]]>";

/// The whole page.
pub fn full(live: &Live, src: &Sources) -> String {
    let mut warnings = Vec::new();
    let store = Store::new(&src.baselines);
    let mut stored = Vec::new();
    // Each baseline's earlier runs (`--append`), for the comparison.
    let mut earlier = Vec::new();
    for info in store.list().unwrap_or_default() {
        match (&info.problem, store.load(&info.name)) {
            (None, Ok(b)) => {
                stored.push((format!("baseline {}", info.name), b.report));
                earlier.push(b.earlier_runs);
            }
            (Some(p), _) => warnings.push(format!("baseline {} not shown: {p}", info.name)),
            (None, Err(e)) => warnings.push(format!("baseline {} not shown: {e:#}", info.name)),
        }
    }
    let hstore = HistoryStore::new(&src.history);
    let entries = match hstore.load(&src.fingerprint) {
        Ok(h) => {
            warnings.extend(h.warnings);
            h.entries
        }
        Err(e) => {
            warnings.push(format!("history not shown: {e:#}"));
            Vec::new()
        }
    };
    let mut reports: Vec<(String, &crate::results::RunReport)> =
        live.runs.iter().rev().map(|r| (run_label(r), &r.report)).collect();
    reports.extend(stored.iter().map(|(l, r)| (l.clone(), r)));
    let shown: std::collections::BTreeSet<&str> =
        reports.iter().flat_map(|(_, r)| r.cases.iter().map(|c| c.id.as_str())).collect();
    let trends: Vec<_> = history::trends(&entries, None)
        .into_iter()
        .filter(|t| shown.contains(t.id.as_str()) && t.points.len() >= 2)
        .collect();
    // Finished live runs (page order: newest first) and the baselines.
    let mut sides: Vec<Side> = live
        .runs
        .iter()
        .rev()
        .enumerate()
        .filter(|(_, r)| r.finished)
        .map(|(index, r)| Side { index, label: &reports[index].0, report: &r.report, earlier: &[] })
        .collect();
    sides.extend(stored.iter().zip(&earlier).enumerate().map(|(j, ((label, report), earlier))| Side {
        index: live.runs.len() + j,
        label,
        report,
        earlier,
    }));
    // Noise bands learned on this machine, for runs of this machine.
    let spreads = if sides.iter().all(|s| s.report.environment.fingerprint() == src.fingerprint) {
        history::learned_spreads(&entries)
    } else {
        Default::default()
    };
    let shown_cmp = compared::comparison(&sides, &spreads);
    let mut top = fragment(live);
    store_section(&mut top, &stored, !entries.is_empty(), &hstore, src, &warnings);
    let (comparison, sides) = match &shown_cmp {
        Compared(c, sides) => (Some(c.as_ref()), Some(*sides)),
        Refused(why) => {
            let _ = write!(top, "<p class=\"warn\"><b>No comparison:</b> {}</p>", escape(why));
            (None, None)
        }
        Nothing => (None, None),
    };
    let input = HtmlInput { title: src.title.clone(), reports, comparison, sides, trends: &trends };
    let running = live.runs.iter().any(|r| !r.finished);
    html::render_served(
        &input,
        &Served { top: &top, css: CSS, script: SCRIPT, refresh_without_script: running.then_some(5) },
    )
}

/// How a live run is labelled among the results files.
fn run_label(r: &LiveRun) -> String {
    format!("live run {} ({})", r.report.started_at, if r.finished { "finished" } else { "running" })
}

/// The live section: the newest run's progress and finished cases (newest
/// first), earlier runs as one line each.
pub fn fragment(live: &Live) -> String {
    let mut out = String::new();
    let _ = write!(out, "<section id=\"live\" class=\"live\" data-seq=\"{}\"><h2>Live run</h2>", live.seq);
    let Some(run) = live.runs.last() else {
        let _ = write!(
            out,
            "<p class=\"muted\">No run has streamed here yet. A <code>tfbench run</code> by this user streams \
             here by itself when this dashboard listens on port {}; otherwise start it with \
             <code>tfbench run --live URL</code>.</p></section>",
            super::DEFAULT_PORT
        );
        return out;
    };
    let s = RunSummary::of(&run.report);
    let (done, total) = run.progress;
    let state = if run.finished { "Finished" } else { "Running" };
    let _ = write!(
        out,
        "<p><b>{state}</b>: run of {} started {}: {} of {} case(s) finished{}; {}.</p>\
         <progress max=\"{}\" value=\"{}\">{done} of {total}</progress>",
        escape(&run.report.environment.cpu_model),
        escape(&run.report.started_at),
        run.report.cases.len(),
        run.planned.len(),
        if run.rounds > 1 { format!(" ({done} of {total} case-rounds)") } else { String::new() },
        escape(&s.counts_line()),
        total.max(1),
        done.min(total),
    );
    if let Some((id, round)) = &run.current {
        let r =
            if run.rounds > 1 { format!(" (round {} of {})", round + 1, run.rounds) } else { String::new() };
        let _ = write!(out, "<p>Now: <code>{}</code>{r}</p>", case_id_html(id));
    }
    if run.finished {
        out.push_str("<p>The run is over: <a href=\"/\">reload</a> for its charts and distributions.</p>");
    }
    out.push_str(
        "<table class=\"livecases\"><thead><tr><th>#</th><th>case</th><th>status</th><th>median</th>\
         <th>throughput</th></tr></thead><tbody>",
    );
    for (i, c) in run.report.cases.iter().enumerate().rev() {
        let class = match (c.status.is_failed(), i + 1 == run.report.cases.len()) {
            (true, _) => " class=\"fail\"",
            (false, true) => " class=\"new\"",
            _ => "",
        };
        let _ = write!(
            out,
            "<tr data-case=\"{}\"{class}><td class=\"num\">{}</td><td class=\"id\"><code>{}</code></td>\
             <td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
            escape(&c.id),
            i + 1,
            case_id_html(&c.id),
            escape(&cells::status(c, 90)),
            escape(&cells::median(c)),
            escape(&cells::throughput(c)),
        );
    }
    out.push_str("</tbody></table>");
    for r in live.runs.iter().rev().skip(1) {
        let _ = write!(
            out,
            "<p class=\"muted\">Earlier: {}: {}.</p>",
            escape(&run_label(r)),
            escape(&RunSummary::of(&r.report).counts_line())
        );
    }
    out.push_str("</section>");
    out
}

/// Links to the stored files and any problem reading them.
fn store_section(
    out: &mut String,
    stored: &[(String, crate::results::RunReport)],
    has_history: bool,
    hstore: &HistoryStore,
    src: &Sources,
    warnings: &[String],
) {
    let _ = write!(
        out,
        "<p class=\"muted\">Store <code>{}</code>: ",
        escape(&src.baselines.display().to_string())
    );
    if stored.is_empty() {
        out.push_str("no baselines yet");
    }
    for (i, (label, _)) in stored.iter().enumerate() {
        let name = label.trim_start_matches("baseline ");
        let _ = write!(
            out,
            "{}<a href=\"/store/{}.json\">{}.json</a>",
            if i > 0 { ", " } else { "" },
            escape(&percent_encode(name)),
            escape(name)
        );
    }
    if has_history
        && let Ok(path) = hstore.path_for(&src.fingerprint)
        && let Some(file) = path.file_name().and_then(|f| f.to_str())
    {
        let _ = write!(
            out,
            "; this machine's history <a href=\"/history/{}\">{}</a>",
            escape(&percent_encode(file)),
            escape(file)
        );
    }
    out.push_str(".</p>");
    for w in warnings {
        let _ = write!(out, "<p class=\"warn\">{}</p>", escape(w));
    }
}

/// A file name as a URL path segment.
fn percent_encode(name: &str) -> String {
    let mut out = String::new();
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::Event;

    #[test]
    fn the_fragment_follows_a_run() {
        let mut live = Live::default();
        assert!(fragment(&live).contains("No run has streamed here yet"));
        let mut report = crate::report::fixture();
        let cases = std::mem::take(&mut report.cases);
        let planned: Vec<String> = cases.iter().map(|c| c.id.clone()).collect();
        let run_id = report.run_id.clone();
        live.apply(Event::RunStarted { report: Box::new(report), planned, rounds: 1 }).unwrap();
        let first = cases[0].clone();
        live.apply(Event::CaseStarted {
            run_id: run_id.clone(),
            id: first.id.clone(),
            round: 0,
            done: 0,
            total: 3,
        })
        .unwrap();
        let f = fragment(&live);
        assert!(f.contains("<b>Running</b>") && f.contains("0 of 3 case(s) finished"), "{f}");
        assert!(f.contains("Now: <code>"), "{f}");
        live.apply(Event::CaseFinished { run_id: run_id.clone(), result: Box::new(first.clone()) }).unwrap();
        let f = fragment(&live);
        assert!(f.contains(&format!("data-case=\"{}\"", escape(&first.id))), "{f}");
        assert!(f.contains("1 of 3 case(s) finished") && !f.contains("Now:"), "{f}");
        live.apply(Event::RunFinished { run_id, wall_time_secs: 1.5, targets: vec![] }).unwrap();
        assert!(fragment(&live).contains("<b>Finished</b>"));
        // An event of a run never started is refused and changes nothing.
        let seq = live.seq;
        let stray = Event::RunFinished { run_id: "nope".into(), wall_time_secs: 0.0, targets: vec![] };
        assert!(live.apply(stray).is_err());
        assert_eq!(live.seq, seq);
    }

    #[test]
    fn the_page_compares_the_newest_run_by_compares_rules() {
        let dir = std::env::temp_dir().join(format!("tfbench-live-cmp-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = Store::new(dir.join("store"));
        let at = |id: &str, started: &str, factor: f64| {
            let mut r = crate::report::fixture();
            r.run_id = id.into();
            r.started_at = started.into();
            for c in &mut r.cases {
                c.samples.iter_mut().for_each(|s| s.nanos *= factor);
            }
            r
        };
        // Saved newest first: the order of the store is not the rule.
        store.save("pr", &at("b", "2026-01-02T00:00:00Z", 1.3)).unwrap();
        store.save("main", &at("a", "2026-01-01T00:00:00Z", 1.0)).unwrap();
        let src = Sources {
            title: "dash".into(),
            baselines: dir.join("store"),
            history: dir.join("store/history"),
            fingerprint: "x".into(),
        };
        let page = full(&Live::default(), &src);
        assert!(
            page.contains("<b>baseline main</b> (baseline) → <b>baseline pr</b> (candidate)"),
            "the newest run is the candidate"
        );
        assert!(page.contains("<section id=\"comparison\""));
        // The candidate's samples copied under a new run: nothing to judge.
        store.save("pr", &at("c", "2026-01-02T00:00:00Z", 1.0)).unwrap();
        let page = full(&Live::default(), &src);
        assert!(!page.contains("<section id=\"comparison\""), "no comparison of identical runs");
        assert!(page.contains("No comparison:") && page.contains("compared with itself"));
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn the_page_is_the_report_with_the_live_run_among_its_files() {
        let mut live = Live::default();
        let report = crate::report::fixture();
        let planned: Vec<String> = report.cases.iter().map(|c| c.id.clone()).collect();
        let case = report.cases[0].clone();
        let run_id = report.run_id.clone();
        live.apply(Event::RunStarted { report: Box::new(report), planned, rounds: 1 }).unwrap();
        live.apply(Event::CaseFinished { run_id, result: Box::new(case.clone()) }).unwrap();
        let dir = std::env::temp_dir().join(format!("tfbench-live-page-{}", std::process::id()));
        let src = Sources {
            title: "dash".into(),
            baselines: dir.join("none"),
            history: dir.join("none/history"),
            fingerprint: "x".into(),
        };
        let page = full(&live, &src);
        assert!(page.contains("<section id=\"live\""), "live section on top");
        assert!(page.contains("<section id=\"summary\""), "the report below it");
        assert!(page.contains("live run ") && page.contains("(running)"));
        assert!(page.contains("http-equiv=\"refresh\""), "reloads itself without scripts while running");
        assert!(page.contains("new EventSource('/events')"));
        assert!(page.contains("no baselines yet"));
        // Still well-formed XML, script and all, as the report is.
        let mut reader = quick_xml::Reader::from_str(&page);
        loop {
            match reader.read_event() {
                Ok(quick_xml::events::Event::Eof) => break,
                Ok(_) => {}
                Err(e) => panic!("not well-formed at {}: {e}", reader.buffer_position()),
            }
        }
    }
}
