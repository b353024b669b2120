//! The serving suite (issue 49) through the real binary: `list` shows it,
//! a quick run of one model's three scenarios verifies every request's
//! tokens and reports the latency percentiles and goodput as metrics, and a
//! bad rate or an unknown scenario in a config is refused (exit 2, naming
//! the file, the parameter and the rule) before anything runs. Assertions
//! are on counts, orderings and checks, never on the machine's speed.

mod common;
use common::*;

#[test]
fn list_shows_the_suite_its_benchmark_and_cases() {
    let r = tfbench(&["list"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("serving"), "{}", r.stdout);
    let r = tfbench(&["list", "--suite", "serving"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("\n  engine ("), "{}", r.stdout);
    let id = "serving/engine/input_len=32,max_batch=8,model=gpt2-tiny,output_len=16,qps=0.5x,requests=16,\
              scenario=server,slo=ttft:2s+tpot:200ms,threads=all";
    assert!(r.stdout.contains(id), "{}", r.stdout);
    let flat = r.stdout.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(flat.contains("one-request greedy"), "{}", r.stdout);
}

#[test]
fn a_quick_run_verifies_every_scenario_and_reports_latencies_and_goodput() {
    let (r, v) = suite_json("serving", "3", &["model=llama-tiny"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let cases = v["cases"].as_array().unwrap();
    let ids: Vec<&str> = cases.iter().map(|c| c["id"].as_str().unwrap()).collect();
    assert_eq!(cases.len(), 3, "{ids:?}");
    for scenario in ["offline", "single_stream", "server"] {
        let c = cases
            .iter()
            .find(|c| c["params"]["scenario"] == scenario)
            .unwrap_or_else(|| panic!("no {scenario} case in {ids:?}"));
        let id = c["id"].as_str().unwrap();
        assert_eq!(c["status"]["state"], "ok", "{id}: {}", c["status"]);
        assert_eq!(c["verification"]["passed"], true, "{id}");
        let detail = c["verification"]["detail"].as_str().unwrap();
        assert!(detail.contains("16 requests") && detail.contains("16 of 16 completed"), "{id}: {detail}");
        let m = |name: &str| metric(c, name).unwrap_or_else(|| panic!("{id}: no metric {name}"));
        for what in ["ttft", "tpot", "e2e"] {
            let (p50, p90, p99) =
                (m(&format!("{what}_p50_ns")), m(&format!("{what}_p90_ns")), m(&format!("{what}_p99_ns")));
            assert!(p50 > 0.0 && p50 <= p90 && p90 <= p99, "{id}: {what} {p50} {p90} {p99}");
        }
        assert!(m("e2e_p99_ns") >= m("ttft_p99_ns"), "{id}");
        assert_eq!(m("verified_requests"), 16.0, "{id}");
        let timed = m("requests_timed");
        assert!(timed >= 16.0 && timed % 16.0 == 0.0, "{id}: whole runs pooled, got {timed}");
        assert!((0.0..=1.0).contains(&m("goodput_share")), "{id}");
        // One iteration is one run: its tokens and requests as throughput units.
        let kinds: Vec<&str> =
            c["throughput"].as_array().unwrap().iter().filter_map(|t| t["kind"].as_str()).collect();
        assert!(kinds.contains(&"tokens") && kinds.contains(&"items"), "{id}: {kinds:?}");
        assert!(c["samples"].as_array().unwrap().iter().all(|s| s["iterations"] == 1), "{id}");
        match scenario {
            "server" => assert!((m("qps") / m("offline_capacity_per_s") - 0.5).abs() < 1e-6, "{id}"),
            "single_stream" => assert_eq!(m("mean_batch"), 1.0, "{id}"),
            _ => assert!(metric(c, "qps").is_none(), "{id}"),
        }
    }
}

#[test]
fn bad_rates_and_unknown_scenarios_are_refused_before_anything_runs() {
    let dir = scratch("serving-bad-config");
    let bad: &[(&str, &str, &[&str])] = &[
        (
            "qps.toml",
            "qps = [\"0x\"]",
            &["qps.toml:2:", "`qps`", "positive multiple of the offline capacity"],
        ),
        ("neg.toml", "qps = [-3]", &["neg.toml:2:", "`qps`", "positive rate in requests/s"]),
        (
            "scenario.toml",
            "scenario = [\"multi_stream\"]",
            &["scenario.toml:2:", "`scenario`", "valid: offline, single_stream, server"],
        ),
        ("slo.toml", "slo = [\"ttft:500\"]", &["slo.toml:2:", "`slo`", "no unit"]),
        ("model.toml", "model = [\"bert-tiny\"]", &["model.toml:2:", "`model`", "decoder"]),
    ];
    for (name, line, needles) in bad {
        let cfg = write(&dir, name, &format!("[suites.serving.benchmarks.engine]\n{line}\n"));
        let r = tfbench(&["run", "--suite", "serving", "--quick", "--no-probe", "--config", &cfg]);
        assert_usage_error(&r, needles);
    }
}
