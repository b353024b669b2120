//! `tfbench report --html`: one self-contained HTML file.
//!
//! A comparison in the report follows `tfbench compare`'s rules, so the
//! page never shows a looser verdict than `compare` would: `--baseline`
//! names the baseline, and the candidate is the newest of the RESULTS by
//! the start time each run recorded, the baseline itself left out; both
//! sides are read and checked as `compare` reads them (every run of a
//! baseline that holds several), judged with this machine's learned noise
//! bands, and a comparison with nothing to judge (a run compared with
//! itself, no case in common) is refused with `compare`'s reason.

use super::{load_result_set, load_run_set};
use crate::baseline::Store;
use crate::cli::ReportArgs;
use crate::compare::{self, CompareOptions, Comparison};
use crate::env::Environment;
use crate::history::{self, HistoryStore};
use crate::report::html::{HtmlInput, render_with_machines};
use crate::report::machines::HourlyPrice;
use crate::results::RunReport;
use anyhow::{Result, bail};
use std::path::Path;

/// Writes the report; returns a line saying where.
pub fn report(args: &ReportArgs) -> Result<String> {
    if let Some(h) = &args.html {
        super::check_writable(h, "--html")?;
    }
    if let Some(m) = &args.markdown {
        super::check_writable(m, "--markdown")?;
    }
    let prices = prices(args)?;
    let baselines = super::baseline_dir(args.dir.baseline_dir.as_deref(), None);
    let store = Store::new(&baselines);
    let mut loaded = Vec::new();
    for spec in &args.results {
        loaded.push(load_result_set(&store, spec)?);
    }
    let hdir = super::history_dir(args.history_dir.as_deref(), None, &baselines);
    let (comparison, sides) = match &args.baseline {
        Some(spec) => {
            let (c, sides) = compare_newest(&store, spec, &args.results, &loaded, &hdir)?;
            (Some(c), sides)
        }
        None => (None, None),
    };
    // Trends of the cases shown, from this machine's history when there is one.
    let h = HistoryStore::new(hdir).load(&Environment::gather().fingerprint())?;
    let shown: std::collections::BTreeSet<&str> =
        loaded.iter().flat_map(|(_, r)| r.cases.iter().map(|c| c.id.as_str())).collect();
    let trends: Vec<_> = history::trends(&h.entries, None)
        .into_iter()
        .filter(|t| shown.contains(t.id.as_str()) && t.points.len() >= 2)
        .collect();
    let input = HtmlInput {
        title: args.title.clone(),
        reports: loaded.iter().map(|(l, r)| (l.clone(), r)).collect(),
        comparison: comparison.as_ref(),
        sides,
        trends: &trends,
    };
    let priced: Vec<_> = loaded.iter().zip(&prices).map(|((l, r), p)| (l.clone(), r, p.clone())).collect();
    let machines = crate::report::machines::compare(&priced);
    let mut said = String::new();
    if let Some(h) = &args.html {
        crate::util::write_atomic(h, render_with_machines(&input, machines.as_ref()).as_bytes())?;
        said += &format!("HTML report written to {}\n", h.display());
    }
    if let Some(md) = &args.markdown {
        let text = match &machines {
            Some(m) => crate::report::machines::markdown(m),
            None => {
                loaded.iter().map(|(_, r)| crate::report::markdown::render(r)).collect::<Vec<_>>().join("\n")
            }
        };
        crate::util::write_atomic(md, text.as_bytes())?;
        said += &format!("Markdown report written to {}\n", md.display());
    }
    Ok(said)
}

/// Each RESULTS argument's price: `--price-per-hour LABEL=PRICE` (LABEL the
/// argument or its file name), else the file's own `"price_per_hour"`.
fn prices(args: &ReportArgs) -> Result<Vec<Option<HourlyPrice>>> {
    let mut given = Vec::new();
    for p in &args.price_per_hour {
        let Some((label, price)) = p.rsplit_once('=') else {
            bail!("--price-per-hour {p}: write LABEL=PRICE (results.json=0.42USD)");
        };
        let price = HourlyPrice::parse(price).map_err(|e| anyhow::anyhow!("--price-per-hour {p}: {e}"))?;
        let matches = |spec: &str| {
            spec == label || Path::new(spec).file_name().is_some_and(|n| n.to_string_lossy() == label)
        };
        if !args.results.iter().any(|r| matches(r)) {
            bail!("--price-per-hour {p}: {label} is none of the RESULTS given");
        }
        given.push((label.to_string(), price));
    }
    let mut out = Vec::new();
    for spec in &args.results {
        let name = Path::new(spec).file_name().map(|n| n.to_string_lossy().to_string());
        let from_flag =
            given.iter().find(|(l, _)| l == spec || Some(l) == name.as_ref()).map(|(_, p)| p.clone());
        let from_file = match from_flag {
            Some(_) => None,
            None => file_price(spec)?,
        };
        out.push(from_flag.or(from_file));
    }
    Ok(out)
}

