// Grouped-query attention with a causal mask over the KV cache: one workgroup per (head,
// position). Query i (at position pos0 + i, in row row0 + i of q and out) attends to cache
// positions 0..=pos0 + i of its KV head (head / group). scores is scratch: ctx floats per
// (row, head). row0 lets a batch of several sequences run each sequence's rows against its own
// cache (0 for a single sequence).

struct Params {
    n_head: u32,
    head_dim: u32,
    kv_dim: u32,
    group: u32,
    pos0: u32,
    ctx: u32,
    scale: f32,
    row0: u32,
}

@group(0) @binding(0) var<storage, read> q: array<f32>;
@group(0) @binding(1) var<storage, read> kc: array<f32>;
@group(0) @binding(2) var<storage, read> vc: array<f32>;
@group(0) @binding(3) var<storage, read_write> scores: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;
@group(0) @binding(5) var<uniform> p: Params;

var<workgroup> red: array<f32, 64>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let head = wid.x;
    let i = wid.y;
    let hd = p.head_dim;
    let kvo = (head / p.group) * hd;
    let qo = ((p.row0 + i) * p.n_head + head) * hd;
    let so = ((p.row0 + i) * p.n_head + head) * p.ctx;
    let len = p.pos0 + i + 1u;

    var m = bitcast<f32>(0xff7fffffu); // -f32::MAX (the literal -3.4028235e38 rounds to it, which Tint refuses)
    for (var s = t; s < len; s += 64u) {
        var d = 0.0;
        for (var e = 0u; e < hd; e++) {
            d += q[qo + e] * kc[s * p.kv_dim + kvo + e];
        }
        d *= p.scale;
        scores[so + s] = d;
        m = max(m, d);
    }
    red[t] = m;
    workgroupBarrier();
    for (var k = 32u; k > 0u; k >>= 1u) {
        if (t < k) {
            red[t] = max(red[t], red[t + k]);
        }
        workgroupBarrier();
    }
    let mx = red[0];
    workgroupBarrier();
    var sum = 0.0;
    for (var s = t; s < len; s += 64u) {
        let v = exp(scores[so + s] - mx);
        scores[so + s] = v;
        sum += v;
    }
    red[t] = sum;
    storageBarrier();
    workgroupBarrier();
    for (var k = 32u; k > 0u; k >>= 1u) {
        if (t < k) {
            red[t] += red[t + k];
        }
        workgroupBarrier();
    }
    let inv = 1.0 / red[0];
    for (var e = t; e < hd; e += 64u) {
        var acc = 0.0;
        for (var s = 0u; s < len; s++) {
            acc += scores[so + s] * inv * vc[s * p.kv_dim + kvo + e];
        }
        out[qo + e] = acc;
    }
}
