;; Dot products. dot: the f32 sum of a[i] * b[i] for i < n (the SIMD128 form
;; keeps four partial sums, added at the end, so its rounding differs from
;; the scalar form's running sum). dot_i8: the sum of products of signed
;; bytes, in i32 arithmetic that wraps as the native reference's does;
;; SIMD128 widens 16 bytes to two i16x8 halves and multiplies-and-adds
;; them pairwise with i32x4.dot_i16x8_s.
(module
  (memory (export "memory") 1)

  (func (export "dot_scalar") (param $a i32) (param $b i32) (param $n i32) (result f32)
    (local $end i32) (local $sum f32)
    (local.set $end (i32.add (local.get $a) (i32.shl (local.get $n) (i32.const 2))))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $a) (local.get $end)))
        (local.set $sum (f32.add (local.get $sum) (f32.mul (f32.load (local.get $a)) (f32.load (local.get $b)))))
        (local.set $a (i32.add (local.get $a) (i32.const 4)))
        (local.set $b (i32.add (local.get $b) (i32.const 4)))
        (br $next)))
    (local.get $sum))

  (func (export "dot_simd") (param $a i32) (param $b i32) (param $n i32) (result f32)
    (local $end i32) (local $end4 i32) (local $acc v128) (local $sum f32)
    (local.set $end (i32.add (local.get $a) (i32.shl (local.get $n) (i32.const 2))))
    (local.set $end4 (i32.add (local.get $a) (i32.shl (i32.and (local.get $n) (i32.const -4)) (i32.const 2))))
    (block $done4
      (loop $next4
        (br_if $done4 (i32.ge_u (local.get $a) (local.get $end4)))
        (local.set $acc (f32x4.add (local.get $acc) (f32x4.mul (v128.load (local.get $a)) (v128.load (local.get $b)))))
        (local.set $a (i32.add (local.get $a) (i32.const 16)))
        (local.set $b (i32.add (local.get $b) (i32.const 16)))
        (br $next4)))
    (local.set $sum
      (f32.add
        (f32.add (f32x4.extract_lane 0 (local.get $acc)) (f32x4.extract_lane 1 (local.get $acc)))
        (f32.add (f32x4.extract_lane 2 (local.get $acc)) (f32x4.extract_lane 3 (local.get $acc)))))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $a) (local.get $end)))
        (local.set $sum (f32.add (local.get $sum) (f32.mul (f32.load (local.get $a)) (f32.load (local.get $b)))))
        (local.set $a (i32.add (local.get $a) (i32.const 4)))
        (local.set $b (i32.add (local.get $b) (i32.const 4)))
        (br $next)))
    (local.get $sum))

  (func (export "dot_i8_scalar") (param $a i32) (param $b i32) (param $n i32) (result i32)
    (local $end i32) (local $sum i32)
    (local.set $end (i32.add (local.get $a) (local.get $n)))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $a) (local.get $end)))
        (local.set $sum (i32.add (local.get $sum) (i32.mul (i32.load8_s (local.get $a)) (i32.load8_s (local.get $b)))))
        (local.set $a (i32.add (local.get $a) (i32.const 1)))
        (local.set $b (i32.add (local.get $b) (i32.const 1)))
        (br $next)))
    (local.get $sum))

  (func (export "dot_i8_simd") (param $a i32) (param $b i32) (param $n i32) (result i32)
    (local $end i32) (local $end16 i32) (local $va v128) (local $vb v128) (local $acc v128) (local $sum i32)
    (local.set $end (i32.add (local.get $a) (local.get $n)))
    (local.set $end16 (i32.add (local.get $a) (i32.and (local.get $n) (i32.const -16))))
    (block $done16
      (loop $next16
        (br_if $done16 (i32.ge_u (local.get $a) (local.get $end16)))
        (local.set $va (v128.load (local.get $a)))
        (local.set $vb (v128.load (local.get $b)))
        (local.set $acc
          (i32x4.add (local.get $acc)
            (i32x4.add
              (i32x4.dot_i16x8_s (i16x8.extend_low_i8x16_s (local.get $va)) (i16x8.extend_low_i8x16_s (local.get $vb)))
              (i32x4.dot_i16x8_s (i16x8.extend_high_i8x16_s (local.get $va)) (i16x8.extend_high_i8x16_s (local.get $vb))))))
        (local.set $a (i32.add (local.get $a) (i32.const 16)))
        (local.set $b (i32.add (local.get $b) (i32.const 16)))
        (br $next16)))
    (local.set $sum
      (i32.add
        (i32.add (i32x4.extract_lane 0 (local.get $acc)) (i32x4.extract_lane 1 (local.get $acc)))
        (i32.add (i32x4.extract_lane 2 (local.get $acc)) (i32x4.extract_lane 3 (local.get $acc)))))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $a) (local.get $end)))
        (local.set $sum (i32.add (local.get $sum) (i32.mul (i32.load8_s (local.get $a)) (i32.load8_s (local.get $b)))))
        (local.set $a (i32.add (local.get $a) (i32.const 1)))
        (local.set $b (i32.add (local.get $b) (i32.const 1)))
        (br $next)))
    (local.get $sum)))
