#!/usr/bin/env python3
"""The Hugging Face `tokenizers` library's ids of tfbench's tokenizer check
text for a directory's tokenizer.json, as the fixture
src/suites/inference/text/<name>_tokens.json that the `gguf` benchmark's
`tokenize` case checks a Hugging Face directory against.

The ids come from PyPI's `tokenizers` (Tokenizer.from_file(...).encode(text,
add_special_tokens=False).ids with the file's truncation and padding off, as
tfbench encodes: whole texts, no special tokens added).
Nothing of tfbench runs here. For a plain byte-level BPE without a
pre-tokenizer regex (the test directories' tokenizer.json written by
scripts/make_arch_models.py) the ids are also computed by the textbook BPE
in pure Python below (merge the lowest-ranked adjacent pair, everywhere,
until none applies) and must agree, so the fixture does not rest on the
`tokenizers` code alone. The fingerprint (FNV-1a 64 over the
tokenizer.json's bytes followed by a zero byte) tells tfbench which files the
ids apply to.

    python3 -m venv /tmp/refenv && /tmp/refenv/bin/pip install tokenizers==0.23.3
    /tmp/refenv/bin/python scripts/hf_tokens_reference.py .data/arch/gpt2-tiny-hf/tokenizer.json \\
        src/suites/inference/text/check.txt > src/suites/inference/text/bpe512_tokens.json
"""
import json
import sys

import tokenizers
from tokref import byte_chars, fnv1a, merge_pair


def textbook_bpe(spec, text):
    """Byte-level BPE of the whole text as one word, or None when `spec` is
    not that plain kind (a regex, a normalizer, added tokens)."""
    m, pre = spec["model"], spec.get("pre_tokenizer") or {}
    if (m.get("type") != "BPE" or spec.get("normalizer") or spec.get("added_tokens")
            or pre.get("type") != "ByteLevel" or pre.get("use_regex", True) or pre.get("add_prefix_space")):
        return None
    merges = [tuple(x.split(" ")) if isinstance(x, str) else tuple(x) for x in m["merges"]]
    rank = {p: i for i, p in enumerate(merges)}
    chars = byte_chars()
    seq = [chars[b] for b in text.encode("utf-8")]
    while True:
        ranked = [rank[p] for p in zip(seq, seq[1:]) if p in rank]
        if not ranked:
            break
        a, b = merges[min(ranked)]
        seq = merge_pair(seq, a, b)
    return [m["vocab"][t] for t in seq]


def main():
    path, text_file = sys.argv[1], sys.argv[2]
    raw = open(path, "rb").read()
    text = open(text_file, encoding="utf-8").read()
    tok = tokenizers.Tokenizer.from_file(path)
    # As tfbench encodes a tokenizer.json: whole texts, no truncation or padding.
    tok.no_truncation()
    tok.no_padding()
    ids = tok.encode(text, add_special_tokens=False).ids
    source = (f"PyPI tokenizers {tokenizers.__version__} Tokenizer.from_file(tokenizer.json), no truncation or"
              " padding, .encode(text, add_special_tokens=False).ids")
    own = textbook_bpe(json.loads(raw), text)
    if own is not None:
        if own != ids:
            at = next((i for i, (a, b) in enumerate(zip(own, ids)) if a != b), min(len(own), len(ids)))
            sys.exit(f"hf_tokens_reference: tokenizers and the textbook BPE differ at index {at}")
        source += "; equal to a textbook byte-level BPE in pure Python (scripts/hf_tokens_reference.py)"
    print(f"{len(ids)} ids for {len(text.encode())} bytes, vocabulary {tok.get_vocab_size(True)}", file=sys.stderr)
    json.dump({
        "source": source,
        "model": path,
        "vocab": tok.get_vocab_size(True),
        "fingerprint": fnv1a([raw]),
        "text_file": text_file,
        "text_bytes": len(text.encode()),
        "ids": ids,
    }, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
