#!/usr/bin/env python3
"""tfbench's GPU cases beside PyTorch's twins, as a Markdown table.

    python3 scripts/gpu_side_by_side.py ours.json torch.json

`ours.json` is `tfbench run --suite tensor --device cuda -f json`, and
`torch.json` is `scripts/torch_peer.py --device cuda ours.json torch.json`
run right after it on the same GPU (scripts/gpu-check.sh does both). Each
row: the host-clock median per iteration, the CUDA-event median, the share
of the GPU probe's matching limit, the roofline class, PyTorch's median
(host clock after synchronising) and the ratio tfbench / PyTorch (below 1:
tfbench is faster)."""
import json
import sys


def metric(case, name):
    return next((m["value"] for m in case.get("metrics") or [] if m["name"] == name), None)


def median(case):
    est = case.get("estimates")
    return est["median"]["point"] if est else None


def fmt(ns):
    if ns is None:
        return "-"
    return f"{ns / 1e6:.3f} ms" if ns >= 1e6 else f"{ns / 1e3:.1f} us"


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    ours, peer = (json.load(open(p)) for p in sys.argv[1:])
    theirs = {c["id"]: c for c in peer["cases"] if c["status"]["state"] == "ok"}
    print("| case | tfbench (host) | tfbench (CUDA events) | % of probed limit | bound | PyTorch | tfbench / PyTorch |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for c in ours["cases"]:
        if c["status"]["state"] != "ok" or "device=cuda" not in c["id"]:
            continue
        t = theirs.get(c["id"])
        m, tm = median(c), (median(t) if t else None)
        pct = metric(c, "pct_of_probed_limit")
        name = c["id"].removeprefix("tensor/").rsplit(",device=", 1)[0]
        print(f"| `{name}` | {fmt(m)} | {fmt(metric(c, 'cuda_event_ns'))} | "
              f"{'-' if pct is None else f'{pct:.0f}%'} | {c.get('bound') or '-'} | {fmt(tm)} | "
              f"{f'{m / tm:.2f}' if m and tm else '-'} |")


if __name__ == "__main__":
    main()
