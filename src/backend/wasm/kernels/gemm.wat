;; GEMM: C[m x n] = A[m x k] * B[k x n], all row-major f32, C overwritten.
;; gemm_scalar runs the i-k-j loop order (a row of C stays in cache while
;; B's rows stream past). gemm_simd is register-tiled: a 4 x 8 tile of C
;; lives in eight f32x4 accumulators while k runs, each step loading 8
;; floats of B once for four rows of A; it needs m % 4 == 0 and
;; n % 8 == 0 and traps (unreachable) otherwise.
(module
  (memory (export "memory") 1)

  (func (export "gemm_scalar") (param $a i32) (param $b i32) (param $c i32) (param $m i32) (param $k i32) (param $n i32)
    (local $nb i32) (local $cend i32) (local $crow i32) (local $rowend i32) (local $cp i32)
    (local $ap i32) (local $aend i32) (local $bp i32) (local $aip f32)
    (local.set $nb (i32.shl (local.get $n) (i32.const 2)))
    (local.set $crow (local.get $c))
    (local.set $cend (i32.add (local.get $c) (i32.mul (local.get $m) (local.get $nb))))
    (local.set $ap (local.get $a))
    (block $rows_done
      (loop $row
        (br_if $rows_done (i32.ge_u (local.get $crow) (local.get $cend)))
        (local.set $rowend (i32.add (local.get $crow) (local.get $nb)))
        (memory.fill (local.get $crow) (i32.const 0) (local.get $nb))
        (local.set $aend (i32.add (local.get $ap) (i32.shl (local.get $k) (i32.const 2))))
        (local.set $bp (local.get $b))
        (block $k_done
          (loop $kk
            (br_if $k_done (i32.ge_u (local.get $ap) (local.get $aend)))
            (local.set $aip (f32.load (local.get $ap)))
            (local.set $cp (local.get $crow))
            (block $j_done
              (loop $j
                (br_if $j_done (i32.ge_u (local.get $cp) (local.get $rowend)))
                (f32.store (local.get $cp)
                  (f32.add (f32.load (local.get $cp)) (f32.mul (local.get $aip) (f32.load (local.get $bp)))))
                (local.set $cp (i32.add (local.get $cp) (i32.const 4)))
                (local.set $bp (i32.add (local.get $bp) (i32.const 4)))
                (br $j)))
            (local.set $ap (i32.add (local.get $ap) (i32.const 4)))
            (br $kk)))
        (local.set $crow (local.get $rowend))
        (br $row))))

  (func (export "gemm_simd") (param $a i32) (param $b i32) (param $c i32) (param $m i32) (param $k i32) (param $n i32)
    (local $kb i32) (local $kb2 i32) (local $kb3 i32) (local $nb i32)
    (local $i i32) (local $j i32) (local $pa i32) (local $pend i32) (local $pb i32) (local $pc i32)
    (local $b0 v128) (local $b1 v128) (local $s v128)
    (local $c00 v128) (local $c01 v128) (local $c10 v128) (local $c11 v128)
    (local $c20 v128) (local $c21 v128) (local $c30 v128) (local $c31 v128)
    (if (i32.or (i32.and (local.get $m) (i32.const 3)) (i32.and (local.get $n) (i32.const 7)))
      (then unreachable))
    (local.set $kb (i32.shl (local.get $k) (i32.const 2)))
    (local.set $kb2 (i32.shl (local.get $kb) (i32.const 1)))
    (local.set $kb3 (i32.add (local.get $kb2) (local.get $kb)))
    (local.set $nb (i32.shl (local.get $n) (i32.const 2)))
    (block $i_done
      (loop $i_loop
        (br_if $i_done (i32.ge_u (local.get $i) (local.get $m)))
        (local.set $j (i32.const 0))
        (block $j_done
          (loop $j_loop
            (br_if $j_done (i32.ge_u (local.get $j) (local.get $n)))
            (local.set $c00 (v128.const i32x4 0 0 0 0)) (local.set $c01 (v128.const i32x4 0 0 0 0))
            (local.set $c10 (v128.const i32x4 0 0 0 0)) (local.set $c11 (v128.const i32x4 0 0 0 0))
            (local.set $c20 (v128.const i32x4 0 0 0 0)) (local.set $c21 (v128.const i32x4 0 0 0 0))
            (local.set $c30 (v128.const i32x4 0 0 0 0)) (local.set $c31 (v128.const i32x4 0 0 0 0))
            (local.set $pa (i32.add (local.get $a) (i32.mul (local.get $i) (local.get $kb))))
            (local.set $pend (i32.add (local.get $pa) (local.get $kb)))
            (local.set $pb (i32.add (local.get $b) (i32.shl (local.get $j) (i32.const 2))))
            (block $k_done
              (loop $k_loop
                (br_if $k_done (i32.ge_u (local.get $pa) (local.get $pend)))
                (local.set $b0 (v128.load (local.get $pb)))
                (local.set $b1 (v128.load offset=16 (local.get $pb)))
                (local.set $s (f32x4.splat (f32.load (local.get $pa))))
                (local.set $c00 (f32x4.add (local.get $c00) (f32x4.mul (local.get $s) (local.get $b0))))
                (local.set $c01 (f32x4.add (local.get $c01) (f32x4.mul (local.get $s) (local.get $b1))))
                (local.set $s (f32x4.splat (f32.load (i32.add (local.get $pa) (local.get $kb)))))
                (local.set $c10 (f32x4.add (local.get $c10) (f32x4.mul (local.get $s) (local.get $b0))))
                (local.set $c11 (f32x4.add (local.get $c11) (f32x4.mul (local.get $s) (local.get $b1))))
                (local.set $s (f32x4.splat (f32.load (i32.add (local.get $pa) (local.get $kb2)))))
                (local.set $c20 (f32x4.add (local.get $c20) (f32x4.mul (local.get $s) (local.get $b0))))
                (local.set $c21 (f32x4.add (local.get $c21) (f32x4.mul (local.get $s) (local.get $b1))))
                (local.set $s (f32x4.splat (f32.load (i32.add (local.get $pa) (local.get $kb3)))))
                (local.set $c30 (f32x4.add (local.get $c30) (f32x4.mul (local.get $s) (local.get $b0))))
                (local.set $c31 (f32x4.add (local.get $c31) (f32x4.mul (local.get $s) (local.get $b1))))
                (local.set $pa (i32.add (local.get $pa) (i32.const 4)))
                (local.set $pb (i32.add (local.get $pb) (local.get $nb)))
                (br $k_loop)))
            (local.set $pc
              (i32.add (local.get $c)
                (i32.add (i32.mul (local.get $i) (local.get $nb)) (i32.shl (local.get $j) (i32.const 2)))))
            (v128.store (local.get $pc) (local.get $c00))
            (v128.store offset=16 (local.get $pc) (local.get $c01))
            (local.set $pc (i32.add (local.get $pc) (local.get $nb)))
            (v128.store (local.get $pc) (local.get $c10))
            (v128.store offset=16 (local.get $pc) (local.get $c11))
            (local.set $pc (i32.add (local.get $pc) (local.get $nb)))
            (v128.store (local.get $pc) (local.get $c20))
            (v128.store offset=16 (local.get $pc) (local.get $c21))
            (local.set $pc (i32.add (local.get $pc) (local.get $nb)))
            (v128.store (local.get $pc) (local.get $c30))
            (v128.store offset=16 (local.get $pc) (local.get $c31))
            (local.set $j (i32.add (local.get $j) (i32.const 8)))
            (br $j_loop)))
        (local.set $i (i32.add (local.get $i) (i32.const 4)))
        (br $i_loop)))))
