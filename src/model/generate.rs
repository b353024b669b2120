//! Generation on the CPU, as a serving engine drives the model: a batch's
//! prompt fed into the KV cache in bounded chunks (prefill), and the greedy
//! next token of every sequence (decode). The inference suite's `prefill`
//! and `decode` cases time these.

use super::transformer::{KvCache, Model, Workspace};

/// Prompt tokens per prefill call when filling a deep cache: bounds the
/// workspace (and so the memory plan) however deep the cache is.
pub const PREFILL_CHUNK: usize = 128;

/// Runs `tokens` (`[batch x n]`) through `model` in chunks of at most
/// [`PREFILL_CHUNK`] positions, appending to `cache`; `chunk` is a buffer
/// reused between calls (reserve `batch * PREFILL_CHUNK` so it never grows).
pub fn feed(
    model: &Model,
    ws: &mut Workspace,
    cache: &mut KvCache,
    tokens: &[u32],
    batch: usize,
    n: usize,
    chunk: &mut Vec<u32>,
) {
    let mut start = 0;
    while start < n {
        let len = PREFILL_CHUNK.min(n - start);
        if len == n {
            model.decode(ws, cache, tokens, n, false);
            break;
        }
        chunk.clear();
        for b in 0..batch {
            chunk.extend_from_slice(&tokens[b * n + start..b * n + start + len]);
        }
        model.decode(ws, cache, chunk, len, false);
        start += len;
    }
}

/// Greedy next token of every sequence (one per slot of `out`) from the
/// workspace's last logits, `vocab` of them per sequence.
pub fn greedy(ws: &Workspace, vocab: usize, out: &mut [u32]) {
    for (b, t) in out.iter_mut().enumerate() {
        *t = super::argmax(&ws.logits[b * vocab..(b + 1) * vocab]) as u32;
    }
}
