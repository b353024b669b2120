// Elementwise add: c[i] = a[i] + b[i], one invocation per element.
//
// Workgroups of 256; a grid wider than the 65535 workgroups one dimension
// allows folds into y, so the flat index is rebuilt from both. The length
// is the output array's own (arrayLength), so no uniform is needed; the
// invocations past it (the last workgroup's tail) do nothing.

@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> c: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>,
        @builtin(num_workgroups) groups: vec3<u32>) {
    let i = gid.y * groups.x * 256u + gid.x;
    if (i < arrayLength(&c)) {
        c[i] = a[i] + b[i];
    }
}
