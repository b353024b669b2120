//! tfbench's own CUDA kernels, as NVRTC C++ source (compiled at run time
//! for the GPU found, once per process: `crate::cuda::Gpu::module`).
//!
//! One module, [`TENSOR`], holds the tensor suite's kernels. The launch
//! shapes they expect come from [`super::grid`]: elementwise kernels are
//! grid-stride loops (any grid works), the two-pass reductions need
//! `REDUCE_BLOCK` threads per block, the row kernels one block of
//! `ROW_BLOCK` threads per row.
//!
//! Why they are written this way:
//! - elementwise kernels move float4 vectors (16-byte accesses reach full
//!   bandwidth; the scalar tail handles lengths not divisible by 4, and
//!   cudaMalloc'd buffers are 256-byte aligned);
//! - the sum's partial sums are plain per-thread accumulations plus a tree,
//!   deterministic (no atomics), so its error bound is known
//!   (`super::grid::sum_error_levels`);
//! - unary math uses CUDA's IEEE-accurate `expf`/`logf`/`tanhf`/`sqrtf`
//!   (no fast-math), GELU as `x * sigmoid(2u)` like the CPU kernel, which
//!   avoids the cancellation of `1 + tanh(u)` for negative inputs.

/// Name of the tensor kernels' module in the per-GPU cache.
pub const TENSOR_MODULE: &str = "tfbench_tensor";

/// Threads per block of the reduction kernels (a power of two).
pub const REDUCE_BLOCK: u32 = 256;
/// Threads per block of the row kernels (softmax, layernorm).
pub const ROW_BLOCK: u32 = 256;

/// The tensor suite's kernels.
pub const TENSOR: &str = r#"
typedef unsigned long long u64;

#define REDUCE_BLOCK 256
#define ROW_BLOCK 256
// NVRTC has no <math.h> macros: -inf from its bits.
#define NEG_INF __int_as_float(0xff800000)

__device__ __forceinline__ u64 gid() { return (u64)blockIdx.x * blockDim.x + threadIdx.x; }
__device__ __forceinline__ u64 gstride() { return (u64)gridDim.x * blockDim.x; }

// ---- binary: out = a op b (op 0 add, 1 sub, 2 mul, 3 div) ----
__device__ __forceinline__ float binop(int op, float x, float y) {
    switch (op) {
        case 0: return x + y;
        case 1: return x - y;
        case 2: return x * y;
        default: return x / y;
    }
}

extern "C" __global__ void binary_f32(const float* __restrict__ a, const float* __restrict__ b,
                                      float* __restrict__ out, u64 n, int op) {
    u64 n4 = n / 4;
    const float4* a4 = reinterpret_cast<const float4*>(a);
    const float4* b4 = reinterpret_cast<const float4*>(b);
    float4* o4 = reinterpret_cast<float4*>(out);
    for (u64 i = gid(); i < n4; i += gstride()) {
        float4 x = a4[i], y = b4[i], r;
        r.x = binop(op, x.x, y.x); r.y = binop(op, x.y, y.y);
        r.z = binop(op, x.z, y.z); r.w = binop(op, x.w, y.w);
        o4[i] = r;
    }
    for (u64 i = n4 * 4 + gid(); i < n; i += gstride()) out[i] = binop(op, a[i], b[i]);
}

// out[r][c] = a[r][c] + row[c]
extern "C" __global__ void broadcast_add_f32(const float* __restrict__ a, const float* __restrict__ row,
                                             float* __restrict__ out, u64 n, u64 cols) {
    for (u64 i = gid(); i < n; i += gstride()) out[i] = a[i] + row[i % cols];
}

// ---- unary: out = f(x) (0 relu, 1 sigmoid, 2 tanh, 3 exp, 4 log, 5 sqrt, 6 gelu) ----
__device__ __forceinline__ float unop(int op, float x) {
    switch (op) {
        case 0: return x > 0.0f ? x : 0.0f;
        case 1: return 1.0f / (1.0f + expf(-x));
        case 2: return tanhf(x);
        case 3: return expf(x);
        case 4: return logf(x);
        case 5: return sqrtf(x);
        default: {
            float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
            return x / (1.0f + expf(-2.0f * u));
        }
    }
}

extern "C" __global__ void unary_f32(const float* __restrict__ x, float* __restrict__ out, u64 n, int op) {
    u64 n4 = n / 4;
    const float4* x4 = reinterpret_cast<const float4*>(x);
    float4* o4 = reinterpret_cast<float4*>(out);
    for (u64 i = gid(); i < n4; i += gstride()) {
        float4 v = x4[i], r;
        r.x = unop(op, v.x); r.y = unop(op, v.y); r.z = unop(op, v.z); r.w = unop(op, v.w);
        o4[i] = r;
    }
    for (u64 i = n4 * 4 + gid(); i < n; i += gstride()) out[i] = unop(op, x[i]);
}

