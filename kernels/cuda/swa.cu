// Sliding-window attention: forward and backward kernels.
//
// Layout: q, k, v, out, dout, dq, dk, dv are [BH, s, hd] row-major; lse and D are [BH, s].
// Token i attends to keys j with i - window < j <= i. Scores are q.k * scale.
//
// Mapping: one warp per row (a query in the forward and dq kernels, a key in the dk/dv
// kernel); a block of ROWS warps shares tiles of 32 rows of the other side, staged in shared
// memory. Inside a tile lane j owns row j of the tile for the dot products (so the softmax
// statistics need one warp reduction per tile, not one per key), and for the accumulations
// lane l owns output columns l, l + 32, l + 64, l + 96 (head_dim <= 128, MAXC = 4). Every
// accumulation runs in a fixed order: results are deterministic (no atomics).
//
// Storage: `float` or bfloat16 kept as raw `unsigned short` bits (bf16 is the high half of a
// float32, so a load is a shift; no cuda_bf16.h needed under NVRTC). Compute is float32.

#define WARP 32
#define ROWS 8          // warps (rows) per block
#define TILE 32         // rows per shared-memory tile
#define MAXC 4          // columns per lane: head_dim <= 32 * MAXC = 128
#define FULL 0xffffffffu
// -inf without <math.h>: NVRTC compiles these sources without the standard headers.
#define NEG_INF __int_as_float(0xff800000)

__device__ __forceinline__ float ld(const float* p, long long i) { return p[i]; }
__device__ __forceinline__ float ld(const unsigned short* p, long long i) {
    return __uint_as_float(((unsigned int)p[i]) << 16);
}

__device__ __forceinline__ float warp_max(float x) {
    for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(FULL, x, o));
    return x;
}

__device__ __forceinline__ float warp_sum(float x) {
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(FULL, x, o);
    return x;
}

// Stage rows [r0, r0 + TILE) of a [s, hd] matrix into sh[TILE][hd + 1] (float); rows past
// `rend` are zero. The +1 padding puts lane j's row j in a distinct bank during dot products.
template <typename T>
__device__ __forceinline__ void stage(float* sh, const T* src, int r0, int rend, int hd) {
    const int hp = hd + 1;
    for (int idx = threadIdx.x; idx < TILE * hd; idx += blockDim.x) {
        int r = idx / hd, c = idx - r * hd;
        int row = r0 + r;
        sh[r * hp + c] = row < rend ? ld(src, (long long)row * hd + c) : 0.0f;
    }
}

// Forward: out[i] = sum_j softmax_j(s_ij) v_j and lse[i] = log sum_j exp(s_ij), online softmax
// over tiles of 32 keys.
template <typename T>
__device__ void swa_fwd_impl(const T* __restrict__ q, const T* __restrict__ k,
                             const T* __restrict__ v, float* __restrict__ out,
                             float* __restrict__ lse, int s, int hd, int window, float scale) {
    extern __shared__ float smem[];
    const int hp = hd + 1;
    float* Ks = smem;
    float* Vs = Ks + TILE * hp;
    float* Qs = Vs + TILE * hp;          // [ROWS][hd]
    const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    const long long base = (long long)blockIdx.y * s * hd;
    q += base; k += base; v += base; out += base;
    lse += (long long)blockIdx.y * s;
    const int i0 = blockIdx.x * ROWS;
    const int i = i0 + warp;
    const bool has_row = i < s;
    for (int c = lane; c < hd; c += WARP)
        Qs[warp * hd + c] = has_row ? ld(q, (long long)i * hd + c) : 0.0f;
    float acc[MAXC];
    for (int r = 0; r < MAXC; ++r) acc[r] = 0.0f;
    float m_run = NEG_INF, l_run = 0.0f;
    const int kbeg = max(0, i0 - window + 1);
    const int kend = min(s, i0 + ROWS);
    for (int j0 = kbeg; j0 < kend; j0 += TILE) {
        __syncthreads();                 // the previous tile (and Qs) are no longer being read
        stage(Ks, k, j0, kend, hd);
        stage(Vs, v, j0, kend, hd);
        __syncthreads();
        const int j = j0 + lane;
        const bool in = has_row && j <= i && j > i - window && j < s;
        float sc = NEG_INF;
        if (in) {
            float dot = 0.0f;
            for (int c = 0; c < hd; ++c) dot += Qs[warp * hd + c] * Ks[lane * hp + c];
            sc = dot * scale;
        }
        const float m_new = fmaxf(m_run, warp_max(sc));
        if (m_new == NEG_INF) continue;   // warp-uniform: nothing in this tile nor before
        const float p = in ? expf(sc - m_new) : 0.0f;
        const float corr = expf(m_run - m_new);   // exp(-inf) = 0 on the first hit
        l_run = l_run * corr + warp_sum(p);
        for (int r = 0; r < MAXC; ++r) acc[r] *= corr;
        // Only this row's window (warp-uniform bounds): a masked p = 0 times an inf or NaN
        // value of a key outside it would be NaN.
        const int jlo = max(0, i - window + 1 - j0), jhi = min(TILE, i + 1 - j0);
        for (int jj = jlo; jj < jhi; ++jj) {
            const float pj = __shfl_sync(FULL, p, jj);
            for (int r = 0; r < MAXC; ++r) {
                const int c = lane + WARP * r;
                if (c < hd) acc[r] += pj * Vs[jj * hp + c];
            }
        }
        m_run = m_new;
    }
    if (has_row) {
        const float inv = 1.0f / l_run;
        for (int r = 0; r < MAXC; ++r) {
            const int c = lane + WARP * r;
            if (c < hd) out[(long long)i * hd + c] = acc[r] * inv;
        }
        if (lane == 0) lse[i] = m_run + logf(l_run);
    }
}

