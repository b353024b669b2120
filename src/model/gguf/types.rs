//! ggml's tensor types as GGUF numbers them: name, values per block and
//! bytes per block (from ggml's `type_traits` table), so the reader can size
//! every tensor, including those tfbench does not run, and name them in errors.

/// One ggml tensor type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GgmlType {
    /// The number GGUF stores.
    pub id: u32,
    /// ggml's name (`Q4_1`, `F32`, ...).
    pub name: &'static str,
    /// Values per block (1 for plain types).
    pub block: u64,
    /// Bytes per block.
    pub bytes: u64,
}

/// Every type id ggml defines (ids 4 and 5, the removed Q4_2/Q4_3, and
/// 31-33, removed Q4_0_4_4 repacks, are absent on purpose).
const TABLE: &[(u32, &str, u64, u64)] = &[
    (0, "F32", 1, 4),
    (1, "F16", 1, 2),
    (2, "Q4_0", 32, 18),
    (3, "Q4_1", 32, 20),
    (6, "Q5_0", 32, 22),
    (7, "Q5_1", 32, 24),
    (8, "Q8_0", 32, 34),
    (9, "Q8_1", 32, 36),
    (10, "Q2_K", 256, 84),
    (11, "Q3_K", 256, 110),
    (12, "Q4_K", 256, 144),
    (13, "Q5_K", 256, 176),
    (14, "Q6_K", 256, 210),
    (15, "Q8_K", 256, 292),
    (16, "IQ2_XXS", 256, 66),
    (17, "IQ2_XS", 256, 74),
    (18, "IQ3_XXS", 256, 98),
    (19, "IQ1_S", 256, 50),
    (20, "IQ4_NL", 32, 18),
    (21, "IQ3_S", 256, 110),
    (22, "IQ2_S", 256, 82),
    (23, "IQ4_XS", 256, 136),
    (24, "I8", 1, 1),
    (25, "I16", 1, 2),
    (26, "I32", 1, 4),
    (27, "I64", 1, 8),
    (28, "F64", 1, 8),
    (29, "IQ1_M", 256, 56),
    (30, "BF16", 1, 2),
    (34, "TQ1_0", 256, 54),
    (35, "TQ2_0", 256, 66),
    (39, "MXFP4", 32, 17),
];

/// The tensor types tfbench's kernel library runs (through
/// `kernels::quant::QMatrix`); the others are named and refused.
pub const SUPPORTED: &[&str] = &["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q4_K", "Q6_K"];

impl GgmlType {
    /// The type with GGUF number `id`.
    pub fn from_id(id: u32) -> Option<Self> {
        TABLE.iter().find(|t| t.0 == id).map(|&(id, name, block, bytes)| Self { id, name, block, bytes })
    }

    /// The type named `name` (ggml's spelling).
    pub fn from_name(name: &str) -> Option<Self> {
        TABLE.iter().find(|t| t.1 == name).and_then(|t| Self::from_id(t.0))
    }

    /// Bytes of `n` values, or `None` when `n` is not a whole number of
    /// blocks or the size overflows.
    pub fn size_of(self, n: u64) -> Option<u64> {
        if !n.is_multiple_of(self.block) {
            return None;
        }
        (n / self.block).checked_mul(self.bytes)
    }

    /// Whether tfbench runs tensors of this type.
    pub fn supported(self) -> bool {
        SUPPORTED.contains(&self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_follow_ggml_blocks() {
        let q41 = GgmlType::from_id(3).unwrap();
        assert_eq!((q41.name, q41.size_of(576)), ("Q4_1", Some(18 * 20)));
        assert_eq!(q41.size_of(33), None, "not a whole block");
        assert_eq!(GgmlType::from_name("Q6_K").unwrap().size_of(512), Some(420));
        assert_eq!(GgmlType::from_id(0).unwrap().size_of(u64::MAX), None, "overflow");
        assert!(GgmlType::from_id(4).is_none() && GgmlType::from_id(1000).is_none());
        assert!(GgmlType::from_name("Q8_0").unwrap().supported());
        assert!(!GgmlType::from_name("Q5_K").unwrap().supported());
    }
}
