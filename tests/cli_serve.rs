//! The live dashboard, driven as a person does: `tfbench serve` on an
//! ephemeral port, plain HTTP requests against it, and real runs streaming
//! to it. What a browser shows is checked by `scripts/check-live.sh`.

mod common;
use common::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running `tfbench serve`, killed when dropped.
struct Served {
    child: Child,
    port: u16,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `tfbench serve --port 0 EXTRA` with its cache in `cache` and reads
/// the address it prints.
fn serve(cache: &Path, extra: &[&str]) -> Served {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tfbench"))
        .args(["serve", "--port", "0"])
        .args(extra)
        .env("TFBENCH_CACHE_DIR", cache)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start tfbench serve");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("read the address");
    let url = line.trim().strip_prefix("tfbench dashboard listening on ").unwrap_or_else(|| {
        let _ = child.kill();
        panic!("serve printed no address: {line:?}")
    });
    let port = url.trim_end_matches('/').rsplit(':').next().and_then(|p| p.parse().ok()).expect("a port");
    assert!(url.starts_with("http://127.0.0.1:"), "loopback by default: {url}");
    Served { child, port }
}

/// One HTTP request; returns the status code and the body.
fn http(port: u16, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).expect("timeout");
    let mut req =
        format!("{method} {path} HTTP/1.1\r\nConnection: close\r\nContent-Length: {}\r\n", body.len());
    if !headers.iter().any(|(k, _)| *k == "Host") {
        req.push_str(&format!("Host: 127.0.0.1:{port}\r\n"));
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).expect("send");
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).into_owned();
    let code = text.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    (code, body)
}

fn get(port: u16, path: &str) -> (u16, String) {
    http(port, "GET", path, &[], "")
}

/// This machine's address on its default route, if it has one that is
/// not loopback (no packet is sent: a UDP "connect" only picks the route).
fn non_loopback_ip() -> Option<std::net::IpAddr> {
    let s = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    s.connect("10.255.255.255:9").ok()?;
    let ip = s.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
}

const CASES: &str = "tensor/matmul/impl=gemm,shape=(64x64x64|256x256x256),threads=1";

fn quick(cache: &Path, store: &Path, extra: &[&str]) -> Run {
    let store = store.to_str().expect("utf-8 path");
    let mut args =
        vec!["run", "--quick", "--no-probe", "--sample-size", "3", "--no-canary", "--baseline-dir", store];
    args.extend_from_slice(extra);
    tfbench_in(cache, &args)
}

fn state(port: u16) -> serde_json::Value {
    let (code, body) = get(port, "/api/state");
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).expect("state JSON")
}

