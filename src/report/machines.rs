//! Results of several machines side by side (`tfbench report` given files
//! from more than one machine, or prices): each case's median time on each
//! machine, its speed against the first machine, that speed normalised by
//! the two machines' probed limits, and, where a machine has a price per
//! hour, the cost of a million tokens (cases that count tokens); machines
//! are ranked by their cost over the token cases they all ran.
//!
//! - **speed** of machine `m` on a case: `t(first) / t(m)` (above 1: faster);
//! - **normalised**: speed divided by `L(m) / L(first)`, where `L` is the
//!   probed limit the case's work leans on (FMA peak on all cores for a
//!   FLOP-counting case; STREAM triad bandwidth on all threads for any
//!   other): about 1 when the machines differ by exactly their limits, above
//!   1 when `m` gets more of its limit; absent without both probes;
//! - **$/Mtok**: `price per hour / 3600 / (tokens/s) x 1e6`, from the case's
//!   median rate.
//!
//! The ranking is the geometric mean of $/Mtok over the token cases every
//! priced machine ran, in one currency (machines priced in another are
//! listed unranked, as are machines without a price).

use crate::results::{CaseStatus, RunReport};
use crate::workload::ThroughputKind;
use anyhow::{Result, bail};
use std::fmt::Write as _;

/// A price per hour in a currency.
#[derive(Debug, Clone, PartialEq)]
pub struct HourlyPrice {
    /// Amount per hour.
    pub per_hour: f64,
    /// ISO 4217 code, upper case.
    pub currency: String,
}

impl HourlyPrice {
    /// `0.42USD`, `USD 0.42`: the currency is required.
    pub fn parse(s: &str) -> Result<Self> {
        let t = s.trim();
        let letters: String = t.chars().filter(|c| c.is_ascii_alphabetic()).collect();
        let number: String = t.chars().filter(|c| !c.is_ascii_alphabetic() && !c.is_whitespace()).collect();
        if letters.is_empty() {
            bail!("price {s:?} has no currency: write it as 0.42USD (ISO 4217 code)");
        }
        if letters.len() != 3 || !(t.starts_with(&letters) || t.ends_with(&letters)) {
            bail!("price {s:?}: the currency must be a three-letter code before or after the amount");
        }
        let per_hour: f64 = number.parse().map_err(|_| anyhow::anyhow!("price {s:?}: not a number"))?;
        if !(per_hour.is_finite() && per_hour > 0.0) {
            bail!("price {s:?} must be positive");
        }
        Ok(Self { per_hour, currency: letters.to_ascii_uppercase() })
    }
}

/// One results file's machine.
#[derive(Debug, Clone)]
pub struct Machine {
    /// The file's label.
    pub label: String,
    /// CPU model (and GPUs, when the run used any).
    pub cpu: String,
    /// Logical CPUs.
    pub threads: usize,
    /// Machine fingerprint.
    pub fingerprint: String,
    /// Probed FMA peak on all cores, FLOP/s.
    pub peak_flops: Option<f64>,
    /// Probed STREAM triad bandwidth on all threads, B/s.
    pub triad: Option<f64>,
    /// Its price, when given.
    pub price: Option<HourlyPrice>,
}

/// One case on one machine.
#[derive(Debug, Clone, Default)]
pub struct Cell {
    /// Median time per iteration, seconds.
    pub median_s: f64,
    /// Speed against the first machine that ran the case.
    pub speed: Option<f64>,
    /// `speed` over the ratio of the machines' limits.
    pub normalised: Option<f64>,
    /// Tokens per second, for a case that counts tokens.
    pub tokens_per_s: Option<f64>,
    /// Cost of a million tokens, with a price.
    pub per_mtok: Option<f64>,
}

/// The comparison.
#[derive(Debug, Clone)]
pub struct Machines {
    /// One per results file, in order.
    pub machines: Vec<Machine>,
    /// Case ids with a cell per machine (`None`: not run or not passed there).
    pub cases: Vec<(String, Vec<Option<Cell>>)>,
    /// Ranked machines: `(index, geometric mean $/Mtok)`, cheapest first.
    pub ranking: Vec<(usize, f64)>,
    /// The ranking's currency and the token cases it is over.
    pub ranking_basis: Option<(String, usize)>,
    /// Why some machines are not ranked.
    pub unranked: Vec<String>,
}

