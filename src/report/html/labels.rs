//! Case ids for people: natural ordering (`100x100` before `1000x1000`),
//! chart labels that keep only the parameters that vary inside a group (so
//! `threads=1` and `threads=all` never collapse into one truncated label),
//! and ids that may wrap at their commas in a table.

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
    fn ids_may_break_after_commas_and_slashes_only() {
        assert_eq!(id_html("a/b/x=1,y=<2>"), "a/<wbr/>b/<wbr/>x=1,<wbr/>y=&lt;2&gt;");
    }
}