/// The `"price_per_hour"` a results file carries, if any.
fn file_price(spec: &str) -> Result<Option<HourlyPrice>> {
    let path = Path::new(spec);
    if !path.is_file() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(path)?;
    let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    match v.get("price_per_hour").and_then(serde_json::Value::as_str) {
        Some(p) => {
            HourlyPrice::parse(p).map(Some).map_err(|e| anyhow::anyhow!("{spec}: price_per_hour: {e}"))
        }
        None => Ok(None),
    }
}

/// The comparison of the newest of `results` (the specs, `loaded` their
/// reports) with the baseline `base`, as `compare` makes it, with where its
/// sides are among the files shown (`(baseline, candidate)`, when the
/// baseline is one of them). Refuses a comparison with nothing to judge.
fn compare_newest(
    store: &Store,
    base: &str,
    results: &[String],
    loaded: &[(String, RunReport)],
    history_dir: &Path,
) -> Result<(Comparison, Option<(usize, usize)>)> {
    let is_base: Vec<bool> = results.iter().map(|spec| same_source(spec, base)).collect();
    let started: Vec<&str> = loaded.iter().map(|(_, r)| r.started_at.as_str()).collect();
    let Some(cand) = newest(&started, &is_base) else {
        bail!("report: no RESULTS given to compare with --baseline {base}");
    };
    let (old_label, old) = load_run_set(store, base)?;
    let (new_label, new) = load_run_set(store, &results[cand])?;
    let spreads = super::spreads_for(history_dir, &new);
    let c = compare::compare_sets(&old_label, &old, &new_label, &new, &spreads, &CompareOptions::default());
    if let Some(why) = &c.vacuous {
        bail!(
            "the comparison has nothing to judge: {why} (baseline {old_label}, candidate {new_label}: the \
             newest of the RESULTS other than --baseline); give --baseline another run, or leave it out \
             to report the files without a comparison"
        );
    }
    super::check_machine(&c, false)?;
    let sides = is_base.iter().position(|b| *b).map(|b| (b, cand));
    Ok((c, sides))
}

/// The candidate among files that recorded `started` (RFC 3339 in UTC, so
/// the text orders them): the newest of those that are not the baseline
/// (`is_base`), a later one on the command line winning a tie; the baseline
/// itself only when every file is the baseline, so that the comparison
/// refuses it as a run compared with itself. `None` for no file.
fn newest(started: &[&str], is_base: &[bool]) -> Option<usize> {
    let pick = |others: bool| {
        (0..started.len()).filter(|&i| !others || !is_base[i]).max_by(|&a, &b| started[a].cmp(started[b]))
    };
    pick(true).or_else(|| pick(false))
}

/// Whether two specs name one result set: the same file (however the path
/// is spelled), or the same baseline name.
fn same_source(a: &str, b: &str) -> bool {
    let (pa, pb) = (Path::new(a), Path::new(b));
    if pa.is_file() && pb.is_file() {
        return match (pa.canonicalize(), pb.canonicalize()) {
            (Ok(x), Ok(y)) => x == y,
            _ => a == b,
        };
    }
    a == b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_other_file_is_the_candidate() {
        let t = ["2026-01-02T00:00:00Z", "2026-01-03T00:00:00Z", "2026-01-01T00:00:00Z"];
        assert_eq!(newest(&t, &[false, false, false]), Some(1));
        // The baseline is never its own candidate while another file is given.
        assert_eq!(newest(&t, &[false, true, false]), Some(0));
        // A tie goes to the later file on the command line.
        assert_eq!(newest(&[t[0], t[0]], &[false, false]), Some(1));
        // Only the baseline: it is picked, and the comparison refuses it.
        assert_eq!(newest(&t[..1], &[true]), Some(0));
        assert_eq!(newest(&[], &[]), None);
    }

    #[test]
    fn one_file_under_two_spellings_is_one_source() {
        let dir = std::env::temp_dir().join(format!("tfbench-report-same-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("a.json");
        std::fs::write(&f, "{}").unwrap();
        std::fs::write(dir.join("b.json"), "{}").unwrap();
        let plain = f.display().to_string();
        let dotted = dir.join(".").join("a.json").display().to_string();
        assert!(same_source(&plain, &dotted));
        assert!(!same_source(&plain, &dir.join("b.json").display().to_string()));
        assert!(same_source("main", "main") && !same_source("main", "pr"));
        let _ = std::fs::remove_dir_all(dir);
    }
}
