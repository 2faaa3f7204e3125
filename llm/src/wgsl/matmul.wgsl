// out[j][row0 + r] = sum_c W[r][c] * x[j][c] for the rows of one weight buffer, the weight
// dequantized inside the kernel from its stored (ggml) bytes. One workgroup per (row, JPER
// inputs): the row is read (and dequantized) once for up to JPER inputs, each input's sum kept in
// the order of one input alone (so the result does not depend on how inputs are grouped).
// kind: 0 F32, 1 F16, 2 BF16, 3 Q8_0, 4 Q4_0, 5 Q4_K, 6 Q6_K. f32 accumulation.

struct Params {
    rows: u32,
    cols: u32,
    row_bytes: u32,
    kind: u32,
    out_stride: u32,
    row0: u32,
    grid_x: u32,
    // Inputs in all (workgroup z covers JPER of them).
    n_in: u32,
}

@group(0) @binding(0) var<storage, read> w: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

// Inputs per workgroup: 8 for a batch, 1 for one input (decode), where a smaller kernel runs
// faster on CPU-emulated adapters. The pipeline sets it; at most MAX_JPER.
override JPER: u32 = 8u;
const MAX_JPER: u32 = 8u;

var<workgroup> red: array<f32, 64u * JPER>;

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

// Unit u of the row at byte rb (32 weights of a quantized type): writes the weights' quantized
// values as f32 into q (for Q6_K times the unit's own 6-bit scale) and returns the scales still to
// apply: (d) for Q8_0, Q4_0 and Q6_K, (d * scale, dmin * min) for Q4_K. q is the caller's function
// variable: a module-scope private array would be zeroed by every invocation, of every kind.
fn load_unit(q: ptr<function, array<f32, 32>>, rb: u32, u: u32) -> vec2<f32> {
    switch p.kind {
        case 3u: {
            let base = rb + 34u * u;
            for (var l = 0u; l < 32u; l++) {
                (*q)[l] = f32(i8_of(byte_at(base + 2u + l)));
            }
            return vec2<f32>(f16_at(base), 0.0);
        }
        case 4u: {
            let base = rb + 18u * u;
            for (var l = 0u; l < 16u; l++) {
                let b = byte_at(base + 2u + l);
                (*q)[l] = f32(i32(b & 15u) - 8);
                (*q)[l + 16u] = f32(i32(b >> 4u) - 8);
            }
            return vec2<f32>(f16_at(base), 0.0);
        }
        case 5u: {
            let sub = u % 8u;
            let base = rb + 144u * (u / 8u);
            let sm = scale_min_k4(base + 4u, sub);
            let qs = base + 16u + 32u * (sub / 2u);
            let shift = 4u * (sub % 2u);
            for (var l = 0u; l < 32u; l++) {
                (*q)[l] = f32((byte_at(qs + l) >> shift) & 15u);
            }
            return vec2<f32>(f16_at(base) * sm.x, f16_at(base + 2u) * sm.y);
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
                (*q)[l] = f32(i8_of(byte_at(sc + l / 16u))) * f32(i32(lo | (hi << 4u)) - 32);
            }
            return vec2<f32>(f16_at(base + 208u), 0.0);
        }
    }
}

// The unit in q (load_unit) dotted with x[xb ..], its scales d applied: llama.cpp's per-block sums,
// in its order.
fn dot_unit(q: ptr<function, array<f32, 32>>, xb: u32, d: vec2<f32>) -> f32 {
    var s = 0.0;
    switch p.kind {
        case 4u: {
            for (var l = 0u; l < 16u; l++) {
                s += (*q)[l] * x[xb + l] + (*q)[l + 16u] * x[xb + l + 16u];
            }
            return d.x * s;
        }
        case 5u: {
            var sx = 0.0;
            for (var l = 0u; l < 32u; l++) {
                let xv = x[xb + l];
                s += (*q)[l] * xv;
                sx += xv;
            }
            return d.x * s - d.y * sx;
        }
        default: {
            for (var l = 0u; l < 32u; l++) {
                s += (*q)[l] * x[xb + l];
            }
            return d.x * s;
        }
    }
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let r = wid.y * p.grid_x + wid.x;
    let j0 = wid.z * JPER;
    let nj = min(JPER, p.n_in - j0);
    let rb = r * p.row_bytes;
    // The loops over inputs run JPER times (j < nj inside), so compilers unroll them and keep acc
    // in registers.
    var acc: array<f32, MAX_JPER>;
    if (r < p.rows) {
        if (p.kind == 0u) {
            for (var c = t; c < p.cols; c += 64u) {
                let wv = bitcast<f32>(w[(rb >> 2u) + c]);
                for (var j = 0u; j < JPER; j++) {
                    if (j < nj) {
                        acc[j] += wv * x[(j0 + j) * p.cols + c];
                    }
                }
            }
        } else if (p.kind == 1u) {
            for (var c = t; c < p.cols; c += 64u) {
                let wv = f16_at(rb + 2u * c);
                for (var j = 0u; j < JPER; j++) {
                    if (j < nj) {
                        acc[j] += wv * x[(j0 + j) * p.cols + c];
                    }
                }
            }
        } else if (p.kind == 2u) {
            for (var c = t; c < p.cols; c += 64u) {
                let o = rb + 2u * c;
                let wv = bitcast<f32>(((w[o >> 2u] >> ((o & 2u) * 8u)) & 0xffffu) << 16u);
                for (var j = 0u; j < JPER; j++) {
                    if (j < nj) {
                        acc[j] += wv * x[(j0 + j) * p.cols + c];
                    }
                }
            }
        } else {
            var q: array<f32, 32>;
            for (var u = t; u < p.cols / 32u; u += 64u) {
                let d = load_unit(&q, rb, u);
                for (var j = 0u; j < JPER; j++) {
                    if (j < nj) {
                        acc[j] += dot_unit(&q, (j0 + j) * p.cols + 32u * u, d);
                    }
                }
            }
        }
    }
    for (var j = 0u; j < JPER; j++) {
        if (j < nj) {
            red[j * 64u + t] = acc[j];
        }
    }
    workgroupBarrier();
    for (var k = 32u; k > 0u; k >>= 1u) {
        if (t < k) {
            for (var j = 0u; j < nj; j++) {
                red[j * 64u + t] += red[j * 64u + t + k];
            }
        }
        workgroupBarrier();
    }
    if (t == 0u && r < p.rows) {
        for (var j = 0u; j < nj; j++) {
            y[(j0 + j) * p.out_stride + p.row0 + r] = red[j * 64u];
        }
    }
}
