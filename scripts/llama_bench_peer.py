#!/usr/bin/env python3
"""llama-bench as tfbench's peer: its `-o json` output written as a tfbench
results file, so `tfbench compare` and tfbench's reports put llama.cpp and
tfbench side by side on the same model file.

It reads a tfbench results file (the template: same machine, the `gguf`
cases of the same file, run with `--suite inference --model FILE`) and
llama-bench's JSON, and for every gguf case whose test and depth llama-bench
ran (`ppN` = n_prompt N, n_gen 0; `tgN`; `pgN,M` = llama-bench's
`-pg N,M`; `depth` = n_depth) replaces the case's samples, estimates and
throughput with llama-bench's repetitions (`samples_ns`, one iteration per
sample); cases without a twin (`load`, `tokenize`, other suites) are dropped.
llama-bench checks no result: the peer cases carry no verification, and a
note says where the figures came from.

    bash scripts/llama-bench.sh bench MODEL.gguf llama.json -t 2 -p 512 -n 128 -r 5
    tfbench run --suite inference --model MODEL.gguf --threads 2 -o ours.json
    python3 scripts/llama_bench_peer.py ours.json llama.json peer.json
    tfbench compare --baseline peer.json --against ours.json

Threads: llama-bench's `n_threads` should equal tfbench's `--threads`; a
mismatch is reported and the case skipped.
"""
import argparse
import copy
import json
import math
import os
import statistics
import sys


def quantile(s, p):
    """Linear interpolation between order statistics (tfbench's quantile_sorted)."""
    h = (len(s) - 1) * p
    lo = int(h)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (h - lo) * (s[hi] - s[lo])


def estimates(ns):
    """tfbench's Estimates record: the median's interval is fastest..slowest
    repetition (level 1 - 2^(1-n)), the mean's a normal approximation."""
    s = sorted(float(x) for x in ns)
    n, med, mean = len(s), quantile(s, 0.5), statistics.fmean(s)
    sd = statistics.stdev(s) if n > 1 else 0.0
    half = 1.96 * sd / math.sqrt(n)
    return {
        "median": {"point": med, "lower": s[0], "upper": s[-1], "level": 1 - 2.0 ** (1 - n)},
        "mean": {"point": mean, "lower": mean - half, "upper": mean + half, "level": 0.95},
        "std_dev": sd, "mad": statistics.median(abs(x - med) for x in s), "min": s[0], "max": s[-1],
        "p50": med, "p90": quantile(s, 0.9), "p99": quantile(s, 0.99),
        "iqr_over_median": (quantile(s, 0.75) - quantile(s, 0.25)) / med,
    }


def outliers(ns):
    """Tukey fences at 1.5 and 3 IQR, counted (nothing removed)."""
    s = sorted(float(x) for x in ns)
    q1, q3 = quantile(s, 0.25), quantile(s, 0.75)
    iqr = q3 - q1
    count = lambda f: sum(1 for x in s if f(x))  # noqa: E731
    return {"low_severe": count(lambda x: x < q1 - 3 * iqr),
            "low_mild": count(lambda x: q1 - 3 * iqr <= x < q1 - 1.5 * iqr),
            "high_mild": count(lambda x: q3 + 1.5 * iqr < x <= q3 + 3 * iqr),
            "high_severe": count(lambda x: x > q3 + 3 * iqr), "removed": 0}


def lengths(test):
    """(n_prompt, n_gen) of tfbench's `ppN`, `tgN`, `pgN,M`; None otherwise."""
    t = test.replace(" ", "")
    try:
        if t.startswith("pp"):
            return int(t[2:]), 0
        if t.startswith("tg"):
            return 0, int(t[2:])
        if t.startswith("pg"):
            a, b = t[2:].split(",")
            return int(a), int(b)
    except ValueError:
        pass
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("template", help="a tfbench results file (JSON) with gguf cases, from this machine")
    ap.add_argument("llama_bench", help="llama-bench -o json output")
    ap.add_argument("output", help="where to write llama-bench's figures as tfbench results (JSON)")
    a = ap.parse_args()
    try:
        with open(a.template) as f:
            report = json.load(f)
        report["cases"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        sys.exit(f"llama_bench_peer.py: {a.template} is not a readable tfbench results file: {e}")
    try:
        with open(a.llama_bench) as f:
            runs = json.load(f)
        runs = [r for r in runs if "samples_ns" in r]
    except (OSError, ValueError, TypeError) as e:
        sys.exit(f"llama_bench_peer.py: {a.llama_bench} is not llama-bench JSON (-o json): {e}")
    threads = report.get("harness", {}).get("threads")
    cases, skipped = [], 0
    for c in report["cases"]:
        if c.get("suite") != "inference" or c.get("benchmark") != "gguf" or c["status"]["state"] != "ok":
            skipped += 1
            continue
        nm = lengths(str(c["params"].get("test", "")))
        depth = int(c["params"].get("depth", 0))
        twin = None
        if nm is not None:
            twin = next((r for r in runs if (r["n_prompt"], r["n_gen"], r.get("n_depth", 0)) == (*nm, depth)), None)
        if twin is None:
            skipped += 1
            continue
        if threads is not None and twin.get("n_threads") != threads:
            print(f"{c['id']}: skipped (llama-bench ran {twin.get('n_threads')} threads, tfbench {threads})")
            skipped += 1
            continue
        ns = [float(x) for x in twin["samples_ns"]]
        if not ns:
            skipped += 1
            continue
        c = copy.deepcopy(c)
        est = estimates(ns)
        for t in c.get("throughput", []):
            old = t["rate"]["point"]
            t["rate"] = {"point": t["per_iteration"] / (est["median"]["point"] / 1e9),
                         "lower": t["per_iteration"] / (est["median"]["upper"] / 1e9),
                         "upper": t["per_iteration"] / (est["median"]["lower"] / 1e9),
                         "level": est["median"]["level"]}
            if t.get("pct_of_peak") is not None and old:
                t["pct_of_peak"] *= t["rate"]["point"] / old
        c.update(samples=[{"iterations": 1, "nanos": x, "round": 0} for x in ns], estimates=est,
                 outliers=outliers(ns), verification=None, metrics=[], alloc=None,
                 sampling={"warm_up_ns": 0.0, "iterations_per_sample": 1, "samples": len(ns),
                           "requested_samples": len(ns), "stopped_by": "sample_size", "prepare_ns": 0.0,
                           "verify_ns": 0.0},
                 notes=[f"llama-bench {twin.get('build_commit', '?')} ({twin.get('model_type', '?')}, "
                        f"{twin.get('n_threads')} threads, {twin.get('backends', '?')}, "
                        f"{twin.get('avg_ts', 0):.2f} ± {twin.get('stddev_ts', 0):.2f} t/s; "
                        "no self-check) via scripts/llama_bench_peer.py"])
        cases.append(c)
        print(f"{c['id']}: {twin['avg_ts']:.2f} ± {twin['stddev_ts']:.2f} t/s (llama-bench)")
    if not cases:
        sys.exit("llama_bench_peer.py: no gguf case of the template has a llama-bench twin "
                 "(same ppN/tgN/pgN,M and depth)")
    report["cases"] = cases
    report["targets"] = []
    tmp = a.output + ".tmp"
    with open(tmp, "w") as f:
        json.dump(report, f, indent=1)
    os.replace(tmp, a.output)
    print(f"{len(cases)} cases written to {a.output} ({skipped} without a llama-bench twin)")


if __name__ == "__main__":
    main()
