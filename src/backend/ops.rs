//! Tensor work a backend can offer, in words no device owns.
//!
//! A suite describes a benchmark once, as a [`TensorWork`]: the operation
//! ([`TensorOp`]), its host inputs, the work one iteration does, and the
//! check of a result against the suite's own reference ([`Check`]). A
//! backend that runs tensor work implements [`TensorOps`] (reached through
//! [`super::Backend::tensor_ops`]) and realises the description on its
//! device: buffers, kernels, launches, synchronisation and timing are its
//! own; inputs, work counts and references stay the suite's. [`realise`]
//! hands a description to the case's backend.
//!
//! The CPU runs the suites' own workloads and offers none of this; CUDA's
//! realisation is `cuda/tensor/`.
//!
//! ## Offering tensor work on a new backend
//! Implement [`TensorOps::prepare`]: upload [`TensorWork::inputs`], run the
//! op once per iteration, and in `verify` run it once more and hand the
//! result to [`TensorWork::verify`] as the [`Output`] its op names; return
//! the implementation from `Backend::tensor_ops`. An op the backend lacks
//! is a skip ([`lacks`]) naming the device and the op, never a failure.
//!
//! One check is the backend's own, by nature: values drawn by a generator
//! the backend owns (CUDA's counter-based `randn`) are compared with that
//! generator's f64 twin before the suite's statistical check sees them.

use super::Device;
use crate::workload::{Throughput, Verification, Workload, skip};
use anyhow::{Result, bail};

/// A binary elementwise operation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum BinOp {
    /// `a + b`.
    Add,
    /// `a - b`.
    Sub,
    /// `a * b`.
    Mul,
    /// `a / b`.
    Div,
}

impl BinOp {
    /// The operation in f64 (the references' arithmetic).
    pub fn f64(self, a: f64, b: f64) -> f64 {
        match self {
            Self::Add => a + b,
            Self::Sub => a - b,
            Self::Mul => a * b,
            Self::Div => a / b,
        }
    }
}

/// A unary elementwise operation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum UnOp {
    /// `max(x, 0)`.
    Relu,
    /// `1 / (1 + e^-x)`.
    Sigmoid,
    /// `tanh x`.
    Tanh,
    /// `e^x`.
    Exp,
    /// `ln x`.
    Log,
    /// `sqrt x`.
    Sqrt,
    /// GELU, tanh form.
    Gelu,
}

impl UnOp {
    /// Every unary op, in the order of the tensor suite's `op` values (a
    /// kernel's op code is the position here).
    pub const ALL: [UnOp; 7] =
        [UnOp::Relu, UnOp::Sigmoid, UnOp::Tanh, UnOp::Exp, UnOp::Log, UnOp::Sqrt, UnOp::Gelu];
}

/// A reduction: over all values, or row by row.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ReduceOp {
    /// Sum of every value ([`Output::Sum`]).
    Sum,
    /// Mean of every value ([`Output::Sum`]).
    Mean,
    /// Largest value ([`Output::Max`]).
    Max,
    /// First index of the largest value ([`Output::Max`] with the index).
    Argmax,
    /// Softmax of each row ([`Output::Values`]).
    Softmax,
    /// Layer norm of each row with gamma and beta ([`Output::Values`]).
    LayerNorm,
}

/// What a fill writes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Fill {
    /// Every value 0.
    Zeros,
    /// Every value 1.
    Ones,
    /// Standard normals from the backend's own generator, fresh every
    /// iteration, starting from `seed` (checked against the generator's
    /// twin by the backend, then by the suite's moments).
    Randn {
        /// The case's seed.
        seed: u64,
    },
}

/// Element types of the GEMMs a device runs (f32 accumulation in every one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GemmDtype {
    /// f32 in and out, f32 arithmetic (no TF32).
    F32,
    /// f32 in and out, inputs rounded to TF32 on the tensor cores, f32
    /// accumulation.
    Tf32,
    /// f16 in and out, f32 accumulation.
    F16,
    /// bf16 in and out, f32 accumulation.
    Bf16,
}

