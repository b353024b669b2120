//! tfbench's own CUDA kernels for transformer inference (everything but the
//! GEMMs, which are cuBLAS's: `super::gemm`), as NVRTC C++ source compiled
//! once per process (`crate::backend::cuda::Gpu::module`).
//!
//! Every kernel exists for three activation types, suffixed `_f32`, `_f16`
//! and `_bf16`; arithmetic is always f32 (loads widen, stores round to
//! nearest even). The half types are 16-bit structs converted by PTX `cvt`
//! (f16) and bit shifts (bf16), not `cuda_fp16.h`: NVRTC then needs no
//! include path on the machine that runs it.
//!
//! Why they are shaped this way:
//! - decode state lives on the device: the position of the next token is an
//!   `int` in device memory (`pos`) that kernels read, and `argmax` writes
//!   the next token ids and advances `pos` itself. A decode step's launches
//!   then take the same arguments every step, so one step can be captured
//!   once as a CUDA Graph and replayed, and greedy decoding never waits for
//!   the host;
//! - attention is one block per (query, head, sequence) with strided K/V:
//!   the encoder reads K and V straight out of the fused QKV projection,
//!   decoders out of the head-major KV cache, with the same kernel;
//! - norms, bias/activation and residual adds are separate small kernels
//!   (fusing them into cuBLAS epilogues would need cuBLASLt): at the
//!   sizes of the suite's models, the GEMMs and the launch count dominate.

use super::source::cuda_prelude;

/// Name of the transformer kernels' module in the per-GPU cache.
pub const TRANSFORMER_MODULE: &str = "tfbench_transformer";

/// Threads per block of the attention kernel (a multiple of 32): eight lanes
/// per key for the scores, so a decode step's few blocks (one per head) keep
/// 32 keys' loads in flight.
pub const ATTN_BLOCK: u32 = 256;
/// Threads per block of the row kernels (norm, embedding, rope).
pub const ROW_BLOCK: u32 = 256;
/// Threads per block of `argmax` (one block per sequence over the whole
/// vocabulary: as many loads in flight as a block can have).
pub const ARGMAX_BLOCK: u32 = 1024;
/// Threads per block of the grid-stride elementwise kernels.
pub const ELEM_BLOCK: u32 = 256;
/// Most blocks an elementwise launch uses (grid-stride loops cover the rest).
pub const ELEM_MAX_BLOCKS: u32 = 4096;
/// Widest attention head the attention kernel supports (its output
/// reduction gives each of [`ATTN_BLOCK`] threads at most one dimension,
/// and at least two key groups share the sum).
pub const MAX_HEAD_DIM: usize = ATTN_BLOCK as usize / 2;

/// Dynamic shared memory of one attention block, in bytes: the scaled
/// query (`head_dim`), the scores of up to `capacity` keys and
/// [`ATTN_BLOCK`] partial sums, all f32.
pub fn attention_smem_bytes(head_dim: usize, capacity: usize) -> usize {
    4 * (head_dim + capacity + ATTN_BLOCK as usize)
}

/// Shared memory a block may use without opting in to more (48 KiB on
/// every architecture CUDA 13 supports).
pub const DEFAULT_SMEM_LIMIT: usize = 48 * 1024;

/// Blocks of an elementwise launch over `n` values.
pub fn elem_blocks(n: usize) -> u32 {
    (n.div_ceil(ELEM_BLOCK as usize)).clamp(1, ELEM_MAX_BLOCKS as usize) as u32
}

/// The kernels (see the module doc); `INST` instantiates each per type.
pub const TRANSFORMER: &str = concat!(
    cuda_prelude!(),
    r#"
struct h16 { u16 x; };
struct b16 { u16 x; };

__device__ __forceinline__ float ld(float v) { return v; }
__device__ __forceinline__ float ld(h16 v) {
    float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.x)); return f;
}
__device__ __forceinline__ float ld(b16 v) { return __uint_as_float(((unsigned)v.x) << 16); }

template <typename T> __device__ __forceinline__ T cvt(float f);
template <> __device__ __forceinline__ float cvt<float>(float f) { return f; }
template <> __device__ __forceinline__ h16 cvt<h16>(float f) {
    h16 r; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r.x) : "f"(f)); return r;
}
template <> __device__ __forceinline__ b16 cvt<b16>(float f) {
    unsigned u = __float_as_uint(f);
    b16 r;
    // NaN stays a (quiet) NaN; otherwise round to nearest even on the 16 dropped bits.
    if ((u & 0x7fffffffu) > 0x7f800000u) r.x = 0x7fc0;
    else r.x = (u16)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    return r;
}


