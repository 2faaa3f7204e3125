// y[r] = x[row0 + r] / sqrt(mean(x[row0 + r]^2) + eps) * w, one workgroup per row.

struct Params {
    d: u32,
    eps: f32,
    row0: u32,
    _pad: u32,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

var<workgroup> red: array<f32, 64>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let xo = (p.row0 + wid.x) * p.d;
    let yo = wid.x * p.d;
    var s = 0.0;
    for (var i = t; i < p.d; i += 64u) {
        let v = x[xo + i];
        s += v * v;
    }
    red[t] = s;
    workgroupBarrier();
    for (var k = 32u; k > 0u; k >>= 1u) {
        if (t < k) {
            red[t] += red[t + k];
        }
        workgroupBarrier();
    }
    let scale = 1.0 / sqrt(red[0] / f32(p.d) + p.eps);
    for (var i = t; i < p.d; i += 64u) {
        y[yo + i] = x[xo + i] * scale * w[i];
    }
}