/// The `dtype` values the GPU GEMM benchmarks accept.
pub const DTYPES: &[&str] = &["f32", "tf32", "f16", "bf16"];

impl GemmDtype {
    /// Parses one of [`DTYPES`].
    pub fn parse(s: &str) -> Result<Self> {
        Ok(match s {
            "f32" => Self::F32,
            "tf32" => Self::Tf32,
            "f16" => Self::F16,
            "bf16" => Self::Bf16,
            _ => bail!("unknown GEMM dtype `{s}`; valid: {}", DTYPES.join(", ")),
        })
    }

    /// Bytes of one stored element (inputs and output).
    pub fn bytes(self) -> usize {
        match self {
            Self::F32 | Self::Tf32 => 4,
            Self::F16 | Self::Bf16 => 2,
        }
    }

    /// `x` as the device stores it: rounded to f16/bf16 (to nearest even),
    /// or unchanged for f32 and tf32 (TF32 rounding happens inside the
    /// GEMM, so the tolerance covers it).
    pub fn store(self, x: f32) -> f32 {
        match self {
            Self::F32 | Self::Tf32 => x,
            Self::F16 => half::f16::from_f32(x).to_f32(),
            Self::Bf16 => half::bf16::from_f32(x).to_f32(),
        }
    }

    /// Tolerance for one entry of C against the f64 dot product of the
    /// stored inputs (`want`, with `abs_sum = sum |a b|` over `k` terms):
    /// f32 accumulation (8 sqrt(k) eps, as on the CPU; 16 on the tensor
    /// cores, whose summation order is not ours), TF32's rounding of both
    /// inputs (at most 2^-10 each, so 2^-9 of each product, bounded by the
    /// whole absolute sum) and the rounding of the output to f16/bf16 (unit
    /// roundoff of |want|, plus f16's smallest subnormal).
    pub fn tolerance(self, k: usize, abs_sum: f64, want: f64) -> f64 {
        let eps = f32::EPSILON as f64;
        let sk = (k as f64).sqrt().max(1.0);
        let acc = if self == Self::F32 { 8.0 } else { 16.0 } * sk * eps * abs_sum;
        let input = if self == Self::Tf32 { 2f64.powi(-9) * abs_sum } else { 0.0 };
        let output = match self {
            Self::F32 | Self::Tf32 => 0.0,
            Self::F16 => 2f64.powi(-11) * want.abs() + 2f64.powi(-24),
            Self::Bf16 => 2f64.powi(-8) * want.abs() + 1e-38,
        };
        acc + input + output + 1e-30
    }
}

/// `direction` values of a transfer: host to device, device to host,
/// device to device.
pub const DIRECTIONS: &[&str] = &["h2d", "d2h", "d2d"];
/// `memory` values of a transfer (the host memory of h2d and d2h).
pub const MEMORY: &[&str] = &["pageable", "pinned"];
/// `mode` values of a launch: wait for the device after every launch, or
/// queue launches back to back.
pub const LAUNCH_MODES: &[&str] = &["launch_sync", "launch_only"];

