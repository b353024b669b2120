//! The kernels' WebAssembly text, embedded, and its assembly into modules.

use anyhow::{Result, anyhow};

/// One module of kernels: its name and its WebAssembly text.
#[derive(Debug, Clone, Copy)]
pub struct Kernel {
    /// The module's name (its file is `kernels/<name>.wat`).
    pub name: &'static str,
    /// What its exports compute.
    pub exports: &'static [&'static str],
    /// The WebAssembly text.
    pub text: &'static str,
}

/// Every kernel module, each export in a scalar and a SIMD128 form
/// (`<op>_scalar`, `<op>_simd`) except the memory patterns'.
pub const KERNELS: &[Kernel] = &[
    Kernel {
        name: "elementwise",
        exports: &["add_scalar", "add_simd", "mul_scalar", "mul_simd"],
        text: include_str!("kernels/elementwise.wat"),
    },
    Kernel {
        name: "dot",
        exports: &["dot_scalar", "dot_simd", "dot_i8_scalar", "dot_i8_simd"],
        text: include_str!("kernels/dot.wat"),
    },
    Kernel { name: "gemm", exports: &["gemm_scalar", "gemm_simd"], text: include_str!("kernels/gemm.wat") },
    Kernel {
        name: "nn",
        exports: &[
            "softmax_scalar",
            "softmax_simd",
            "layernorm_scalar",
            "layernorm_simd",
            "gelu_scalar",
            "gelu_simd",
        ],
        text: include_str!("kernels/nn.wat"),
    },
    Kernel {
        name: "memory",
        exports: &["grow", "size", "pattern", "arena_start", "arena_used"],
        text: include_str!("kernels/memory.wat"),
    },
];

/// The text of kernel module `name`.
pub fn source(name: &str) -> Option<&'static str> {
    KERNELS.iter().find(|k| k.name == name).map(|k| k.text)
}

/// Assembles WebAssembly text into a binary module; an error carries the
/// assembler's message with the line and column. (Validation is the
/// runtime's, when it loads the module.)
pub fn assemble(text: &str) -> Result<Vec<u8>> {
    wat::parse_str(text).map_err(|e| anyhow!("the WebAssembly text does not assemble: {e}"))
}