// x[r] = tok[ids[r]] + posemb[past + r % n] + types[0]; one block per row.
template <typename T>
__device__ void embed(const int* ids, const int* pos, const T* tok, const float* posemb,
                      const float* types, T* x, int n, int h) {
    int r = blockIdx.x;
    u64 id = (u64)ids[r];
    int p = (pos ? *pos : 0) + r % n;
    for (int i = threadIdx.x; i < h; i += blockDim.x) {
        float v = ld(tok[id * h + i]);
        if (posemb) v += posemb[(u64)p * h + i];
        if (types) v += types[i];
        x[(u64)r * h + i] = cvt<T>(v);
    }
}

// out[r] = norm(x[r * step + off]): LayerNorm with bias b, or RMSNorm when
// b is null. The row is kept in shared memory (width floats), so out may be x.
template <typename T>
__device__ void norm(const T* x, T* out, const float* w, const float* b, int width, float eps,
                     int step, int off) {
    extern __shared__ float row[];
    __shared__ float red[32];
    const T* xr = x + ((u64)blockIdx.x * step + off) * width;
    int rms = b == 0;
    float s = 0.0f;
    for (int i = threadIdx.x; i < width; i += blockDim.x) {
        float v = ld(xr[i]);
        row[i] = v;
        s += rms ? v * v : v;
    }
    float tot = block_sum(s, red);
    float mean = rms ? 0.0f : tot / width, var;
    if (rms) {
        var = tot / width;
    } else {
        float s2 = 0.0f;
        for (int i = threadIdx.x; i < width; i += blockDim.x) {
            float d = row[i] - mean;
            s2 += d * d;
        }
        var = block_sum(s2, red) / width;
    }
    float inv = 1.0f / sqrtf(var + eps);
    T* o = out + (u64)blockIdx.x * width;
    for (int i = threadIdx.x; i < width; i += blockDim.x) {
        float v = (row[i] - mean) * inv * w[i];
        if (b) v += b[i];
        o[i] = cvt<T>(v);
    }
}

// act: 0 none, 1 exact-erf GELU, 2 tanh GELU, 3 tanh.
__device__ __forceinline__ float activate(float v, int act) {
    switch (act) {
        case 1: return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
        case 2: {
            float u = 0.7978845608028654f * (v + 0.044715f * v * v * v);
            return 0.5f * v * (1.0f + tanhf(u));
        }
        case 3: return tanhf(v);
        default: return v;
    }
}

// y = act(y + bias) over rows x width.
template <typename T>
__device__ void bias_act(T* y, const float* bias, int rows, int width, int act) {
    u64 n = (u64)rows * width;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        float v = ld(y[i]);
        if (bias) v += bias[i % width];
        y[i] = cvt<T>(activate(v, act));
    }
}

// x += y + bias (the residual stream).
template <typename T>
__device__ void residual(const T* y, const float* bias, T* x, int rows, int width) {
    u64 n = (u64)rows * width;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        float v = ld(y[i]);
        if (bias) v += bias[i % width];
        x[i] = cvt<T>(ld(x[i]) + v);
    }
}

// out[r][i] = silu(gu[r][i]) * gu[r][f + i]: the fused gate|up projection.
template <typename T>
__device__ void swiglu(const T* gu, T* out, int rows, int f) {
    u64 n = (u64)rows * f;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        u64 r = i / f, c = i % f;
        float g = ld(gu[r * 2 * f + c]), u = ld(gu[r * 2 * f + f + c]);
        out[i] = cvt<T>(g / (1.0f + expf(-g)) * u);
    }
}

// Row r of the fused projection [q | k | v] (width W) at position past + r % n:
// rotates q and k (pairing i with i + hd/2) when cos is given, then writes k
// and v into the head-major caches [batch][kvh][cap][hd].
template <typename T>
__device__ void rope_append(T* qkv, int W, T* kc, T* vc, const float* cos, const float* sin,
                            const int* pos, int n, int heads, int kvh, int hd, int cap) {
    int r = blockIdx.x, b = r / n, p = (pos ? *pos : 0) + r % n, half = hd / 2;
    int h = heads * hd, kvd = kvh * hd;
    T* row = qkv + (u64)r * W;
    if (cos) {
        for (int j = threadIdx.x; j < (heads + kvh) * half; j += blockDim.x) {
            int head = j / half, i = j % half;
            T* base = head < heads ? row + head * hd : row + h + (head - heads) * hd;
            float c = cos[(u64)p * half + i], s = sin[(u64)p * half + i];
            float u = ld(base[i]), v = ld(base[i + half]);
            base[i] = cvt<T>(u * c - v * s);
            base[i + half] = cvt<T>(v * c + u * s);
        }
        __syncthreads();
    }
    for (int j = threadIdx.x; j < kvd; j += blockDim.x) {
        int kh = j / hd, d = j % hd;
        u64 dst = (((u64)b * kvh + kh) * cap + p) * hd + d;
        kc[dst] = row[h + j];
        vc[dst] = row[h + kvd + j];
    }
}

