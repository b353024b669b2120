"""Helpers the tokenizer scripts share: the fingerprint a committed token
reference is keyed by (FNV-1a 64 over NUL-terminated chunks, as
`src/suites/inference/filetok.rs` computes it) and GPT-2's byte alphabet."""


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
