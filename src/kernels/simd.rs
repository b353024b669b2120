//! Run-time multiversioning for plain-loop kernels: the crate is built for
//! baseline x86-64, so without this their loops would be SSE2-only.

/// Defines a function whose body is compiled for AVX-512, AVX2+FMA+F16C and the
/// baseline target, dispatching at run time on the CPU features that
/// [`crate::isa`] allows (the CPU's, under `TFBENCH_MAX_ISA`).
/// Generic parameters take one trait bound each. Helpers called from the body
/// must be `#[inline(always)]` to benefit.
macro_rules! simd_dispatch {
    ($(#[$meta:meta])* $vis:vis fn $name:ident $(<$($g:ident : $bound:path),*>)? ($($arg:ident : $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block) => {
        $(#[$meta])*
        $vis fn $name $(<$($g: $bound),*>)? ($($arg: $ty),*) $(-> $ret)? {
            #[inline(always)]
            fn body $(<$($g: $bound),*>)? ($($arg: $ty),*) $(-> $ret)? $body
            #[cfg(target_arch = "x86_64")]
            {
                {
                    #[target_feature(enable = "avx512f,avx512vl,avx512dq,avx512bw,avx2,fma,f16c")]
                    unsafe fn v4 $(<$($g: $bound),*>)? ($($arg: $ty),*) $(-> $ret)? { body($($arg),*) }
                    if $crate::isa::has_all(&$crate::kernels::simd::V4) {
                        // SAFETY: the CPU supports every feature v4 was compiled for.
                        return unsafe { v4($($arg),*) };
                    }
                }
                #[target_feature(enable = "avx2,fma,f16c")]
                unsafe fn v3 $(<$($g: $bound),*>)? ($($arg: $ty),*) $(-> $ret)? { body($($arg),*) }
                if $crate::isa::has_all(&$crate::kernels::simd::V3) {
                    // SAFETY: the CPU supports every feature v3 was compiled for.
                    return unsafe { v3($($arg),*) };
                }
            }
            body($($arg),*)
        }
    };
}

pub(crate) use simd_dispatch;

/// The features of [`simd_dispatch`]'s AVX-512 version.
pub(crate) const V4: [crate::isa::Feature; 7] = {
    use crate::isa::Feature::*;
    [Avx512f, Avx512vl, Avx512dq, Avx512bw, Avx2, Fma, F16c]
};

/// The features of [`simd_dispatch`]'s AVX2 version.
pub(crate) const V3: [crate::isa::Feature; 3] = {
    use crate::isa::Feature::*;
    [Avx2, Fma, F16c]
};
