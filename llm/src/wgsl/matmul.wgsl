// out[j][row0 + r] = sum_c W[r][c] * x[j][c] for the rows of one weight buffer, the weight
// dequantized inside the kernel from its stored (ggml) bytes. One workgroup per (row, input).
// kind: 0 F32, 1 F16, 2 BF16, 3 Q8_0, 4 Q4_0, 5 Q4_K, 6 Q6_K. f32 accumulation.

struct Params {
    rows: u32,
    cols: u32,
    row_bytes: u32,
    kind: u32,
    out_stride: u32,
    row0: u32,
    grid_x: u32,
    _pad: u32,
}

@group(0) @binding(0) var<storage, read> w: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

var<workgroup> red: array<f32, 64>;

fn byte_at(o: u32) -> u32 {
    return (w[o >> 2u] >> ((o & 3u) * 8u)) & 0xffu;
}

fn f16_at(o: u32) -> f32 {
    let h = (w[o >> 2u] >> ((o & 2u) * 8u)) & 0xffffu;
    return unpack2x16float(h).x;
}

fn i8_of(b: u32) -> i32 {
    return bitcast<i32>(b << 24u) >> 24u;
}

// Q4_K: 6-bit scale and min of sub-block j from the 12 scale bytes at s.
fn scale_min_k4(s: u32, j: u32) -> vec2<f32> {
    if (j < 4u) {
        return vec2<f32>(f32(byte_at(s + j) & 63u), f32(byte_at(s + j + 4u) & 63u));
    }
    let sc = (byte_at(s + j + 4u) & 15u) | ((byte_at(s + j - 4u) >> 6u) << 4u);
    let m = (byte_at(s + j + 4u) >> 4u) | ((byte_at(s + j) >> 6u) << 4u);
    return vec2<f32>(f32(sc), f32(m));
}

// Dot product of 32 weights (unit u of the row at byte rb) with x[xo + 32u ..].
fn dot_unit(rb: u32, u: u32, xo: u32) -> f32 {
    let xb = xo + 32u * u;
    var s = 0.0;
    switch p.kind {
        case 3u: {
            let base = rb + 34u * u;
            for (var l = 0u; l < 32u; l++) {
                s += f32(i8_of(byte_at(base + 2u + l))) * x[xb + l];
            }
            return f16_at(base) * s;
        }
        case 4u: {
            let base = rb + 18u * u;
            for (var l = 0u; l < 16u; l++) {
                let b = byte_at(base + 2u + l);
                s += f32(i32(b & 15u) - 8) * x[xb + l] + f32(i32(b >> 4u) - 8) * x[xb + l + 16u];
            }
            return f16_at(base) * s;
        }
        case 5u: {
            let sub = u % 8u;
            let base = rb + 144u * (u / 8u);
            let sm = scale_min_k4(base + 4u, sub);
            let q = base + 16u + 32u * (sub / 2u);
            let shift = 4u * (sub % 2u);
            var sx = 0.0;
            for (var l = 0u; l < 32u; l++) {
                let xv = x[xb + l];
                s += f32((byte_at(q + l) >> shift) & 15u) * xv;
                sx += xv;
            }
            return f16_at(base) * sm.x * s - f16_at(base + 2u) * sm.y * sx;
        }
        default: {
            // Q6_K
            let sub = u % 8u;
            let base = rb + 210u * (u / 8u);
            let n = sub / 4u;
            let part = sub % 4u;
            let ql = base + 64u * n + 32u * (part & 1u);
            let qh = base + 128u + 32u * n;
            let sc = base + 192u + 8u * n + 2u * part;
            for (var l = 0u; l < 32u; l++) {
                let lb = byte_at(ql + l);
                let lo = select(lb & 15u, lb >> 4u, part >= 2u);
                let hi = (byte_at(qh + l) >> (2u * part)) & 3u;
                let q = i32(lo | (hi << 4u)) - 32;
                s += f32(i8_of(byte_at(sc + l / 16u))) * f32(q) * x[xb + l];
            }
            return f16_at(base + 208u) * s;
        }
    }
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let r = wid.y * p.grid_x + wid.x;
    let j = wid.z;
    let xo = j * p.cols;
    let rb = r * p.row_bytes;
    var s = 0.0;
    if (r < p.rows) {
        if (p.kind == 0u) {
            for (var c = t; c < p.cols; c += 64u) {
                s += bitcast<f32>(w[(rb >> 2u) + c]) * x[xo + c];
            }
        } else if (p.kind == 1u) {
            for (var c = t; c < p.cols; c += 64u) {
                s += f16_at(rb + 2u * c) * x[xo + c];
            }
        } else if (p.kind == 2u) {
            for (var c = t; c < p.cols; c += 64u) {
                let o = rb + 2u * c;
                let h = (w[o >> 2u] >> ((o & 2u) * 8u)) & 0xffffu;
                s += bitcast<f32>(h << 16u) * x[xo + c];
            }
        } else {
            for (var u = t; u < p.cols / 32u; u += 64u) {
                s += dot_unit(rb, u, xo);
            }
        }
    }
    red[t] = s;
    workgroupBarrier();
    for (var k = 32u; k > 0u; k >>= 1u) {
        if (t < k) {
            red[t] += red[t + k];
        }
        workgroupBarrier();
    }
    if (t == 0u && r < p.rows) {
        y[j * p.out_stride + p.row0 + r] = red[0];
    }
}
