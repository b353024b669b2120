//! `tfbench report --baseline` follows `compare`'s rules (issue 45): the
//! newest results file is the candidate, a self-comparison is refused,
//! colours follow the verdicts, and chart labels keep the file names.

mod common;
use common::*;
use serde_json::Value;
use std::path::Path;

const SMALL: &str = "tensor/binary/op=(add|mul),shape=100x100$";

/// Writes a copy of results `src` as run `id`, started at `started`, whose
/// samples are replaced by 30 deterministic ones (1 us +- 1.5%, in reverse
/// order when `reversed`: the same values, not the same samples) scaled by
/// `factor`, and whose headline medians are scaled by `headline[i]` for
/// case `i`. Canary and load records are removed, so that no comparison of
/// these files depends on how loaded the machine was during the run, and
/// the settings say a full profile's budget.
fn synthetic(
    src: &Path,
    dst: &Path,
    id: &str,
    started: &str,
    factor: f64,
    reversed: bool,
    headline: [f64; 2],
) {
    let mut v = json_file(src);
    for (i, c) in v["cases"].as_array_mut().unwrap().iter_mut().enumerate() {
        let samples: Vec<Value> = (0..30)
            .map(|k| {
                let k = if reversed { 29 - k } else { k };
                let per_iter = 1000.0 * (1.0 + 0.005 * (k % 7) as f64 - 0.015) * factor;
                serde_json::json!({"iterations": 100, "nanos": per_iter * 100.0, "round": 0})
            })
            .collect();
        c["samples"] = Value::Array(samples);
        let median = &mut c["estimates"]["median"];
        for field in ["point", "lower", "upper"] {
            let x = median[field].as_f64().expect("a headline median");
            median[field] = serde_json::json!(x * headline[i]);
        }
    }
    v["run_id"] = Value::String(id.into());
    v["started_at"] = Value::String(started.into());
    v["canaries"] = Value::Array(vec![]);
    v["load"] = Value::Array(vec![]);
    // Thirty samples as a full profile takes them, not the --quick source
    // run's budget (a comparison judges smoke-profile runs with a wide band).
    for s in v["harness"]["settings"].as_object_mut().unwrap().values_mut() {
        s["measurement_time"] = serde_json::json!(3.0);
    }
    std::fs::write(dst, serde_json::to_string(&v).unwrap()).unwrap();
}

/// The part of `page` from the element with `id` to its section's end.
fn section<'a>(page: &'a str, id: &str) -> &'a str {
    let start = page.find(&format!("<section id=\"{id}\"")).unwrap_or_else(|| panic!("no section {id}"));
    let end = page[start..].find("</section>").expect("closed section") + start;
    &page[start..end]
}

/// Whether `html` gives any element the red or green class.
fn coloured(html: &str) -> bool {
    html.split("class=\"").skip(1).any(|rest| {
        let classes = rest.split('"').next().unwrap_or("");
        classes.split_whitespace().any(|c| c == "slower" || c == "faster")
    })
}

#[test]
fn report_compares_the_newest_file_by_compares_rules() {
    let dir = scratch("report-rules");
    let hist = dir.join("history").display().to_string();
    let run = dir.join("run.json");
    let bdir = dir.join("baselines").display().to_string();
    let r = tfbench(&[
        "run",
        "--quick",
        "--no-probe",
        "--sample-size",
        "20",
        "--baseline-dir",
        &bdir,
        SMALL,
        "--output",
        &run.display().to_string(),
        "-q",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    // Every file in one long folder: only the file names differ.
    let folder = dir.join("a-folder-with-a-long-name-shared-by-every-file");
    std::fs::create_dir_all(&folder).unwrap();
    let path = |name: &str| folder.join(name).display().to_string();
    let (a, b, c, slow) = (path("run-a.json"), path("run-b.json"), path("run-c.json"), path("run-slow.json"));
    synthetic(&run, Path::new(&a), "run-a", "2026-01-01T00:00:00Z", 1.0, false, [1.0, 1.0]);
    synthetic(&run, Path::new(&b), "run-b", "2026-01-02T00:00:00Z", 1.0, true, [1.0, 1.0]);
    // An A/A candidate whose headline medians read 1.34x and 0.59x (what a
    // busy machine did to two runs of one build in issue 45).
    synthetic(&run, Path::new(&c), "run-c", "2026-01-03T00:00:00Z", 1.0, true, [1.34, 0.59]);
    synthetic(&run, Path::new(&slow), "run-slow", "2026-01-04T00:00:00Z", 1.25, true, [1.25, 1.25]);
    let html = dir.join("r.html");
    let h = html.display().to_string();
    let report = |files: &[&str], base: &str| {
        let _ = std::fs::remove_file(&html);
        let mut args = vec!["report", "--history-dir", &hist, "--html", &h, "--baseline", base];
        args.extend_from_slice(files);
        tfbench(&args)
    };

    // A file against itself, as the only file or named twice: refused.
    for files in [vec![a.as_str()], vec![a.as_str(), a.as_str()]] {
        let r = report(&files, &a);
        assert_eq!(r.code, 2, "{files:?}: {}", r.stderr);
        assert!(
            r.stderr.contains("nothing to judge") && r.stderr.contains("compared with itself"),
            "{}",
            r.stderr
        );
        assert!(!html.exists(), "no report written for a refused comparison");
    }
    // A copy of the baseline's run under another name: refused too.
    let copy = path("copy-of-a.json");
    std::fs::copy(&a, &copy).unwrap();
    let r = report(&[&copy], &a);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("compared with itself"), "{}", r.stderr);

    // The candidate is the newest file by its recorded start, wherever it
    // stands on the command line; the baseline is never its own candidate.
    let r = report(&[&c, &a, &b], &a);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let page = std::fs::read_to_string(&html).unwrap();
    let cmp = section(&page, "comparison");
    let want = format!("<b>{a}</b> (baseline) → <b>{c}</b> (candidate)");
    assert!(cmp.contains(&want), "{want} in {cmp}");
    // A/A: nothing red or green anywhere on the page, though the side-by-side
    // ratios of the headline medians are 1.34x and 0.59x.
    let body = &page[page.find("</style>").expect("a stylesheet")..];
    assert!(!coloured(body), "an A/A report colours nothing red or green");
    let side = section(&page, "side");
    assert!(side.contains("(×1.34)") && side.contains("(×0.590)"), "{side}");
    assert!(side.contains("(baseline)") && side.contains("(candidate)"), "{side}");
    // Chart labels keep the file names (cut from the left), and differ.
    let dist = section(&page, "distributions");
    for name in ["run-a.json", "run-b.json", "run-c.json"] {
        assert!(dist.contains(&format!(">…/{name} (n = 30)<")), "{name} in the distribution captions");
    }
    // The charts themselves (the legend above them names the whole paths).
    let charts: Vec<&str> = dist.split("<svg").skip(1).map(|s| s.split("</svg>").next().unwrap()).collect();
    assert!(
        !charts.is_empty() && charts.iter().all(|c| !c.contains("a-folder-with")),
        "the shared folder is cut away"
    );

    // A real change is still coloured: red for the regressed candidate.
    let r = report(&[&a, &slow], &a);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let page = std::fs::read_to_string(&html).unwrap();
    let side = section(&page, "side");
    assert!(coloured(side) && side.contains("class=\"slower\">(×1.25)"), "{side}");
    assert!(!side.contains("class=\"faster\""), "{side}");
}
