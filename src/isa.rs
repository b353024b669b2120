//! Which instruction-set extensions tfbench's own kernels may use: the CPU's
//! features, capped by `TFBENCH_MAX_ISA` (or, in tests, [`override_cap`]).
//!
//! Every place that dispatches on CPU features asks [`has`] (or [`has_all`],
//! [`unavailable`]) instead of `is_x86_feature_detected!`, so one setting
//! moves every kernel down to its fallback at once: that is how the test run
//! exercises the AVX2 and portable paths on an AVX-512 machine, and how a
//! user sees what an older CPU would get.
//!
//! Levels, lowest first ([`IsaLevel`]):
//!
//! - `scalar`: no AVX at all, only the portable code (compiled for baseline
//!   x86-64, so the compiler may still use SSE2);
//! - `avx2`: AVX, AVX2, FMA and F16C (Haswell); no AVX-VNNI;
//! - `avx512`: also AVX-512 F/BW/DQ/VL (Skylake-X); no VNNI of either kind;
//! - `native` (the default): everything the CPU has, VNNI included.
//!
//! VNNI (`avx512_vnni`, `avx_vnni`) counts as *above* `avx512`, so a cap at
//! `avx512` runs the AVX-512-without-VNNI fallbacks (the int8 decode kernels'
//! portable dot, the AVX2 int8 GEMM) that a Skylake-X user gets, and a cap at
//! `avx2` the non-VNNI AVX2 int8 path. tfbench has no AMX kernels, so AMX
//! needs no level of its own.
//!
//! The cap reaches tfbench's own kernels only. Third-party crates dispatch
//! internally on the CPU's features (`gemm`, `matrixmultiply`) and OpenBLAS
//! picks its kernel at load time (set `OPENBLAS_CORETYPE`, e.g. `Haswell`,
//! to steer it); the machine probe also ignores the cap, since it measures
//! the machine's limits and is cached per machine.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU8, AtomicU32, Ordering};

/// The environment variable that caps kernel dispatch.
pub const ENV: &str = "TFBENCH_MAX_ISA";

/// A cap on the instruction sets kernels may use, lowest first (the order
/// of the variants is the order of the levels).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum IsaLevel {
    /// Portable code only.
    Scalar,
    /// AVX, AVX2, FMA, F16C.
    Avx2,
    /// AVX2 plus AVX-512 F/BW/DQ/VL, without VNNI.
    Avx512,
    /// No cap: every feature the CPU has.
    Native,
}

impl IsaLevel {
    /// Every level, lowest first.
    pub const ALL: [IsaLevel; 4] = [Self::Scalar, Self::Avx2, Self::Avx512, Self::Native];
    /// The valid values of `TFBENCH_MAX_ISA`, lowest first.
    pub const NAMES: [&'static str; 4] = ["scalar", "avx2", "avx512", "native"];

    /// The level's name as `TFBENCH_MAX_ISA` spells it.
    pub fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }

    /// The level named `s`, or an error naming the variable and the valid choices.
    pub fn parse(s: &str) -> Result<Self, String> {
        let t = s.trim().to_ascii_lowercase();
        match Self::NAMES.iter().position(|n| *n == t) {
            Some(i) => Ok(Self::ALL[i]),
            None => Err(format!(
                "{ENV}={s:?} is not a valid ISA level; valid choices: {}",
                Self::NAMES.join(", ")
            )),
        }
    }
}

/// A CPU feature a kernel dispatches on, with rustc's `target_feature` name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feature {
    /// AVX (256-bit float vectors).
    Avx,
    /// AVX2 (256-bit integer vectors).
    Avx2,
    /// Fused multiply-add (FMA3).
    Fma,
    /// f16 <-> f32 conversions.
    F16c,
    /// AVX-512 Foundation.
    Avx512f,
    /// AVX-512 byte and word instructions.
    Avx512bw,
    /// AVX-512 doubleword and quadword instructions.
    Avx512dq,
    /// AVX-512 vector-length extensions (128/256-bit AVX-512 forms).
    Avx512vl,
    /// AVX-512 VNNI (`vpdpbusd` on 512-bit vectors).
    Avx512vnni,
    /// AVX-VNNI (`vpdpbusd`, VEX encoded, 256-bit).
    AvxVnni,
}

impl Feature {
    /// Every feature, in level order.
    pub const ALL: [Feature; 10] = [
        Self::Avx,
        Self::Avx2,
        Self::Fma,
        Self::F16c,
        Self::Avx512f,
        Self::Avx512bw,
        Self::Avx512dq,
        Self::Avx512vl,
        Self::Avx512vnni,
        Self::AvxVnni,
    ];

