//! The client against an in-test fake server that answers well and badly,
//! by what each request's prompt asks for.

use super::*;
use crate::load::driver::{Mode, run};
use crate::load::summary::Summary;
use std::io::Read;
use std::net::TcpListener;

/// Words as tokens: the fake server's and the client's tokenizer.
struct Words;
impl Tokenize for Words {
    fn ids(&self, text: &str) -> Result<Vec<u32>> {
        Ok(text.split_whitespace().map(|w| w.len() as u32).collect())
    }
}

fn sse(data: &str) -> String {
    format!("data: {data}\n\n")
}

fn text_chunk(t: &str) -> String {
    sse(&serde_json::json!({"choices": [{"text": t, "index": 0}]}).to_string())
}

/// Writes `s` as one HTTP chunk.
fn chunk(w: &mut TcpStream, s: &str) -> std::io::Result<()> {
    write!(w, "{:x}\r\n{s}\r\n", s.len())?;
    w.flush()
}

/// Answers one connection by the prompt's first word.
fn answer(mut s: TcpStream) -> std::io::Result<()> {
    let mut r = BufReader::new(s.try_clone()?);
    let (mut line, mut len) = (String::new(), 0usize);
    loop {
        line.clear();
        r.read_line(&mut line)?;
        if line.trim().is_empty() {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0; len];
    r.read_exact(&mut body)?;
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    assert_eq!(v["stream"], true);
    assert_eq!(v["stream_options"]["include_usage"], true);
    let prompt =
        v["prompt"].as_str().or_else(|| v["messages"][0]["content"].as_str()).unwrap_or("").to_string();
    let n = v["max_tokens"].as_u64().unwrap_or(1) as usize;
    let kind = prompt.split_whitespace().next().unwrap_or("");
    if kind == "http500" {
        return write!(s, "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 8\r\n\r\noverload");
    }
    write!(s, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")?;
    chunk(&mut s, ": ping\n\n")?;
    for i in 0..n {
        match (kind, i) {
            ("drop", 2) => return Ok(()),
            ("malformed", 1) => chunk(&mut s, "data: {\"choices\": [{\"text\": \n\n")?,
            ("slow", 1) => std::thread::sleep(Duration::from_secs(3)),
            _ => {}
        }
        let c = text_chunk(&format!(" w{i}"));
        if i == 0 {
            // A JSON object split across two HTTP chunks (and reads).
            let (a, b) = c.split_at(c.len() / 2);
            chunk(&mut s, a)?;
            std::thread::sleep(Duration::from_millis(2));
            chunk(&mut s, b)?;
        } else {
            chunk(&mut s, &c)?;
        }
    }
    if kind != "nousage" {
        let u = serde_json::json!({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": n}});
        chunk(&mut s, &sse(&u.to_string()))?;
    }
    chunk(&mut s, &sse("[DONE]"))?;
    write!(s, "0\r\n\r\n")
}

fn fake_server() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            std::thread::spawn(move || {
                let _ = answer(s);
            });
        }
    });
    format!("http://{addr}")
}

fn req(id: usize, kind: &str) -> Request {
    Request { id, text: Some(format!("{kind} a b")), ids: vec![1, 2, 3], max_tokens: 5 }
}

#[test]
fn endpoints_parse_to_paths_and_apis() {
    let e = Endpoint::parse("http://127.0.0.1:8080", Api::Completions).unwrap();
    assert_eq!((e.authority.as_str(), e.path.as_str()), ("127.0.0.1:8080", "/v1/completions"));
    let e = Endpoint::parse("http://h:1/v1/", Api::Chat).unwrap();
    assert_eq!((e.path.as_str(), e.api), ("/v1/chat/completions", Api::Chat));
    let e = Endpoint::parse("http://h/x/v1/chat/completions", Api::Completions).unwrap();
    assert_eq!((e.authority.as_str(), e.api), ("h:80", Api::Chat));
    assert!(Endpoint::parse("https://h", Api::Chat).is_err());
    assert!(Endpoint::parse("http:///v1", Api::Chat).is_err());
}

/// Good and bad answers in one run: the good ones complete with their
/// counts (the server's usage, else the tokenizer's), every bad one fails
/// with its reason, apart from the latencies, and the run goes on.
#[test]
fn misbehaving_servers_fail_requests_with_reasons_and_the_run_goes_on() {
    let url = fake_server();
    for api in [Api::Completions, Api::Chat] {
        let ep = Endpoint::parse(&url, api).unwrap();
        let tok: Arc<dyn Tokenize + Send + Sync> = Arc::new(Words);
        let mut t = HttpTarget::new(ep, Some("m".into()), Some(tok), Duration::from_millis(1500));
        let kinds = ["ok", "drop", "ok", "malformed", "nousage", "slow", "http500", "ok"];
        let mut make = |i: usize| req(i, kinds[i]);
        let log = run(&mut t, &Mode::Open(vec![0.0; kinds.len()]), &mut make, 30.0);
        let q = &log.queries;
        for i in [0, 2, 7] {
            assert!(q[i].ok(), "{:?}", q[i]);
            assert_eq!((q[i].output_tokens, q[i].prompt_tokens, q[i].server_counted), (5, 3, true));
            assert_eq!(q[i].chunks.len(), 5);
        }
        assert!(q[4].ok() && q[4].output_tokens == 5 && !q[4].server_counted, "{:?}", q[4]);
        let reason = |i: usize| q[i].error.clone().unwrap_or_default();
        assert!(reason(1).starts_with("stream dropped"), "{}", reason(1));
        assert!(reason(3).starts_with("malformed chunk"), "{}", reason(3));
        assert!(reason(5).starts_with("timed out"), "{}", reason(5));
        assert!(reason(6).starts_with("HTTP 500: overload"), "{}", reason(6));
        let s = Summary::of(&log, None);
        assert_eq!((s.completed, s.failed), (4, 4));
        assert_eq!(s.failures.len(), 4, "{:?}", s.failures);
        assert_eq!(s.e2e.count, 4, "failed requests stay out of the latencies");
        let cpu = &log.target["client_cpu_us_per_request"];
        assert_eq!(cpu["count"], 8, "{}", log.target);
        assert!(cpu["mean"].as_f64().unwrap() > 0.0);
    }
}

#[test]
fn a_refused_connection_fails_the_request() {
    // A port nobody listens on: bind, note it, close.
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let ep = Endpoint::parse(&format!("http://127.0.0.1:{port}"), Api::Completions).unwrap();
    let mut t = HttpTarget::new(ep, None, None, Duration::from_secs(2));
    let log = run(&mut t, &Mode::Open(vec![0.0, 0.0]), &mut |i| req(i, "ok"), 10.0);
    for q in &log.queries {
        assert!(q.error.as_deref().is_some_and(|e| e.starts_with("connection refused")), "{q:?}");
    }
}
