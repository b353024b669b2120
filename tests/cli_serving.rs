//! `tfbench load` (issue 49) through the real binary: bad input stops it
//! before anything runs (exit 2 naming the flag and the rule); the
//! in-process engine under each scenario writes its query log and passes
//! its self-check; the HTTP client drives an in-test OpenAI-compatible
//! server. Runs are short (seconds) and assume nothing about the machine's
//! speed or idleness: assertions are on counts, orderings and checks.

mod common;
use common::*;
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;

#[test]
fn bad_input_is_refused_before_anything_runs() {
    let cases: &[(&[&str], &[&str])] = &[
        (&["--qps", "0"], &["--qps", "positive"]),
        (&["--qps", "-2"], &["--qps", "positive"]),
        (&["--duration", "0"], &["--duration", "positive"]),
        (&["--tpot-bound-ms", "-1"], &["--tpot-bound-ms", "positive"]),
        (&["--goodput", "ttft:500"], &["--goodput", "no unit"]),
        (&["--suite", "tensor"], &["--suite tensor", "has no request model", "serving"]),
        (&["--suite", "nosuch"], &["--suite nosuch", "is not a suite"]),
        (&["--price-per-hour", "0.5"], &["--price-per-hour", "no currency"]),
        (&["--find-peak"], &["--find-peak", "bound"]),
        (&["--scenario", "offline", "--find-peak", "--tpot-bound-ms", "200"], &["server scenario"]),
        (&["--preset", "bert-tiny"], &["encoder"]),
        (&["--endpoint", "https://x"], &["only http://"]),
    ];
    for (args, needles) in cases {
        let mut all = vec!["load"];
        all.extend_from_slice(args);
        assert_usage_error(&tfbench(&all), needles);
    }
}

fn results(dir: &std::path::Path, extra: &[&str]) -> (Run, Value) {
    let out = dir.join("load.json");
    let mut args = vec!["load", "--threads", "2", "--seed", "3", "-o", out.to_str().unwrap()];
    args.extend_from_slice(extra);
    let r = tfbench(&args);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    (r, json_file(&out))
}

/// Every scenario on a seeded llama-tiny: all queries complete, the log
/// holds each query's times in order, and the engine's tokens equal
/// one-request greedy generation.
#[test]
fn every_scenario_runs_the_engine_and_logs_each_query() {
    let dir = scratch("serving-scenarios");
    for (scenario, extra) in [
        ("offline", &["--queries", "6"][..]),
        ("single-stream", &["--queries", "3", "--duration", "0.2"]),
        ("multi-stream", &["--queries", "2", "--streams", "3", "--duration", "0.2"]),
        ("server", &["--qps", "20", "--duration", "0.4", "--goodput", "ttft:10s", "tpot:5s"]),
    ] {
        let mut args =
            vec!["--scenario", scenario, "--preset", "llama-tiny", "--input-len", "8", "--output-len", "6"];
        args.extend_from_slice(extra);
        let (r, v) = results(&dir, &args);
        let run = &v["runs"][0];
        let s = &run["summary"];
        assert!(s["queries"].as_u64().unwrap() >= 2, "{scenario}: {s}");
        assert_eq!(s["failed"], 0, "{scenario}: {s}");
        for q in run["log"]["queries"].as_array().unwrap() {
            let t = |k: &str| q[k].as_f64().unwrap();
            assert!(t("scheduled_s") <= t("sent_s") + 1e-9 && t("sent_s") <= t("first_token_s"));
            assert!(t("first_token_s") <= t("finished_s"));
            let chunks = q["chunks"].as_array().unwrap();
            assert_eq!(chunks.len() as u64, q["output_tokens"].as_u64().unwrap());
        }
        let c = &v["self_check"];
        assert!(c["requests"].as_u64().unwrap() >= 1 && c["identical"].as_u64().unwrap() >= 1, "{v}");
        assert!(r.stdout.contains("self-check"), "{}", r.stdout);
        assert!(run["log"]["target"]["kv_trace"].as_array().is_some_and(|t| !t.is_empty()));
        if scenario == "server" {
            assert_eq!(s["goodput"]["slo"]["ttft_ms"], 10000.0);
        }
        if scenario == "multi-stream" {
            assert!(s["query_latency"]["count"].as_u64().unwrap() >= 2);
        }
    }
}

