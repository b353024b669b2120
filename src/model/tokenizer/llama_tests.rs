//! The file tokenizers against llama.cpp's own test vectors: the vocabulary
//! files llama.cpp ships for `test-tokenizer-0` (`models/ggml-vocab-*.gguf`,
//! with `.inp`, inputs separated by `__ggml_vocab_test__` lines, and `.out`,
//! the expected ids of each input, one line each), which
//! `scripts/fetch-test-data.sh` copies into the data folder's `llama-vocab/`
//! from the llama-cpp-python 0.3.36 source distribution (llama.cpp 0c1e570).
//! As `test-tokenizer-0` does: no BOS/EOS, special tokens not parsed.

use super::{FileTokenizer, from_header_with};
use crate::model::gguf::GgufFile;

/// Inputs with llama.cpp's ids for each.
type Cases = Vec<(String, Vec<u32>)>;

/// One vocabulary's inputs and llama.cpp's ids, or the reason to skip.
fn load(name: &str) -> Result<(FileTokenizer, Cases), String> {
    // The qwen2 and phi-3 vocabularies sit with the tiny models made from them.
    let path = crate::data::find(&format!("llama-vocab/ggml-vocab-{name}.gguf"))
        .or_else(|_| crate::data::find(&format!("arch/ggml-vocab-{name}.gguf")))?;
    let read = |ext: &str| {
        let p = path.with_extension(format!("gguf.{ext}"));
        std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))
    };
    let (inp, out) = (read("inp")?, read("out")?);
    // test-tokenizer-0.cpp's read_tests: split on the separator line, the
    // last piece kept only when not empty.
    let sep = "\n__ggml_vocab_test__\n";
    let mut inputs = Vec::new();
    let mut rest = inp.as_str();
    while !rest.is_empty() {
        match rest.find(sep) {
            Some(at) => {
                inputs.push(rest[..at].to_string());
                rest = &rest[at + sep.len()..];
            }
            None => {
                inputs.push(rest.to_string());
                rest = "";
            }
        }
    }
    let ids: Vec<Vec<u32>> = out
        .lines()
        .map(|l| l.split_whitespace().map(|t| t.parse::<u32>().map_err(|e| format!("{t}: {e}"))).collect())
        .collect::<Result<_, _>>()?;
    if inputs.len() != ids.len() || inputs.is_empty() {
        return Err(format!("{name}: {} inputs, {} expected outputs", inputs.len(), ids.len()));
    }
    let f = GgufFile::open(&path, None).map_err(|e| format!("{e:#}"))?;
    let t = from_header_with(&f.header, false).map_err(|e| format!("{e:#}"))?;
    Ok((t, inputs.into_iter().zip(ids).collect()))
}

/// Every input of `name` gives llama.cpp's ids; the file's tokenizer kind is `kind`.
fn check(name: &str, kind: &str) {
    let (t, cases) = match load(name) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("skipped: llama.cpp's {name} vocabulary not available: {e}");
            return;
        }
    };
    assert_eq!(t.kind, kind);
    let mut bad = Vec::new();
    for (text, want) in &cases {
        let got = t.encode(text).unwrap();
        if &got != want {
            bad.push(format!("{text:?}: got {got:?}, llama.cpp {want:?}"));
        } else if t.round_trips() {
            assert_eq!(&t.decode(&got).unwrap(), text, "round trip");
        }
    }
    assert!(bad.is_empty(), "{name}: {} of {} inputs differ:\n{}", bad.len(), cases.len(), bad.join("\n"));
}

#[test]
fn llama_spm_ids_equal_llama_cpp() {
    check("llama-spm", "llama/spm");
}

#[test]
fn bert_bge_ids_equal_llama_cpp() {
    check("bert-bge", "bert/wpm");
}

#[test]
fn gpt_2_ids_equal_llama_cpp() {
    check("gpt-2", "gpt2/gpt-2");
}

#[test]
fn qwen2_ids_equal_llama_cpp() {
    check("qwen2", "gpt2/qwen2");
}

#[test]
fn phi_3_ids_equal_llama_cpp() {
    check("phi-3", "llama/spm");
}

/// Gemma 3's 262144-token SentencePiece vocabulary (the 270M file): the ids
/// `llama-tokenize` gives (llama.cpp 0c1e570, through llama-cpp-python's
/// `Llama.tokenize`, special tokens parsed, BOS 2 dropped here).
#[test]
fn gemma3_ids_equal_llama_cpp() {
    let Ok(path) = crate::data::find("gemma3/gemma-3-270m-q4_k_m.gguf") else {
        eprintln!(
            "skipped: gemma3/gemma-3-270m-q4_k_m.gguf not in the data folder (bash scripts/fetch-test-data.sh)"
        );
        return;
    };
    let f = GgufFile::open(&path, None).unwrap();
    let t = super::from_header(&f.header).unwrap();
    let ids = t.encode("In the beginning God created the heaven and the earth.").unwrap();
    assert_eq!(ids, [902, 506, 6534, 3803, 4464, 506, 20808, 532, 506, 7764, 236761]);
}