#[test]
fn serve_shows_the_store_refuses_what_it_must_and_reflects_a_run() {
    let dir = scratch("serve-main");
    let (cache, store): (PathBuf, PathBuf) = (dir.join("cache"), dir.join("store"));
    std::fs::create_dir_all(&store).unwrap();
    let r = quick(&cache, &store, &["--save-baseline", "b1", "--no-live", "-q", CASES]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    std::fs::write(dir.join("secret.json"), "{\"secret\": \"outside the store\"}").unwrap();
    std::os::unix::fs::symlink(dir.join("secret.json"), store.join("link.json")).unwrap();
    std::fs::write(store.join(".hidden.json"), "{\"secret\": \"hidden\"}").unwrap();

    let srv = serve(&cache, &["--baseline-dir", store.to_str().unwrap()]);
    let port = srv.port;
    // The dashboard file: this user's only, naming the address.
    let file = cache.join(format!("dashboard-{port}.json"));
    let meta = std::fs::metadata(&file).expect("dashboard file");
    assert_eq!(std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777, 0o600);
    let token = json_file(&file)["token"].as_str().expect("token").to_string();

    // The report of the store, with an empty live section on top.
    let (code, page) = get(port, "/");
    assert_eq!(code, 200);
    assert!(page.contains("<section id=\"live\"") && page.contains("No run has streamed here yet"));
    assert!(page.contains("baseline b1") && page.contains("shape=64x64x64"), "the stored baseline's cases");
    assert!(page.contains("<a href=\"/store/b1.json\">"), "a link to the stored file");
    let (code, raw) = get(port, "/store/b1.json");
    assert_eq!(code, 200);
    assert!(serde_json::from_str::<serde_json::Value>(&raw).is_ok(), "the baseline, as stored");

    // Nothing outside the store, however the path is spelled.
    for path in [
        "/store/../secret.json",
        "/store/%2e%2e/secret.json",
        "/store/%2E%2E%2Fsecret.json",
        "/store/..%2fsecret.json",
        "/store//etc/passwd",
        "/store/%2fetc%2fpasswd",
        "/store/link.json",
        "/store/.hidden.json",
        "/store/b1.json%00.json",
        "/history/../b1.json",
        "/../Cargo.toml",
        "/etc/passwd",
    ] {
        let (code, body) = get(port, path);
        assert_eq!(code, 404, "{path}: {body}");
        assert!(!body.contains("secret") && !body.contains("root:"), "{path}: {body}");
    }
    // Reads answer to the loopback address only (DNS rebinding); writes
    // need the token; other methods are refused.
    let (code, _) = http(port, "GET", "/", &[("Host", &format!("evil.example:{port}"))], "");
    assert_eq!(code, 403);
    let event = "{\"event\":\"run_finished\",\"run_id\":\"x\",\"wall_time_secs\":0,\"targets\":[]}";
    assert_eq!(http(port, "POST", "/api/events", &[], event).0, 401);
    assert_eq!(http(port, "POST", "/api/events", &[("Authorization", "Bearer 00")], event).0, 401);
    let bearer = format!("Bearer {token}");
    assert_eq!(http(port, "POST", "/api/events", &[("Authorization", &bearer)], event).0, 409, "unknown run");
    assert_eq!(http(port, "POST", "/api/events", &[("Authorization", &bearer)], "{").0, 400);
    assert_eq!(http(port, "DELETE", "/store/b1.json", &[], "").0, 405);
    assert_eq!(http(port, "PUT", "/", &[], "x").0, 405);
    match non_loopback_ip() {
        Some(ip) => assert!(
            TcpStream::connect_timeout(&(ip, port).into(), Duration::from_secs(2)).is_err(),
            "the dashboard must not be reachable on {ip} without --bind"
        ),
        None => eprintln!("skipped the non-loopback check: this machine has no non-loopback address"),
    }

    // A run streams to it: every case arrives, the run is marked finished.
    let url = format!("http://127.0.0.1:{port}");
    let r = quick(&cache, &store, &["--live", &url, CASES]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.contains(&format!("streaming progress to the dashboard at {url}")), "{}", r.stderr);
    let s = state(port);
    let run = &s["runs"][0];
    assert_eq!(run["finished"], true, "{s}");
    assert_eq!(run["planned"], 2, "{s}");
    let cases: Vec<(String, String)> = serde_json::from_value(run["cases"].clone()).unwrap();
    assert_eq!(cases.len(), 2, "{s}");
    assert!(cases.iter().all(|(id, st)| id.starts_with("tensor/matmul/impl=gemm") && st == "ok"), "{s}");
    let (_, fragment) = get(port, "/live");
    assert!(
        fragment.contains("<b>Finished</b>") && fragment.contains("2 of 2 case(s) finished"),
        "{fragment}"
    );
    assert!(fragment.contains(&format!("data-case=\"{}\"", cases[0].0)), "{fragment}");
    let (_, page) = get(port, "/");
    assert!(page.contains("live run ") && page.contains("(finished)"), "the run among the report's files");

    // A run finds the dashboard listening on the default port by its file,
    // unless --no-live.
    std::fs::copy(&file, cache.join("dashboard-8080.json")).unwrap();
    let r = quick(&cache, &store, &[CASES]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.contains("found listening on the default port"), "{}", r.stderr);
    assert_eq!(state(port)["runs"].as_array().map(Vec::len), Some(2));
    let r = quick(&cache, &store, &["--no-live", CASES]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(state(port)["runs"].as_array().map(Vec::len), Some(2), "--no-live streams nothing");
    // The event stream opens with an update.
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET /events HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n").unwrap();
    let mut buf = vec![0u8; 4096];
    let mut got = String::new();
    while !got.contains("event: update") {
        let n = s.read(&mut buf).expect("the stream answers");
        assert!(n > 0, "stream closed: {got}");
        got.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    assert!(got.starts_with("HTTP/1.1 200") && got.contains("text/event-stream"), "{got}");
}

#[test]
fn a_run_goes_on_when_the_dashboard_is_gone() {
    let dir = scratch("serve-gone");
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let t0 = std::time::Instant::now();
    let r = quick(&dir.join("cache"), &dir, &["--live", &format!("http://127.0.0.1:{port}"), CASES]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.contains("did not take the run's progress"), "{}", r.stderr);
    assert_eq!(r.stderr.matches("did not take").count(), 1, "warned once: {}", r.stderr);
    assert!(t0.elapsed() < Duration::from_secs(60));
}

#[test]
fn serve_and_live_flags_are_checked() {
    let dir = scratch("serve-flags");
    let cache = dir.join("cache");
    assert_usage_error(&tfbench_in(&cache, &["serve", "--bind", "nowhere"]), &["--bind nowhere"]);
    assert_usage_error(
        &tfbench_in(&cache, &["serve", "--baseline-dir", "/nonexistent/x"]),
        &["--baseline-dir"],
    );
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port().to_string();
    assert_usage_error(&tfbench_in(&cache, &["serve", "--port", &port]), &["--bind/--port"]);
    let r = tfbench_in(&cache, &["run", "--live", "https://127.0.0.1:1", "x"]);
    assert_usage_error(&r, &["--live", "plain http://"]);
    let r = tfbench_in(&cache, &["run", "--live", "tensor/matmul"]);
    assert_usage_error(&r, &["--live", "put a FILTER before it"]);
}

#[test]
fn binding_beyond_loopback_warns() {
    let dir = scratch("serve-bind");
    let mut child = Command::new(env!("CARGO_BIN_EXE_tfbench"))
        .args(["serve", "--port", "0", "--bind", "0.0.0.0", "--baseline-dir"])
        .arg(&dir)
        .env("TFBENCH_CACHE_DIR", dir.join("cache"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start");
    let mut line = String::new();
    let read = BufReader::new(child.stderr.take().unwrap()).read_line(&mut line);
    let _ = child.kill();
    let _ = child.wait();
    read.expect("stderr");
    assert!(line.starts_with("warning: --bind 0.0.0.0") && line.contains("network"), "{line}");
}

#[test]
fn ctrl_c_stops_the_dashboard_and_removes_its_file() {
    let dir = scratch("serve-stop");
    let cache = dir.join("cache");
    let mut srv = serve(&cache, &["--baseline-dir", dir.to_str().unwrap()]);
    let file = cache.join(format!("dashboard-{}.json", srv.port));
    assert!(file.exists());
    let pid = srv.child.id().to_string();
    assert!(Command::new("kill").args(["-INT", &pid]).status().expect("kill").success());
    let status = srv.child.wait().expect("wait");
    assert_eq!(status.code(), Some(0), "a clean stop");
    assert!(!file.exists(), "the token file goes with the dashboard");
}
