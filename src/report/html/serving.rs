//! The page of a `tfbench load` run (`load --html FILE`): each run's
//! summary, and its query log drawn: a timeline with one row per query
//! (scheduled send, actual send, first token, every streamed chunk,
//! finish; failures in red), and TTFT and E2E latency against each query's
//! scheduled time, where queueing shows as a rising tail.
//!
//! It reads the results JSON `load -o` writes (a `serde_json::Value`, so
//! this layer needs nothing of the app's types), and draws at most
//! [`MAX_ROWS`] queries of a run (saying so when there are more).

use super::CSS;
use super::svg::{self, Esc, FONT, LinearScale, N, Units};
use serde_json::Value;
use std::fmt::Write as _;

/// Queries drawn per run at most: a row each.
pub const MAX_ROWS: usize = 400;
/// Chunk ticks drawn per run at most.
const MAX_TICKS: usize = 40_000;

const W: f64 = 1000.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 22.0;

fn f(v: &Value) -> Option<f64> {
    v.as_f64().filter(|x| x.is_finite())
}

fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

/// The whole page for the results `res` of `tfbench load`.
pub fn load_page(title: &str, res: &Value) -> String {
    let mut out = String::with_capacity(128 * 1024);
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"/>\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"/>\
         <title>{t}</title><style>{CSS}</style></head><body><header><h1>{t}</h1>\
         <p class=\"muted\">tfbench load: the {} scenario against {}. Latencies count from each query's \
         scheduled send time.</p></header><dl class=\"facts\">",
        Esc(&text_of(&res["scenario"])),
        Esc(&text_of(&res["target"])),
        t = Esc(title),
    );
    for (k, label) in [
        ("date_utc", "started"),
        ("cpu", "CPU"),
        ("logical_cpus", "logical CPUs"),
        ("loadavg_before", "load average before"),
        ("loadavg_after", "load average after"),
        ("wall_s", "wall time (s)"),
    ] {
        let _ = write!(out, "<dt>{label}</dt><dd>{}</dd>", Esc(&text_of(&res[k])));
    }
    out.push_str("</dl>");
    if let Some(p) = res.get("memory_pressure").filter(|p| !p.is_null()) {
        pressure(&mut out, p);
    }
    let runs = res["runs"].as_array().map_or(&[][..], Vec::as_slice);
    for (i, run) in runs.iter().enumerate() {
        run_section(&mut out, i, run);
    }
    if runs.is_empty() {
        out.push_str("<p class=\"warn\">No run in these results.</p>");
    }
    out.push_str("</body></html>\n");
    out
}

fn pressure(out: &mut String, p: &Value) {
    out.push_str("<section id=\"pressure\"><h2>Memory pressure</h2><dl class=\"facts\">");
    for (k, label) in [
        ("share", "share of RAM asked"),
        ("method", "how"),
        ("cgroup", "cgroup limit"),
        ("requested_bytes", "bytes asked"),
        ("held_bytes_start", "bytes held (resident) at the start"),
        ("held_bytes_end", "bytes held (resident) at the end"),
        ("slowdown_output_tok_per_s", "slowdown (unpressured / pressured output tok/s)"),
        ("slowdown_e2e_p50", "slowdown (pressured / unpressured E2E p50)"),
        ("completed", "pressured run completed"),
        ("note", "note"),
    ] {
        if let Some(v) = p.get(k).filter(|v| !v.is_null()) {
            let _ = write!(out, "<dt>{label}</dt><dd>{}</dd>", Esc(&text_of(v)));
        }
    }
    out.push_str("</dl></section>");
}

fn run_section(out: &mut String, i: usize, run: &Value) {
    let s = &run["summary"];
    let mut head = format!("Run {}", i + 1);
    if let Some(q) = f(&run["qps"]) {
        let _ = write!(head, " at {q:.3} QPS");
    }
    match run["valid"].as_bool() {
        Some(true) => head.push_str(", valid"),
        Some(false) => head.push_str(", INVALID"),
        None => {}
    }
    if let Some(p) = f(&run["memory_pressure"]) {
        let _ = write!(head, ", under memory pressure ({:.1}% of RAM taken)", 100.0 * p);
    }
    let _ = write!(out, "<section id=\"run{i}\"><h2>{}</h2>", Esc(&head));
    if let Some(why) = run["why"].as_array().filter(|w| !w.is_empty()) {
        let list: Vec<String> = why.iter().map(text_of).collect();
        let _ = write!(out, "<p class=\"warn\">{}</p>", Esc(&list.join("; ")));
    }
    let _ = write!(
        out,
        "<p>{} queries: {} completed, {} failed; {} output tok/s in all; {} s from start to last event.</p>",
        text_of(&s["queries"]),
        text_of(&s["completed"]),
        text_of(&s["failed"]),
        f(&s["output_tok_per_s"]).map_or("-".into(), |v| format!("{v:.1}")),
        f(&s["duration_s"]).map_or("-".into(), |v| format!("{v:.2}")),
    );
    out.push_str(
        "<div class=\"scroll\"><table class=\"summary\"><tr><th>ms</th><th>p50</th><th>p90</th>\
         <th>p99</th><th>mean</th><th>max</th><th>count</th></tr>",
    );
    for (k, label) in
        [("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2e", "E2E"), ("send_lag", "send lag")]
    {
        let d = &s[k];
        let _ = write!(out, "<tr><td>{label}</td>");
        for p in ["p50", "p90", "p99", "mean", "max"] {
            let _ =
                write!(out, "<td class=\"num\">{}</td>", f(&d[p]).map_or("-".into(), |v| format!("{v:.1}")));
        }
        let _ = write!(out, "<td class=\"num\">{}</td></tr>", text_of(&d["count"]));
    }
    out.push_str("</table></div>");
    if let Some(fails) = s["failures"].as_object().filter(|m| !m.is_empty()) {
        out.push_str("<ul>");
        for (reason, n) in fails {
            let _ = write!(out, "<li class=\"slower\">failed ({}): {}</li>", Esc(reason), text_of(n));
        }
        out.push_str("</ul>");
    }
    let queries = run["log"]["queries"].as_array().map_or(&[][..], Vec::as_slice);
    if !queries.is_empty() {
        timeline(out, queries);
        latencies(out, queries);
    }
    out.push_str("</section>");
}

