//! What a run amounted to, counted once for every output: cases run, ok,
//! failed and skipped, with the skipped cases grouped by their reason.
//!
//! Skips come in families (every `impl=openblas` case skips for the same
//! missing library), so the reason is given once per family with the cases it
//! covers, instead of once per case: 14 copies of a 600-character reason hid
//! everything else in the table, the progress lines and the HTML report.

use crate::results::{CaseResult, CaseStatus, RunReport};
use std::fmt::Write as _;

/// Skipped cases that share one reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkipGroup {
    /// The reason, whole, with a leading `case <id>: ` of the case's own id
    /// removed (suites prefix errors with it for logs; it would make every
    /// case's reason distinct).
    pub reason: String,
    /// Ids of the cases skipped for it, in run order.
    pub ids: Vec<String>,
}

/// Counts of a run's cases and its skip reasons, grouped.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RunSummary {
    /// Every case in the report.
    pub total: usize,
    /// Measured cases.
    pub ok: usize,
    /// Cases that failed (prepare, verify, run or panic).
    pub failed: usize,
    /// Cases skipped (a library, data or CPU feature is absent).
    pub skipped: usize,
    /// One group per distinct skip reason, in the order first met.
    pub skip_groups: Vec<SkipGroup>,
}

/// `reason` without a leading `case <id>: ` naming `id`.
pub(crate) fn without_case_id(reason: &str, id: &str) -> String {
    reason.replacen(&format!("case {id}: "), "", 1)
}

impl RunSummary {
    /// Counts `cases`.
    pub fn of_cases(cases: &[CaseResult]) -> Self {
        let mut s = RunSummary { total: cases.len(), ..Default::default() };
        for c in cases {
            match &c.status {
                CaseStatus::Ok => s.ok += 1,
                CaseStatus::Failed { .. } => s.failed += 1,
                CaseStatus::Skipped { reason } => {
                    s.skipped += 1;
                    let reason = without_case_id(reason, &c.id).trim().to_string();
                    match s.skip_groups.iter_mut().find(|g| g.reason == reason) {
                        Some(g) => g.ids.push(c.id.clone()),
                        None => s.skip_groups.push(SkipGroup { reason, ids: vec![c.id.clone()] }),
                    }
                }
            }
        }
        s
    }

    /// Counts the cases of `report`.
    pub fn of(report: &RunReport) -> Self {
        Self::of_cases(&report.cases)
    }

    /// `147 cases: 133 ok, 14 skipped, 0 failed` (the zero counts of skipped
    /// and failed are kept: "0 failed" is what a reader looks for).
    pub fn counts_line(&self) -> String {
        format!(
            "{} case{}: {} ok, {} skipped, {} failed",
            self.total,
            if self.total == 1 { "" } else { "s" },
            self.ok,
            self.skipped,
            self.failed
        )
    }

    /// The 1-based number of the group holding `id`, for a status cell that
    /// points at the reason printed once under the table.
    pub fn group_of(&self, id: &str) -> Option<usize> {
        self.skip_groups.iter().position(|g| g.ids.iter().any(|i| i == id)).map(|k| k + 1)
    }
}

/// The cases of `ids` in a few words: per benchmark, the parameters every
/// case shares and how many cases, e.g.
/// `tensor/matmul/impl=openblas,… ×10; tensor/bmm/impl=openblas,… ×4`.
/// A single case is named whole.
pub fn describe_ids(ids: &[String]) -> String {
    // (suite/benchmark, [params of each case])
    let mut benches: Vec<(&str, Vec<Vec<&str>>)> = Vec::new();
    for id in ids {
        let (bench, params) = split_id(id);
        let params: Vec<&str> = if params.is_empty() { Vec::new() } else { params.split(',').collect() };
        match benches.iter_mut().find(|(b, _)| *b == bench) {
            Some((_, all)) => all.push(params),
            None => benches.push((bench, vec![params])),
        }
    }
    let parts: Vec<String> = benches
        .iter()
        .map(|(bench, cases)| {
            if cases.len() == 1 {
                let p = cases[0].join(",");
                return if p.is_empty() { bench.to_string() } else { format!("{bench}/{p}") };
            }
            let shared: Vec<&str> =
                cases[0].iter().copied().filter(|p| cases.iter().all(|c| c.contains(p))).collect();
            if shared.is_empty() {
                format!("{bench}/… ×{}", cases.len())
            } else {
                format!("{bench}/{},… ×{}", shared.join(","), cases.len())
            }
        })
        .collect();
    parts.join("; ")
}

/// `("suite/benchmark", "k=v,k=v")` of a case id.
pub(crate) fn split_id(id: &str) -> (&str, &str) {
    match id.match_indices('/').nth(1) {
        Some((i, _)) => (&id[..i], &id[i + 1..]),
        None => (id, ""),
    }
}

/// The summary as plain-text lines: the counts, then one line per skip
/// reason (`14 skipped: reason (cases)`). Reasons are cut to `max_reason`
/// characters unless it is `None` (`--verbose`), which also lists every id.
pub fn text_lines(s: &RunSummary, max_reason: Option<usize>) -> Vec<String> {
    let mut lines = vec![s.counts_line()];
    for (k, g) in s.skip_groups.iter().enumerate() {
        let number = if s.skip_groups.len() > 1 { format!("({}) ", k + 1) } else { String::new() };
        let (reason, cases) = match max_reason {
            Some(max) => (super::shorten(&g.reason, max), describe_ids(&g.ids)),
            None => (g.reason.replace('\n', " "), g.ids.join(" ")),
        };
        lines.push(format!("{number}{} skipped: {reason} ({cases})", g.ids.len()));
    }
    lines
}

