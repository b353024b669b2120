//! Case ids for people: natural ordering (`100x100` before `1000x1000`),
//! chart labels that keep only the parameters that vary inside a group (so
//! `threads=1` and `threads=all` never collapse into one truncated label),
//! ids that may wrap at their commas in a table, and results-file labels
//! cut from the left for a chart's narrow column (the file names differ,
//! the folders often do not).

use super::svg::Esc;
use crate::report::summary::split_id;
use std::cmp::Ordering;

/// Compares ids as a person does: runs of digits by value, the rest as text.
pub(crate) fn natural_cmp(a: &str, b: &str) -> Ordering {
    let (mut a, mut b) = (a.as_bytes(), b.as_bytes());
    loop {
        match (a.first(), b.first()) {
            (None, None) => return Ordering::Equal,
            (None, _) => return Ordering::Less,
            (_, None) => return Ordering::Greater,
            (Some(x), Some(y)) if x.is_ascii_digit() && y.is_ascii_digit() => {
                let da = a.iter().take_while(|c| c.is_ascii_digit()).count();
                let db = b.iter().take_while(|c| c.is_ascii_digit()).count();
                let (na, nb) = (trim_zeros(&a[..da]), trim_zeros(&b[..db]));
                let ord = na.len().cmp(&nb.len()).then_with(|| na.cmp(nb));
                if ord != Ordering::Equal {
                    return ord;
                }
                (a, b) = (&a[da..], &b[db..]);
            }
            (Some(x), Some(y)) => {
                if x != y {
                    return x.cmp(y);
                }
                (a, b) = (&a[1..], &b[1..]);
            }
        }
    }
}

fn trim_zeros(d: &[u8]) -> &[u8] {
    let k = d.iter().take_while(|&&c| c == b'0').count().min(d.len().saturating_sub(1));
    &d[k..]
}

/// Labels for `ids` of one group: the `key=value` parameters that differ
/// between the ids, in id order, joined by `, `; a case with no varying
/// parameter gets its benchmark name. When the ids do not all share one
/// benchmark, the benchmark leads each label. Distinct ids always get
/// distinct labels.
pub(crate) fn varying_labels(ids: &[&str]) -> Vec<String> {
    let parsed: Vec<(&str, Vec<&str>)> = ids
        .iter()
        .map(|id| {
            let (bench, params) = split_id(id);
            (bench, if params.is_empty() { Vec::new() } else { params.split(',').collect() })
        })
        .collect();
    let one_bench = parsed.windows(2).all(|w| w[0].0 == w[1].0);
    let shared = |p: &&str| parsed.iter().all(|(_, ps)| ps.contains(p));
    let labels: Vec<String> = parsed
        .iter()
        .map(|(bench, ps)| {
            let varying: Vec<&str> = ps.iter().copied().filter(|p| ids.len() == 1 || !shared(p)).collect();
            let short_bench = bench.rsplit('/').next().unwrap_or(bench);
            match (one_bench, varying.is_empty()) {
                (true, false) => varying.join(", "),
                (true, true) => short_bench.to_string(),
                (false, false) => format!("{short_bench}: {}", varying.join(", ")),
                (false, true) => short_bench.to_string(),
            }
        })
        .collect();
    // Ids are distinct, so varying params are too unless two ids differ in
    // their suite only: fall back to whole ids then.
    let mut seen = std::collections::HashSet::new();
    if labels.iter().all(|l| seen.insert(l.as_str())) {
        labels
    } else {
        ids.iter().map(|s| s.to_string()).collect()
    }
}

/// Labels of results files for a narrow place (a chart's column), in the
/// order given. Each is cut from the LEFT to its last path components
/// (`…/run-b.json`): as few as keep it apart from every other distinct
/// label, so what differs stays visible (`x/run/r.json` and `y/run/r.json`
/// keep their whole paths). A label still over `max` characters is cut
/// from the left to `max` (`…ng-name-b.json`), unless that would make it
/// equal another; then it stays whole, since a wide label beats an
/// ambiguous one. Labels that are equal as given (one file named twice)
/// are told apart by a count: `a.json`, `a.json (2)`.
pub(crate) fn short_paths(labels: &[&str], max: usize) -> Vec<String> {
    let parts: Vec<Vec<&str>> =
        labels.iter().map(|l| l.split('/').filter(|p| !p.is_empty() && *p != ".").collect()).collect();
    let tail = |i: usize, k: usize| -> String {
        let p = &parts[i];
        if p.is_empty() {
            return labels[i].to_string();
        }
        let k = k.min(p.len());
        let kept = p[p.len() - k..].join("/");
        if k < p.len() {
            format!("…/{kept}")
        } else if labels[i].starts_with('/') {
            format!("/{kept}")
        } else {
            kept
        }
    };
    // Components kept per label: grow the ones that collide with another
    // distinct label until none does (or they are whole).
    let mut keep = vec![1usize; labels.len()];
    loop {
        let shown: Vec<String> = (0..labels.len()).map(|i| tail(i, keep[i])).collect();
        let mut grew = false;
        for i in 0..labels.len() {
            let clash = (0..labels.len()).any(|j| labels[j] != labels[i] && shown[j] == shown[i]);
            if clash && keep[i] < parts[i].len() {
                keep[i] += 1;
                grew = true;
            }
        }
        if !grew {
            break;
        }
    }
    let whole: Vec<String> = (0..labels.len()).map(|i| tail(i, keep[i])).collect();
    let cut: Vec<String> = whole
        .iter()
        .map(|w| {
            let n = w.chars().count();
            if n <= max || max < 2 {
                w.clone()
            } else {
                format!("…{}", w.chars().skip(n - (max - 1)).collect::<String>())
            }
        })
        .collect();
    let mut out: Vec<String> = (0..labels.len())
        .map(|i| {
            let clash = (0..labels.len()).any(|j| labels[j] != labels[i] && cut[j] == cut[i]);
            if clash { whole[i].clone() } else { cut[i].clone() }
        })
        .collect();
    for i in 0..labels.len() {
        let n = labels[..i].iter().filter(|l| **l == labels[i]).count();
        if n > 0 {
            out[i] = format!("{} ({})", out[i], n + 1);
        }
    }
    out
}