// ---- fill (creation: ones) ----
extern "C" __global__ void fill_f32(float* __restrict__ out, u64 n, float value) {
    for (u64 i = gid(); i < n; i += gstride()) out[i] = value;
}

// ---- empty kernel (launch latency) ----
extern "C" __global__ void empty_kernel() {}

// ---- block reductions ----
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
// Sum / max over the block; every thread gets the result. `sh` holds 32 floats.
__device__ float block_sum(float v, float* sh) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = (threadIdx.x < (blockDim.x >> 5)) ? sh[threadIdx.x] : 0.0f;
    if (w == 0) v = warp_sum(v);
    if (threadIdx.x == 0) sh[0] = v;
    __syncthreads();
    return sh[0];
}
__device__ float block_max(float v, float* sh) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = (threadIdx.x < (blockDim.x >> 5)) ? sh[threadIdx.x] : NEG_INF;
    if (w == 0) v = warp_max(v);
    if (threadIdx.x == 0) sh[0] = v;
    __syncthreads();
    return sh[0];
}

// ---- whole-tensor reductions, two passes: partial[blockIdx] then one block ----
// kind 0 sum, 1 max. Pass 2 runs the same kernel over the partials with one
// block and writes out[0] * scale (scale = 1/n for a mean).
extern "C" __global__ void reduce_f32(const float* __restrict__ x, float* __restrict__ out, u64 n,
                                      int kind, float scale) {
    __shared__ float sh[32];
    float acc = kind == 0 ? 0.0f : NEG_INF;
    for (u64 i = gid(); i < n; i += gstride()) acc = kind == 0 ? acc + x[i] : fmaxf(acc, x[i]);
    acc = kind == 0 ? block_sum(acc, sh) : block_max(acc, sh);
    if (threadIdx.x == 0) out[blockIdx.x] = gridDim.x == 1 ? acc * scale : acc;
}

// argmax: (value, index) pairs, the first index among equal maxima.
__device__ __forceinline__ void am_take(float& v, u64& i, float v2, u64 i2) {
    if (v2 > v || (v2 == v && i2 < i)) { v = v2; i = i2; }
}
extern "C" __global__ void argmax_f32(const float* __restrict__ x, const u64* __restrict__ xi,
                                      float* __restrict__ out_v, u64* __restrict__ out_i, u64 n) {
    __shared__ float sv[REDUCE_BLOCK];
    __shared__ u64 si[REDUCE_BLOCK];
    float v = NEG_INF;
    u64 idx = ~0ull;
    for (u64 i = gid(); i < n; i += gstride()) am_take(v, idx, x[i], xi ? xi[i] : i);
    sv[threadIdx.x] = v; si[threadIdx.x] = idx;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            float v2 = sv[threadIdx.x + s]; u64 i2 = si[threadIdx.x + s];
            float v1 = sv[threadIdx.x]; u64 i1 = si[threadIdx.x];
            am_take(v1, i1, v2, i2);
            sv[threadIdx.x] = v1; si[threadIdx.x] = i1;
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) { out_v[blockIdx.x] = sv[0]; out_i[blockIdx.x] = si[0]; }
}

// ---- row kernels: one block per row ----
extern "C" __global__ void softmax_rows_f32(const float* __restrict__ x, float* __restrict__ out, u64 cols) {
    __shared__ float sh[32];
    const float* r = x + (u64)blockIdx.x * cols;
    float* o = out + (u64)blockIdx.x * cols;
    float m = NEG_INF;
    for (u64 c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, r[c]);
    m = block_max(m, sh);
    float s = 0.0f;
    for (u64 c = threadIdx.x; c < cols; c += blockDim.x) s += expf(r[c] - m);
    s = block_sum(s, sh);
    float inv = 1.0f / s;
    for (u64 c = threadIdx.x; c < cols; c += blockDim.x) o[c] = expf(r[c] - m) * inv;
}

extern "C" __global__ void layernorm_rows_f32(const float* __restrict__ x, const float* __restrict__ gamma,
                                              const float* __restrict__ beta, float* __restrict__ out,
                                              u64 cols, float eps) {
    __shared__ float sh[32];
    const float* r = x + (u64)blockIdx.x * cols;
    float* o = out + (u64)blockIdx.x * cols;
    float s = 0.0f;
    for (u64 c = threadIdx.x; c < cols; c += blockDim.x) s += r[c];
    float mean = block_sum(s, sh) / (float)cols;
    float q = 0.0f;
    for (u64 c = threadIdx.x; c < cols; c += blockDim.x) { float d = r[c] - mean; q += d * d; }
    float rstd = rsqrtf(block_sum(q, sh) / (float)cols + eps);
    for (u64 c = threadIdx.x; c < cols; c += blockDim.x) o[c] = (r[c] - mean) * rstd * gamma[c] + beta[c];
}
"#;
