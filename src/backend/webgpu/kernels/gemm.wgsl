// GEMM: C[M x N] = A[M x K] * B[K x N], f32, row-major, accumulated in f32.
//
// Each workgroup of 16 x 16 invocations computes a 64 x 64 tile of C; each
// invocation a 4 x 4 block of it, strided by 16 in both directions so that
// neighbouring invocations read neighbouring words of the shared tiles and
// write neighbouring words of C. K is walked in slices of 16: the
// workgroup copies a 64 x 16 slice of A and a 16 x 64 slice of B into
// workgroup memory (8 KiB, within WebGPU's default 16 KiB), waits at a
// barrier, and every invocation accumulates from there. A is stored
// transposed in workgroup memory (k-major) so both inner-loop reads are
// rows. Loads past the matrices' edges read zero, so any M, K, N works.

struct Dims {
    m: u32,
    k: u32,
    n: u32,
    pad: u32,
}

@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> c: array<f32>;
@group(0) @binding(3) var<uniform> d: Dims;

const TILE: u32 = 64u;   // rows and columns of C per workgroup
const SLICE: u32 = 16u;  // K per step through workgroup memory
const STRIDE: u32 = 16u; // invocations per side of the workgroup

var<workgroup> a_tile: array<f32, 1024>; // [SLICE][TILE]: A's slice, transposed
var<workgroup> b_tile: array<f32, 1024>; // [SLICE][TILE]: B's slice

@compute @workgroup_size(16, 16)
fn main(@builtin(workgroup_id) wg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let row0 = wg.y * TILE;
    let col0 = wg.x * TILE;
    var acc: array<f32, 16>;
    let steps = (d.k + SLICE - 1u) / SLICE;
    for (var s = 0u; s < steps; s++) {
        let k0 = s * SLICE;
        // 1024 words of each tile, 4 per invocation.
        for (var r = 0u; r < 4u; r++) {
            let e = li + 256u * r;
            let ar = e / SLICE;
            let ak = e % SLICE;
            var av = 0.0;
            if (row0 + ar < d.m && k0 + ak < d.k) {
                av = a[(row0 + ar) * d.k + k0 + ak];
            }
            a_tile[ak * TILE + ar] = av;
            let bk = e / TILE;
            let bc = e % TILE;
            var bv = 0.0;
            if (k0 + bk < d.k && col0 + bc < d.n) {
                bv = b[(k0 + bk) * d.n + col0 + bc];
            }
            b_tile[bk * TILE + bc] = bv;
        }
        workgroupBarrier();
        for (var kk = 0u; kk < SLICE; kk++) {
            var ar: array<f32, 4>;
            var br: array<f32, 4>;
            for (var i = 0u; i < 4u; i++) {
                ar[i] = a_tile[kk * TILE + lid.y + STRIDE * i];
                br[i] = b_tile[kk * TILE + lid.x + STRIDE * i];
            }
            for (var i = 0u; i < 4u; i++) {
                for (var j = 0u; j < 4u; j++) {
                    acc[i * 4u + j] = fma(ar[i], br[j], acc[i * 4u + j]);
                }
            }
        }
        // Everyone is done reading before the next slice overwrites it.
        workgroupBarrier();
    }
    for (var i = 0u; i < 4u; i++) {
        let row = row0 + lid.y + STRIDE * i;
        for (var j = 0u; j < 4u; j++) {
            let col = col0 + lid.x + STRIDE * j;
            if (row < d.m && col < d.n) {
                c[row * d.n + col] = acc[i * 4u + j];
            }
        }
    }
}
