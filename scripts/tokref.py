"""Helpers the tokenizer scripts share: the fingerprint a committed token
reference is keyed by (FNV-1a 64 over NUL-terminated chunks, as
`src/suites/inference/model_file_tokenize.rs` computes it), GPT-2's byte alphabet and
one BPE merge step."""


def fnv1a(chunks):
    x = 0xCBF29CE484222325
    for c in chunks:
        for b in c + b"\0":
            x ^= b
            x = (x * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{x:016x}"


def byte_chars():
    """GPT-2's byte -> printable character table (the ByteLevel alphabet)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def merge_pair(seq, a, b):
    """`seq` with every non-overlapping adjacent (a, b), left to right,
    replaced by the merged token a + b (one BPE merge)."""
    out, i = [], 0
    while i < len(seq):
        if i + 1 < len(seq) and seq[i] == a and seq[i + 1] == b:
            out.append(a + b)
            i += 2
        else:
            out.append(seq[i])
            i += 1
    return out