/// The search brackets and bisects: with a bound no run can miss, it
/// doubles until its step limit, every step valid and the peak the last.
#[test]
fn the_peak_search_records_each_step() {
    let dir = scratch("serving-search");
    let (_, v) = results(
        &dir,
        &[
            "--preset",
            "gpt2-tiny",
            "--find-peak",
            "--qps",
            "4",
            "--duration",
            "0.3",
            "--search-steps",
            "3",
            "--latency-bound-ms",
            "600000",
            "--input-len",
            "4",
            "--output-len",
            "3",
            "--price-per-hour",
            "0.36USD",
        ],
    );
    let p = &v["peak"];
    let steps = p["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 3, "{p}");
    let qps: Vec<f64> = steps.iter().map(|s| s["qps"].as_f64().unwrap()).collect();
    assert_eq!(qps, [4.0, 8.0, 16.0]);
    assert_eq!(p["qps"], 16.0);
    assert_eq!(v["runs"].as_array().unwrap().len(), 3);
    assert!(v["cost"]["per_million_output_tokens"].as_f64().unwrap() > 0.0);
    assert_eq!(v["cost"]["price"]["currency"], "USD");
}

/// Answers every request on `l` with a streamed completion of
/// `max_tokens` words, usage included.
fn fake_openai(l: TcpListener) {
    for s in l.incoming().flatten() {
        std::thread::spawn(move || {
            let mut r = BufReader::new(s.try_clone().unwrap());
            let (mut line, mut len) = (String::new(), 0usize);
            loop {
                line.clear();
                if r.read_line(&mut line).unwrap_or(0) == 0 || line.trim().is_empty() {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; len];
            let _ = r.read_exact(&mut body);
            let v: Value = serde_json::from_slice(&body).unwrap_or_default();
            let n = v["max_tokens"].as_u64().unwrap_or(1);
            let mut w = s;
            let mut out =
                String::from("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n: hello\n\n");
            for i in 0..n {
                out += &format!("data: {{\"choices\":[{{\"text\":\" t{i}\"}}]}}\n\n");
            }
            out += &format!(
                "data: {{\"choices\":[],\"usage\":{{\"prompt_tokens\":5,\"completion_tokens\":{n}}}}}\n\ndata: [DONE]\n\n"
            );
            let _ = w.write_all(out.as_bytes());
        });
    }
}

#[test]
fn the_client_drives_an_openai_compatible_server_and_reports_its_overhead() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    std::thread::spawn(move || fake_openai(l));
    let dir = scratch("serving-http");
    let (r, v) =
        results(&dir, &["--endpoint", &url, "--scenario", "offline", "--queries", "5", "--output-len", "4"]);
    let s = &v["runs"][0]["summary"];
    assert_eq!(s["completed"], 5, "{s}");
    assert!(s["output_tokens"].as_u64().unwrap() >= 5, "{s}");
    assert_eq!(s["server_counted"], 1.0);
    assert!(v["runs"][0]["log"]["target"]["client_cpu_us_per_request"]["count"] == 5);
    assert!(r.stdout.contains("client overhead"), "{}", r.stdout);
    assert!(v["self_check"].is_null(), "no engine, no self-check");
    // A server that is not there: every request fails with its reason, the run ends normally.
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let gone = format!("http://127.0.0.1:{port}");
    let (r, v) = results(&dir, &["--endpoint", &gone, "--scenario", "offline", "--queries", "3"]);
    let s = &v["runs"][0]["summary"];
    assert_eq!((s["completed"].as_u64(), s["failed"].as_u64()), (Some(0), Some(3)));
    assert_eq!(s["failures"]["connection refused"], 3);
    assert!(r.stdout.contains("failed (connection refused)"), "{}", r.stdout);
}

/// The test data's SmolLM2 through the engine: its tokenizer builds the
/// prompts, and the batched tokens are its greedy ones.
#[test]
fn smollm2_serves_and_passes_its_self_check() {
    let Ok(path) = std::fs::canonicalize(".data/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") else {
        eprintln!("skipped: .data/smollm2 not present (bash scripts/fetch-test-data.sh)");
        return;
    };
    let dir = scratch("serving-smollm2");
    let (_, v) = results(
        &dir,
        &[
            "--model",
            path.to_str().unwrap(),
            "--scenario",
            "offline",
            "--queries",
            "4",
            "--input-len",
            "16",
            "--output-len",
            "8",
            "--check",
            "4",
        ],
    );
    assert_eq!(v["runs"][0]["summary"]["completed"], 4);
    let c = &v["self_check"];
    assert_eq!(c["requests"], 4, "{c}");
    assert!(v["target"].as_str().unwrap().contains("q4_1"), "{}", v["target"]);
}
