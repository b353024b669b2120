//! Multiversioning for the plain-loop kernels (quantize, dequantize): the
//! crate is built for baseline x86-64, so without this their loops would be
//! SSE2-only (and rounding would call libm).

/// Defines a function whose body is compiled for AVX-512, AVX2+FMA and the
/// baseline target, dispatching at run time on the detected CPU features.
/// Helpers called from the body must be `#[inline(always)]` to benefit.
macro_rules! multiversion {
    ($(#[$meta:meta])* $vis:vis fn $name:ident $(<$($g:ident : $bound:path),*>)? ($($arg:ident : $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block) => {
        $(#[$meta])*
        $vis fn $name $(<$($g: $bound),*>)? ($($arg: $ty),*) $(-> $ret)? {
            #[inline(always)]
            fn body $(<$($g: $bound),*>)? ($($arg: $ty),*) $(-> $ret)? $body
            #[cfg(target_arch = "x86_64")]
            {
                #[cfg(tfbench_rust_1_89)]
                {
                    #[target_feature(enable = "avx512f,avx512vl,avx512dq,avx512bw,avx2,fma,f16c")]
                    unsafe fn v4 $(<$($g: $bound),*>)? ($($arg: $ty),*) $(-> $ret)? { body($($arg),*) }
                    if crate::kernels::quant::has_avx512() && std::arch::is_x86_feature_detected!("avx512dq") {
                        // SAFETY: the CPU supports every feature v4 was compiled for.
                        return unsafe { v4($($arg),*) };
                    }
                }
                #[target_feature(enable = "avx2,fma,f16c")]
                unsafe fn v3 $(<$($g: $bound),*>)? ($($arg: $ty),*) $(-> $ret)? { body($($arg),*) }
                if std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
                    && std::arch::is_x86_feature_detected!("f16c")
                {
                    // SAFETY: the CPU supports every feature v3 was compiled for.
                    return unsafe { v3($($arg),*) };
                }
            }
            body($($arg),*)
        }
    };
}

pub(crate) use multiversion;
