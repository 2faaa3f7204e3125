// Rotary position embedding of n positions of `heads` heads: src [n][heads*head_dim] into
// dst row (row0 + i). The (cos, sin) table holds rope_dim/2 pairs per position.
// style 0: adjacent pairs (x[2i], x[2i+1]) (llama.cpp's normal rope); 1: halves (x[i],
// x[i + rope_dim/2]) (rotate_half, neox). One invocation per output element.

struct Params {
    n: u32,
    heads: u32,
    head_dim: u32,
    rope_dim: u32,
    pos0: u32,
    style: u32,
    row0: u32,
    grid_x: u32,
}

@group(0) @binding(0) var<storage, read> src: array<f32>;
@group(0) @binding(1) var<storage, read> table: array<f32>;
@group(0) @binding(2) var<storage, read_write> dst: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let idx = (wid.y * p.grid_x + wid.x) * 64u + t;
    let width = p.heads * p.head_dim;
    if (idx >= p.n * width) {
        return;
    }
    let i = idx / width;
    let within = idx % width;
    let e = within % p.head_dim;
    let h = i * width + within - e;
    let pairs = p.rope_dim / 2u;
    var out = src[idx];
    if (e < p.rope_dim) {
        var k: u32;
        var a: f32;
        var b: f32;
        var first: bool;
        if (p.style == 0u) {
            k = e / 2u;
            a = src[h + 2u * k];
            b = src[h + 2u * k + 1u];
            first = (e % 2u) == 0u;
        } else {
            k = e % pairs;
            a = src[h + k];
            b = src[h + k + pairs];
            first = e < pairs;
        }
        let at = 2u * ((p.pos0 + i) * pairs + k);
        let c = table[at];
        let s = table[at + 1u];
        out = select(a * s + b * c, a * c - b * s, first);
    }
    dst[p.row0 * width + idx] = out;
}