// dq[i] = scale * sum_j ds_ij k_j with p_ij = exp(s_ij - lse_i), ds_ij = p_ij (dout_i.v_j - D_i).
template <typename T>
__device__ void swa_bwd_dq_impl(const T* __restrict__ q, const T* __restrict__ k,
                                const T* __restrict__ v, const float* __restrict__ lse,
                                const float* __restrict__ D, const float* __restrict__ dout,
                                float* __restrict__ dq, int s, int hd, int window, float scale) {
    extern __shared__ float smem[];
    const int hp = hd + 1;
    float* Ks = smem;
    float* Vs = Ks + TILE * hp;
    float* Qs = Vs + TILE * hp;          // [ROWS][hd]
    float* Gs = Qs + ROWS * hd;          // [ROWS][hd]: dout rows
    const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    const long long base = (long long)blockIdx.y * s * hd;
    q += base; k += base; v += base; dout += base; dq += base;
    lse += (long long)blockIdx.y * s;
    D += (long long)blockIdx.y * s;
    const int i0 = blockIdx.x * ROWS;
    const int i = i0 + warp;
    const bool has_row = i < s;
    for (int c = lane; c < hd; c += WARP) {
        Qs[warp * hd + c] = has_row ? ld(q, (long long)i * hd + c) : 0.0f;
        Gs[warp * hd + c] = has_row ? dout[(long long)i * hd + c] : 0.0f;
    }
    const float lse_i = has_row ? lse[i] : 0.0f;
    const float D_i = has_row ? D[i] : 0.0f;
    float acc[MAXC];
    for (int r = 0; r < MAXC; ++r) acc[r] = 0.0f;
    const int kbeg = max(0, i0 - window + 1);
    const int kend = min(s, i0 + ROWS);
    for (int j0 = kbeg; j0 < kend; j0 += TILE) {
        __syncthreads();
        stage(Ks, k, j0, kend, hd);
        stage(Vs, v, j0, kend, hd);
        __syncthreads();
        const int j = j0 + lane;
        const bool in = has_row && j <= i && j > i - window && j < s;
        float ds = 0.0f;
        if (in) {
            float qk = 0.0f, gv = 0.0f;
            for (int c = 0; c < hd; ++c) {
                qk += Qs[warp * hd + c] * Ks[lane * hp + c];
                gv += Gs[warp * hd + c] * Vs[lane * hp + c];
            }
            const float p = expf(qk * scale - lse_i);
            ds = p * (gv - D_i);
        }
        const int jlo = max(0, i - window + 1 - j0), jhi = min(TILE, i + 1 - j0);
        for (int jj = jlo; jj < jhi; ++jj) {   // this row's window only, as in the forward
            const float dsj = __shfl_sync(FULL, ds, jj);
            for (int r = 0; r < MAXC; ++r) {
                const int c = lane + WARP * r;
                if (c < hd) acc[r] += dsj * Ks[jj * hp + c];
            }
        }
    }
    if (has_row) {
        for (int r = 0; r < MAXC; ++r) {
            const int c = lane + WARP * r;
            if (c < hd) dq[(long long)i * hd + c] = acc[r] * scale;
        }
    }
}