/// One query's times (seconds from the run's start).
struct Q {
    scheduled: f64,
    sent: f64,
    first: Option<f64>,
    finished: Option<f64>,
    chunks: Vec<f64>,
    failed: bool,
}

fn q_of(v: &Value) -> Option<Q> {
    let chunks = v["chunks"].as_array().map_or(Vec::new(), |c| c.iter().filter_map(|p| f(&p[0])).collect());
    Some(Q {
        scheduled: f(&v["scheduled_s"])?,
        sent: f(&v["sent_s"])?,
        first: f(&v["first_token_s"]),
        finished: f(&v["finished_s"]),
        chunks,
        failed: !v["error"].is_null(),
    })
}

/// The timeline: a row per query, time across.
fn timeline(out: &mut String, queries: &[Value]) {
    let qs: Vec<Q> = queries.iter().take(MAX_ROWS).filter_map(q_of).collect();
    let end = qs
        .iter()
        .flat_map(|q| [Some(q.sent), q.first, q.finished, q.chunks.last().copied()])
        .flatten()
        .fold(1e-3, f64::max);
    let row = if qs.len() > 150 { 3.0 } else { 6.0 };
    let h = TOP + row * qs.len() as f64 + 24.0;
    let x = LinearScale::new((0.0, end * 1e9), (LEFT, W - RIGHT));
    let label = "Query log: one row per query, time from the run's start";
    let _ = write!(out, "<figure><figcaption>{label}. ");
    out.push_str(
        "<span class=\"key\" style=\"color:#999\"><i></i><span>scheduled to sent</span></span>\
         <span class=\"key\" style=\"color:#e69f00\"><i></i><span>sent to first token (queue, prefill)</span></span>\
         <span class=\"key\" style=\"color:#0072b2\"><i></i><span>first token to finish (decode; ticks: chunks)</span></span>\
         <span class=\"key\" style=\"color:#c62828\"><i></i><span>failed</span></span>",
    );
    if queries.len() > MAX_ROWS {
        let _ = write!(out, " The first {MAX_ROWS} of {} queries are drawn.", queries.len());
    }
    out.push_str("</figcaption>");
    svg::open(out, "timeline", W, h, label);
    let bottom = TOP + row * qs.len() as f64;
    svg::x_axis(out, &x, TOP, bottom, Units::Time);
    let _ =
        write!(out, "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">query</text>", N(LEFT - 6.0), N(TOP - 6.0));
    let mut ticks = 0usize;
    let px = |t: f64| N(x.map(t * 1e9));
    let seg = |out: &mut String, a: f64, b: f64, y: f64, colour: &str, wd: f64| {
        let _ = write!(
            out,
            "<line x1=\"{}\" y1=\"{y}\" x2=\"{}\" y2=\"{y}\" stroke=\"{colour}\" stroke-width=\"{}\"/>",
            px(a),
            px(b.max(a)),
            N(wd),
            y = N(y)
        );
    };
    for (i, q) in qs.iter().enumerate() {
        let y = TOP + row * (i as f64 + 0.5);
        seg(out, q.scheduled, q.sent, y, "#999", 1.0);
        let last = q.finished.or(q.chunks.last().copied()).or(q.first).unwrap_or(q.sent);
        if q.failed {
            seg(out, q.sent, last, y, "#c62828", row * 0.7);
            let _ = write!(
                out,
                "<circle cx=\"{}\" cy=\"{}\" r=\"{}\" fill=\"#c62828\"/>",
                px(last),
                N(y),
                N(row * 0.5)
            );
            continue;
        }
        if let Some(first) = q.first {
            seg(out, q.sent, first, y, "#e69f00", row * 0.7);
            seg(out, first, last, y, "#0072b2", row * 0.7);
        }
        for &c in &q.chunks {
            if ticks >= MAX_TICKS {
                break;
            }
            ticks += 1;
            let _ = write!(
                out,
                "<line x1=\"{p}\" y1=\"{}\" x2=\"{p}\" y2=\"{}\" stroke=\"#003f63\" stroke-width=\"0.6\"/>",
                N(y - row * 0.45),
                N(y + row * 0.45),
                p = px(c)
            );
        }
    }
    out.push_str("</svg></figure>");
}

/// TTFT and E2E of each completed query against its scheduled time.
fn latencies(out: &mut String, queries: &[Value]) {
    let qs: Vec<Q> = queries.iter().filter_map(q_of).filter(|q| !q.failed).collect();
    let pts = |pick: fn(&Q) -> Option<f64>| -> Vec<(f64, f64)> {
        qs.iter().filter_map(|q| pick(q).map(|t| (q.scheduled * 1e9, (t - q.scheduled) * 1e9))).collect()
    };
    let ttft = pts(|q| q.first);
    let e2e = pts(|q| q.finished);
    if ttft.is_empty() && e2e.is_empty() {
        return;
    }
    let (h, bottom) = (260.0, 226.0);
    let xmax = ttft.iter().chain(&e2e).map(|p| p.0).fold(1e6, f64::max);
    let ymax = ttft.iter().chain(&e2e).map(|p| p.1).fold(1e6, f64::max);
    let x = LinearScale::new((0.0, xmax), (LEFT, W - RIGHT));
    let y = LinearScale::new(svg::padded(0.0, ymax, 0.05), (bottom, TOP));
    let label = "Latency of each completed query against its scheduled send time";
    let _ = write!(
        out,
        "<figure><figcaption>{label}: <span class=\"key s0\"><i></i><span>TTFT</span></span>\
         <span class=\"key s1\"><i></i><span>E2E</span></span></figcaption>"
    );
    svg::open(out, "latency", W, h, label);
    svg::y_axis(out, &y, LEFT, W - RIGHT, Units::Time);
    svg::x_axis(out, &x, TOP, bottom, Units::Time);
    let _ = write!(
        out,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" class=\"muted\">scheduled send time</text>",
        N((LEFT + W - RIGHT) / 2.0),
        N(bottom + 2.0 * FONT + 8.0)
    );
    for (class, points) in [("s0", &ttft), ("s1", &e2e)] {
        let _ = write!(out, "<g class=\"samples {class}\">");
        for &(px, py) in points.iter().take(MAX_ROWS * 10) {
            let _ = write!(out, "<circle cx=\"{}\" cy=\"{}\" r=\"2\"/>", N(x.map(px)), N(y.map(py)));
        }
        out.push_str("</g>");
    }
    out.push_str("</svg></figure>");
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A results file with a completed, a failed and a queued query: every
    /// query drawn, the page well-formed XML, nothing unescaped.
    #[test]
    fn the_query_log_is_drawn_row_by_row() {
        let q = |id: u32, s: f64, first: Option<f64>, end: Option<f64>, err: Option<&str>| {
            json!({"id": id, "scheduled_s": s, "sent_s": s + 0.001, "first_token_s": first,
                "finished_s": end, "chunks": first.map_or(vec![], |f| vec![json!([f, 1]), json!([f + 0.1, 1])]),
                "error": err})
        };
        let res = json!({
            "scenario": "Server", "target": "engine <x> & co", "runs": [{
                "qps": 2.0, "valid": false, "why": ["p99 TTFT 900 ms over 500 ms"],
                "summary": {"queries": 3, "completed": 2, "failed": 1, "failures": {"stream dropped": 1},
                    "ttft": {"p50": 10.0, "count": 2}, "e2e": {"p50": 200.0, "count": 2}},
                "log": {"queries": [
                    q(0, 0.0, Some(0.05), Some(0.2), None),
                    q(1, 0.5, Some(1.4), Some(1.6), None),
                    q(2, 1.0, None, None, Some("stream dropped: x")),
                ]}
            }]
        });
        let page = load_page("load <test>", &res);
        assert!(page.contains("engine &lt;x&gt; &amp; co") && !page.contains("<x>"));
        assert!(page.contains("INVALID") && page.contains("p99 TTFT 900 ms"));
        // Three rows: two decode segments, one failure marker; four chunk ticks.
        assert_eq!(page.matches("stroke=\"#0072b2\"").count(), 2);
        assert_eq!(page.matches("fill=\"#c62828\"").count(), 1);
        assert_eq!(page.matches("stroke=\"#003f63\"").count(), 4);
        // Two TTFT and two E2E points.
        assert_eq!(page.matches("r=\"2\"").count(), 4);
        assert_eq!(page.matches("<svg").count(), page.matches("</svg>").count());
        assert!(page.contains("failed (stream dropped): 1"));
        // An empty results file still gives a page.
        assert!(load_page("t", &json!({})).contains("No run"));
    }
}