/// An id escaped for HTML with a break opportunity after each `/` and `,`,
/// so a narrow column wraps it between parameters, never inside one.
pub(crate) fn id_html(id: &str) -> String {
    let mut out = String::with_capacity(id.len() + 16);
    for part in id.split_inclusive([',', '/']) {
        out.push_str(&Esc(part).to_string());
        if part.ends_with([',', '/']) {
            out.push_str("<wbr/>");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_sort_by_value() {
        let mut ids =
            vec!["t/b/shape=1000x1000", "t/b/shape=100x100", "t/b/shape=4096x4096", "t/b/shape=100x2"];
        ids.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(
            ids,
            ["t/b/shape=100x2", "t/b/shape=100x100", "t/b/shape=1000x1000", "t/b/shape=4096x4096"]
        );
        assert_eq!(natural_cmp("a07", "a7"), Ordering::Equal);
    }

    #[test]
    fn labels_keep_only_the_varying_params_and_stay_distinct() {
        let ids = [
            "tensor/matmul/impl=gemm,shape=1x4096x4096,threads=1",
            "tensor/matmul/impl=gemm,shape=1x4096x4096,threads=all",
            "tensor/matmul/impl=tfbench,shape=1x4096x4096,threads=1",
        ];
        assert_eq!(
            varying_labels(&ids),
            ["impl=gemm, threads=1", "impl=gemm, threads=all", "impl=tfbench, threads=1"]
        );
        assert_eq!(varying_labels(&["a/b/x=1"]), ["x=1"]);
        let mixed = varying_labels(&["s/one/x=1", "s/two/x=1"]);
        assert_eq!(mixed, ["one", "two"]);
        let suites = varying_labels(&["s/b/x=1", "t/b/x=1"]);
        assert_eq!(suites, ["s/b/x=1", "t/b/x=1"]);
    }

    #[test]
    fn paths_are_cut_from_the_left_keeping_what_differs() {
        // The finding of issue 45: both files in DIR, cut from the right,
        // read "DIR/…" twice.
        let long = "/tmp/some/long/folder/DIR";
        let (a, b) = (format!("{long}/run-a.json"), format!("{long}/run-b.json"));
        assert_eq!(short_paths(&[&a, &b], 24), ["…/run-a.json", "…/run-b.json"]);
        // Equal file names: enough of the folders to tell them apart.
        assert_eq!(
            short_paths(&["ci/x/main/results.json", "ci/y/main/results.json", "z.json"], 40),
            ["…/x/main/results.json", "…/y/main/results.json", "z.json"]
        );
        assert_eq!(short_paths(&["x/r.json", "y/r.json"], 40), ["x/r.json", "y/r.json"]);
        // No path at all (dashboard labels, baseline names) stays as it is.
        assert_eq!(short_paths(&["baseline main", "live run 2025"], 40), ["baseline main", "live run 2025"]);
        // Too long: cut from the left to `max`, while the labels stay apart.
        let (c, d) = ("d/a-very-long-results-name-one.json", "d/a-very-long-results-name-two.json");
        let s = short_paths(&[c, d], 12);
        assert_eq!(s, ["…me-one.json", "…me-two.json"]);
        assert!(s.iter().all(|l| l.chars().count() <= 12));
        // A cut that would make them equal is not taken.
        let (e, f) = ("d/one-results-name.json", "d/two-results-name.json");
        assert_eq!(short_paths(&[e, f], 12), ["…/one-results-name.json", "…/two-results-name.json"]);
        // One file named twice: a count tells the columns apart.
        assert_eq!(short_paths(&["./a.json", "./a.json"], 20), ["a.json", "a.json (2)"]);
        // Distinct labels always give distinct short labels.
        let many = ["a/b/c.json", "b/b/c.json", "c.json", "/c.json", "a/c.json"];
        let s = short_paths(&many, 8);
        let set: std::collections::HashSet<&String> = s.iter().collect();
        assert_eq!(set.len(), many.len(), "{s:?}");
    }

    #[test]
    fn ids_may_break_after_commas_and_slashes_only() {
        assert_eq!(id_html("a/b/x=1,y=<2>"), "a/<wbr/>b/<wbr/>x=1,<wbr/>y=&lt;2&gt;");
    }
}
