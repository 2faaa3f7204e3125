// The CUDA executor's kernels: the same computations as llm/src/wgsl/*.wgsl (one workgroup of 64
// threads there, one block of 64 threads here), compiled at run time with NVRTC. No headers:
// f16 conversions go through PTX `cvt`.

extern "C" {

__device__ __forceinline__ float h2f(unsigned short h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

__device__ __forceinline__ float f16_round(float v) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
    return h2f(h);
}

__device__ __forceinline__ float f16_at(const unsigned char* w, unsigned int o) {
    return h2f((unsigned short)(w[o] | (w[o + 1] << 8)));
}

__device__ __forceinline__ int i8_of(unsigned char b) { return (int)(signed char)b; }

// Q4_K: 6-bit scale and min of sub-block j from the 12 scale bytes at s.
__device__ __forceinline__ void scale_min_k4(const unsigned char* s, unsigned int j, float* sc, float* m) {
    if (j < 4) {
        *sc = (float)(s[j] & 63);
        *m = (float)(s[j + 4] & 63);
    } else {
        *sc = (float)((s[j + 4] & 15) | ((s[j - 4] >> 6) << 4));
        *m = (float)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

// Dot product of 32 weights (unit u of the row at w + rb) with x + 32u.
__device__ float dot_unit(const unsigned char* row, unsigned int kind, unsigned int u, const float* x) {
    const float* xb = x + 32 * u;
    float s = 0.0f;
    if (kind == 3) {  // Q8_0
        const unsigned char* b = row + 34 * u;
        for (int l = 0; l < 32; l++) s += (float)i8_of(b[2 + l]) * xb[l];
        return f16_at(b, 0) * s;
    }
    if (kind == 4) {  // Q4_0
        const unsigned char* b = row + 18 * u;
        for (int l = 0; l < 16; l++) {
            unsigned char q = b[2 + l];
            s += (float)((int)(q & 15) - 8) * xb[l] + (float)((int)(q >> 4) - 8) * xb[l + 16];
        }
        return f16_at(b, 0) * s;
    }
    if (kind == 5) {  // Q4_K
        unsigned int sub = u % 8;
        const unsigned char* b = row + 144 * (u / 8);
        float sc, m;
        scale_min_k4(b + 4, sub, &sc, &m);
        const unsigned char* q = b + 16 + 32 * (sub / 2);
        unsigned int shift = 4 * (sub % 2);
        float sx = 0.0f;
        for (int l = 0; l < 32; l++) {
            float xv = xb[l];
            s += (float)((q[l] >> shift) & 15) * xv;
            sx += xv;
        }
        return f16_at(b, 0) * sc * s - f16_at(b, 2) * m * sx;
    }
    // Q6_K
    unsigned int sub = u % 8;
    const unsigned char* b = row + 210 * (u / 8);
    unsigned int n = sub / 4, part = sub % 4;
    const unsigned char* ql = b + 64 * n + 32 * (part & 1);
    const unsigned char* qh = b + 128 + 32 * n;
    const unsigned char* scl = b + 192 + 8 * n + 2 * part;
    for (int l = 0; l < 32; l++) {
        unsigned int lb = ql[l];
        unsigned int lo = part >= 2 ? (lb >> 4) : (lb & 15);
        unsigned int hi = (qh[l] >> (2 * part)) & 3;
        int q = (int)(lo | (hi << 4)) - 32;
        s += (float)i8_of(scl[l / 16]) * (float)q * xb[l];
    }
    return f16_at(b, 208) * s;
}

// y[j * out_stride + row0 + r] = sum_c W[r][c] * x[j][c] for the `rows` rows at w; grid
// (grid_x, ceil(rows / grid_x), inputs), 64 threads. kind: 0 F32, 1 F16, 2 BF16, 3 Q8_0,
// 4 Q4_0, 5 Q4_K, 6 Q6_K.
__global__ void matmul(const unsigned char* w, const float* x, float* y, unsigned int rows, unsigned int cols,
                       unsigned int row_bytes, unsigned int kind, unsigned int out_stride, unsigned int row0,
                       unsigned int grid_x) {
    __shared__ float red[64];
    unsigned int t = threadIdx.x;
    unsigned int r = blockIdx.y * grid_x + blockIdx.x;
    unsigned int j = blockIdx.z;
    const float* xj = x + (size_t)j * cols;
    const unsigned char* row = w + (size_t)r * row_bytes;
    float s = 0.0f;
    if (r < rows) {
        if (kind == 0) {
            const float* wf = (const float*)row;
            for (unsigned int c = t; c < cols; c += 64) s += wf[c] * xj[c];
        } else if (kind == 1) {
            for (unsigned int c = t; c < cols; c += 64) s += f16_at(row, 2 * c) * xj[c];
        } else if (kind == 2) {
            for (unsigned int c = t; c < cols; c += 64) {
                unsigned int h = row[2 * c] | (row[2 * c + 1] << 8);
                s += __int_as_float((int)(h << 16)) * xj[c];
            }
        } else {
            for (unsigned int u = t; u < cols / 32; u += 64) s += dot_unit(row, kind, u, xj);
        }
    }
    red[t] = s;
    __syncthreads();
    for (unsigned int k = 32; k > 0; k >>= 1) {
        if (t < k) red[t] += red[t + k];
        __syncthreads();
    }
    if (t == 0 && r < rows) y[(size_t)j * out_stride + row0 + r] = red[0];
}

// Rounds a product's inputs as llama.cpp's CPU backend converts activations (see round.wgsl).
__global__ void round_inputs(const float* x, float* y, unsigned int len, unsigned int kind, unsigned int grid_x) {
    unsigned int i = (blockIdx.y * grid_x + blockIdx.x) * 64 + threadIdx.x;
    if (kind == 1) {
        if (i < len) y[i] = f16_round(x[i]);
    } else if (kind == 2) {
        if (i < len) {
            unsigned int u = (unsigned int)__float_as_int(x[i]);
            unsigned int h = (u & 0x7fffffffu) > 0x7f800000u ? ((u >> 16) | 64u) : ((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
            y[i] = __int_as_float((int)(h << 16));
        }
    } else if (kind == 3 || kind == 4) {
        unsigned int b = i * 32;
        if (b < len) {
            float amax = 0.0f;
            for (int l = 0; l < 32; l++) amax = fmaxf(amax, fabsf(x[b + l]));
            float d = f16_round(amax / 127.0f);
            float id = amax != 0.0f ? 127.0f / amax : 0.0f;
            for (int l = 0; l < 32; l++) y[b + l] = rintf(x[b + l] * id) * d;
        }
    } else {
        unsigned int b = i * 256;
        if (b < len) {
            float amax = 0.0f, mx = 0.0f;
            for (int l = 0; l < 256; l++) {
                float v = x[b + l];
                if (fabsf(v) > amax) { amax = fabsf(v); mx = v; }
            }
            if (amax == 0.0f) {
                for (int l = 0; l < 256; l++) y[b + l] = 0.0f;
            } else {
                float iscale = -127.0f / mx;
                float d = 1.0f / iscale;
                for (int l = 0; l < 256; l++) y[b + l] = fminf(rintf(iscale * x[b + l]), 127.0f) * d;
            }
        }
    }
}

// y[i] = x[row0 + i] / rms(x[row0 + i]) * w, one block per row.
__global__ void rms_norm(const float* x, const float* w, float* y, unsigned int d, float eps, unsigned int row0) {
    __shared__ float red[64];
    unsigned int t = threadIdx.x;
    const float* xr = x + (size_t)(row0 + blockIdx.x) * d;
    float* yr = y + (size_t)blockIdx.x * d;
    float s = 0.0f;
    for (unsigned int i = t; i < d; i += 64) s += xr[i] * xr[i];
    red[t] = s;
    __syncthreads();
    for (unsigned int k = 32; k > 0; k >>= 1) {
        if (t < k) red[t] += red[t + k];
        __syncthreads();
    }
    float scale = 1.0f / sqrtf(red[0] / (float)d + eps);
    for (unsigned int i = t; i < d; i += 64) yr[i] = xr[i] * scale * w[i];
}

// Rotary embedding of n rows of `heads` heads at positions pos0.., written at row row0 of dst
// (see rope.wgsl); style 0: adjacent pairs (GGUF), 1: halves (HF).
__global__ void rope(const float* src, const float* table, float* dst, unsigned int n, unsigned int heads,
                     unsigned int head_dim, unsigned int rope_dim, unsigned int pos0, unsigned int style,
                     unsigned int row0, unsigned int grid_x) {
    unsigned int idx = (blockIdx.y * grid_x + blockIdx.x) * 64 + threadIdx.x;
    unsigned int width = heads * head_dim;
    if (idx >= n * width) return;
    unsigned int i = idx / width, within = idx % width, e = within % head_dim;
    unsigned int h = i * width + within - e;
    unsigned int pairs = rope_dim / 2;
    float out = src[idx];
    if (e < rope_dim) {
        unsigned int k;
        float a, b;
        bool first;
        if (style == 0) {
            k = e / 2;
            a = src[h + 2 * k];
            b = src[h + 2 * k + 1];
            first = (e % 2) == 0;
        } else {
            k = e % pairs;
            a = src[h + k];
            b = src[h + k + pairs];
            first = e < pairs;
        }
        unsigned int at = 2 * ((pos0 + i) * pairs + k);
        float c = table[at], s = table[at + 1];
        out = first ? a * c - b * s : a * s + b * c;
    }
    dst[(size_t)row0 * width + idx] = out;
}

// Causal grouped-query attention of one (head, position) per block over the cache (see
// attention.wgsl).
__global__ void attention(const float* q, const float* kc, const float* vc, float* scores, float* out,
                          unsigned int n_head, unsigned int hd, unsigned int kv_dim, unsigned int group,
                          unsigned int pos0, unsigned int ctx, float scale) {
    __shared__ float red[64];
    unsigned int t = threadIdx.x, head = blockIdx.x, i = blockIdx.y;
    unsigned int kvo = (head / group) * hd;
    size_t qo = ((size_t)i * n_head + head) * hd;
    size_t so = ((size_t)i * n_head + head) * ctx;
    unsigned int len = pos0 + i + 1;
    float m = -3.4028235e38f;
    for (unsigned int s = t; s < len; s += 64) {
        float d = 0.0f;
        for (unsigned int e = 0; e < hd; e++) d += q[qo + e] * kc[(size_t)s * kv_dim + kvo + e];
        d *= scale;
        scores[so + s] = d;
        m = fmaxf(m, d);
    }
    red[t] = m;
    __syncthreads();
    for (unsigned int k = 32; k > 0; k >>= 1) {
        if (t < k) red[t] = fmaxf(red[t], red[t + k]);
        __syncthreads();
    }
    float mx = red[0];
    __syncthreads();
    float sum = 0.0f;
    for (unsigned int s = t; s < len; s += 64) {
        float v = expf(scores[so + s] - mx);
        scores[so + s] = v;
        sum += v;
    }
    red[t] = sum;
    __syncthreads();
    for (unsigned int k = 32; k > 0; k >>= 1) {
        if (t < k) red[t] += red[t + k];
        __syncthreads();
    }
    float inv = 1.0f / red[0];
    for (unsigned int e = t; e < hd; e += 64) {
        float acc = 0.0f;
        for (unsigned int s = 0; s < len; s++) acc += scores[so + s] * inv * vc[(size_t)s * kv_dim + kvo + e];
        out[qo + e] = acc;
    }
}

__global__ void add_rows(float* a, const float* b, unsigned int len, unsigned int d, unsigned int grid_x) {
    unsigned int i = (blockIdx.y * grid_x + blockIdx.x) * 64 + threadIdx.x;
    if (i < len) a[i] += b[i % d];
}

__global__ void swiglu(float* a, const float* b, unsigned int len, unsigned int d, unsigned int grid_x) {
    unsigned int i = (blockIdx.y * grid_x + blockIdx.x) * 64 + threadIdx.x;
    if (i < len) {
        float g = a[i];
        a[i] = g / (1.0f + expf(-g)) * b[i];
    }
}

__global__ void add(float* a, const float* b, unsigned int len, unsigned int d, unsigned int grid_x) {
    unsigned int i = (blockIdx.y * grid_x + blockIdx.x) * 64 + threadIdx.x;
    if (i < len) a[i] += b[i];
}

}
