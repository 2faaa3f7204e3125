// Elementwise steps over len floats: a += b[i % d] (biases), a = silu(a) * b (SwiGLU),
// a += b (residual adds).

struct Params {
    len: u32,
    d: u32,
    grid_x: u32,
    _pad: u32,
}

@group(0) @binding(0) var<storage, read_write> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;

fn index(wid: vec3<u32>, t: u32) -> u32 {
    return (wid.y * p.grid_x + wid.x) * 64u + t;
}

@compute @workgroup_size(64)
fn add_rows(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let i = index(wid, t);
    if (i < p.len) {
        a[i] += b[i % p.d];
    }
}

@compute @workgroup_size(64)
fn swiglu(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let i = index(wid, t);
    if (i < p.len) {
        let g = a[i];
        a[i] = g / (1.0 + exp(-g)) * b[i];
    }
}

@compute @workgroup_size(64)
fn add(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let i = index(wid, t);
    if (i < p.len) {
        a[i] += b[i];
    }
}
