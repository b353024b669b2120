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
use std::process::{Child, Command, Stdio};

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
        (&["--memory-pressure", "1"], &["--memory-pressure", "(0, 1)"]),
        (&["--memory-pressure", "0"], &["--memory-pressure", "(0, 1)"]),
        (&["--memory-pressure", "-0.2"], &["--memory-pressure", "(0, 1)"]),
        (&["--memory-pressure", "half"], &["--memory-pressure", "not a number"]),
        (
            &["--memory-pressure", "0.1", "--find-peak", "--tpot-bound-ms", "9"],
            &["--memory-pressure", "--find-peak"],
        ),
        (&["--serve", "nohost"], &["--serve nohost", "host:port"]),
        (&["--serve", "127.0.0.1:0", "--endpoint", "http://x:1"], &["--serve", "--endpoint"]),
        (&["--prompt-ids"], &["--prompt-ids", "--endpoint"]),
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

/// `tfbench load --serve`, killed when the test ends (passed or not), with
/// its stdout kept open until then.
struct Served {
    child: Child,
    _stdout: BufReader<std::process::ChildStdout>,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `load --serve 127.0.0.1:0` with `args`; returns it and its URL
/// (the first line it prints).
fn serve(args: &[&str]) -> (Served, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tfbench"))
        .args(["load", "--serve", "127.0.0.1:0"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start tfbench load --serve");
    let mut line = String::new();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    out.read_line(&mut line).unwrap();
    let served = Served { child, _stdout: out };
    let url = line.split_whitespace().find(|w| w.starts_with("http://")).unwrap_or_else(|| panic!("{line}"));
    (served, url.to_string())
}

fn query_ids(v: &Value) -> Vec<Vec<u64>> {
    v["runs"][0]["log"]["queries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| {
            q["token_ids"].as_array().map_or(vec![], |a| a.iter().map(|x| x.as_u64().unwrap()).collect())
        })
        .collect()
}

/// The engine served over HTTP, driven by tfbench's own client with the
/// prompts as ids: every query's streamed tokens are the in-process
/// engine's, which are one-request greedy generation's (both self-checks);
/// a text prompt to a model with no tokenizer is refused with the reason.
#[test]
fn the_engine_served_over_http_streams_the_in_process_tokens() {
    // `results` gives the clients --seed 3: the server's weights are the same seeded ones.
    let model = ["--preset", "llama-tiny", "--input-len", "8", "--output-len", "6"];
    let (_server, url) =
        serve(&[&model[..], &["--seed", "3", "--threads", "1", "--max-batch", "4"]].concat());
    assert!(url.ends_with("/v1/completions"), "{url}");
    let dir = scratch("serving-served");
    let scenario = ["--scenario", "offline", "--queries", "5"];
    let (_, local) = results(&dir, &[&model[..], &scenario[..]].concat());
    let html = dir.join("http.html");
    let h = html.to_str().unwrap();
    let client = [&model[..], &scenario[..], &["--endpoint", &url, "--prompt-ids", "--html", h]].concat();
    let (r, remote) = results(&dir, &client);
    let s = &remote["runs"][0]["summary"];
    assert_eq!(s["completed"], 5, "{s}");
    assert_eq!(s["server_counted"], 1.0, "usage sent: {s}");
    let (want, got) = (query_ids(&local), query_ids(&remote));
    assert_eq!(got.len(), 5);
    for (i, (w, g)) in want.iter().zip(&got).enumerate() {
        assert!(!g.is_empty() && g.len() as u64 == remote["runs"][0]["log"]["queries"][i]["output_tokens"]);
        assert_eq!(w, g, "query {i}: in-process and served tokens");
    }
    let c = &remote["server_tokens"];
    assert_eq!(c["requests"], 4, "{c}");
    assert_eq!(c["differing"], 0, "{c}");
    assert!(r.stdout.contains("server tokens vs one-request greedy"), "{}", r.stdout);
    assert!(r.stdout.contains("client overhead"), "{}", r.stdout);
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("Query log") && page.matches("<svg").count() >= 2);
    // Text prompts: this model has no tokenizer, so the server says 400 and why.
    let text = [&model[..], &["--scenario", "offline", "--queries", "2", "--endpoint", &url]].concat();
    let (_, v) = results(&dir, &text);
    let s = &v["runs"][0]["summary"];
    assert_eq!(s["failed"], 2, "{s}");
    assert!(s["failure_examples"][0].as_str().unwrap().contains("no tokenizer"), "{s}");
}

/// A tiny memory pressure (about 12 MiB of a 24 GiB machine; at most what
/// is free): the scenario runs twice, the second under the balloon, whose
/// resident bytes are measured, and the slowdown is reported.
#[test]
fn memory_pressure_reruns_the_scenario_under_a_measured_balloon() {
    let dir = scratch("serving-pressure");
    let (r, v) = results(
        &dir,
        &[
            "--preset",
            "gpt2-tiny",
            "--scenario",
            "offline",
            "--queries",
            "3",
            "--input-len",
            "4",
            "--output-len",
            "3",
            "--memory-pressure",
            "0.0005",
        ],
    );
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    assert!(runs[0].get("memory_pressure").is_none() && runs[1]["memory_pressure"] == 0.0005);
    let p = &v["memory_pressure"];
    assert!(p["held_bytes_start"].as_u64().unwrap() > 0, "{p}");
    assert!(p["mapped_bytes"].as_u64().unwrap() <= p["requested_bytes"].as_u64().unwrap());
    assert_eq!(p["completed"], true, "{p}");
    assert!(p["slowdown_output_tok_per_s"].as_f64().unwrap() > 0.0, "{p}");
    assert!(p["cgroup"].as_str().unwrap().starts_with("not used"), "{p}");
    assert!(
        r.stdout.contains("memory pressure 0.1% of RAM") || r.stdout.contains("memory pressure 0.0% of RAM")
    );
    assert!(v["self_check"]["requests"].as_u64().unwrap() >= 1);
}
