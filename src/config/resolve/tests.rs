use super::*;
use crate::config::file::parse_toml;

fn loaded(text: &str) -> LoadedConfig {
    LoadedConfig { config: parse_toml("x.toml", text).unwrap(), path: "x.toml".into(), text: text.into() }
}

#[test]
fn layers_apply_in_order() {
    let cfg = loaded(
        "[harness]\nsample_size = 30\nwarm_up_time = 0.2\n[suites.tensor.harness]\nsample_size = 40\n",
    );
    let cli = CliOverrides {
        quick: true,
        harness: PartialSettings { warm_up_time: Some(0.1), ..Default::default() },
        ..Default::default()
    };
    let r = resolve(Some(&cfg), &cli).unwrap();
    let s = &r.settings["tensor"];
    assert_eq!(s.sample_size, 40, "suite section beats the file's harness");
    assert_eq!(s.warm_up_time, 0.1, "CLI beats the file");
    assert_eq!(s.max_time, Some(0.5), "quick profile applies under the file");
}

#[test]
fn unknown_suites_and_params_are_located() {
    let err = resolve(
        Some(&loaded("[run]\nthreads = 1\n\n[suites.tensr.harness]\nsample_size = 3\n")),
        &Default::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(err.starts_with("x.toml:4:9:") && err.contains("known suites: tensor"), "{err}");
    let cli = CliOverrides { suites: vec!["nope".into()], ..Default::default() };
    let err = resolve(None, &cli).unwrap_err().to_string();
    assert!(err.contains("unknown suite `nope`") && err.contains("tensor"), "{err}");
    let err = resolve(Some(&loaded("[harness]\nconfidence_level = 1.5\n")), &Default::default())
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("x.toml:2:1:") && err.contains("(0, 1)"), "{err}");
}

#[test]
fn bad_parameter_values_name_their_line_and_the_choices() {
    let text = "[run]\nthreads = 1\n\n[suites.inference.benchmarks.decode]\ndtype = [\"f32\", \"f33\"]\n";
    let err = resolve(Some(&loaded(text)), &Default::default()).unwrap_err().to_string();
    assert!(err.starts_with("x.toml:5:18: benchmark inference/decode:"), "{err}");
    assert!(err.contains("`dtype` = \"f33\" is not valid; valid: f32, f16, bf16, int8, q4_0"), "{err}");
    let text = "[suites.optim.benchmarks.zero]\nstage = 1\nranks = [2, 0]\n";
    let err = resolve(Some(&loaded(text)), &Default::default()).unwrap_err().to_string();
    assert!(
        err.starts_with("x.toml:3:13:") && err.contains("`ranks` = 0") && err.contains("positive"),
        "{err}"
    );
    // A suite the run does not select is not checked, as its keys are not.
    let cli = CliOverrides { suites: vec!["tensor".into()], ..Default::default() };
    resolve(Some(&loaded(text)), &cli).unwrap();
    // The quick profile's values are checked too, and pass.
    resolve(None, &CliOverrides { quick: true, ..Default::default() }).unwrap();
}

#[test]
fn shards_partition_the_plan() {
    let all = resolve(None, &Default::default()).unwrap().cases;
    let mut union = Vec::new();
    for index in 1..=3 {
        let cli = CliOverrides { shard: Some(Shard { index, count: 3 }), ..Default::default() };
        let part = resolve(None, &cli).unwrap().cases;
        assert!(part.len() >= all.len() / 3 && part.len() <= all.len() / 3 + 1);
        union.extend(part);
    }
    union.sort_by(|a, b| a.id.cmp(&b.id));
    let mut sorted = all.clone();
    sorted.sort_by(|a, b| a.id.cmp(&b.id));
    assert_eq!(union, sorted);
    assert!(
        "0/3".parse::<Shard>().is_err() && "4/3".parse::<Shard>().is_err() && "x".parse::<Shard>().is_err()
    );
    assert_eq!("2/5".parse::<Shard>(), Ok(Shard { index: 2, count: 5 }));
}

#[test]
fn shipped_profiles_resolve() {
    for (name, text) in [
        ("configs/quick.toml", include_str!("../../../configs/quick.toml")),
        ("configs/ci.toml", include_str!("../../../configs/ci.toml")),
    ] {
        let c =
            LoadedConfig { config: parse_toml(name, text).unwrap(), path: name.into(), text: text.into() };
        resolve(Some(&c), &Default::default()).unwrap_or_else(|e| panic!("{name}: {e:#}"));
    }
    let text = include_str!("../../../configs/full.yaml");
    let c = LoadedConfig {
        config: crate::config::parse_yaml("configs/full.yaml", text).unwrap(),
        path: "configs/full.yaml".into(),
        text: text.into(),
    };
    resolve(Some(&c), &Default::default()).unwrap_or_else(|e| panic!("full.yaml: {e:#}"));
}

