#!/usr/bin/env python3
"""How far llama.cpp's own CPU paths differ from each other on one GGUF file:
two fixtures written by scripts/llamacpp_reference.py from the same file and
prompt with two llama.cpp builds (e.g. GGML_NATIVE on an AVX-512 machine and
GGML_AVX2 only, the class of hosted CI runners), compared as tfbench's
llamacpp tests compare tfbench with llama.cpp.

Only positions whose contexts agree are compared: the prompt, then the
greedy continuation up to the first position where the two builds picked
different tokens (after it the two runs see different text).

Prints, as JSON: positions compared, the first greedy divergence (if any),
top-1 agreement, and the largest |logit difference| over ids both fixtures
hold (the top-8 of each and the fixed sample), as a fraction of the largest
|logit|: the figure the tests' tolerance on quantized files is set against.

    python3 scripts/llamacpp_isa_spread.py native.json avx2.json
"""
import json
import sys


def logits_of(pos):
    """id -> logit of one position: its top ids and its sample ids."""
    out = dict(zip(pos["top_ids"], pos["top_logits"]))
    return out, pos["sample_logits"]


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    a, b = (json.load(open(p)) for p in sys.argv[1:])
    if a["prompt_ids"] != b["prompt_ids"] or a["sample_ids"] != b["sample_ids"]:
        sys.exit("the fixtures were made with different prompts or sample ids")
    ga, gb = a["greedy_ids"], b["greedy_ids"]
    diverge = next((i for i, (x, y) in enumerate(zip(ga, gb)) if x != y), None)
    n_prompt = len(a["prompt_ids"])
    # Position p's logits predict token p+1; contexts agree up to the prompt
    # plus the greedy tokens before the divergence.
    usable = n_prompt + (diverge if diverge is not None else len(ga))
    usable = min(usable, len(a["positions"]), len(b["positions"]))
    worst, scale, top1 = 0.0, 0.0, 0
    for pa, pb in zip(a["positions"][:usable], b["positions"][:usable]):
        ta, sa = logits_of(pa)
        tb, sb = logits_of(pb)
        scale = max(scale, max(abs(v) for v in pa["top_logits"] + pb["top_logits"]))
        shared = set(ta) & set(tb)
        diffs = [abs(ta[i] - tb[i]) for i in shared] + [abs(x - y) for x, y in zip(sa, sb)]
        worst = max(worst, max(diffs))
        top1 += pa["top_ids"][0] == pb["top_ids"][0]
    print(json.dumps({
        "file": a["file"],
        "builds": [a["llama_cpp"].get("build", sys.argv[1]), b["llama_cpp"].get("build", sys.argv[2])],
        "positions_compared": usable,
        "greedy_divergence_at": diverge,
        "top1_agree": top1,
        "max_abs_logit_diff": round(worst, 5),
        "largest_abs_logit": round(scale, 5),
        "fraction_of_largest": round(worst / scale, 5) if scale else None,
    }, indent=1))


if __name__ == "__main__":
    main()