// One warp per key j: dv[j] = sum_i p_ij dout_i and dk[j] = scale * sum_i ds_ij q_i over the
// queries i with j <= i < j + window.
template <typename T>
__device__ void swa_bwd_dkdv_impl(const T* __restrict__ q, const T* __restrict__ k,
                                  const T* __restrict__ v, const float* __restrict__ lse,
                                  const float* __restrict__ D, const float* __restrict__ dout,
                                  float* __restrict__ dk, float* __restrict__ dv, int s, int hd,
                                  int window, float scale) {
    extern __shared__ float smem[];
    const int hp = hd + 1;
    float* Qs = smem;                    // [TILE][hp]
    float* Gs = Qs + TILE * hp;          // [TILE][hp]: dout rows
    float* Ks = Gs + TILE * hp;          // [ROWS][hd]
    float* Vs = Ks + ROWS * hd;          // [ROWS][hd]
    float* Ls = Vs + ROWS * hd;          // [TILE]: lse of the tile's queries
    float* Ds = Ls + TILE;               // [TILE]: D of the tile's queries
    const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    const long long base = (long long)blockIdx.y * s * hd;
    q += base; k += base; v += base; dout += base; dk += base; dv += base;
    lse += (long long)blockIdx.y * s;
    D += (long long)blockIdx.y * s;
    const int j0k = blockIdx.x * ROWS;
    const int j = j0k + warp;
    const bool has_row = j < s;
    for (int c = lane; c < hd; c += WARP) {
        Ks[warp * hd + c] = has_row ? ld(k, (long long)j * hd + c) : 0.0f;
        Vs[warp * hd + c] = has_row ? ld(v, (long long)j * hd + c) : 0.0f;
    }
    float acc_k[MAXC], acc_v[MAXC];
    for (int r = 0; r < MAXC; ++r) acc_k[r] = acc_v[r] = 0.0f;
    const int qbeg = j0k;
    const long long qend_ll = (long long)j0k + ROWS - 1 + window;
    const int qend = (int)(qend_ll < s ? qend_ll : s);
    for (int i0 = qbeg; i0 < qend; i0 += TILE) {
        __syncthreads();
        stage(Qs, q, i0, qend, hd);
        stage(Gs, dout, i0, qend, hd);
        for (int t = threadIdx.x; t < TILE; t += blockDim.x) {
            const int row = i0 + t;
            Ls[t] = row < qend ? lse[row] : 0.0f;
            Ds[t] = row < qend ? D[row] : 0.0f;
        }
        __syncthreads();
        const int i = i0 + lane;
        const bool in = has_row && i >= j && i < s && (long long)i < (long long)j + window;
        float p = 0.0f, ds = 0.0f;
        if (in) {
            float qk = 0.0f, gv = 0.0f;
            for (int c = 0; c < hd; ++c) {
                qk += Qs[lane * hp + c] * Ks[warp * hd + c];
                gv += Gs[lane * hp + c] * Vs[warp * hd + c];
            }
            p = expf(qk * scale - Ls[lane]);
            ds = p * (gv - Ds[lane]);
        }
        // The queries that attend this key only (warp-uniform bounds): a masked zero times
        // an inf or NaN in another query's q or dout would be NaN.
        const int ilo = max(0, j - i0), ihi = min(TILE, j + window - i0);
        for (int ii = ilo; ii < ihi; ++ii) {
            const float pi = __shfl_sync(FULL, p, ii);
            const float dsi = __shfl_sync(FULL, ds, ii);
            for (int r = 0; r < MAXC; ++r) {
                const int c = lane + WARP * r;
                if (c < hd) {
                    acc_v[r] += pi * Gs[ii * hp + c];
                    acc_k[r] += dsi * Qs[ii * hp + c];
                }
            }
        }
    }
    if (has_row) {
        for (int r = 0; r < MAXC; ++r) {
            const int c = lane + WARP * r;
            if (c < hd) {
                dk[(long long)j * hd + c] = acc_k[r] * scale;
                dv[(long long)j * hd + c] = acc_v[r];
            }
        }
    }
}

#define SWA_ENTRY_POINTS(SUFFIX, T)                                                           \
extern "C" __global__ void __launch_bounds__(ROWS * WARP)                                     \
swa_fwd_##SUFFIX(const T* q, const T* k, const T* v, float* out, float* lse, int s, int hd,   \
                 int window, float scale) {                                                   \
    swa_fwd_impl<T>(q, k, v, out, lse, s, hd, window, scale);                                 \
}                                                                                             \
extern "C" __global__ void __launch_bounds__(ROWS * WARP)                                     \
swa_bwd_dq_##SUFFIX(const T* q, const T* k, const T* v, const float* lse, const float* D,     \
                    const float* dout, float* dq, int s, int hd, int window, float scale) {   \
    swa_bwd_dq_impl<T>(q, k, v, lse, D, dout, dq, s, hd, window, scale);                      \
}                                                                                             \
extern "C" __global__ void __launch_bounds__(ROWS * WARP)                                     \
swa_bwd_dkdv_##SUFFIX(const T* q, const T* k, const T* v, const float* lse, const float* D,   \
                      const float* dout, float* dk, float* dv, int s, int hd, int window,     \
                      float scale) {                                                          \
    swa_bwd_dkdv_impl<T>(q, k, v, lse, D, dout, dk, dv, s, hd, window, scale);                \
}

SWA_ENTRY_POINTS(f32, float)
SWA_ENTRY_POINTS(bf16, unsigned short)
