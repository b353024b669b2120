//! tfbench's own CUDA kernels, as NVRTC C++ source (compiled at run time
//! for the GPU found, once per process: `crate::backend::cuda::Gpu::module`).
//!
//! One module, [`TENSOR`], holds the tensor suite's kernels. The launch
//! shapes they expect come from [`super::grid`]: elementwise kernels are
//! grid-stride loops (any grid works), the reductions need `REDUCE_BLOCK`
//! threads per block and a zeroed ticket word, the row kernels one block of
//! `ROW_BLOCK` threads per row.
//!
//! Why they are written this way:
//! - elementwise kernels move float4 vectors (16-byte accesses reach full
//!   bandwidth; the scalar tail handles lengths not divisible by 4, and
//!   cudaMalloc'd buffers are 256-byte aligned);
//! - the sum's partial sums are plain per-thread accumulations plus a tree,
//!   deterministic (no floating-point atomics: an integer ticket only picks
//!   the block that adds the partials, in a fixed order), so its error bound
//!   is known (`super::grid::sum_error_levels`);
//! - unary math uses CUDA's IEEE-accurate `expf`/`logf`/`tanhf`/`sqrtf`
//!   (no fast-math), GELU as `x * sigmoid(2u)` like the CPU kernel, which
//!   avoids the cancellation of `1 + tanh(u)` for negative inputs.

/// CUDA C++ that every kernel module of tfbench starts with, written once:
/// the integer type names, `-inf` (NVRTC has no `<math.h>` macros) and the
/// warp- and block-wide sum and max. Each module's source is this followed
/// by its own kernels (`concat!(cuda_prelude!(), ...)`).
///
/// The block reductions need `blockDim.x` a multiple of 32 and `red` 32
/// floats of shared memory; every thread gets the result, and the leading
/// barrier lets one `red` serve call after call.
macro_rules! cuda_prelude {
    () => {
        r#"
typedef unsigned long long u64;
typedef unsigned short u16;
#define NEG_INF __int_as_float(0xff800000)

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ float block_sum(float v, float* red) {
    v = warp_sum(v);
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0) red[w] = v;
    __syncthreads();
    return warp_sum(lane < nw ? red[lane] : 0.0f);
}
__device__ float block_max(float v, float* red) {
    v = warp_max(v);
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0) red[w] = v;
    __syncthreads();
    return warp_max(lane < nw ? red[lane] : NEG_INF);
}
"#
    };
}
pub(crate) use cuda_prelude;

/// Name of the tensor kernels' module in the per-GPU cache.
pub const TENSOR_MODULE: &str = "tfbench_tensor";

/// Threads per block of the reduction kernels (a power of two).
pub const REDUCE_BLOCK: u32 = 256;
/// Threads per block of the row kernels (softmax, layernorm).
pub const ROW_BLOCK: u32 = 256;