#[test]
fn the_commands_example_resolves_to_only_its_commands() {
    let name = "configs/commands.toml";
    let text = include_str!("../../../configs/commands.toml");
    let c = LoadedConfig { config: parse_toml(name, text).unwrap(), path: name.into(), text: text.into() };
    let r = resolve(Some(&c), &Default::default()).unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(r.suites.iter().map(|s| s.name()).collect::<Vec<_>>(), ["command"]);
    let ids: Vec<&str> = r.cases.iter().map(|c| c.id.as_str()).collect();
    assert!(ids.contains(&"command/sort/n=1000000") && ids.contains(&"command/gzip/level=6"), "{ids:?}");
    assert_eq!(r.suite("command").map(|s| s.name()), Some("command"));
    // Beside a built-in suite when asked, and refused when there are none.
    let both = CliOverrides { suites: vec!["command".into(), "tensor".into()], ..Default::default() };
    let r = resolve(Some(&c), &both).unwrap();
    assert_eq!(r.suites.iter().map(|s| s.name()).collect::<Vec<_>>(), ["tensor", "command"]);
    let alone = CliOverrides { suites: vec!["command".into()], ..Default::default() };
    let err = resolve(None, &alone).unwrap_err().to_string();
    assert!(err.contains("[[command]]"), "{err}");
}

#[test]
fn model_flags_replace_the_configs_tests_and_need_a_model() {
    let cfg = loaded("[suites.inference.benchmarks.gguf]\nfile = [\"m.gguf\"]\ntest = [\"tg64\"]\n");
    let filter = Filter { pattern: Some("gguf/".into()), ..Default::default() };
    let cli = CliOverrides { suites: vec!["inference".into()], filter, ..Default::default() };
    let m = ModelFileTests {
        tests: vec!["pp8".into(), "pg4,2".into()],
        depths: vec![0, 16],
        flag: Some("--tests"),
    };
    let r = resolve_model(suites::registry(), Some(&cfg), &cli, &m).unwrap();
    let ids: Vec<&str> = r.cases.iter().map(|c| c.id.as_str()).collect();
    let want: Vec<String> = [(0, "pp8"), (0, "pg4,2"), (16, "pp8"), (16, "pg4,2")]
        .iter()
        .map(|(d, t)| format!("inference/gguf/depth={d},file=m.gguf,model=from-file,test={t}"))
        .collect();
    assert_eq!(ids, want);
    // No model to apply them to: refused, naming the flag.
    let err = resolve_model(suites::registry(), None, &cli, &m).unwrap_err().to_string();
    assert!(err.starts_with("--tests chooses the tests of a model") && err.contains("--model PATH"), "{err}");
}

#[test]
fn devices_multiply_only_the_benchmarks_that_run_there() {
    use crate::backend::Device;
    let cpu =
        resolve(None, &CliOverrides { suites: vec!["tensor".into()], quick: true, ..Default::default() })
            .unwrap();
    assert!(cpu.cases.iter().all(|c| c.device == Device::Cpu && !c.id.contains("device=")));
    // Asking for a GPU too adds the tensor benchmarks that run there,
    // with `device=cuda:0` ids; the CPU cases stay as they were.
    let both = CliOverrides {
        suites: vec!["tensor".into()],
        quick: true,
        devices: vec![Device::Cpu, Device::Cuda(0)],
        ..Default::default()
    };
    let all = resolve(None, &both).unwrap().cases;
    let (gpu_cases, cpu_cases): (Vec<_>, Vec<_>) = all.into_iter().partition(|c| c.device == Device::Cuda(0));
    assert_eq!(cpu_cases, cpu.cases);
    assert!(gpu_cases.iter().all(|c| c.id.ends_with(",device=cuda:0")));
    let benches: std::collections::BTreeSet<&str> = gpu_cases.iter().map(|c| c.benchmark.as_str()).collect();
    assert!(
        benches.contains("binary") && benches.contains("gpu_gemm") && !benches.contains("matmul"),
        "{benches:?}"
    );
    // A CPU-only suite asked for a GPU alone selects nothing.
    let gpu = CliOverrides { devices: vec![Device::Cuda(0)], suites: vec!["quant".into()], ..both };
    assert!(resolve(None, &gpu).unwrap().cases.is_empty());
}