fn median_s(c: &crate::results::CaseResult) -> Option<f64> {
    let m = c.estimates.as_ref()?.median.point;
    (c.status == CaseStatus::Ok && m.is_finite() && m > 0.0).then_some(m * 1e-9)
}

/// Compares `reports` (label, report, price); `None` when they come from
/// one machine and none has a price (nothing this section would add).
pub fn compare(reports: &[(String, &RunReport, Option<HourlyPrice>)]) -> Option<Machines> {
    let machines: Vec<Machine> = reports
        .iter()
        .map(|(label, r, price)| {
            let e = &r.environment;
            let mut cpu = e.cpu_model.trim().to_string();
            for g in &e.gpus {
                let _ = write!(cpu, " + {}", g.name);
            }
            Machine {
                label: label.clone(),
                cpu,
                threads: e.logical_threads,
                fingerprint: e.fingerprint(),
                peak_flops: r.machine_limits.as_ref().map(|l| l.peak_flops_all_cores).filter(|v| *v > 0.0),
                triad: r.machine_limits.as_ref().map(|l| l.triad_bandwidth_all_threads).filter(|v| *v > 0.0),
                price: price.clone(),
            }
        })
        .collect();
    let distinct = machines.iter().any(|m| m.fingerprint != machines[0].fingerprint);
    if machines.len() < 2 || !(distinct || machines.iter().any(|m| m.price.is_some())) {
        return None;
    }
    let mut ids: Vec<String> = Vec::new();
    for (_, r, _) in reports {
        for c in &r.cases {
            if !ids.contains(&c.id) {
                ids.push(c.id.clone());
            }
        }
    }
    let mut cases = Vec::new();
    for id in ids {
        let mut row: Vec<Option<Cell>> = Vec::new();
        let mut first: Option<(usize, f64)> = None;
        for (i, (_, r, _)) in reports.iter().enumerate() {
            let Some(c) = r.cases.iter().find(|c| c.id == id) else {
                row.push(None);
                continue;
            };
            let Some(t) = median_s(c) else {
                row.push(None);
                continue;
            };
            let flops = c.throughput.iter().any(|tp| tp.kind == ThroughputKind::Flops);
            let limit = |m: &Machine| if flops { m.peak_flops } else { m.triad };
            let (f_i, f_t) = *first.get_or_insert((i, t));
            let speed = f_t / t;
            let normalised = match (limit(&machines[f_i]), limit(&machines[i])) {
                (Some(l0), Some(l)) => Some(speed / (l / l0)),
                _ => None,
            };
            let tokens_per_s = c
                .throughput
                .iter()
                .find(|tp| tp.kind == ThroughputKind::Tokens)
                .map(|tp| tp.per_iteration / t)
                .filter(|v| v.is_finite() && *v > 0.0);
            let per_mtok =
                machines[i].price.as_ref().zip(tokens_per_s).map(|(p, tps)| p.per_hour / 3600.0 / tps * 1e6);
            row.push(Some(Cell { median_s: t, speed: Some(speed), normalised, tokens_per_s, per_mtok }));
        }
        cases.push((id, row));
    }
    let (ranking, ranking_basis, unranked) = rank(&machines, &cases);
    Some(Machines { machines, cases, ranking, ranking_basis, unranked })
}

type Ranked = (Vec<(usize, f64)>, Option<(String, usize)>, Vec<String>);