/// One operation of tensor work, with the shapes the inputs do not carry.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum TensorOp {
    /// `len` values written with `value` ([`Output::Values`]).
    Fill {
        /// What is written.
        value: Fill,
        /// Values in the output.
        len: usize,
    },
    /// `inputs[0] op inputs[1]`, equal lengths ([`Output::Values`]).
    Binary(BinOp),
    /// `inputs[0]` (rows x `cols`) plus the row `inputs[1]` added to every
    /// row ([`Output::Values`]).
    BroadcastAdd {
        /// Columns (the length of the row).
        cols: usize,
    },
    /// `op(inputs[0])` ([`Output::Values`]).
    Unary(UnOp),
    /// A reduction of `inputs[0]` (`rows x cols`); a layer norm also takes
    /// gamma and beta (`inputs[1]`, `inputs[2]`, `cols` each) and `eps`.
    Reduce {
        /// Which reduction.
        op: ReduceOp,
        /// Rows of the input.
        rows: usize,
        /// Columns of the input.
        cols: usize,
        /// The layer norm's epsilon.
        eps: f32,
    },
    /// Row-major `C = A B` of `inputs[0]` (`batch` x m x k) and `inputs[1]`
    /// (`batch` x k x n), the inputs already rounded as `dtype` stores
    /// them ([`Output::Values`]: C widened to f32).
    Gemm {
        /// Element type.
        dtype: GemmDtype,
        /// Whether this is a batched (strided) GEMM, even of one item.
        batched: bool,
        /// Batch items.
        batch: usize,
        /// Rows of A and C.
        m: usize,
        /// Columns of A, rows of B.
        k: usize,
        /// Columns of B and C.
        n: usize,
    },
    /// A copy of [`Inputs::bytes`] in `direction` (one of [`DIRECTIONS`]),
    /// from page-locked host memory when `pinned` ([`Output::Bytes`]).
    Transfer {
        /// One of [`DIRECTIONS`].
        direction: &'static str,
        /// Page-locked (pinned) host memory instead of pageable.
        pinned: bool,
    },
    /// The smallest kernel: one thread writing `value` to one value
    /// ([`Output::Values`]), with a device synchronisation after every
    /// launch when `sync`.
    Launch {
        /// Wait for the device after each launch.
        sync: bool,
        /// The value the kernel writes.
        value: f32,
    },
}

impl TensorOp {
    /// A short name for messages ("binary add", "gemm bf16").
    pub fn name(&self) -> String {
        match self {
            Self::Fill { value, .. } => format!("fill {value:?}").to_lowercase(),
            Self::Binary(op) => format!("binary {op:?}").to_lowercase(),
            Self::BroadcastAdd { .. } => "broadcast add".into(),
            Self::Unary(op) => format!("unary {op:?}").to_lowercase(),
            Self::Reduce { op, .. } => format!("reduction {op:?}").to_lowercase(),
            Self::Gemm { dtype, batched, .. } => {
                format!("{} {dtype:?}", if *batched { "batched gemm" } else { "gemm" }).to_lowercase()
            }
            Self::Transfer { direction, .. } => format!("transfer {direction}"),
            Self::Launch { .. } => "kernel launch".into(),
        }
    }
}

/// The host data a work item sends to the device.
#[derive(Debug, Default)]
pub struct Inputs {
    /// f32 operands, in the order [`TensorOp`] names them.
    pub values: Vec<Vec<f32>>,
    /// The bytes a transfer sends.
    pub bytes: Vec<u8>,
}

/// A result brought back from the device, as the op's check reads it.
#[derive(Debug, Clone, Copy)]
pub enum Output<'a> {
    /// Every output value (f16/bf16 widened exactly to f32).
    Values(&'a [f32]),
    /// A full sum or mean, and the depth of the backend's addition tree
    /// (the rounding levels any input passes through), which bounds its
    /// error.
    Sum {
        /// The result.
        value: f64,
        /// Addition levels of the backend's summation.
        levels: f64,
    },
    /// A max, and argmax's index.
    Max {
        /// The largest value found.
        value: f32,
        /// Its index (argmax only).
        index: Option<u64>,
    },
    /// The bytes that arrived.
    Bytes(&'a [u8]),
}

impl Output<'_> {
    /// Which output this is, for a check that was handed another.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Values(_) => "values",
            Self::Sum { .. } => "a sum",
            Self::Max { .. } => "a maximum",
            Self::Bytes(_) => "bytes",
        }
    }
}