// One block per (query t, head, sequence b), ATTN_BLOCK threads: softmax(q k^T / sqrt(hd)) v over
// the keys 0..past+n (causal: 0..past+t), masked keys (mask[b*keys + j] == 0)
// left out. q of (b, t) at q + b*q_sb + t*q_sj + head*hd; key j of kv head kh
// at k + b*k_sb + kh*k_sh + j*k_sj (v likewise). out is [b*n + t][heads*hd].
template <typename T>
__device__ void attention(const T* q, u64 q_sb, u64 q_sj, const T* k, const T* v, u64 k_sb,
                          u64 k_sh, u64 k_sj, const int* mask, T* out, const int* pos, int n,
                          int heads, int kvh, int hd, int causal, int cap, float scale) {
    extern __shared__ float sm[];
    __shared__ float red[32];
    float* qs = sm;
    float* sc = sm + hd;
    float* part = sc + cap;
    int t = blockIdx.x, head = blockIdx.y, b = blockIdx.z, tid = threadIdx.x;
    int past = pos ? *pos : 0, keys = past + n;
    int limit = causal ? past + t + 1 : keys;
    int kh = head / (heads / kvh);
    const T* qr = q + b * q_sb + t * q_sj + (u64)head * hd;
    for (int d = tid; d < hd; d += blockDim.x) qs[d] = ld(qr[d]) * scale;
    __syncthreads();
    // Eight lanes per key, so a block scores 32 keys at once: a warp per key
    // serialised a long cache into hundreds of dependent shuffle rounds, and
    // one thread per key made every load touch 32 rows (slow when K is read
    // out of the encoder's wide fused projection). The loop bound is uniform
    // across the warp (the shuffles need every lane).
    const T* kb = k + b * k_sb + kh * k_sh;
    int sub = tid & 7, slot = tid >> 3, slots = blockDim.x >> 3;
    for (int j0 = 0; j0 < limit; j0 += slots) {
        int j = j0 + slot;
        float s = 0.0f;
        if (j < limit) {
            const T* kr = kb + j * k_sj;
            for (int d = sub; d < hd; d += 8) s += qs[d] * ld(kr[d]);
        }
        s += __shfl_xor_sync(0xffffffffu, s, 4);
        s += __shfl_xor_sync(0xffffffffu, s, 2);
        s += __shfl_xor_sync(0xffffffffu, s, 1);
        if (sub == 0 && j < limit) sc[j] = (mask && mask[(u64)b * keys + j] == 0) ? NEG_INF : s;
    }
    __syncthreads();
    float m = NEG_INF;
    for (int j = tid; j < limit; j += blockDim.x) m = fmaxf(m, sc[j]);
    m = block_max(m, red);
    float sum = 0.0f;
    for (int j = tid; j < limit; j += blockDim.x) {
        float e = sc[j] == NEG_INF ? 0.0f : expf(sc[j] - m);
        sc[j] = e;
        sum += e;
    }
    sum = block_sum(sum, red);
    float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    int groups = blockDim.x / hd, g = tid / hd, d = tid % hd;
    const T* vb = v + b * k_sb + kh * k_sh;
    if (g < groups) {
        float acc = 0.0f;
#pragma unroll 4
        for (int j = g; j < limit; j += groups) acc += sc[j] * ld(vb[j * k_sj + d]);
        part[g * hd + d] = acc;
    }
    __syncthreads();
    if (tid < hd) {
        float o = 0.0f;
        for (int gg = 0; gg < groups; gg++) o += part[gg * hd + tid];
        out[((u64)b * n + t) * heads * hd + (u64)head * hd + tid] = cvt<T>(o * inv);
    }
}

// ids[r] = index of the largest logit of row r (first on ties, NaN never
// wins); block 0 then advances *pos by inc. One block per row.
template <typename T>
__device__ void argmax(const T* logits, int vocab, int* ids, int* pos, int inc) {
    __shared__ float bv[32];
    __shared__ int bi[32];
    const T* row = logits + (u64)blockIdx.x * vocab;
    float best = NEG_INF;
    int idx = 0x7fffffff;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
        float v = ld(row[i]);
        if (v > best || (v == best && i < idx)) { best = v; idx = i; }
    }
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, best, o);
        int oi = __shfl_xor_sync(0xffffffffu, idx, o);
        if (ov > best || (ov == best && oi < idx)) { best = ov; idx = oi; }
    }
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    if (lane == 0) { bv[w] = best; bi[w] = idx; }
    __syncthreads();
    if (w == 0) {
        best = lane < nw ? bv[lane] : NEG_INF;
        idx = lane < nw ? bi[lane] : 0x7fffffff;
        for (int o = 16; o > 0; o >>= 1) {
            float ov = __shfl_xor_sync(0xffffffffu, best, o);
            int oi = __shfl_xor_sync(0xffffffffu, idx, o);
            if (ov > best || (ov == best && oi < idx)) { best = ov; idx = oi; }
        }
        if (lane == 0) {
            ids[blockIdx.x] = idx == 0x7fffffff ? 0 : idx;
            if (pos && blockIdx.x == 0) *pos += inc;
        }
    }
}