/// The ranking by geometric-mean $/Mtok over the token cases every priced
/// machine (in the first price's currency) passed.
fn rank(machines: &[Machine], cases: &[(String, Vec<Option<Cell>>)]) -> Ranked {
    let mut unranked = Vec::new();
    let Some(currency) = machines.iter().find_map(|m| m.price.as_ref().map(|p| p.currency.clone())) else {
        return (Vec::new(), None, unranked);
    };
    let mut priced = Vec::new();
    for (i, m) in machines.iter().enumerate() {
        match &m.price {
            Some(p) if p.currency == currency => priced.push(i),
            Some(p) => unranked.push(format!("{}: priced in {}, not {currency}", m.label, p.currency)),
            None => unranked.push(format!("{}: no price", m.label)),
        }
    }
    let common: Vec<&Vec<Option<Cell>>> = cases
        .iter()
        .map(|(_, row)| row)
        .filter(|row| priced.iter().all(|&i| row[i].as_ref().is_some_and(|c| c.per_mtok.is_some())))
        .collect();
    if common.is_empty() {
        unranked.push("no token-counting case that every priced machine passed".into());
        return (Vec::new(), None, unranked);
    }
    let mut ranking: Vec<(usize, f64)> = priced
        .iter()
        .map(|&i| {
            let logs: f64 = common.iter().filter_map(|row| row[i].as_ref()?.per_mtok).map(f64::ln).sum();
            (i, (logs / common.len() as f64).exp())
        })
        .collect();
    ranking.sort_by(|a, b| a.1.total_cmp(&b.1));
    (ranking, Some((currency, common.len())), unranked)
}

fn num(v: Option<f64>, digits: usize) -> String {
    v.map_or("-".into(), |x| format!("{x:.digits$}"))
}

/// Median time in a readable unit.
pub fn time(s: f64) -> String {
    crate::units::format_time_ns(s * 1e9)
}

/// The comparison as GitHub-flavoured Markdown.
pub fn markdown(m: &Machines) -> String {
    let mut out = String::from(
        "## Machines\n\n| # | results | CPU | threads | FMA peak | triad | price/h |\n|---|---|---|---|---|---|---|\n",
    );
    for (i, x) in m.machines.iter().enumerate() {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} |",
            i + 1,
            x.label.replace('|', "\\|"),
            x.cpu.replace('|', "\\|"),
            x.threads,
            x.peak_flops.map_or("-".into(), |v| format!("{:.1} GFLOP/s", v / 1e9)),
            x.triad.map_or("-".into(), |v| format!("{:.1} GB/s", v / 1e9)),
            x.price.as_ref().map_or("-".into(), |p| format!("{} {}", p.per_hour, p.currency)),
        );
    }
    if let Some((cur, n)) = &m.ranking_basis {
        let _ = writeln!(
            out,
            "\n### Ranked by {cur} per million tokens (geometric mean over {n} token case(s))\n"
        );
        out.push_str("| rank | machine | per Mtok |\n|---|---|---|\n");
        for (r, (i, v)) in m.ranking.iter().enumerate() {
            let _ = writeln!(
                out,
                "| {} | {} ({}) | {v:.4} {cur} |",
                r + 1,
                i + 1,
                m.machines[*i].label.replace('|', "\\|")
            );
        }
    }
    for u in &m.unranked {
        let _ = writeln!(out, "\nnot ranked: {u}");
    }
    out.push_str("\n### Cases\n\nPer machine: median time, speed against the first machine that ran the case (x), normalised by the probed limits (n), $ per million tokens.\n\n| case |");
    for i in 0..m.machines.len() {
        let _ = write!(out, " {} |", i + 1);
    }
    out.push_str("\n|---|");
    out.push_str(&"---|".repeat(m.machines.len()));
    out.push('\n');
    for (id, row) in &m.cases {
        let _ = write!(out, "| `{}` |", id.replace('|', "\\|").replace('`', "'"));
        for (i, c) in row.iter().enumerate() {
            let cur = m.machines[i].price.as_ref().map_or("", |p| p.currency.as_str());
            match c {
                None => out.push_str(" - |"),
                Some(c) => {
                    let _ =
                        write!(out, " {} x{} n{}", time(c.median_s), num(c.speed, 2), num(c.normalised, 2));
                    if let Some(p) = c.per_mtok {
                        let _ = write!(out, " {p:.4} {cur}/Mtok");
                    }
                    out.push_str(" |");
                }
            }
        }
        out.push('\n');
    }
    out
}
