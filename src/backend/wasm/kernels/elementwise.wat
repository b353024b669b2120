;; Element-wise f32 kernels: out[i] = a[i] + b[i] (add) or a[i] * b[i] (mul)
;; for i < n. Pointers are byte offsets into linear memory. The SIMD128
;; forms take four lanes at a time, then finish the last n % 4 one by one.
(module
  (memory (export "memory") 1)

  (func (export "add_scalar") (param $a i32) (param $b i32) (param $out i32) (param $n i32)
    (local $end i32)
    (local.set $end (i32.add (local.get $out) (i32.shl (local.get $n) (i32.const 2))))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $out) (local.get $end)))
        (f32.store (local.get $out) (f32.add (f32.load (local.get $a)) (f32.load (local.get $b))))
        (local.set $a (i32.add (local.get $a) (i32.const 4)))
        (local.set $b (i32.add (local.get $b) (i32.const 4)))
        (local.set $out (i32.add (local.get $out) (i32.const 4)))
        (br $next))))

  (func (export "add_simd") (param $a i32) (param $b i32) (param $out i32) (param $n i32)
    (local $end i32) (local $end4 i32)
    (local.set $end (i32.add (local.get $out) (i32.shl (local.get $n) (i32.const 2))))
    (local.set $end4 (i32.add (local.get $out) (i32.shl (i32.and (local.get $n) (i32.const -4)) (i32.const 2))))
    (block $done4
      (loop $next4
        (br_if $done4 (i32.ge_u (local.get $out) (local.get $end4)))
        (v128.store (local.get $out) (f32x4.add (v128.load (local.get $a)) (v128.load (local.get $b))))
        (local.set $a (i32.add (local.get $a) (i32.const 16)))
        (local.set $b (i32.add (local.get $b) (i32.const 16)))
        (local.set $out (i32.add (local.get $out) (i32.const 16)))
        (br $next4)))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $out) (local.get $end)))
        (f32.store (local.get $out) (f32.add (f32.load (local.get $a)) (f32.load (local.get $b))))
        (local.set $a (i32.add (local.get $a) (i32.const 4)))
        (local.set $b (i32.add (local.get $b) (i32.const 4)))
        (local.set $out (i32.add (local.get $out) (i32.const 4)))
        (br $next))))

  (func (export "mul_scalar") (param $a i32) (param $b i32) (param $out i32) (param $n i32)
    (local $end i32)
    (local.set $end (i32.add (local.get $out) (i32.shl (local.get $n) (i32.const 2))))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $out) (local.get $end)))
        (f32.store (local.get $out) (f32.mul (f32.load (local.get $a)) (f32.load (local.get $b))))
        (local.set $a (i32.add (local.get $a) (i32.const 4)))
        (local.set $b (i32.add (local.get $b) (i32.const 4)))
        (local.set $out (i32.add (local.get $out) (i32.const 4)))
        (br $next))))

  (func (export "mul_simd") (param $a i32) (param $b i32) (param $out i32) (param $n i32)
    (local $end i32) (local $end4 i32)
    (local.set $end (i32.add (local.get $out) (i32.shl (local.get $n) (i32.const 2))))
    (local.set $end4 (i32.add (local.get $out) (i32.shl (i32.and (local.get $n) (i32.const -4)) (i32.const 2))))
    (block $done4
      (loop $next4
        (br_if $done4 (i32.ge_u (local.get $out) (local.get $end4)))
        (v128.store (local.get $out) (f32x4.mul (v128.load (local.get $a)) (v128.load (local.get $b))))
        (local.set $a (i32.add (local.get $a) (i32.const 16)))
        (local.set $b (i32.add (local.get $b) (i32.const 16)))
        (local.set $out (i32.add (local.get $out) (i32.const 16)))
        (br $next4)))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $out) (local.get $end)))
        (f32.store (local.get $out) (f32.mul (f32.load (local.get $a)) (f32.load (local.get $b))))
        (local.set $a (i32.add (local.get $a) (i32.const 4)))
        (local.set $b (i32.add (local.get $b) (i32.const 4)))
        (local.set $out (i32.add (local.get $out) (i32.const 4)))
        (br $next)))))