/// The tensor suite's kernels.
pub const TENSOR: &str = concat!(
    cuda_prelude!(),
    r#"
#define REDUCE_BLOCK 256
#define ROW_BLOCK 256

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

// out[r][c] = a[r][c] + row[c]; float4 vectors when rows are a multiple of
// 4 long (then a vector never crosses a row and the row vector is aligned).
extern "C" __global__ void broadcast_add_f32(const float* __restrict__ a, const float* __restrict__ row,
                                             float* __restrict__ out, u64 n, u64 cols) {
    if (cols % 4 == 0) {
        u64 n4 = n / 4, c4 = cols / 4;
        const float4* a4 = reinterpret_cast<const float4*>(a);
        const float4* r4 = reinterpret_cast<const float4*>(row);
        float4* o4 = reinterpret_cast<float4*>(out);
        for (u64 i = gid(); i < n4; i += gstride()) {
            float4 x = a4[i], y = r4[i % c4];
            o4[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
        }
        return;
    }
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

// ---- randn: counter-based standard normals ----
// Output pair i (2i, 2i+1) comes from one splitmix64 hash of
// seed + (i + 1) * golden: 24 bits make u1 in (0, 1], 24 more u2 in [0, 1),
// both exact in f32, and Box-Muller turns them into two normals. Stateless,
// so any grid gives the same values, and `random::pair_uniforms` replays the
// uniforms on the CPU bit for bit.
__device__ __forceinline__ u64 mix64(u64 z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
extern "C" __global__ void randn_f32(float* __restrict__ out, u64 n, u64 seed) {
    const float ulp = 1.0f / 16777216.0f;
    u64 pairs = (n + 1) / 2;
    for (u64 i = gid(); i < pairs; i += gstride()) {
        u64 h = mix64(seed + (i + 1) * 0x9e3779b97f4a7c15ull);
        float u1 = (float)((h >> 40) + 1) * ulp;
        float u2 = (float)(h & 0xffffffull) * ulp;
        float r = sqrtf(-2.0f * logf(u1));
        float s, c;
        sincospif(2.0f * u2, &s, &c);
        if (2 * i + 1 < n) {
            reinterpret_cast<float2*>(out)[i] = make_float2(r * c, r * s);
        } else {
            out[2 * i] = r * c;
        }
    }
}

// ---- empty kernel (launch latency) ----
extern "C" __global__ void empty_kernel() {}

// ---- whole-tensor reductions, one launch ----
// Each block reduces its grid-stride share into partial[blockIdx.x]; the
// last block to finish (a ticket taken after a fence) reduces the partials,
// in a fixed order, into out[0] and resets the ticket for the next launch.
// So the result is deterministic (no floating-point atomics) and no second
// launch waits on the first. kind 0 sum, 1 max; out[0] is scaled by
// `scale` (1/n for a mean).
//
// A thread reads float4 vectors, four at a time before using them (more
// bytes in flight per thread), into four lane accumulators in index order,
// adds the scalar tail to its first lane, then combines the lanes as a pair
// tree; the error bound in `grid::sum_error_levels` follows exactly this
// order. The last block reads the partials through L2 (`__ldcg`): other
// blocks wrote them during this launch.
__device__ __forceinline__ float rop(int kind, float a, float b) { return kind == 0 ? a + b : fmaxf(a, b); }
__device__ __forceinline__ float4 rop4(int kind, float4 a, float4 v) {
    return make_float4(rop(kind, a.x, v.x), rop(kind, a.y, v.y), rop(kind, a.z, v.z), rop(kind, a.w, v.w));
}
__device__ __forceinline__ float4 ld4(const float4* p, bool l2) { return l2 ? __ldcg(p) : __ldg(p); }
__device__ __forceinline__ float ld1(const float* p, bool l2) { return l2 ? __ldcg(p) : __ldg(p); }
__device__ float thread_reduce(const float* x, u64 n, int kind, u64 tid, u64 stride, bool l2) {
    float id = kind == 0 ? 0.0f : NEG_INF;
    float4 acc = make_float4(id, id, id, id);
    u64 n4 = n / 4;
    const float4* x4 = reinterpret_cast<const float4*>(x);
    u64 i = tid;
    for (; i + 3 * stride < n4; i += 4 * stride) {
        float4 v0 = ld4(x4 + i, l2), v1 = ld4(x4 + i + stride, l2);
        float4 v2 = ld4(x4 + i + 2 * stride, l2), v3 = ld4(x4 + i + 3 * stride, l2);
        acc = rop4(kind, acc, v0); acc = rop4(kind, acc, v1);
        acc = rop4(kind, acc, v2); acc = rop4(kind, acc, v3);
    }
    for (; i < n4; i += stride) acc = rop4(kind, acc, ld4(x4 + i, l2));
    for (u64 j = n4 * 4 + tid; j < n; j += stride) acc.x = rop(kind, acc.x, ld1(x + j, l2));
    return rop(kind, rop(kind, acc.x, acc.y), rop(kind, acc.z, acc.w));
}
// Whether this block is the last of the grid to finish (thread 0 has
// written the block's partial; every thread gets the answer).
__device__ bool last_block(unsigned* ticket) {
    __shared__ bool last;
    if (threadIdx.x == 0) {
        __threadfence();
        last = atomicAdd(ticket, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    return last;
}
extern "C" __global__ void reduce_f32(const float* __restrict__ x, float* partial, float* out, u64 n,
                                      int kind, float scale, unsigned* ticket) {
    __shared__ float sh[32];
    float a = thread_reduce(x, n, kind, gid(), gstride(), false);
    a = kind == 0 ? block_sum(a, sh) : block_max(a, sh);
    if (threadIdx.x == 0) partial[blockIdx.x] = a;
    if (!last_block(ticket)) return;
    a = thread_reduce(partial, gridDim.x, kind, threadIdx.x, blockDim.x, true);
    a = kind == 0 ? block_sum(a, sh) : block_max(a, sh);
    if (threadIdx.x == 0) { out[0] = a * scale; *ticket = 0; }
}

// argmax: (value, index) pairs, the first index among equal maxima, in the
// same one-launch shape: float4 reads in the first phase, the partials'
// values and indices (through L2) in the last block.
//
// A thread visits its indices in increasing order, so inside a thread a
// later element wins only when strictly greater: per float4 that is three
// fmaxf and one compare, and the rare new maximum picks its first lane
// (before, every element compared a u64 index too, and the block combined
// its pairs through shared memory in 8 synchronised steps: 77% of copy
// bandwidth at 16M on the H100, against the plain reductions' 81%).
__device__ __forceinline__ void am_take(float& v, u64& i, float v2, u64 i2) {
    if (v2 > v || (v2 == v && i2 < i)) { v = v2; i = i2; }
}
__device__ __forceinline__ void am_take4(float& v, u64& i, float4 q, u64 j) {
    float m = fmaxf(fmaxf(q.x, q.y), fmaxf(q.z, q.w));
    if (m > v) {
        v = m;
        i = q.x == m ? j : q.y == m ? j + 1 : q.z == m ? j + 2 : j + 3;
    }
}
__device__ __forceinline__ void warp_argmax(float& v, u64& i) {
    for (int o = 16; o > 0; o >>= 1) {
        float v2 = __shfl_down_sync(0xffffffffu, v, o);
        u64 i2 = __shfl_down_sync(0xffffffffu, i, o);
        am_take(v, i, v2, i2);
    }
}
// The block's (value, index), in thread 0 (warp shuffles, then the warps'
// winners in the first warp). sv, si: 32 entries of shared memory.
__device__ void block_argmax(float& v, u64& idx, float* sv, u64* si) {
    warp_argmax(v, idx);
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0) { sv[w] = v; si[w] = idx; }
    __syncthreads();
    if (w == 0) {
        v = lane < nw ? sv[lane] : NEG_INF;
        idx = lane < nw ? si[lane] : ~0ull;
        warp_argmax(v, idx);
    }
}
extern "C" __global__ void argmax_f32(const float* __restrict__ x, float* part_v, u64* part_i,
                                      float* out_v, u64* out_i, u64 n, unsigned* ticket) {
    __shared__ float sv[32];
    __shared__ u64 si[32];
    float v = NEG_INF;
    u64 idx = ~0ull;
    u64 n4 = n / 4;
    const float4* x4 = reinterpret_cast<const float4*>(x);
    u64 i = gid(), st = gstride();
    for (; i + 3 * st < n4; i += 4 * st) {
        float4 q[4] = {__ldg(x4 + i), __ldg(x4 + i + st), __ldg(x4 + i + 2 * st), __ldg(x4 + i + 3 * st)};
#pragma unroll
        for (int k = 0; k < 4; k++) am_take4(v, idx, q[k], 4 * (i + k * st));
    }
    for (; i < n4; i += st) am_take4(v, idx, __ldg(x4 + i), 4 * i);
    for (u64 j = n4 * 4 + gid(); j < n; j += st) {
        float y = x[j];
        if (y > v) { v = y; idx = j; }
    }
    block_argmax(v, idx, sv, si);
    if (threadIdx.x == 0) { part_v[blockIdx.x] = v; part_i[blockIdx.x] = idx; }
    if (!last_block(ticket)) return;
    v = NEG_INF; idx = ~0ull;
    for (u64 i = threadIdx.x; i < gridDim.x; i += blockDim.x) am_take(v, idx, __ldcg(part_v + i), __ldcg(part_i + i));
    block_argmax(v, idx, sv, si);
    if (threadIdx.x == 0) { out_v[0] = v; out_i[0] = idx; *ticket = 0; }
}

// ---- row kernels: one block per row ----
// A row of up to ROW_CACHE float4 vectors per thread (8192 columns with 256
// threads) whose length is a multiple of 4 is read once into registers
// (float4 loads, indices fixed at compile time so the array stays in
// registers) and written once: one pass over memory instead of three.
// Other rows take the plain loops, which re-read the row from cache.
#define ROW_CACHE 8
__device__ __forceinline__ bool row_cached(u64 cols) {
    return cols % 4 == 0 && cols / 4 <= (u64)ROW_CACHE * blockDim.x;
}

extern "C" __global__ void softmax_rows_f32(const float* __restrict__ x, float* __restrict__ out, u64 cols) {
    __shared__ float sh[32];
    const float* r = x + (u64)blockIdx.x * cols;
    float* o = out + (u64)blockIdx.x * cols;
    if (row_cached(cols)) {
        const float4* r4 = reinterpret_cast<const float4*>(r);
        float4* o4 = reinterpret_cast<float4*>(o);
        u64 c4 = cols / 4;
        float4 v[ROW_CACHE];
        float m = NEG_INF;
#pragma unroll
        for (int k = 0; k < ROW_CACHE; k++) {
            u64 c = threadIdx.x + (u64)k * blockDim.x;
            if (c < c4) { v[k] = r4[c]; m = fmaxf(m, fmaxf(fmaxf(v[k].x, v[k].y), fmaxf(v[k].z, v[k].w))); }
        }
        m = block_max(m, sh);
        float s = 0.0f;
#pragma unroll
        for (int k = 0; k < ROW_CACHE; k++) {
            u64 c = threadIdx.x + (u64)k * blockDim.x;
            if (c < c4) {
                v[k].x = expf(v[k].x - m); v[k].y = expf(v[k].y - m);
                v[k].z = expf(v[k].z - m); v[k].w = expf(v[k].w - m);
                s += (v[k].x + v[k].y) + (v[k].z + v[k].w);
            }
        }
        float inv = 1.0f / block_sum(s, sh);
#pragma unroll
        for (int k = 0; k < ROW_CACHE; k++) {
            u64 c = threadIdx.x + (u64)k * blockDim.x;
            if (c < c4) o4[c] = make_float4(v[k].x * inv, v[k].y * inv, v[k].z * inv, v[k].w * inv);
        }
        return;
    }
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
    if (row_cached(cols)) {
        const float4* r4 = reinterpret_cast<const float4*>(r);
        const float4* g4 = reinterpret_cast<const float4*>(gamma);
        const float4* b4 = reinterpret_cast<const float4*>(beta);
        float4* o4 = reinterpret_cast<float4*>(o);
        u64 c4 = cols / 4;
        float4 v[ROW_CACHE];
        float s = 0.0f;
#pragma unroll
        for (int k = 0; k < ROW_CACHE; k++) {
            u64 c = threadIdx.x + (u64)k * blockDim.x;
            if (c < c4) { v[k] = r4[c]; s += (v[k].x + v[k].y) + (v[k].z + v[k].w); }
        }
        float mean = block_sum(s, sh) / (float)cols;
        float q = 0.0f;
#pragma unroll
        for (int k = 0; k < ROW_CACHE; k++) {
            u64 c = threadIdx.x + (u64)k * blockDim.x;
            if (c < c4) {
                float a = v[k].x - mean, b = v[k].y - mean, d = v[k].z - mean, e = v[k].w - mean;
                q += (a * a + b * b) + (d * d + e * e);
            }
        }
        float rstd = rsqrtf(block_sum(q, sh) / (float)cols + eps);
#pragma unroll
        for (int k = 0; k < ROW_CACHE; k++) {
            u64 c = threadIdx.x + (u64)k * blockDim.x;
            if (c < c4) {
                float4 g = g4[c], b = b4[c];
                o4[c] = make_float4((v[k].x - mean) * rstd * g.x + b.x, (v[k].y - mean) * rstd * g.y + b.y,
                                    (v[k].z - mean) * rstd * g.z + b.z, (v[k].w - mean) * rstd * g.w + b.w);
            }
        }
        return;
    }
    float s = 0.0f;
    for (u64 c = threadIdx.x; c < cols; c += blockDim.x) s += r[c];
    float mean = block_sum(s, sh) / (float)cols;
    float q = 0.0f;
    for (u64 c = threadIdx.x; c < cols; c += blockDim.x) { float d = r[c] - mean; q += d * d; }
    float rstd = rsqrtf(block_sum(q, sh) / (float)cols + eps);
    for (u64 c = threadIdx.x; c < cols; c += blockDim.x) o[c] = (r[c] - mean) * rstd * gamma[c] + beta[c];
}
"#
);
