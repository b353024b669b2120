#!/usr/bin/env python3
"""llama.cpp's Unicode tables, as the compact binary file tfbench's WordPiece
tokenizer reads (src/model/tokenizer/llama_unicode.bin).

llama.cpp's WordPiece (`llm_tokenizer_wpm_session::preprocess`) classifies
code points with its own generated tables (src/unicode-data.cpp, from
scripts/gen-unicode-data.py; MIT licence, see the llama.cpp LICENSE), not with
the platform's or a crate's Unicode version, and its "NFD" maps each code
point to one code point. To split and normalize exactly as it does, tfbench
uses the same tables, copied here from llama.cpp build 0c1e570 (vendored in
the llama-cpp-python 0.3.36 source distribution on PyPI). Nothing else.

    python3 scripts/llama_unicode_tables.py \\
        .data/llama.cpp/llama_cpp_python-0.3.36/vendor/llama.cpp/src/unicode-data.cpp \\
        src/model/tokenizer/llama_unicode.bin

Layout, little-endian u32 throughout: b"LLUT", version 1; then four tables,
each a count followed by its rows: flags (start, flags: a range runs to the
next start), whitespace (code point), lowercase (from, to), nfd (first,
last, nfd).
"""
import re
import struct
import sys


def table(src, name, width):
    m = re.search(name + r"\s*=\s*\{(.*?)\n\};", src, re.S)
    if not m:
        sys.exit(f"{name} not found")
    nums = [int(x, 16) for x in re.findall(r"0x[0-9A-Fa-f]+", m.group(1))]
    if len(nums) % width:
        sys.exit(f"{name}: {len(nums)} numbers, not rows of {width}")
    return [nums[i:i + width] for i in range(0, len(nums), width)]


def main():
    src = open(sys.argv[1], encoding="utf-8").read()
    out = bytearray(b"LLUT") + struct.pack("<I", 1)
    for name, width in [("unicode_ranges_flags", 2), ("unicode_set_whitespace", 1),
                        ("unicode_map_lowercase", 2), ("unicode_ranges_nfd", 3)]:
        rows = table(src, name, width)
        out += struct.pack("<I", len(rows))
        for r in rows:
            out += struct.pack("<" + "I" * width, *r)
        print(f"{name}: {len(rows)} rows", file=sys.stderr)
    with open(sys.argv[2] + ".partial", "wb") as f:
        f.write(out)
    import os
    os.replace(sys.argv[2] + ".partial", sys.argv[2])


if __name__ == "__main__":
    main()
