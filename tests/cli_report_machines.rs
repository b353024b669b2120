//! `tfbench report` over results of several machines (issue 49): each
//! case's figures per machine, speeds normalised by each machine's probed
//! limits, and with prices the cost of a million tokens and the machines
//! ranked by it, in HTML and Markdown.

mod common;
use common::*;
use serde_json::json;
use std::path::Path;

const CASE: &str =
    "inference/decode/batch=1,depth=0,dtype=f32,gen=16,layers=full,model=gpt2-tiny,shape=preset$";

/// A copy of results `src` as another machine: its CPU named `cpu`, every
/// headline median scaled by `time`, probed limits scaled by `limits`, and
/// no canary or load record (they were this machine's, not the synthetic
/// one's).
fn machine(src: &Path, dst: &Path, cpu: &str, time: f64, limits: f64, price: Option<&str>) {
    let mut v = json_file(src);
    v["environment"]["cpu_model"] = json!(cpu);
    v["run_id"] = json!(format!("synthetic-{cpu}"));
    for c in v["cases"].as_array_mut().unwrap() {
        let median = &mut c["estimates"]["median"];
        for field in ["point", "lower", "upper"] {
            let x = median[field].as_f64().expect("a headline median");
            median[field] = json!(x * time);
        }
    }
    v["machine_limits"] = json!({
        "fingerprint": cpu, "measured_at": "2026-11-28T00:00:00Z", "threads": 2,
        "peak_flops_one_core": 5e10 * limits, "peak_flops_all_cores": 1e11 * limits,
        "copy_bandwidth_one_thread": 1e10 * limits, "copy_bandwidth_all_threads": 2e10 * limits,
        "triad_bandwidth_one_thread": 1e10 * limits, "triad_bandwidth_all_threads": 2e10 * limits,
    });
    v["canaries"] = json!([]);
    v["load"] = json!([]);
    if let Some(p) = price {
        v["price_per_hour"] = json!(p);
    }
    std::fs::write(dst, serde_json::to_string(&v).unwrap()).unwrap();
}

#[test]
fn machines_are_compared_normalised_and_ranked_by_cost_per_million_tokens() {
    let dir = scratch("report-machines");
    let src = dir.join("src.json");
    let r = tfbench(&[
        "run",
        "--suite",
        "inference",
        "--quick",
        "--no-probe",
        "--sample-size",
        "3",
        CASE,
        "-o",
        src.to_str().unwrap(),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let (a, b) = (dir.join("a.json"), dir.join("b.json"));
    // B: twice as fast with twice the limits, at four times A's price.
    machine(&src, &a, "Synthetic CPU A", 1.0, 1.0, None);
    machine(&src, &b, "Synthetic CPU B", 0.5, 2.0, Some("0.40USD"));
    let (h, md) = (dir.join("m.html"), dir.join("m.md"));
    let args = [
        "report",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        "--html",
        h.to_str().unwrap(),
        "--markdown",
        md.to_str().unwrap(),
        "--price-per-hour",
        "a.json=0.10USD",
    ];
    let r = tfbench(&args);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let text = std::fs::read_to_string(&md).unwrap();
    let v = json_file(&a);
    let case = &v["cases"][0];
    let t = case["estimates"]["median"]["point"].as_f64().unwrap() * 1e-9;
    let tokens = case["throughput"].as_array().unwrap().iter().find(|x| x["kind"] == "tokens").unwrap()
        ["per_iteration"]
        .as_f64()
        .unwrap();
    let cost_a = 0.10 / 3600.0 / (tokens / t) * 1e6;
    let cost_b = 0.40 / 3600.0 / (tokens / (0.5 * t)) * 1e6;
    assert!(text.contains("Synthetic CPU A") && text.contains("Synthetic CPU B"), "{text}");
    // Ranked: A (cheaper per token) first, at the figures the prices give.
    let ranked = text.split("### Ranked by USD").nth(1).expect("a ranking");
    let (ia, ib) = (ranked.find("a.json)").unwrap(), ranked.find("b.json)").unwrap());
    assert!(ia < ib, "{ranked}");
    assert!(
        ranked.contains(&format!("{cost_a:.4} USD")) && ranked.contains(&format!("{cost_b:.4} USD")),
        "{ranked}"
    );
    // B: x2.00 as fast, normalised by its doubled limits to n1.00.
    assert!(text.contains("x2.00 n1.00"), "{text}");
    let page = std::fs::read_to_string(&h).unwrap();
    assert!(page.contains("<section id=\"machines\">") && page.contains("Ranked by USD per million tokens"));
    assert!(page.contains("Synthetic CPU B") && page.contains("x2.00, n1.00"));
    // Bad prices stop the command, naming the flag and the rule.
    for (p, needle) in
        [("a.json=0.10", "no currency"), ("c.json=1USD", "none of the RESULTS"), ("0.1USD", "LABEL=PRICE")]
    {
        let mut bad = args.to_vec();
        bad[8] = p;
        assert_usage_error(&tfbench(&bad), &["--price-per-hour", needle]);
    }
}
