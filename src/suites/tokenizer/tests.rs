use super::*;
use crate::plan::{ParamValue, SuiteSpec, expand, test_case};

fn spec() -> SuiteSpec {
    SuiteSpec::parse("tokenizer", SPEC).expect("suites/tokenizer.toml parses")
}

fn have_data() -> bool {
    let d = crate::data::lookup();
    let missing = sources::REAL
        .iter()
        .flat_map(|(_, files)| files.iter().copied())
        .chain(["kjv.txt"])
        .find_map(|f| d.find(f).err());
    if let Some(why) = &missing {
        eprintln!("SKIPPED: real tokenizer files absent: {why}");
    }
    missing.is_none()
}

fn s(v: &str) -> ParamValue {
    ParamValue::Str(v.into())
}

fn i(v: i64) -> ParamValue {
    ParamValue::Int(v)
}

#[test]
fn segments_cut_lines_paragraphs_and_4k_chunks() {
    let text = "a\n\n  b  \nccc\n".repeat(300);
    let lines = segments(&text, Length::Line, 0);
    assert_eq!(lines.len(), 900);
    assert_eq!(&lines[..3], ["a", "  b", "ccc"]);
    let paras = segments(&text, Length::Paragraph, 0);
    assert!(paras[..paras.len() - 1].iter().all(|p| p.len() >= 512 && p.len() < 512 + 4));
    assert_eq!(paras.concat().replace('\n', "").len(), lines.concat().len());
    let chunks = segments(&text, Length::Chunk4k, 0);
    assert!(chunks.iter().all(|c| c.len() <= 4096));
    assert_eq!(chunks.join("\n"), lines.join("\n"), "chunks lose nothing");
    // A budget stops after the first text that reaches it.
    let some = segments(&text, Length::Line, 10);
    assert_eq!(some.iter().map(String::len).sum::<usize>(), 11);
}

#[test]
fn absent_real_files_become_trained_fallbacks_in_case_ids() {
    let empty = crate::data::Lookup {
        places: vec![crate::data::Place {
            dir: std::env::temp_dir().join("tfbench-no-data-here"),
            source: crate::data::Source::Env,
            exists: false,
        }],
    };
    let spec = sources::with_fallbacks(SPEC, &empty);
    let parsed = SuiteSpec::parse("tokenizer", &spec).unwrap();
    let ids: Vec<String> =
        parsed.benchmarks.iter().flat_map(|b| expand("tokenizer", b)).map(|c| c.id).collect();
    assert!(ids.iter().any(|i| i.contains("vocab=gpt2-trained")));
    assert!(ids.iter().any(|i| i.contains("vocab=bert-trained")));
    assert!(
        ids.iter().all(|i| !i.ends_with("vocab=gpt2") && !i.contains("vocab=gpt2,")),
        "no silent real vocab"
    );
    // With every file present the spec is untouched.
    if have_data() {
        assert_eq!(sources::with_fallbacks(SPEC, &crate::data::lookup()), SPEC);
    }
}

#[test]
fn bad_params_name_the_valid_choices() {
    let err = crate::suites::prepare_standalone(&TokenizerSuite, &test_case("tokenizer", "nope", &[]))
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("valid: encode, encode_batch"), "{err}");
    let c = test_case(
        "tokenizer",
        "encode",
        &[("vocab", s("gpt3")), ("corpus", s("multilingual")), ("length", s("line")), ("input_bytes", i(0))],
    );
    let err = format!("{:#}", crate::suites::prepare_standalone(&TokenizerSuite, &c).err().unwrap());
    assert!(err.contains("valid: gpt2, bert, llama2"), "{err}");
    let c = test_case(
        "tokenizer",
        "encode",
        &[("vocab", s("gpt2-trained")), ("corpus", s("bible")), ("length", s("line")), ("input_bytes", i(0))],
    );
    let err = format!("{:#}", crate::suites::prepare_standalone(&TokenizerSuite, &c).err().unwrap());
    assert!(err.contains("valid: kjv, multilingual"), "{err}");
    let c = test_case(
        "tokenizer",
        "normalize",
        &[("form", s("nfkd")), ("corpus", s("multilingual")), ("input_bytes", i(0))],
    );
    let err = format!("{:#}", crate::suites::prepare_standalone(&TokenizerSuite, &c).err().unwrap());
    assert!(err.contains("valid: nfc, nfkc, lowercase, strip_accents, bert"), "{err}");
    let c = test_case(
        "tokenizer",
        "encode",
        &[
            ("vocab", s("gpt2-trained")),
            ("corpus", s("multilingual")),
            ("length", s("huge")),
            ("input_bytes", i(0)),
        ],
    );
    let err = format!("{:#}", crate::suites::prepare_standalone(&TokenizerSuite, &c).err().unwrap());
    assert!(err.contains("valid: line, paragraph, 4k"), "{err}");
}

/// Every normalize form and pre-tokenizer verifies on the built-in sample
/// (no .data needed), and a broken expectation is caught.
#[test]
fn normalize_and_pretokenize_verify_on_the_multilingual_sample() {
    for form in ["nfc", "nfkc", "lowercase", "strip_accents", "bert"] {
        let c = test_case(
            "tokenizer",
            "normalize",
            &[("form", s(form)), ("corpus", s("multilingual")), ("input_bytes", i(0))],
        );
        let mut w = crate::suites::prepare_standalone(&TokenizerSuite, &c).unwrap();
        let v = w.verify().unwrap_or_else(|e| panic!("{form}: {e:#}"));
        assert!(v.passed);
        w.run(1).unwrap();
    }
    for kind in ["bytelevel", "whitespace", "metaspace"] {
        let c = test_case(
            "tokenizer",
            "pretokenize",
            &[("kind", s(kind)), ("corpus", s("multilingual")), ("input_bytes", i(0))],
        );
        let mut w = crate::suites::prepare_standalone(&TokenizerSuite, &c).unwrap();
        let v = w.verify().unwrap_or_else(|e| panic!("{kind}: {e:#}"));
        assert!(v.passed);
        w.run(1).unwrap();
    }
}

