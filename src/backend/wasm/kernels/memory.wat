;; Linear-memory patterns. grow/size: memory.grow and memory.size as a
;; module calls them (grow returns the old size in pages, or -1 when the
;; runtime refuses: past 65536 pages, 4 GiB, always).
;;
;; Two allocators over one arena starting at `base`, driven by the same
;; seeded pattern (pattern): 64 slots; each step draws a slot, frees its
;; block if it holds one, else allocates 16 to 1024 bytes into it.
;;   kind 0, bump: a pointer that only moves up; free does nothing.
;;   kind 1, free list: seven size classes (16 << c bytes, c = 0..6), each
;;   with a list of freed blocks reused first; an 8-byte header before each
;;   block holds its class.
;; Every block gets a tag at both ends (slot | size << 8), checked when it is
;; freed: a block handed out twice or overrun traps (unreachable). With a
;; non-zero `log`, step s writes (op, slot, ptr, size) as four i32 at
;; log + 16 s (op 1 = allocate, 0 = free) for the host to replay and check.
(module
  (memory (export "memory") 1)
  (global $heads (mut i32) (i32.const 0))   ;; 7 list heads, i32 each
  (global $slots (mut i32) (i32.const 0))   ;; 64 (ptr, size) pairs
  (global $arena (mut i32) (i32.const 0))   ;; first byte blocks may use
  (global $top (mut i32) (i32.const 0))

  (func (export "grow") (param $pages i32) (result i32)
    (memory.grow (local.get $pages)))

  (func (export "size") (result i32)
    (memory.size))

  (func (export "arena_start") (result i32) (global.get $arena))
  (func (export "arena_used") (result i32) (i32.sub (global.get $top) (global.get $arena)))

  (func $reset (param $base i32)
    (global.set $heads (local.get $base))
    (global.set $slots (i32.add (local.get $base) (i32.const 64)))
    (global.set $arena (i32.add (local.get $base) (i32.const 1024)))
    (global.set $top (global.get $arena))
    (memory.fill (local.get $base) (i32.const 0) (i32.const 1024)))

  (func $bump_alloc (param $size i32) (result i32)
    (local $p i32)
    (local.set $p (global.get $top))
    (global.set $top (i32.and (i32.add (i32.add (local.get $p) (local.get $size)) (i32.const 7)) (i32.const -8)))
    (if (i32.gt_u (global.get $top) (i32.shl (memory.size) (i32.const 16)))
      (then (return (i32.const 0))))
    (local.get $p))

  (func $class (param $size i32) (result i32)
    (local $c i32)
    (block $found
      (loop $up
        (br_if $found (i32.ge_u (i32.shl (i32.const 16) (local.get $c)) (local.get $size)))
        (local.set $c (i32.add (local.get $c) (i32.const 1)))
        (br $up)))
    (local.get $c))

  (func $fl_alloc (param $size i32) (result i32)
    (local $c i32) (local $head i32) (local $p i32)
    (local.set $c (call $class (local.get $size)))
    (local.set $head (i32.add (global.get $heads) (i32.shl (local.get $c) (i32.const 2))))
    (local.set $p (i32.load (local.get $head)))
    (if (local.get $p)
      (then
        (i32.store (local.get $head) (i32.load (local.get $p)))
        (return (local.get $p))))
    (local.set $p (i32.add (global.get $top) (i32.const 8)))
    (global.set $top (i32.add (local.get $p) (i32.shl (i32.const 16) (local.get $c))))
    (if (i32.gt_u (global.get $top) (i32.shl (memory.size) (i32.const 16)))
      (then (return (i32.const 0))))
    (i32.store (i32.sub (local.get $p) (i32.const 8)) (local.get $c))
    (local.get $p))

  (func $fl_free (param $p i32)
    (local $head i32)
    (local.set $head (i32.add (global.get $heads) (i32.shl (i32.load (i32.sub (local.get $p) (i32.const 8))) (i32.const 2))))
    (i32.store (local.get $p) (i32.load (local.get $head)))
    (i32.store (local.get $head) (local.get $p)))

  (func $log (param $log i32) (param $step i32) (param $op i32) (param $slot i32) (param $p i32) (param $size i32)
    (local $at i32)
    (if (i32.eqz (local.get $log)) (then (return)))
    (local.set $at (i32.add (local.get $log) (i32.shl (local.get $step) (i32.const 4))))
    (i32.store (local.get $at) (local.get $op))
    (i32.store offset=4 (local.get $at) (local.get $slot))
    (i32.store offset=8 (local.get $at) (local.get $p))
    (i32.store offset=12 (local.get $at) (local.get $size)))

  ;; Runs `steps` steps of the pattern with allocator `kind` on an arena at
  ;; `base`, then frees what is left; returns the number of allocations.
  (func (export "pattern") (param $kind i32) (param $base i32) (param $steps i32) (param $seed i32) (param $log i32) (result i32)
    (local $step i32) (local $r i32) (local $slot i32) (local $entry i32) (local $p i32) (local $size i32)
    (local $tag i32) (local $allocs i32)
    (call $reset (local.get $base))
    (block $done
      (loop $each
        (br_if $done (i32.ge_u (local.get $step) (local.get $steps)))
        (local.set $seed (i32.add (i32.mul (local.get $seed) (i32.const 1664525)) (i32.const 1013904223)))
        (local.set $r (local.get $seed))
        (local.set $slot (i32.and (i32.shr_u (local.get $r) (i32.const 8)) (i32.const 63)))
        (local.set $entry (i32.add (global.get $slots) (i32.shl (local.get $slot) (i32.const 3))))
        (local.set $p (i32.load (local.get $entry)))
        (if (local.get $p)
          (then
            (local.set $size (i32.load offset=4 (local.get $entry)))
            (call $check_and_free (local.get $kind) (local.get $p) (local.get $slot) (local.get $size))
            (i32.store (local.get $entry) (i32.const 0))
            (call $log (local.get $log) (local.get $step) (i32.const 0) (local.get $slot) (local.get $p) (local.get $size)))
          (else
            (local.set $size (i32.add (i32.const 16) (i32.rem_u (i32.shr_u (local.get $r) (i32.const 16)) (i32.const 1009))))
            (local.set $p
              (if (result i32) (local.get $kind)
                (then (call $fl_alloc (local.get $size)))
                (else (call $bump_alloc (local.get $size)))))
            ;; the arena is full: the host sized memory too small
            (if (i32.eqz (local.get $p)) (then unreachable))
            (local.set $tag (i32.or (local.get $slot) (i32.shl (local.get $size) (i32.const 8))))
            (i32.store (local.get $p) (local.get $tag))
            (i32.store (i32.sub (i32.add (local.get $p) (local.get $size)) (i32.const 4)) (local.get $tag))
            (i32.store (local.get $entry) (local.get $p))
            (i32.store offset=4 (local.get $entry) (local.get $size))
            (local.set $allocs (i32.add (local.get $allocs) (i32.const 1)))
            (call $log (local.get $log) (local.get $step) (i32.const 1) (local.get $slot) (local.get $p) (local.get $size))))
        (local.set $step (i32.add (local.get $step) (i32.const 1)))
        (br $each)))
    ;; free what is left, in slot order
    (local.set $slot (i32.const 0))
    (block $freed
      (loop $each_slot
        (br_if $freed (i32.ge_u (local.get $slot) (i32.const 64)))
        (local.set $entry (i32.add (global.get $slots) (i32.shl (local.get $slot) (i32.const 3))))
        (local.set $p (i32.load (local.get $entry)))
        (if (local.get $p)
          (then
            (call $check_and_free (local.get $kind) (local.get $p) (local.get $slot) (i32.load offset=4 (local.get $entry)))
            (i32.store (local.get $entry) (i32.const 0))))
        (local.set $slot (i32.add (local.get $slot) (i32.const 1)))
        (br $each_slot)))
    (local.get $allocs))

  ;; Checks both tags of a block, then frees it (free list) or drops it (bump).
  (func $check_and_free (param $kind i32) (param $p i32) (param $slot i32) (param $size i32)
    (local $tag i32)
    (local.set $tag (i32.or (local.get $slot) (i32.shl (local.get $size) (i32.const 8))))
    (if (i32.ne (i32.load (local.get $p)) (local.get $tag)) (then unreachable))
    (if (i32.ne (i32.load (i32.sub (i32.add (local.get $p) (local.get $size)) (i32.const 4))) (local.get $tag))
      (then unreachable))
    (if (local.get $kind) (then (call $fl_free (local.get $p))))))
