//! What a person meets at the terminal: a table that fits COLUMNS, the run
//! summary counting skipped cases once, suggestions for typos, errors that
//! name the flag typed, shell completions and the man page.

mod common;
use common::*;

const OPENBLAS_GONE: (&str, &str) = ("TFBENCH_OPENBLAS", "/nonexistent/libopenblas.so");

/// A few matmul cases, two of them skipped (no OpenBLAS), with long ids.
fn small_run(env: &[(&str, &str)], extra: &[&str]) -> Run {
    let mut args = vec![
        "run",
        "--quick",
        "--no-probe",
        "--sample-size",
        "3",
        "tensor/matmul/impl=(gemm|openblas),shape=(64x64x64|256x256x256),threads=1",
    ];
    args.extend_from_slice(extra);
    let mut all = vec![OPENBLAS_GONE];
    all.extend_from_slice(env);
    tfbench_env(&all, &args)
}

#[test]
fn at_columns_100_no_table_line_is_wider_and_skips_are_counted_once() {
    let r = small_run(&[("COLUMNS", "100")], &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    for line in r.stdout.lines() {
        assert!(line.chars().count() <= 100, "{} chars: {line}\n{}", line.chars().count(), r.stdout);
    }
    assert!(r.stdout.lines().any(|l| l == "4 cases: 2 ok, 2 skipped, 0 failed"), "{}", r.stdout);
    // The long reason is given once, in the summary, not in each row.
    assert_eq!(r.stdout.matches("no usable OpenBLAS").count(), 1, "{}", r.stdout);
    assert!(r.stdout.contains("2 skipped: impl=openblas: no usable OpenBLAS"), "{}", r.stdout);
    // stdout is a pipe, so stderr counts the cases too, once, reasons short.
    assert_eq!(r.stderr.matches("4 cases: 2 ok, 2 skipped, 0 failed").count(), 1, "{}", r.stderr);
    for line in r.stderr.lines().filter(|l| l.contains("skipped")) {
        assert!(line.chars().count() < 260, "progress lines shorten skip reasons: {line}");
    }
}

#[test]
fn wide_and_verbose_give_the_reason_whole() {
    let r = small_run(&[("COLUMNS", "100")], &["--wide", "--verbose"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let row = r.stdout.lines().find(|l| l.contains("impl=openblas,shape=64x64x64")).expect("row");
    assert!(row.contains("skipped: impl=openblas: no usable OpenBLAS") && row.contains("TFBENCH_OPENBLAS"));
    let progress = r.stderr.lines().find(|l| l.contains("impl=openblas,shape=64x64x64")).expect("line");
    assert!(progress.contains("TFBENCH_OPENBLAS") && !progress.contains('…'), "{progress}");
}

#[test]
fn markdown_and_jsonl_count_the_skipped_cases() {
    let md = small_run(&[], &["--format", "markdown"]);
    assert!(md.stdout.contains("**4 cases: 2 ok, 2 skipped, 0 failed**"), "{}", md.stdout);
    assert_eq!(md.stdout.matches("no usable OpenBLAS").count(), 1, "{}", md.stdout);
    let jsonl = small_run(&[], &["--format", "jsonl"]);
    let last = jsonl.stdout.lines().last().expect("a summary line");
    let v: serde_json::Value = serde_json::from_str(last).expect("json");
    assert_eq!(v["skipped"], 2, "{last}");
    assert_eq!(v["skip_reasons"][0]["cases"].as_array().map(Vec::len), Some(2), "{last}");
}

#[test]
fn a_short_typo_of_a_subcommand_or_flag_gets_a_suggestion() {
    let r = tfbench(&["rn"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("a similar subcommand exists: 'run'"), "{}", r.stderr);
    let r = tfbench(&["run", "--quik"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("'--quick'"), "{}", r.stderr);
}

#[test]
fn an_unwritable_html_path_names_the_html_flag() {
    let dir = scratch("ui-html-flag");
    let results = dir.join("r.json");
    std::fs::write(&results, "{}").expect("write");
    let r = tfbench(&["report", results.to_str().unwrap(), "--html", "/nonexistent/x.html"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("cannot write --html /nonexistent/x.html"), "{}", r.stderr);
    assert!(!r.stderr.contains("--output"), "{}", r.stderr);
}

#[test]
fn completions_for_every_shell_name_the_subcommands() {
    for shell in ["bash", "zsh", "fish", "powershell"] {
        let r = tfbench(&["completions", shell]);
        assert_eq!(r.code, 0, "{shell}: {}", r.stderr);
        for word in ["tfbench", "sysinfo", "suite", "baseline-dir"] {
            assert!(r.stdout.contains(word), "{shell} completion lacks {word}");
        }
    }
    let bad = tfbench(&["completions", "tcsh"]);
    assert_eq!(bad.code, 2);
    assert!(bad.stderr.contains("bash") && bad.stderr.contains("powershell"), "{}", bad.stderr);
}

#[test]
fn the_man_page_is_roff_with_every_subcommand() {
    let r = tfbench(&["man"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.starts_with(".ie \\n(.g .ds Aq"), "{}", &r.stdout[..200.min(r.stdout.len())]);
    assert!(r.stdout.contains(".TH tfbench 1"), "{}", r.stdout);
    for sub in ["run", "compare", "report", "completions"] {
        assert!(r.stdout.contains(&format!("tfbench\\-{sub}")), "man page lacks {sub}");
    }
    let dir = scratch("ui-man");
    let w = tfbench(&["man", "--dir", dir.to_str().unwrap()]);
    assert_eq!(w.code, 0, "{}", w.stderr);
    let run = std::fs::read_to_string(dir.join("tfbench-run.1")).expect("tfbench-run.1");
    assert!(run.contains("\\-\\-wide") && run.contains("\\-\\-quick"), "{run}");
    let missing = tfbench(&["man", "--dir", "/nonexistent/man"]);
    assert_eq!(missing.code, 2);
    assert!(missing.stderr.contains("--dir /nonexistent/man"), "{}", missing.stderr);
}
