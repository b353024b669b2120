//! Tests of `pool.rs`, in their own file to keep that one short.

use super::*;

#[test]
fn classes_cover_sizes_with_bounded_waste() {
    assert_eq!(size_class(1), Some((0, 64)));
    assert_eq!(size_class(64), Some((0, 64)));
    assert_eq!(size_class(65), Some((1, 80)));
    assert_eq!(size_class(128), Some((4, 128)));
    assert_eq!(size_class(129), Some((5, 160)));
    assert_eq!(size_class(SMALL_MAX), Some((40, SMALL_MAX)));
    assert_eq!(size_class(SMALL_MAX + 1), None);
    let mut last = (0u16, 64usize);
    for size in (1..5000).chain([12_288, 49_153, SMALL_MAX]) {
        let (c, bytes) = size_class(size).unwrap();
        assert!(bytes >= size && bytes % 16 == 0, "{size} -> {bytes}");
        assert!(size <= 64 || ((bytes - size) as f64) < 0.25 * size as f64, "{size} -> {bytes}");
        assert_eq!(class_bytes(c), bytes, "class {c}");
        if size < 5000 {
            assert!(c >= last.0 && (c > last.0 || bytes == last.1));
            last = (c, bytes);
        }
    }
    // Bias and norm vectors of transformer layers are exact (768 and
    // 3 x 768 f32).
    assert_eq!(size_class(3072).unwrap().1, 3072);
    assert_eq!(size_class(9216).unwrap().1, 10_240);
}

#[test]
fn freed_blocks_are_reused_and_aligned() {
    let mut pool = TensorPool::default();
    let a = pool.alloc(1000).unwrap();
    let pa = a.as_ptr();
    assert_eq!(pa as usize % ALIGN, 0);
    pool.free(a).unwrap();
    let b = pool.alloc(1010).unwrap(); // same class (1024)
    assert_eq!(b.as_ptr(), pa, "the cached block is handed out again");
    let c = pool.alloc(3).unwrap();
    assert_ne!(c.as_ptr(), pa);
    assert_eq!(c.as_ptr() as usize % ALIGN, 0);
    let s = pool.stats();
    assert_eq!((s.hits, s.misses, s.live_blocks), (1, 2, 2));
    assert_eq!(s.requested, 1013);
    assert_eq!(s.held, 1024 + 64);
    pool.free(b).unwrap();
    pool.free(c).unwrap();
    assert_eq!(pool.stats().requested, 0);
    assert_eq!(pool.free_block_sizes().iter().sum::<usize>(), 1024 + 64);
    pool.trim();
    assert_eq!(pool.stats().held, 0);
    assert_eq!(pool.stats().system_blocks, 0);
}

#[test]
fn large_blocks_split_and_coalesce_inside_an_arena() {
    let mut pool = TensorPool::default();
    let big = pool.alloc(1 << 20).unwrap();
    let base = big.as_ptr();
    pool.free(big).unwrap();
    assert_eq!(pool.free_block_sizes(), vec![1 << 20]);
    // Two quarter-size requests are cut from the front of the free arena
    // (hits, no new system memory), leaving one 512 KiB extent.
    let a = pool.alloc(256 << 10).unwrap();
    let b = pool.alloc((256 << 10) - 100).unwrap(); // rounded to 64 B
    assert_eq!(a.as_ptr(), base);
    // SAFETY: pointer arithmetic inside the 1 MiB arena.
    assert_eq!(b.as_ptr(), unsafe { base.add(256 << 10) });
    assert_eq!(b.as_ptr() as usize % ALIGN, 0);
    let s = pool.stats();
    assert_eq!((s.hits, s.misses, s.system_blocks, s.held), (2, 1, 1, 1 << 20));
    assert_eq!(s.in_use, (512 << 10) - 64);
    assert_eq!(pool.free_block_sizes(), vec![(512 << 10) + 64]);
    // Freeing `a` leaves a hole before live `b`: two free extents.
    pool.free(a).unwrap();
    let mut free = pool.free_block_sizes();
    free.sort_unstable();
    assert_eq!(free, vec![256 << 10, (512 << 10) + 64]);
    let ext = external_fragmentation(&free);
    assert!((ext - 256.0 / (768.0 + 1.0 / 16.0)).abs() < 1e-9, "{ext}");
    // Freeing `b` merges both sides: the whole arena is one extent again,
    // and a full-size request is served from it.
    pool.free(b).unwrap();
    assert_eq!(pool.free_block_sizes(), vec![1 << 20]);
    assert_eq!(external_fragmentation(&pool.free_block_sizes()), 0.0);
    let again = pool.alloc(1 << 20).unwrap();
    assert_eq!(again.as_ptr(), base);
    assert_eq!(pool.stats().misses, 1);
    pool.free(again).unwrap();
    pool.trim();
    assert_eq!((pool.stats().held, pool.stats().system_blocks), (0, 0));
}