/// The summary as Markdown: the counts in bold, then a bullet per skip
/// reason with the reason whole and every case id.
pub fn markdown(s: &RunSummary) -> String {
    let mut out = format!("**{}**\n", s.counts_line());
    if !s.skip_groups.is_empty() {
        out.push('\n');
    }
    for (k, g) in s.skip_groups.iter().enumerate() {
        let number = if s.skip_groups.len() > 1 { format!("({}) ", k + 1) } else { String::new() };
        let ids: Vec<String> = g.ids.iter().map(|i| format!("`{}`", i.replace('`', "'"))).collect();
        let _ = writeln!(
            out,
            "- {number}{} skipped: {} ({})",
            g.ids.len(),
            g.reason.replace('\n', " ").replace('|', "\\|"),
            ids.join(", ")
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn skipped(id: &str, reason: &str) -> CaseResult {
        let mut c = super::super::fixture().cases.remove(2);
        c.id = id.into();
        c.status = CaseStatus::Skipped { reason: reason.into() };
        c
    }

    fn openblas_cases() -> Vec<CaseResult> {
        let mut cases = super::super::fixture().cases;
        for shape in ["64x64x64", "256x256x256"] {
            for threads in ["1", "all"] {
                let id = format!("tensor/matmul/impl=openblas,shape={shape},threads={threads}");
                let reason = format!("case {id}: OpenBLAS not found: looked in /a, /b");
                cases.push(skipped(&id, &reason));
            }
        }
        cases.push(skipped("tensor/bmm/impl=openblas,batch=8", "OpenBLAS not found: looked in /a, /b"));
        cases.push(skipped("quant/int8/path=avx_vnni", "this CPU has no avx_vnni instructions"));
        cases
    }

    #[test]
    fn counts_every_case_and_groups_skips_by_reason_without_the_case_id() {
        let s = RunSummary::of_cases(&openblas_cases());
        assert_eq!((s.total, s.ok, s.failed, s.skipped), (9, 2, 1, 6));
        assert_eq!(s.skip_groups.len(), 2, "{s:?}");
        assert_eq!(s.skip_groups[0].reason, "OpenBLAS not found: looked in /a, /b");
        assert_eq!(s.skip_groups[0].ids.len(), 5);
        assert_eq!(s.skip_groups[1].ids, ["quant/int8/path=avx_vnni"]);
        assert_eq!(s.group_of("quant/int8/path=avx_vnni"), Some(2));
        assert_eq!(s.group_of("tensor/layernorm/rows=4096"), None);
        assert_eq!(s.counts_line(), "9 cases: 2 ok, 6 skipped, 1 failed");
    }

    #[test]
    fn ids_are_described_by_benchmark_with_the_shared_params() {
        let s = RunSummary::of_cases(&openblas_cases());
        assert_eq!(
            describe_ids(&s.skip_groups[0].ids),
            "tensor/matmul/impl=openblas,… ×4; tensor/bmm/impl=openblas,batch=8"
        );
        let ids = ["a/b/x=1".to_string(), "a/b/x=2".to_string()];
        assert_eq!(describe_ids(&ids), "a/b/… ×2");
        assert_eq!(describe_ids(&["a/b".to_string()]), "a/b");
    }

    #[test]
    fn text_lines_shorten_reasons_unless_verbose() {
        let mut cases = openblas_cases();
        let long = format!("OpenBLAS not found: {}", "x".repeat(500));
        for c in &mut cases {
            if c.id.contains("openblas") {
                c.status = CaseStatus::Skipped { reason: long.clone() };
            }
        }
        let s = RunSummary::of_cases(&cases);
        let short = text_lines(&s, Some(60));
        assert_eq!(short[0], "9 cases: 2 ok, 6 skipped, 1 failed");
        assert!(short[1].starts_with("(1) 5 skipped: OpenBLAS not found: xxx"), "{}", short[1]);
        assert!(short[1].len() < 200, "{}", short[1]);
        assert!(short[2].starts_with("(2) 1 skipped: this CPU has no avx_vnni"), "{}", short[2]);
        let full = text_lines(&s, None);
        assert!(full[1].contains(&long), "{}", full[1]);
        assert!(full[1].contains("tensor/matmul/impl=openblas,shape=64x64x64,threads=1 "), "{}", full[1]);
    }

    #[test]
    fn markdown_lists_each_reason_once_with_every_case() {
        let s = RunSummary::of_cases(&openblas_cases());
        let md = markdown(&s);
        assert!(md.starts_with("**9 cases: 2 ok, 6 skipped, 1 failed**\n"), "{md}");
        assert_eq!(md.matches("OpenBLAS not found").count(), 1, "{md}");
        assert!(
            md.contains("- (1) 5 skipped: OpenBLAS not found: looked in /a, /b (`tensor/matmul/"),
            "{md}"
        );
    }
}
