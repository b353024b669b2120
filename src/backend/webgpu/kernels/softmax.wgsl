// Softmax over each row of X[ROWS x COLS]: y = exp(x - max) / sum(exp(x - max)).
//
// One workgroup of 256 invocations per row (a grid wider than 65535 rows
// folds into y). Each invocation strides over the row, then the workgroup
// reduces through workgroup memory twice: the row's maximum (subtracted so
// exp never overflows), then the sum of the exponentials. exp is WGSL's
// built-in (3 + 2|x| ULP at most by the specification; |x| <= 8 here).

struct Shape {
    rows: u32,
    cols: u32,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<uniform> shape: Shape;

const WG: u32 = 256u;

var<workgroup> partial: array<f32, 256>;

// Tree reduction of `partial` by max (op 0) or sum (op 1); every
// invocation returns the result.
fn reduce(li: u32, op: u32) -> f32 {
    for (var half = WG / 2u; half > 0u; half = half / 2u) {
        workgroupBarrier();
        if (li < half) {
            let other = partial[li + half];
            if (op == 0u) {
                partial[li] = max(partial[li], other);
            } else {
                partial[li] = partial[li] + other;
            }
        }
    }
    workgroupBarrier();
    let result = partial[0];
    // Nobody writes `partial` again until everyone has read the result.
    workgroupBarrier();
    return result;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>,
        @builtin(num_workgroups) groups: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    // Uniform across the workgroup, so the barriers below stay in uniform
    // control flow even for a workgroup past the last row.
    let row = wg.y * groups.x + wg.x;
    let live = row < shape.rows;
    let base = row * shape.cols;
    let cols = select(0u, shape.cols, live);

    var m = -3.4028235e38;
    for (var j = li; j < cols; j += WG) {
        m = max(m, x[base + j]);
    }
    partial[li] = m;
    let row_max = reduce(li, 0u);

    var s = 0.0;
    for (var j = li; j < cols; j += WG) {
        s += exp(x[base + j] - row_max);
    }
    partial[li] = s;
    let total = reduce(li, 1u);

    for (var j = li; j < cols; j += WG) {
        y[base + j] = exp(x[base + j] - row_max) / total;
    }
}
