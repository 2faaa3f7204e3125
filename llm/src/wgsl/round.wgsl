// Rounds the input vectors of a product the way llama.cpp's CPU backend converts activations to
// the weight type's vec_dot_type: to f16 (F16 weights), bf16 (BF16), 8-bit blocks of 32 with an
// f16 scale (Q8_0, Q4_0), 8-bit blocks of 256 with an f32 scale (Q4_K, Q6_K). y = rounded x.
// One invocation per element (16-bit kinds) or per block (the others).

struct Params {
    len: u32,
    kind: u32,
    grid_x: u32,
    _pad: u32,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;

fn f16_round(v: f32) -> f32 {
    return unpack2x16float(pack2x16float(vec2<f32>(v, 0.0))).x;
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let i = (wid.y * p.grid_x + wid.x) * 64u + t;
    if (p.kind == 1u) {
        if (i < p.len) { y[i] = f16_round(x[i]); }
    } else if (p.kind == 2u) {
        if (i < p.len) {
            let u = bitcast<u32>(x[i]);
            var h: u32;
            if ((u & 0x7fffffffu) > 0x7f800000u) {
                h = (u >> 16u) | 64u;
            } else {
                h = (u + (0x7fffu + ((u >> 16u) & 1u))) >> 16u;
            }
            y[i] = bitcast<f32>(h << 16u);
        }
    } else if (p.kind == 3u || p.kind == 4u) {
        let b = i * 32u;
        if (b < p.len) {
            var amax = 0.0;
            for (var l = 0u; l < 32u; l++) { amax = max(amax, abs(x[b + l])); }
            let d = f16_round(amax / 127.0);
            let id = select(0.0, 127.0 / amax, amax != 0.0);
            for (var l = 0u; l < 32u; l++) { y[b + l] = round(x[b + l] * id) * d; }
        }
    } else {
        let b = i * 256u;
        if (b < p.len) {
            var amax = 0.0;
            var mx = 0.0;
            for (var l = 0u; l < 256u; l++) {
                let v = x[b + l];
                if (abs(v) > amax) { amax = abs(v); mx = v; }
            }
            if (amax == 0.0) {
                for (var l = 0u; l < 256u; l++) { y[b + l] = 0.0; }
            } else {
                let iscale = -127.0 / mx;
                let d = 1.0 / iscale;
                for (var l = 0u; l < 256u; l++) { y[b + l] = min(round(iscale * x[b + l]), 127.0) * d; }
            }
        }
    }
}