#[test]
fn a_miss_merges_free_arenas_instead_of_stranding_them() {
    let mut pool = TensorPool::default();
    let a = pool.alloc(256 << 10).unwrap();
    let b = pool.alloc(256 << 10).unwrap();
    pool.free(a).unwrap();
    pool.free(b).unwrap();
    assert_eq!(pool.stats().system_blocks, 2);
    // 384 KiB fits neither free arena: both go back and one 512 KiB arena
    // (their total) serves it, so the pool holds no more than before.
    let c = pool.alloc(384 << 10).unwrap();
    let s = pool.stats();
    assert_eq!((s.system_blocks, s.held, s.peak_held), (1, 512 << 10, 512 << 10));
    assert_eq!(pool.free_block_sizes(), vec![128 << 10]);
    // A request larger than everything free grows by exactly the request.
    let d = pool.alloc(1 << 20).unwrap();
    assert_eq!(pool.stats().held, (512 << 10) + (1 << 20));
    pool.free(c).unwrap();
    pool.free(d).unwrap();
    // Peak need 384 KiB + 1 MiB against 512 KiB + 1 MiB held: the 128 KiB
    // left over from the merged arena is the only waste.
    let f = pool.stats().fragmentation();
    assert!((f - (1.0 - 1408.0 / 1536.0)).abs() < 1e-12, "{f}");
}

#[test]
fn double_free_and_foreign_blocks_are_refused() {
    let mut pool = TensorPool::default();
    let a = pool.alloc(256).unwrap();
    let stale = a.duplicate_for_test();
    pool.free(a).unwrap();
    assert_eq!(pool.free(stale), Err(PoolError::DoubleFree(256)));
    // The block went into the cache once, not twice.
    assert_eq!(pool.free_block_sizes(), vec![256]);
    // A stale handle whose slot was reused by a new block is still refused.
    let b = pool.alloc(256).unwrap();
    let stale = b.duplicate_for_test();
    pool.free(b).unwrap();
    let _c = pool.alloc(256).unwrap();
    assert!(matches!(pool.free(stale), Err(PoolError::DoubleFree(_))));
    let mut other = TensorPool::default();
    let d = other.alloc(64).unwrap();
    assert_eq!(pool.free(d), Err(PoolError::ForeignBlock));
    assert_eq!(pool.alloc(0).unwrap_err(), PoolError::ZeroSize);
}

#[test]
fn budget_refuses_with_an_error_after_trimming_the_cache() {
    let mut pool = TensorPool::new(4096);
    let a = pool.alloc(2048).unwrap();
    let b = pool.alloc(1024).unwrap();
    pool.free(b).unwrap(); // 1024 cached, 3072 held
    // 2048 more needs the cached 1024 back: trimmed, then served.
    let c = pool.alloc(2048).unwrap();
    assert_eq!(pool.stats().trimmed_blocks, 1);
    assert_eq!(pool.stats().held, 4096);
    let err = pool.alloc(1).unwrap_err();
    assert!(matches!(err, PoolError::OverBudget { in_use: 4096, budget: 4096, .. }), "{err}");
    assert!(err.to_string().contains("budget"));
    assert_eq!(pool.stats().refusals, 1);
    pool.free(a).unwrap();
    pool.free(c).unwrap();
    assert!(pool.alloc(4096).is_ok(), "room again once blocks are freed");
}

#[test]
fn zeroed_blocks_are_zero_even_when_reused() {
    let mut pool = TensorPool::default();
    let a = pool.alloc(512).unwrap();
    // SAFETY: live block of 512 bytes.
    unsafe { std::ptr::write_bytes(a.as_ptr(), 0xAB, 512) };
    pool.free(a).unwrap();
    let b = pool.alloc_zeroed(512).unwrap();
    // SAFETY: live block of 512 bytes.
    let bytes = unsafe { std::slice::from_raw_parts(b.as_ptr(), 512) };
    assert!(bytes.iter().all(|&x| x == 0));
    pool.free(b).unwrap();
}

#[test]
fn fragmentation_metrics_on_a_constructed_state() {
    // Free memory in one block: nothing external; in four equal crumbs: 3/4.
    assert_eq!(external_fragmentation(&[4096]), 0.0);
    assert_eq!(external_fragmentation(&[1024; 4]), 0.75);
    assert_eq!(external_fragmentation(&[]), 0.0);
    assert!((external_fragmentation(&[3000, 1000]) - 0.25).abs() < 1e-12);
    // Pool state: 100 B asked for lands in a 112 B class; after freeing it
    // and asking for 1000 B, the pool holds 112 + 1024 for a peak need of 1000.
    let mut pool = TensorPool::default();
    let a = pool.alloc(100).unwrap();
    pool.free(a).unwrap();
    let b = pool.alloc(1000).unwrap();
    let s = pool.stats();
    assert_eq!((s.peak_requested, s.peak_held), (1000, 112 + 1024));
    assert!((s.fragmentation() - (1.0 - 1000.0 / 1136.0)).abs() < 1e-12);
    assert!((s.utilization() - 1000.0 / 1136.0).abs() < 1e-12);
    assert_eq!(pool.free_block_sizes(), vec![112]);
    pool.free(b).unwrap();
}