// out[r] = x[r * step] (the [CLS] rows for BERT's pooler).
template <typename T>
__device__ void gather_rows(const T* x, T* out, int width, int step) {
    const T* src = x + (u64)blockIdx.x * step * width;
    for (int i = threadIdx.x; i < width; i += blockDim.x) out[(u64)blockIdx.x * width + i] = src[i];
}

#define INST(T, S)                                                                                    \
extern "C" __global__ void embed_##S(const int* ids, const int* pos, const T* tok, const float* pe,  \
                                     const float* ty, T* x, int n, int h) {                          \
    embed<T>(ids, pos, tok, pe, ty, x, n, h);                                                        \
}                                                                                                     \
extern "C" __global__ void norm_##S(const T* x, T* out, const float* w, const float* b, int width,   \
                                    float eps, int step, int off) {                                  \
    norm<T>(x, out, w, b, width, eps, step, off);                                                    \
}                                                                                                     \
extern "C" __global__ void bias_act_##S(T* y, const float* bias, int rows, int width, int act) {     \
    bias_act<T>(y, bias, rows, width, act);                                                          \
}                                                                                                     \
extern "C" __global__ void residual_##S(const T* y, const float* bias, T* x, int rows, int width) {  \
    residual<T>(y, bias, x, rows, width);                                                            \
}                                                                                                     \
extern "C" __global__ void swiglu_##S(const T* gu, T* out, int rows, int f) {                        \
    swiglu<T>(gu, out, rows, f);                                                                     \
}                                                                                                     \
extern "C" __global__ void rope_append_##S(T* qkv, int W, T* kc, T* vc, const float* c,              \
                                           const float* s, const int* pos, int n, int heads,         \
                                           int kvh, int hd, int cap) {                               \
    rope_append<T>(qkv, W, kc, vc, c, s, pos, n, heads, kvh, hd, cap);                               \
}                                                                                                     \
extern "C" __global__ void attention_##S(const T* q, u64 q_sb, u64 q_sj, const T* k, const T* v,     \
                                         u64 k_sb, u64 k_sh, u64 k_sj, const int* mask, T* out,      \
                                         const int* pos, int n, int heads, int kvh, int hd,          \
                                         int causal, int cap, float scale) {                         \
    attention<T>(q, q_sb, q_sj, k, v, k_sb, k_sh, k_sj, mask, out, pos, n, heads, kvh, hd, causal,   \
                 cap, scale);                                                                        \
}                                                                                                     \
extern "C" __global__ void argmax_##S(const T* logits, int vocab, int* ids, int* pos, int inc) {     \
    argmax<T>(logits, vocab, ids, pos, inc);                                                         \
}                                                                                                     \
extern "C" __global__ void gather_rows_##S(const T* x, T* out, int width, int step) {                \
    gather_rows<T>(x, out, width, step);                                                             \
}

INST(float, f32)
INST(h16, f16)
INST(b16, bf16)

// dst[0..n] = src[0..n] and *pos = value: resets a decode to its start.
extern "C" __global__ void reset_decode(const int* src, int* dst, int n, int* pos, int value) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
    if (threadIdx.x == 0) *pos = value;
}
"#
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kernel_is_instantiated_for_every_type() {
        for k in [
            "embed",
            "norm",
            "bias_act",
            "residual",
            "swiglu",
            "rope_append",
            "attention",
            "argmax",
            "gather_rows",
        ] {
            assert!(TRANSFORMER.contains(&format!("{k}<T>(")), "{k} has no body call");
        }
        for s in ["f32", "f16", "bf16"] {
            assert!(TRANSFORMER.contains(&format!(", {s})")), "{s} not instantiated");
        }
    }

    #[test]
    fn attention_fits_in_default_shared_memory_up_to_thousands_of_keys() {
        assert_eq!(attention_smem_bytes(64, 128), 4 * (64 + 128 + 256));
        assert!(attention_smem_bytes(MAX_HEAD_DIM, 4096) <= DEFAULT_SMEM_LIMIT);
        assert!(attention_smem_bytes(64, 16384) > DEFAULT_SMEM_LIMIT);
    }

    #[test]
    fn elementwise_grids_are_bounded() {
        assert_eq!(elem_blocks(0), 1);
        assert_eq!(elem_blocks(256), 1);
        assert_eq!(elem_blocks(257), 2);
        assert_eq!(elem_blocks(1 << 30), ELEM_MAX_BLOCKS);
    }
}
