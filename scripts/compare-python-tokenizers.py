#!/usr/bin/env python3
"""Side-by-side batch encode throughput: Python `tokenizers` vs tfbench's
tokenizer/encode_batch cases, on the same texts and thread counts.

    pip install tokenizers                 # the Python package (Rust core + bindings)
    cargo build --release
    python3 scripts/compare-python-tokenizers.py [--vocab gpt2] [--threads 1 2] [--length line paragraph 4k] [--rounds 5]

For every (length, threads) pair it times Python's Tokenizer.encode_batch on
the texts tfbench cuts from the corpus (same segmentation as
src/suites/tokenizer/sources.rs::segments, checked by comparing token
counts) and the matching tfbench case, interleaved over --rounds rounds
(alternating which side goes first, so drift on a shared machine hits both
alike), and prints each side's median throughput over the rounds, the
median of the per-round ratios tfbench / Python (>= 1 means tfbench is at
least as fast) and their range.
Python's pool size is fixed with RAYON_RS_NUM_CPUS before tokenizers is
imported, so each thread count runs in its own Python process.

Both sides run the same Rust tokenizers core; what differs is the allocator
under it. tfbench runs on mimalloc by default (glibc malloc in the Python
process): `--allocator system` runs tfbench on glibc too, which isolates the
suite's own overhead (ratio about 1); the default shows what a Rust program
with mimalloc gets (about 1.3-1.9x on this machine). The header names it.
"""
import argparse, json, os, statistics, subprocess, sys, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def segments(text, length, budget):
    """The same cut as tfbench's `segments` (lines, >= 512-byte paragraphs, <= 4096-byte chunks)."""
    out, total, cur = [], 0, ""
    def flush():
        nonlocal cur, total
        if cur:
            total += len(cur.encode())
            out.append(cur)
            cur = ""
    for line in text.split("\n"):
        line = line.rstrip()
        if not line.strip():
            continue
        if budget and total >= budget:
            break
        if length == "line":
            cur = line
            flush()
        elif length == "paragraph":
            cur = cur + "\n" + line if cur else line
            if len(cur.encode()) >= 512:
                flush()
        else:
            if cur and len(cur.encode()) + 1 + len(line.encode()) > 4096:
                flush()
            cur = cur + "\n" + line if cur else line
    if not budget or total < budget:
        flush()
    return out


