//! The PyTorch peer's case mapping for the nn and sci suites
//! (scripts/torch_twins.py, used by scripts/torch_peer.py) against the real
//! binary's `list --format json`: every case gets a twin or a stated reason,
//! the shapes the twins are given are tfbench's, and a parameter the twins
//! do not model (a new `dtype=bf16`, `pass=train`) makes a case skipped,
//! never run as something else. Needs neither torch nor numpy; without
//! python3 the checks that read the script's table as text still run.

mod common;
use common::*;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::process::Command;
use tfbench::kernels::nn::conv::parse_conv;

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/torch_twins.py");

/// `layer -> spec` pairs of the script's LAYERS table, read as text.
fn script_layers() -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(SCRIPT).expect("read scripts/torch_twins.py");
    let start = text.find("LAYERS = {").expect("a LAYERS table");
    let body = &text[start..start + text[start..].find('}').expect("LAYERS ends")];
    body.lines()
        .filter_map(|l| {
            let q: Vec<&str> = l.split('"').collect();
            (q.len() >= 5).then(|| (q[1].to_string(), q[3].to_string()))
        })
        .collect()
}

/// The nn and sci cases of `tfbench list --format json`, as the script reads them.
fn listed() -> (Value, Vec<(String, Value)>) {
    let r = tfbench(&["list", "--suite", "nn", "--suite", "sci", "--format", "json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let doc = json(&r);
    let mut cases = Vec::new();
    for s in doc["suites"].as_array().expect("suites") {
        for b in s["benchmarks"].as_array().expect("benchmarks") {
            for c in b["cases"].as_array().expect("cases") {
                cases.push((c["id"].as_str().expect("id").to_string(), c["params"].clone()));
            }
        }
    }
    assert!(cases.len() > 100, "nn and sci list {} cases", cases.len());
    (doc, cases)
}

#[test]
fn the_script_knows_every_listed_layer_and_benchmark() {
    let (_, cases) = listed();
    let layers = script_layers();
    let text = std::fs::read_to_string(SCRIPT).expect("read the script");
    for (id, params) in &cases {
        if let Some(layer) = params["layer"].as_str() {
            let spec = layers.get(layer).unwrap_or_else(|| panic!("{id}: layer {layer} not in LAYERS"));
            // The table's shape is one tfbench's own parser accepts.
            parse_conv(spec).unwrap_or_else(|e| panic!("{layer}: {e}"));
        }
        let mut parts = id.split('/');
        let (suite, bench) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        assert!(text.contains(&format!("(\"{suite}\", \"{bench}\")")), "{id}: {suite}/{bench} not mapped");
    }
    assert!(layers.len() >= 13, "{layers:?}");
}

/// The script's answer per case, or None when python3 is absent.
fn classify(doc: &Value) -> Option<Vec<Value>> {
    let dir = scratch("torch-twins");
    let list = dir.join("list.json");
    std::fs::write(&list, doc.to_string()).expect("write the list");
    let out = match Command::new("python3").arg(SCRIPT).arg(&list).output() {
        Ok(o) => o,
        Err(e) => {
            eprintln!(
                "SKIPPED the run of scripts/torch_twins.py: python3 not found ({e}); the table checks ran"
            );
            return None;
        }
    };
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    Some(text.lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect())
}

#[test]
fn every_case_gets_a_twin_of_tfbench_shape_or_a_reason() {
    let (doc, cases) = listed();
    let Some(got) = classify(&doc) else { return };
    assert_eq!(got.len(), cases.len(), "one line per case");
    let layers = script_layers();
    let mut twins = 0;
    for ((id, params), line) in cases.iter().zip(&got) {
        assert_eq!(line["id"], json!(id), "same order");
        if let Some(why) = line["skip"].as_str() {
            // Only these have no twin, each with its reason.
            let expected = (id.contains("wav2vec2_conv1d")
                && id.contains("layout=nhwc")
                && why.contains("channels-last"))
                || (id.starts_with("sci/fft_plan/") && why.contains("plan"));
            assert!(expected, "{id}: skipped unexpectedly: {why}");
            continue;
        }
        twins += 1;
        let t = &line["twin"];
        if let Some(layer) = params["layer"].as_str() {
            let g = parse_conv(&layers[layer]).expect("a valid spec");
            assert_eq!(t["flops"].as_f64(), Some(g.flops()), "{id}: the twin's FLOPs are tfbench's");
            assert_eq!(t["groups"], json!(g.groups), "{id}");
            let nhwc = params["layout"] == json!("nhwc");
            assert_eq!(t["memory_format"].is_null(), !nhwc, "{id}: channels_last only for nhwc");
        }
    }
    assert!(twins > 150, "{twins} twins");
    let find = |id: &str| got.iter().find(|l| l["id"] == json!(id)).unwrap_or_else(|| panic!("{id} missing"));
    let t = &find("nn/conv/algo=im2col,layer=rn50_l1_3x3_b1,layout=nchw,threads=all")["twin"];
    assert_eq!(
        (&t["call"], &t["input"], &t["weight"]),
        (&json!("F.conv2d"), &json!([1, 64, 56, 56]), &json!([64, 64, 3, 3]))
    );
    assert_eq!((&t["padding"], &t["output"]), (&json!(1), &json!([1, 64, 56, 56])));
    // The twin is the layer, not the algorithm: winograd's is im2col's.
    for layout in ["nchw", "nhwc"] {
        let twin = |algo: &str| {
            find(&format!("nn/conv/algo={algo},layer=rn50_l3_3x3_b32,layout={layout},threads=all"))["twin"]
                .clone()
        };
        assert_eq!(twin("winograd"), twin("im2col"), "{layout}");
        assert_eq!(twin("winograd")["call"], json!("F.conv2d"));
    }
    let t = &find("nn/conv/algo=direct,layer=r3d18_block,layout=nhwc,threads=all")["twin"];
    assert_eq!((&t["call"], &t["memory_format"]), (&json!("F.conv3d"), &json!("channels_last_3d")));
    let none =
        find("nn/attention/algo=flash,heads=8,mask=none,seq=4096,threads=all")["twin"]["flops"].as_f64();
    let causal =
        find("nn/attention/algo=flash,heads=8,mask=causal,seq=4096,threads=all")["twin"]["flops"].as_f64();
    assert_eq!(none, Some(4.0 * 8.0 * 4096.0 * 4096.0 * 64.0));
    assert_eq!(causal.map(|c| 2.0 * c), none);
    let t = &find("sci/fft/kind=r2c,shape=1024x1024,threads=all")["twin"];
    assert_eq!((&t["call"], &t["output"]), (&json!("torch.fft.rfft2"), &json!([1024, 513])));
}

#[test]
fn parameters_the_twins_do_not_model_are_skipped_by_name() {
    let case = |id: &str, params: Value| json!({"id": id, "params": params});
    let conv = json!({"algo": "im2col", "layer": "rn50_l1_3x3_b1", "layout": "nchw", "threads": "all"});
    let mut bf16 = conv.clone();
    bf16["dtype"] = json!("bf16");
    let mut extra = conv.clone();
    extra["tile"] = json!(8);
    let rnn =
        json!({"cell": "lstm", "hidden": 1024, "batch": 32, "seq": 128, "pass": "train", "threads": "all"});
    let doc = json!({"suites": [{"benchmarks": [{"cases": [
        case("nn/conv/algo=im2col,dtype=bf16,layer=rn50_l1_3x3_b1,layout=nchw,threads=all", bf16),
        case("nn/conv/algo=im2col,layer=rn50_l1_3x3_b1,layout=nchw,threads=all,tile=8", extra),
        case("nn/rnn/batch=32,cell=lstm,hidden=1024,pass=train,seq=128,threads=all", rnn),
        case("nn/conv/algo=im2col,layer=no_such_net,layout=nchw,threads=all",
             json!({"algo": "im2col", "layer": "no_such_net", "layout": "nchw"})),
        case("nn/newbench/x=1", json!({"x": 1})),
        case("nn/conv/algo=im2col,layer=1x8x9x9-k4x3x3-g2,layout=nchw", json!({"algo": "im2col", "layer": "1x8x9x9-k4x3x3-g2", "layout": "nchw"})),
    ]}]}]});
    // Read as text (no python3 needed): the twins accept only f32 and the forward pass.
    let text = std::fs::read_to_string(SCRIPT).expect("read the script");
    let known = &text[text.find("KNOWN = {").expect("a KNOWN table")..];
    let conv_line = known.lines().find(|l| l.contains("(\"nn\", \"conv\")")).expect("conv's entry");
    assert!(conv_line.contains("\"dtype\": (\"f32\",)"), "{conv_line}");
    assert!(known.contains("\"pass\": (\"forward\",)"), "rnn twins are forward only");
    let Some(got) = classify(&doc) else { return };
    let why = |i: usize| {
        got[i]["skip"].as_str().unwrap_or_else(|| panic!("case {i} not skipped: {}", got[i])).to_string()
    };
    assert!(why(0).contains("dtype=bf16"), "{}", why(0));
    assert!(why(1).contains("tile=8"), "{}", why(1));
    assert!(why(2).contains("pass=train"), "{}", why(2));
    assert!(why(3).contains("no_such_net"), "{}", why(3));
    assert!(why(4).contains("nn/newbench"), "{}", why(4));
    // An explicit grouped shape gets its twin, groups and all.
    let t = &got[5]["twin"];
    assert_eq!(
        (&t["groups"], &t["weight"], &t["output"]),
        (&json!(2), &json!([4, 4, 3, 3]), &json!([1, 4, 7, 7]))
    );
    assert_eq!(t["flops"].as_f64(), Some(parse_conv("1x8x9x9-k4x3x3-g2").expect("valid").flops()));
}