    /// rustc's `target_feature` name (what `sysinfo` lists).
    pub fn name(self) -> &'static str {
        match self {
            Self::Avx => "avx",
            Self::Avx2 => "avx2",
            Self::Fma => "fma",
            Self::F16c => "f16c",
            Self::Avx512f => "avx512f",
            Self::Avx512bw => "avx512bw",
            Self::Avx512dq => "avx512dq",
            Self::Avx512vl => "avx512vl",
            Self::Avx512vnni => "avx512vnni",
            Self::AvxVnni => "avxvnni",
        }
    }

    /// The lowest cap that lets kernels use this feature.
    pub fn level(self) -> IsaLevel {
        match self {
            Self::Avx | Self::Avx2 | Self::Fma | Self::F16c => IsaLevel::Avx2,
            Self::Avx512f | Self::Avx512bw | Self::Avx512dq | Self::Avx512vl => IsaLevel::Avx512,
            Self::Avx512vnni | Self::AvxVnni => IsaLevel::Native,
        }
    }

    fn bit(self) -> u32 {
        1 << (self as u32)
    }

    /// Whether the CPU has the feature, whatever the cap.
    pub fn detected(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as d;
            match self {
                Self::Avx => d!("avx"),
                Self::Avx2 => d!("avx2"),
                Self::Fma => d!("fma"),
                Self::F16c => d!("f16c"),
                Self::Avx512f => d!("avx512f"),
                Self::Avx512bw => d!("avx512bw"),
                Self::Avx512dq => d!("avx512dq"),
                Self::Avx512vl => d!("avx512vl"),
                Self::Avx512vnni => d!("avx512vnni"),
                Self::AvxVnni => d!("avxvnni"),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    }
}

/// Where the cap in force comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CapSource {
    /// Nothing caps dispatch.
    Default,
    /// `TFBENCH_MAX_ISA`.
    Env,
    /// [`override_cap`], set in-process (tests).
    Override,
}

/// The cap `TFBENCH_MAX_ISA` asks for: `Ok(None)` when unset or empty,
/// an error naming the variable and the valid choices when invalid. The
/// binary checks this before doing anything (exit 2).
pub fn env_cap() -> Result<Option<IsaLevel>, String> {
    match std::env::var_os(ENV) {
        None => Ok(None),
        Some(v) => {
            let s = v.to_string_lossy();
            if s.trim().is_empty() { Ok(None) } else { IsaLevel::parse(&s).map(Some) }
        }
    }
}

/// `TFBENCH_MAX_ISA`, read once per process. An invalid value (which the
/// binary refuses before running) caps at `scalar` for library callers:
/// the only choice that never runs code the user may have meant to exclude.
fn env_level() -> Option<IsaLevel> {
    static ENV_LEVEL: OnceLock<Option<IsaLevel>> = OnceLock::new();
    *ENV_LEVEL.get_or_init(|| env_cap().unwrap_or(Some(IsaLevel::Scalar)))
}

/// The in-process override: 0 for none, else 1 + the level's index.
static OVERRIDE: AtomicU8 = AtomicU8::new(0);
/// The usable features under the current cap, plus [`MASK_READY`]; 0 until
/// first computed. Cached because dispatch sites can be hot (a
/// `simd_dispatch!` function may be called per row).
static MASK: AtomicU32 = AtomicU32::new(0);
const MASK_READY: u32 = 1 << 31;

fn override_level() -> Option<IsaLevel> {
    match OVERRIDE.load(Ordering::SeqCst) {
        0 => None,
        i => Some(IsaLevel::ALL[(i - 1) as usize]),
    }
}

/// The cap in force and where it comes from. An override never raises the
/// cap above `TFBENCH_MAX_ISA`, so a test run capped from outside stays capped.
pub fn cap_with_source() -> (IsaLevel, CapSource) {
    match (env_level(), override_level()) {
        (Some(e), Some(o)) if o < e => (o, CapSource::Override),
        (Some(e), _) => (e, CapSource::Env),
        (None, Some(o)) => (o, CapSource::Override),
        (None, None) => (IsaLevel::Native, CapSource::Default),
    }
}

/// The cap in force (`native` when nothing caps dispatch).
pub fn cap() -> IsaLevel {
    cap_with_source().0
}

fn compute_mask() -> u32 {
    let cap = cap();
    Feature::ALL.iter().filter(|f| f.level() <= cap && f.detected()).fold(MASK_READY, |m, f| m | f.bit())
}

fn mask() -> u32 {
    let m = MASK.load(Ordering::Relaxed);
    if m != 0 {
        return m;
    }
    let m = compute_mask();
    MASK.store(m, Ordering::Relaxed);
    m
}

/// Whether kernels may use `feature`: the CPU has it and the cap allows it.
#[inline]
pub fn has(feature: Feature) -> bool {
    mask() & feature.bit() != 0
}

/// Whether kernels may use every one of `features`.
#[inline]
pub fn has_all(features: &[Feature]) -> bool {
    let want = features.iter().fold(0, |m, f| m | f.bit());
    mask() & want == want
}

/// Why kernels may not use `features`, or `None` when they may: the first
/// feature the CPU lacks ("this CPU has no avx512vnni instructions"), else
/// the cap that excludes one ("TFBENCH_MAX_ISA=avx2 is in force: avx512f is
/// above it"). Skip reasons of cases quote it.
pub fn unavailable(features: &[Feature]) -> Option<String> {
    if let Some(f) = features.iter().find(|f| !f.detected()) {
        return Some(format!("this CPU has no {} instructions", f.name()));
    }
    let (cap, source) = cap_with_source();
    let f = features.iter().find(|f| f.level() > cap)?;
    Some(match source {
        CapSource::Override => {
            format!("the ISA cap {} (set in-process) is in force: {} is above it", cap.name(), f.name())
        }
        _ => format!("{ENV}={} is in force: {} is above it", cap.name(), f.name()),
    })
}