def python_child(args):
    """Runs in a child process whose RAYON_RS_NUM_CPUS is already set."""
    import tokenizers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    data = os.environ.get("TFBENCH_DATA_DIR", os.path.join(ROOT, ".data"))
    if args.vocab == "gpt2":
        tok = Tokenizer(models.BPE.from_file(os.path.join(data, "gpt2/encoder.json"), os.path.join(data, "gpt2/vocab.bpe")))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        tok.decoder = decoders.ByteLevel()
    else:
        path = {"bert": "minilm/tokenizer.json", "llama2": "llama2/tokenizer.json"}[args.vocab]
        tok = Tokenizer.from_file(os.path.join(data, path))
        tok.no_padding()
        tok.no_truncation()
    text = open(os.path.join(data, "kjv.txt"), encoding="utf-8").read()
    texts = segments(text, args.length[0], args.input_bytes)
    nbytes = sum(len(t.encode()) for t in texts)
    encs = tok.encode_batch(texts, add_special_tokens=False)
    ntokens = sum(len(e.ids) for e in encs)
    times = []
    deadline = time.perf_counter() + args.seconds
    while len(times) < 5 or (time.perf_counter() < deadline and len(times) < 200):
        t0 = time.perf_counter()
        tok.encode_batch(texts, add_special_tokens=False)
        times.append(time.perf_counter() - t0)
    print(json.dumps({"median_s": statistics.median(times), "bytes": nbytes, "tokens": ntokens,
                      "texts": len(texts), "samples": len(times), "version": tokenizers.__version__}))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--vocab", default="gpt2", choices=["gpt2", "bert", "llama2"])
    p.add_argument("--length", nargs="+", default=["line", "paragraph", "4k"], choices=["line", "paragraph", "4k"])
    p.add_argument("--threads", nargs="+", default=["1", "all"])
    p.add_argument("--input-bytes", type=int, default=262144)
    p.add_argument("--seconds", type=float, default=2.0, help="sampling time per side, case and round")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds per case (ratio = median over rounds)")
    p.add_argument("--tfbench", default=os.path.join(ROOT, "target/release/tfbench"))
    p.add_argument("--allocator", choices=["mimalloc", "system"], default=None,
                   help="TFBENCH_ALLOCATOR for the tfbench side (default: tfbench's own default, mimalloc)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        return python_child(args)
    ncpu = os.cpu_count() or 1
    rs_env = dict(os.environ)
    if args.allocator:
        rs_env["TFBENCH_ALLOCATOR"] = args.allocator
    allocator = [None]
    print(f"{'case':<48} {'python MB/s':>11} {'tfbench MB/s':>12} {'ratio':>6} {'range':>11}  tokens (py/rs)")
    for length in args.length:
        for threads in args.threads:
            n = ncpu if threads == "all" else int(threads)
            env = dict(os.environ, RAYON_RS_NUM_CPUS=str(n), RAYON_NUM_THREADS=str(n), TOKENIZERS_PARALLELISM="true")
            case = (f"tokenizer/encode_batch/corpus=kjv,input_bytes={args.input_bytes},length={length},"
                    f"threads={threads},vocab={args.vocab}")
            cfg = os.path.join(ROOT, "target", "compare-python.toml")

            def python_side():
                out = subprocess.run([sys.executable, __file__, "--child", "--vocab", args.vocab, "--length", length,
                                      "--input-bytes", str(args.input_bytes), "--seconds", str(args.seconds)],
                                     env=env, check=True, capture_output=True, text=True).stdout
                return json.loads(out)

            def tfbench_side():
                with open(cfg, "w") as f:
                    f.write(f"[suites.tokenizer.benchmarks.encode_batch]\ninput_bytes = [{args.input_bytes}]\n"
                            f"threads = [{threads if threads != 'all' else chr(34) + 'all' + chr(34)}]\n"
                            f"length = [\"{length}\"]\nvocab = [\"{args.vocab}\"]\n")
                rs = subprocess.run([args.tfbench, "run", "--suite", "tokenizer", "--config", cfg, "--exact", case,
                                     "--no-probe", "--quiet", "--measurement-time", str(args.seconds),
                                     "--warm-up-time", "0.5", "-f", "json"], check=True, capture_output=True, text=True,
                                    env=rs_env)
                report = json.loads(rs.stdout)
                if allocator[0] is None:
                    allocator[0] = report["environment"].get("allocator", "system")
                    print(f"(tfbench allocator: {allocator[0]}; Python: the C library's malloc)", flush=True)
                c = report["cases"][0]
                if c["status"]["state"] != "ok":
                    sys.exit(f"{case}: {c['status']}")
                tokens = next(t["per_iteration"] for t in c["throughput"] if t["kind"] == "tokens")
                return c["estimates"]["median"]["point"] / 1e9, int(tokens)

            py_rates, rs_rates, ratios = [], [], []
            for r in range(args.rounds):
                # Alternate the order so neither side always runs on the warmer (or busier) machine.
                if r % 2 == 0:
                    py = python_side()
                    rs_s, rs_tokens = tfbench_side()
                else:
                    rs_s, rs_tokens = tfbench_side()
                    py = python_side()
                if py["tokens"] != rs_tokens:
                    sys.exit(f"token counts differ ({py['tokens']} vs {rs_tokens}): the two sides did not encode the same texts")
                py_rates.append(py["bytes"] / py["median_s"] / 1e6)
                rs_rates.append(py["bytes"] / rs_s / 1e6)
                ratios.append(rs_rates[-1] / py_rates[-1])
            label = f"{args.vocab} {length} threads={threads} ({py['texts']} texts)"
            spread = f"{min(ratios):.2f}-{max(ratios):.2f}"
            print(f"{label:<48} {statistics.median(py_rates):>11.2f} {statistics.median(rs_rates):>12.2f} "
                  f"{statistics.median(ratios):>6.2f} {spread:>11}  {py['tokens']}/{rs_tokens}", flush=True)

if __name__ == "__main__":
    main()
