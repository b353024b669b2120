//! Where the binary finds its data (`src/data.rs`): at run time, from the
//! flag, the environment, its own location, the XDG data directory, and a
//! checkout only when run from inside one; never the folder it was built in.

mod common;
use common::*;
use serde_json::Value;
use std::path::Path;
use std::process::Command;

/// `sysinfo --format json` of `bin` run in `cwd` with `HOME` set to `home`
/// and no data variables from the caller's environment.
fn sysinfo(bin: &Path, cwd: &Path, home: &Path, args: &[&str]) -> (i32, Value, String) {
    let out = Command::new(bin)
        .args(args)
        .args(["sysinfo", "--format", "json"])
        .current_dir(cwd)
        .env("HOME", home)
        .env_remove("XDG_DATA_HOME")
        .env_remove("TFBENCH_DATA_DIR")
        .env("TFBENCH_CACHE_DIR", home.join("cache"))
        .output()
        .expect("run tfbench");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let v = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out.status.code().unwrap_or(-1), v, stderr)
}

fn sources(v: &Value) -> Vec<String> {
    v["data_dirs"]
        .as_array()
        .expect("data_dirs")
        .iter()
        .map(|d| d["source"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_copied_binary_finds_data_beside_itself_and_never_the_build_checkout() {
    // Under the system's temporary folder, not the target folder: that one
    // is inside this checkout, which would then be searched.
    let dir = std::env::temp_dir().join(format!("tfbench-data-copied-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let bin_dir = dir.join("prefix/bin");
    std::fs::create_dir_all(bin_dir.join("data")).unwrap();
    std::fs::write(bin_dir.join("data/kjv.txt"), "In the beginning\n").unwrap();
    let bin = bin_dir.join("tfbench");
    std::fs::copy(env!("CARGO_BIN_EXE_tfbench"), &bin).unwrap();
    let home = dir.join("home");
    std::fs::create_dir_all(home.join(".local/share/tfbench/gpt2")).unwrap();
    let outside = dir.join("elsewhere");
    std::fs::create_dir_all(&outside).unwrap();

    let (code, v, stderr) = sysinfo(&bin, &outside, &home, &[]);
    assert_eq!(code, 0, "{stderr}");
    // Outside a checkout: no .data/ of any checkout is searched.
    assert_eq!(sources(&v), ["beside the executable", "installed share/", "XDG data directory"]);
    let dirs = v["data_dirs"].as_array().unwrap();
    assert_eq!(dirs[0]["dir"], bin_dir.join("data").to_str().unwrap());
    assert_eq!(dirs[0]["found"], serde_json::json!(["kjv.txt"]));
    assert_eq!(dirs[1]["dir"], dir.join("prefix/share/tfbench/data").to_str().unwrap());
    assert_eq!(dirs[1]["exists"], false);
    assert_eq!(dirs[2]["dir"], home.join(".local/share/tfbench").to_str().unwrap());
    assert_eq!(dirs[2]["found"], serde_json::json!(["gpt2"]));
    let text = v.to_string();
    assert!(!text.contains(env!("CARGO_MANIFEST_DIR")), "the build checkout is named: {text}");

    // A case needing data it lacks says where it looked: these places only.
    let out = Command::new(&bin)
        .args(["run", "--suite", "inference", "--quick", "--no-probe", "--format", "json", "embed"])
        .current_dir(&outside)
        .env("HOME", &home)
        .env_remove("XDG_DATA_HOME")
        .env_remove("TFBENCH_DATA_DIR")
        .env("TFBENCH_CACHE_DIR", home.join("cache"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let reason = r["cases"][0]["status"]["reason"].as_str().unwrap();
    assert!(reason.contains("minilm/model.safetensors is not in the data folder"), "{reason}");
    assert!(reason.contains(&bin_dir.join("data").display().to_string()), "{reason}");
    assert!(!reason.contains(env!("CARGO_MANIFEST_DIR")), "{reason}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn inside_a_checkout_its_data_folder_is_searched_last() {
    let home = scratch("data-home");
    let checkout = Path::new(env!("CARGO_MANIFEST_DIR"));
    let (code, v, stderr) =
        sysinfo(Path::new(env!("CARGO_BIN_EXE_tfbench")), &checkout.join("src/suites"), &home, &[]);
    assert_eq!(code, 0, "{stderr}");
    let dirs = v["data_dirs"].as_array().unwrap();
    let last = dirs.last().unwrap();
    assert_eq!(last["source"], "source checkout (working directory)");
    assert_eq!(last["dir"], checkout.join(".data").to_str().unwrap());
}

#[test]
fn data_dir_flag_and_variable_replace_every_other_place() {
    let dir = scratch("data-flag");
    let data = dir.join("mine");
    std::fs::create_dir_all(data.join("llama2")).unwrap();
    let bin = Path::new(env!("CARGO_BIN_EXE_tfbench"));
    let (code, v, stderr) = sysinfo(bin, &dir, &dir, &["--data-dir", data.to_str().unwrap()]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(sources(&v), ["--data-dir"]);
    assert_eq!(v["data_dirs"][0]["found"], serde_json::json!(["llama2"]));
    // The flag is global: after the subcommand too.
    let r = tfbench(&["sysinfo", "--data-dir", data.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains(&format!("{} [--data-dir]: llama2", data.display())), "{}", r.stdout);
    let r = tfbench_env(&[("TFBENCH_DATA_DIR", data.to_str().unwrap())], &["sysinfo", "--format", "json"]);
    let v = json(&r);
    assert_eq!(sources(&v), ["TFBENCH_DATA_DIR"]);
    // A folder typed on the command line that does not exist is a usage error.
    let r = tfbench(&["--data-dir", "/nonexistent/tfbench-data", "list", "--suite", "tokenizer"]);
    assert_usage_error(&r, &["--data-dir", "/nonexistent/tfbench-data", "no such folder"]);
}