/// The suite's check of an output against its reference, given the inputs.
pub type Check = Box<dyn Fn(&Inputs, Output<'_>) -> Verification + Send>;

/// One benchmark's work, described once by its suite for any backend.
pub struct TensorWork {
    /// The case's id (named in skips and errors).
    pub id: String,
    /// What to compute.
    pub op: TensorOp,
    /// The host data to send.
    pub inputs: Inputs,
    /// Work one iteration does.
    pub throughput: Vec<Throughput>,
    /// The check of a result against the suite's reference.
    pub check: Check,
}

impl TensorWork {
    /// `out` checked against the suite's reference.
    pub fn verify(&self, out: Output<'_>) -> Verification {
        (self.check)(&self.inputs, out)
    }
}

impl std::fmt::Debug for TensorWork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TensorWork").field("id", &self.id).field("op", &self.op).finish_non_exhaustive()
    }
}

/// What a backend that runs tensor work provides.
pub trait TensorOps: Sync {
    /// Realises `work` on `device` (of this backend's kind): allocates and
    /// uploads in setup, and returns the workload that runs the op and
    /// verifies it through [`TensorWork::verify`]. A missing device or an
    /// op this backend lacks is a skip ([`crate::workload::SkipCase`]).
    fn prepare(&self, device: Device, work: TensorWork) -> Result<Box<dyn Workload>>;
}

/// The skip of an op `device`'s backend does not offer.
pub fn lacks(device: Device, op: &TensorOp) -> anyhow::Error {
    skip(format!("{device}: its backend offers no {}", op.name()))
}

/// `work` realised on `device` by its backend; a backend without tensor
/// ops skips the case (with its availability's reason when it has one).
pub fn realise(device: Device, work: TensorWork) -> Result<Box<dyn Workload>> {
    let backend = super::of(device.kind());
    match backend.tensor_ops() {
        Some(ops) => ops.prepare(device, work),
        None => {
            backend.availability(device).map_err(skip)?;
            Err(lacks(device, &work.op))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::SkipCase;

    fn work(op: TensorOp) -> TensorWork {
        TensorWork {
            id: "tensor/x".into(),
            op,
            inputs: Inputs::default(),
            throughput: Vec::new(),
            check: Box::new(|_, _| Verification::pass("nothing")),
        }
    }

    #[test]
    fn a_backend_without_tensor_ops_skips_with_a_reason() {
        let wasm = Device::Wasm(crate::backend::WasmRuntime::Wasmi);
        for device in [Device::Cpu, wasm] {
            let e = realise(device, work(TensorOp::Binary(BinOp::Add))).err().expect("no tensor ops");
            let skip = e.downcast_ref::<SkipCase>().unwrap_or_else(|| panic!("{device}: failed: {e:#}"));
            assert!(skip.0.starts_with(&device.to_string()), "{}", skip.0);
        }
        let e = realise(Device::Cpu, work(TensorOp::Launch { sync: true, value: 1.0 })).err().unwrap();
        assert_eq!(e.to_string(), "cpu: its backend offers no kernel launch");
        // The WebAssembly backend runs its own kernels, not the tensor
        // suite's work: its cases skip naming the op it lacks.
        let e = realise(wasm, work(TensorOp::Binary(BinOp::Add))).err().unwrap();
        assert_eq!(
            e.to_string(),
            format!("{wasm}: its backend offers no {}", TensorOp::Binary(BinOp::Add).name())
        );
    }

    #[test]
    fn ops_parse_and_name_themselves() {
        assert!(GemmDtype::parse("fp8").unwrap_err().to_string().contains("valid: f32, tf32, f16, bf16"));
        for (s, d) in DTYPES.iter().zip([GemmDtype::F32, GemmDtype::Tf32, GemmDtype::F16, GemmDtype::Bf16]) {
            assert_eq!(GemmDtype::parse(s).unwrap(), d);
        }
        let g = TensorOp::Gemm { dtype: GemmDtype::Bf16, batched: true, batch: 2, m: 1, k: 1, n: 1 };
        assert_eq!(g.name(), "batched gemm bf16");
        assert_eq!(TensorOp::Unary(UnOp::Gelu).name(), "unary gelu");
        assert_eq!(BinOp::Div.f64(1.0, 4.0), 0.25);
    }
}
