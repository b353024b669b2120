//! The command suite's cases end to end (verify, then the sampler's
//! loop), on commands every Linux has.

use super::*;
use crate::config::Settings;
use crate::harness::sampler;
use crate::harness::timer::TimerInfo;

fn suite(toml_text: &str) -> CommandSuite {
    #[derive(serde::Deserialize)]
    struct File {
        command: Vec<CommandSpec>,
    }
    let f: File = toml::from_str(toml_text).unwrap_or_else(|e| panic!("{e}"));
    CommandSuite::from_config(f.command).unwrap_or_else(|e| panic!("{e:?}"))
}

fn cases(s: &CommandSuite) -> Vec<Case> {
    s.spec().unwrap().benchmarks.iter().flat_map(|b| crate::plan::expand(NAME, b)).collect()
}

fn settings() -> Settings {
    Settings { sample_size: 5, warm_up_time: 0.0, measurement_time: 1.0, ..Default::default() }
}

fn timer() -> TimerInfo {
    TimerInfo { resolution_ns: 20.0, overhead_ns: 20.0, empty_loop_ns_per_iter: 0.3 }
}

#[test]
fn a_grid_of_checked_commands_verifies_and_times_one_process_per_sample() {
    let s = suite(
        r#"
[[command]]
name = "count"
argv = ["wc", "-l", "{tmpdir}/in.txt"]
setup = "seq {n} > {tmpdir}/in.txt"
prepare = "echo x >> {tmpdir}/prepared"
cleanup = ["sh", "-c", "echo y >> {tmpdir}/cleaned"]
stdout_regex = '^{n} '
params = { n = [3, 50] }
"#,
    );
    let cs = cases(&s);
    assert_eq!(
        cs.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(),
        ["command/count/n=3", "command/count/n=50"]
    );
    for c in &cs {
        let mut w = crate::suites::prepare_standalone(&s, c).unwrap();
        let v = w.verify().unwrap();
        assert!(v.passed, "{v:?}");
        assert!(v.reference.contains("wc -l") && v.reference.contains("matches"), "{}", v.reference);
        let m = sampler::measure(w.as_mut(), &settings(), &timer(), 0).unwrap();
        assert_eq!(m.iterations_per_sample, 1);
        assert!(!m.samples.is_empty());
        let metrics = w.metrics();
        let names: Vec<&str> = metrics.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names[..3], ["user_cpu", "system_cpu", "peak_rss"]);
        assert!(metrics[2].value > 0.0, "{metrics:?}");
    }
}

#[test]
fn prepare_and_cleanup_run_once_around_every_timed_run() {
    let dir = std::env::temp_dir().join(format!("tfbench-cmd-hooks-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.display();
    let s = suite(&format!(
        "[[command]]\nname = \"h\"\nargv = [\"sh\", \"-c\", \"echo r >> {d}/log\"]\nprepare = \"echo p >> {d}/log\"\ncleanup = \"echo c >> {d}/log\"\n"
    ));
    let mut w = crate::suites::prepare_standalone(&s, &cases(&s)[0]).unwrap();
    w.verify().unwrap().into_result().unwrap();
    sampler::measure(w.as_mut(), &settings(), &timer(), 0).unwrap();
    let log = std::fs::read_to_string(dir.join("log")).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len() % 3, 0, "{log}");
    for t in lines.chunks(3) {
        assert_eq!(t, ["p", "r", "c"], "{log}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn wrong_exit_codes_missing_programs_and_bad_output_fail_naming_the_command() {
    let s = suite(
        r#"
[[command]]
name = "wrong"
argv = ["sh", "-c", "echo oops >&2; exit 3"]
[[command]]
name = "missing"
argv = ["tfbench-no-such-program", "x"]
[[command]]
name = "regex"
argv = ["echo", "hello"]
stdout_regex = "^bye"
[[command]]
name = "sum"
argv = ["echo", "hello"]
stdout_sha256 = "0000000000000000000000000000000000000000000000000000000000000000"
[[command]]
name = "good_sum"
argv = ["printf", "abc"]
stdout_sha256 = "BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD"
[[command]]
name = "expected_failure"
argv = ["false"]
exit_code = 1
"#,
    );
    let cs = cases(&s);
    let verify = |i: usize| crate::suites::prepare_standalone(&s, &cs[i]).unwrap().verify();
    let e = format!("{:#}", verify(0).unwrap_err());
    assert!(
        e.contains("`sh -c 'echo oops >&2; exit 3'` exited with code 3, expected 0") && e.contains("oops"),
        "{e}"
    );
    let e = format!("{:#}", verify(1).unwrap_err());
    assert!(e.contains("`tfbench-no-such-program` not found"), "{e}");
    let v = verify(2).unwrap();
    assert!(!v.passed && v.detail.contains("does not match /^bye/") && v.detail.contains("hello"), "{v:?}");
    let v = verify(3).unwrap();
    assert!(!v.passed && v.detail.contains("expected 0000"), "{v:?}");
    assert!(verify(4).unwrap().passed, "upper-case hex is accepted");
    assert!(verify(5).unwrap().passed, "an expected non-zero exit code");
}

#[test]
fn a_hanging_command_is_killed_at_the_time_limit() {
    let s = suite("[[command]]\nname = \"hang\"\nargv = [\"sleep\", \"30\"]\n");
    let mut w = crate::suites::prepare_standalone(&s, &cases(&s)[0]).unwrap();
    w.set_time_limit(std::time::Duration::from_millis(200));
    let t = std::time::Instant::now();
    let e = format!("{:#}", w.verify().unwrap_err());
    assert!(t.elapsed().as_secs() < 10);
    assert!(e.contains("`sleep 30` was still running after 0.200 s (--max-time)"), "{e}");
}