/// The features kernels may use under the cap, by name (sysinfo and results).
pub fn usable() -> Vec<&'static str> {
    Feature::ALL.iter().filter(|f| has(**f)).map(|f| f.name()).collect()
}

/// Restores the previous override when dropped (see [`override_cap`]).
#[must_use = "the override ends when the guard is dropped"]
pub struct CapGuard {
    previous: u8,
}

impl Drop for CapGuard {
    fn drop(&mut self) {
        OVERRIDE.store(self.previous, Ordering::SeqCst);
        MASK.store(0, Ordering::SeqCst);
    }
}

/// Caps dispatch at `level` (never above `TFBENCH_MAX_ISA`) for the whole
/// process until the guard drops, also when the code under it panics. For
/// tests: the cap is process-wide (kernels run on rayon and GEMM worker
/// threads too), so tests that use it must not run concurrently with others
/// that dispatch; `.cargo/config.toml` runs each test binary's tests one at
/// a time.
pub fn override_cap(level: IsaLevel) -> CapGuard {
    let previous = OVERRIDE.swap(level as u8 + 1, Ordering::SeqCst);
    MASK.store(0, Ordering::SeqCst);
    CapGuard { previous }
}

/// Runs `f` with dispatch capped at `level` (see [`override_cap`]).
pub fn with_cap<R>(level: IsaLevel, f: impl FnOnce() -> R) -> R {
    let _guard = override_cap(level);
    f()
}

/// A one-line description of the cap for `sysinfo`: the level, where it
/// comes from and what kernels may use under it.
pub fn describe() -> String {
    let (cap, source) = cap_with_source();
    let from = match source {
        CapSource::Default => format!("no cap; set {ENV}={} to lower it", IsaLevel::NAMES[..3].join("|")),
        CapSource::Env => format!("from {ENV}"),
        CapSource::Override => "set in-process".to_string(),
    };
    let usable = usable();
    let usable = if usable.is_empty() { "portable code only".to_string() } else { usable.join(" ") };
    format!("{} ({from}); kernels use: {usable}", cap.name())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_parse_in_order_and_bad_names_list_the_choices() {
        assert_eq!(IsaLevel::parse("avx2"), Ok(IsaLevel::Avx2));
        assert_eq!(IsaLevel::parse(" AVX512 "), Ok(IsaLevel::Avx512));
        assert!(IsaLevel::Scalar < IsaLevel::Avx2 && IsaLevel::Avx512 < IsaLevel::Native);
        for l in IsaLevel::ALL {
            assert_eq!(IsaLevel::parse(l.name()), Ok(l));
        }
        let e = IsaLevel::parse("sse4").unwrap_err();
        assert!(e.contains("TFBENCH_MAX_ISA") && e.contains("scalar, avx2, avx512, native"), "{e}");
    }

    #[test]
    fn override_caps_every_feature_above_it_and_is_restored() {
        let before = usable();
        let native = cap();
        {
            let _g = override_cap(IsaLevel::Scalar);
            assert_eq!(cap(), IsaLevel::Scalar.min(native));
            assert!(usable().is_empty(), "{:?}", usable());
            for f in Feature::ALL {
                assert!(!has(f), "{f:?} under scalar");
                let why = unavailable(&[f]).expect("nothing is usable under scalar");
                if f.detected() {
                    assert!(why.contains("scalar") && why.contains(f.name()), "{why}");
                } else {
                    assert!(why.contains("this CPU has no"), "{why}");
                }
            }
            // Nested overrides restore the outer one.
            {
                let _g2 = override_cap(IsaLevel::Avx2);
                for f in Feature::ALL {
                    assert_eq!(has(f), f.detected() && f.level() <= IsaLevel::Avx2.min(native), "{f:?}");
                }
            }
            assert!(usable().is_empty());
        }
        assert_eq!(cap(), native);
        assert_eq!(usable(), before);
    }

    #[test]
    fn override_is_restored_after_a_panic() {
        let before = cap();
        let r = std::panic::catch_unwind(|| with_cap(IsaLevel::Scalar, || panic!("inside")));
        assert!(r.is_err());
        assert_eq!(cap(), before);
    }

    #[test]
    fn usable_features_are_the_detected_ones_under_the_cap() {
        for level in IsaLevel::ALL {
            with_cap(level, || {
                let cap = cap();
                assert!(cap <= level);
                for f in Feature::ALL {
                    assert_eq!(has(f), f.detected() && f.level() <= cap, "{f:?} at {level:?}");
                    assert_eq!(unavailable(&[f]).is_none(), has(f), "{f:?} at {level:?}");
                }
                assert!(describe().starts_with(cap.name()), "{}", describe());
            });
        }
    }
}