#[test]
fn trained_fallbacks_round_trip_and_batch_equals_singles_without_data() {
    // A byte-level BPE trained on the built-in sample: the fallback path.
    for bench in ["encode_batch", "decode", "offsets"] {
        let mut p = vec![
            ("vocab", s("gpt2-trained")),
            ("corpus", s("multilingual")),
            ("length", s("line")),
            ("input_bytes", i(0)),
        ];
        match bench {
            "encode_batch" => p.push(("threads", i(2))),
            "offsets" => p.push(("offsets", s("chars"))),
            _ => {}
        }
        let mut w =
            crate::suites::prepare_standalone(&TokenizerSuite, &test_case("tokenizer", bench, &p)).unwrap();
        let v = w.verify().unwrap_or_else(|e| panic!("{bench}: {e:#}"));
        assert!(v.reference.contains("round trip"), "{bench}: {}", v.reference);
        w.run(1).unwrap();
        assert!(w.metrics().iter().any(|m| m.name == "trained_here"));
    }
}

#[test]
fn known_ids_pass_on_real_files_and_a_wrong_vocabulary_fails() {
    if !have_data() {
        return;
    }
    let c = test_case(
        "tokenizer",
        "encode",
        &[("vocab", s("gpt2")), ("corpus", s("multilingual")), ("length", s("line")), ("input_bytes", i(0))],
    );
    let loaded = sources::tokenizer(&c).unwrap();
    assert_eq!(loaded.tok.encode("Hello world", false).unwrap().get_ids(), [15496, 995]);
    for vocab in ["gpt2", "bert", "llama2"] {
        let c = test_case(
            "tokenizer",
            "encode",
            &[
                ("vocab", s(vocab)),
                ("corpus", s("multilingual")),
                ("length", s("line")),
                ("input_bytes", i(0)),
            ],
        );
        let l = sources::tokenizer(&c).unwrap();
        let v = reference::known_ids(&l).unwrap().unwrap();
        assert!(v.passed, "{vocab}: {}", v.detail);
    }
    // The LLaMA file checked against GPT-2's ids must fail loudly.
    let c = test_case(
        "tokenizer",
        "encode",
        &[
            ("vocab", s("llama2")),
            ("corpus", s("multilingual")),
            ("length", s("line")),
            ("input_bytes", i(0)),
        ],
    );
    let mut wrong = sources::tokenizer(&c).unwrap();
    wrong.known_ids = Some("gpt2");
    assert!(!reference::known_ids(&wrong).unwrap().unwrap().passed);
}

#[test]
fn special_tokens_frame_truncate_and_pad() {
    if !have_data() {
        return;
    }
    for vocab in ["bert", "llama2"] {
        let c = test_case(
            "tokenizer",
            "special_tokens",
            &[
                ("vocab", s(vocab)),
                ("corpus", s("multilingual")),
                ("length", s("paragraph")),
                ("max_length", i(16)),
                ("input_bytes", i(0)),
            ],
        );
        let mut w = crate::suites::prepare_standalone(&TokenizerSuite, &c).unwrap();
        let v = w.verify().unwrap_or_else(|e| panic!("{vocab}: {e:#}"));
        assert!(v.passed);
        assert!(w.metrics().iter().any(|m| m.name == "truncated_fraction" && m.value > 0.9));
    }
}

#[test]
fn train_reaches_the_vocab_size_on_the_sample() {
    for model in ["bpe", "wordpiece", "unigram"] {
        let c = test_case(
            "tokenizer",
            "train",
            &[
                ("model", s(model)),
                ("vocab_size", i(700)),
                ("corpus", s("multilingual")),
                ("input_bytes", i(0)),
                ("threads", s("all")),
            ],
        );
        let mut w = crate::suites::prepare_standalone(&TokenizerSuite, &c).unwrap();
        let v = w.verify().unwrap_or_else(|e| panic!("{model}: {e:#}"));
        assert!(v.passed, "{model}");
    }
}

/// Not a test: times encode_batch of the matching default cases without
/// the binary's counting allocator, to see what it costs.
/// `TFBENCH_PROBE=gpt2 cargo test --release --lib tokenizer::tests::probe -- --ignored --nocapture`
#[test]
#[ignore]
fn probe() {
    let re = regex::Regex::new(
        &std::env::var("TFBENCH_PROBE").unwrap_or("encode_batch.*threads=1,vocab=gpt2".into()),
    )
    .unwrap();
    for b in spec().benchmarks {
        for c in expand("tokenizer", &b).into_iter().filter(|c| re.is_match(&c.id)) {
            let mut w = crate::suites::prepare_standalone(&TokenizerSuite, &c).unwrap();
            assert!(w.verify().unwrap().passed);
            let bytes = w.throughput()[0].per_iteration;
            let mut best = f64::MAX;
            for _ in 0..5 {
                let t = std::time::Instant::now();
                w.run(1).unwrap();
                best = best.min(t.elapsed().as_secs_f64());
            }
            println!("{}: {:.2} MB/s", c.id, bytes / best / 1e6);
        }
    }
}
