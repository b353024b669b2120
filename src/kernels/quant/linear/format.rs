//! [`WeightFormat`]: the storage formats a [`super::QMatrix`] can hold,
//! their names in case ids and their block layouts.

use super::*;

/// How a weight matrix is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightFormat {
    /// f32, the baseline (32 bits per weight).
    F32,
    /// IEEE half (16).
    F16,
    /// bfloat16 (16).
    Bf16,
    /// int8, symmetric, one f32 scale per output channel (8 + 32/k).
    Int8,
    /// llama.cpp Q8_0 (8.5).
    Q8_0,
    /// llama.cpp Q4_0 (4.5).
    Q4_0,
    /// llama.cpp Q4_1 (5).
    Q4_1,
    /// llama.cpp Q4_K (4.5): super-blocks of 256 with 6-bit sub-block scales and minimums.
    Q4K,
    /// llama.cpp Q6_K (6.5625): super-blocks of 256 with 8-bit scales of 16 values, 6-bit codes.
    Q6K,
    /// BitNet b1.58 ternary in bit planes (2, plus one f32 scale).
    Ternary,
}

impl WeightFormat {
    /// Every format, in the order reports list them.
    pub const ALL: [WeightFormat; 10] = [
        Self::F32,
        Self::F16,
        Self::Bf16,
        Self::Int8,
        Self::Q8_0,
        Self::Q4_0,
        Self::Q4_1,
        Self::Ternary,
        Self::Q4K,
        Self::Q6K,
    ];

    /// Lowercase name used in case ids.
    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::F16 => "f16",
            Self::Bf16 => "bf16",
            Self::Int8 => "int8",
            Self::Q8_0 => "q8_0",
            Self::Q4_0 => "q4_0",
            Self::Q4_1 => "q4_1",
            Self::Ternary => "ternary",
            Self::Q4K => "q4_k",
            Self::Q6K => "q6_k",
        }
    }

    /// The format named `s`, or an error listing the valid names.
    pub fn parse(s: &str) -> Result<Self> {
        match Self::ALL.iter().find(|f| f.name() == s) {
            Some(f) => Ok(*f),
            None => {
                let names: Vec<_> = Self::ALL.iter().map(|f| f.name()).collect();
                bail!("unknown weight format `{s}`; valid: {}", names.join(", "))
            }
        }
    }

    /// The block layout of the llama.cpp block formats (None for the rest).
    pub(super) fn block(self) -> Option<BlockFormat> {
        match self {
            Self::Q8_0 => Some(BlockFormat::Q8_0),
            Self::Q4_0 => Some(BlockFormat::Q4_0),
            Self::Q4_1 => Some(BlockFormat::Q4_1),
            _ => None,
        }
    }
}
