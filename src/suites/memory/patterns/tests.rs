//! Tests of `patterns.rs`, in their own file to keep that one short.

use super::*;

#[test]
fn patterns_are_balanced_and_peaks_are_right() {
    let s = sequential();
    assert_eq!(s.allocs, 512);
    assert_eq!(s.peak, 64 * (64 + 256 + 1024 + 4096 + 16384 + 65536 + 262_144 + (1 << 20)));
    for list in [s, random(7, 3000), mixed(&ModelConfig::preset("gpt2-tiny").unwrap(), 2, 16)] {
        let mut live = std::collections::HashSet::new();
        for op in &list.ops {
            match *op {
                Op::Alloc { slot, .. } => assert!(live.insert(slot), "slot {slot} reused while live"),
                Op::Free { slot } => assert!(live.remove(&slot), "slot {slot} freed twice"),
            }
        }
        assert!(live.is_empty(), "every block is freed");
    }
    assert_ne!(random(1, 100).ops, random(2, 100).ops);
    assert_eq!(random(1, 100).ops, random(1, 100).ops);
}

#[test]
fn mixed_pattern_by_hand() {
    let m = ModelConfig::preset("gpt2-tiny").unwrap(); // 2 layers, h 128, f 512, heads 2
    let l = mixed(&m, 1, 4);
    // Embedding + 11 per layer + logits.
    assert_eq!(l.allocs, 1 + 11 * 2 + 1);
    // Peak: the logits with the 7 kept activations live.
    let kept = 4 * 128 * 4 + 2 * (4 * 128 * 4 * 2 + 4 * 512 * 4);
    assert_eq!(l.peak.max(kept + 4 * 4096 * 4), l.peak);
}

#[test]
fn replay_tags_catch_a_block_handed_out_twice() {
    // An allocator that returns the same memory for every request.
    struct Broken(Vec<u8>);
    impl BlockAlloc for Broken {
        type Block = usize;
        fn alloc(&mut self, _: usize, _: usize, _: bool) -> Result<usize, PoolError> {
            Ok(self.0.as_mut_ptr() as usize)
        }
        fn free(&mut self, _: usize) -> Result<(), PoolError> {
            Ok(())
        }
        fn ptr(b: &usize) -> *mut u8 {
            *b as *mut u8
        }
    }
    let list = OpList::build(vec![
        Op::Alloc { slot: 0, size: 64, scratch: false },
        Op::Alloc { slot: 1, size: 64, scratch: false },
        Op::Free { slot: 0 },
        Op::Free { slot: 1 },
    ]);
    let mut a = Broken(vec![0; 64]);
    let mut live = vec![None, None];
    let err = replay(&mut a, &mut live, &list, true, false, true).unwrap_err().to_string();
    assert!(err.contains("overwritten while live"), "{err}");
    let mut pool = TensorPool::default();
    let mut live = vec![None, None];
    replay(&mut pool, &mut live, &list, true, false, true).unwrap();
}

#[test]
fn pool_reuse_keeps_the_mixed_pattern_compact() {
    let m = ModelConfig::preset("gpt2-tiny").unwrap();
    let l = mixed(&m, 2, 32);
    let mut pool = TensorPool::default();
    let mut live: Vec<Option<(super::super::pool::Block, usize)>> = (0..l.slots).map(|_| None).collect();
    for _ in 0..3 {
        replay(&mut pool, &mut live, &l, true, false, true).unwrap();
    }
    let s = pool.stats();
    assert_eq!(s.live_blocks, 0);
    assert!(s.hit_rate() > 0.6, "{}", s.hit_rate());
    assert!(s.peak_requested <= s.peak_held);
}

#[test]
fn scratch_hints_keep_the_mixed_pattern_compact_over_passes() {
    // gpt2-tiny at 4x128: weights, then a forward whose logits (8 MiB) are
    // allocated while the kept activations are live. With the hints the
    // layer temporaries' arenas merge into room for the logits and stay
    // there; without them they end up between kept activations.
    let m = ModelConfig::preset("gpt2-tiny").unwrap();
    let l = mixed(&m, 4, 128);
    let weights: Vec<usize> = m.weights().iter().map(|w| w.numel() * 4).collect();
    let mut pool = TensorPool::default();
    let w: Vec<_> = weights.iter().map(|&s| pool.alloc(s).unwrap()).collect();
    let mut live: Vec<Option<(super::super::pool::Block, usize)>> = (0..l.slots).map(|_| None).collect();
    for _ in 0..4 {
        replay(&mut pool, &mut live, &l, true, false, true).unwrap();
    }
    let s = pool.stats();
    assert_eq!(s.peak_requested, l.peak + weights.iter().sum::<usize>());
    assert!(s.fragmentation() < 0.05, "{s:?}");
    let unhinted = fragmentation_without_hints(std::slice::from_ref(&l), &weights).unwrap();
    assert!(unhinted > s.fragmentation(), "{unhinted}");
    for b in w {
        pool.free(b).unwrap();
    }
}
