// Matrix-memory rules (delta, Titans, Hebbian): forward and reverse-time recurrences.
//
// Layout (time-major, as the reference): k, v, q, y, E, dy, dk, dv, dq are [s, B, d];
// gates ret (= 1 - alpha), th, eta and their gradients are [s, B]; states are [*, B, d, d].
// Rules, read after write (y_t = M_{t+1} q_t, e_t = M_t k_t - v_t):
//   delta   M' = ret M - th e k^T
//   titans  S' = eta S - th e k^T,  M' = ret M + S'
//   hebbian M' = ret M + v k^T
//
// Mapping: blocks (b, g) of NWARP warps, gridDim.y = G row groups per batch entry b. Row i of
// every rule's update depends only on row i of the state (plus the shared vectors k, q and
// the gates), so a warp owns rows and keeps them in registers for the whole sequence: warp w
// of group g holds rows w + NWARP (g + G ri), ri = 0, 1, ..., lane l holds columns l, l + 32,
// l + 64, l + 96 (d <= 128). G > 1 spreads one sequence over several blocks (a small batch
// fills more of the GPU). Row dot products are warp reductions. In the backward the cotangent
// G of the state evolves row by row too; only dk, dq (column sums over rows) and the gate
// gradients (sums over the matrix) need every row: each block reduces its rows through shared
// memory in a fixed order and writes its partial sums to its own slice [g] of dk, dq and the
// gate gradients ([G, s, B, *]), which the host sums over g: deterministic.
//
// States: ck[j] is the state at time j*C for j < n_chunks = ceil(s / C), and ck[n_chunks] the
// final state. C = 1 keeps every state. With C > 1 the backward re-runs each chunk from its
// checkpoint into `scratch` ([C + 1, B, d, d]); each thread reads back only the elements it
// wrote itself, so no synchronisation is needed between the re-run and the sweep.

#define WARP 32
#define NWARP 16
#define MAXC 4                       // columns per lane: d <= 128
#define MAXR 8                       // rows per warp: d <= NWARP * MAXR = 128
#define FULL 0xffffffffu
#define DELTA 0
#define TITANS 1
#define HEBBIAN 2

__device__ __forceinline__ float warp_sum(float x) {
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(FULL, x, o);
    return x;
}

// Row ri of warp `warp` in row group g of G.
__device__ __forceinline__ int row_of(int warp, int ri, int g, int G) {
    return warp + NWARP * (g + G * ri);
}

// Offset of element (row, col) of batch entry b in state slot j.
__device__ __forceinline__ long long sidx(long long j, int b, int B, int d, int row, int col) {
    return ((j * B + b) * (long long)d + row) * d + col;
}

struct Step {            // the inputs of one token for batch entry b
    float k[MAXC], q[MAXC];
    float ret, th, eta;
};

template <int rule>
__device__ __forceinline__ void load_step(Step& x, const float* k, const float* q,
                                          const float* ret, const float* th, const float* eta,
                                          int t, int b, int B, int d, int lane) {
    const long long vo = ((long long)t * B + b) * d;
    for (int r = 0; r < MAXC; ++r) {
        const int c = lane + WARP * r;
        x.k[r] = c < d ? k[vo + c] : 0.0f;
        x.q[r] = c < d ? q[vo + c] : 0.0f;
    }
    const long long go = (long long)t * B + b;
    x.ret = ret[go];
    x.th = rule == HEBBIAN ? 0.0f : th[go];
    x.eta = rule == TITANS ? eta[go] : 0.0f;
}

// One forward step of one row (M, S: that row's elements held by this lane). Returns e.
template <int rule>
__device__ __forceinline__ float step_row(const Step& x, float v_row, float* M,
                                          float* S) {
    float e = 0.0f;
    if (rule != HEBBIAN) {
        float mk = 0.0f;
        for (int r = 0; r < MAXC; ++r) mk += M[r] * x.k[r];
        e = warp_sum(mk) - v_row;
    }
    for (int r = 0; r < MAXC; ++r) {
        if (rule == DELTA) {
            M[r] = x.ret * M[r] - x.th * e * x.k[r];
        } else if (rule == TITANS) {
            S[r] = x.eta * S[r] - x.th * e * x.k[r];
            M[r] = x.ret * M[r] + S[r];
        } else {
            M[r] = x.ret * M[r] + v_row * x.k[r];
        }
    }
    return e;
}

__device__ __forceinline__ void load_rows(float (*dst)[MAXC], const float* src, long long j,
                                          int b, int B, int d, int warp, int lane, int g,
                                          int G) {
    for (int ri = 0; ri < MAXR; ++ri) {
        const int row = row_of(warp, ri, g, G);
        for (int r = 0; r < MAXC; ++r) {
            const int c = lane + WARP * r;
            dst[ri][r] = (row < d && c < d) ? src[sidx(j, b, B, d, row, c)] : 0.0f;
        }
    }
}

__device__ __forceinline__ void store_rows(float* dst, float (*src)[MAXC], long long j, int b,
                                           int B, int d, int warp, int lane, int g, int G) {
    for (int ri = 0; ri < MAXR; ++ri) {
        const int row = row_of(warp, ri, g, G);
        if (row >= d) break;
        for (int r = 0; r < MAXC; ++r) {
            const int c = lane + WARP * r;
            if (c < d) dst[sidx(j, b, B, d, row, c)] = src[ri][r];
        }
    }
}

// Forward. ckM[0] (and ckS[0]) hold the initial states on entry.
template <int rule>
__device__ void memory_forward_impl(const float* __restrict__ k, const float* __restrict__ v,
               const float* __restrict__ q, const float* __restrict__ ret,
               const float* __restrict__ th, const float* __restrict__ eta,
               float* __restrict__ ckM, float* __restrict__ ckS, float* __restrict__ y,
               float* __restrict__ E, int s, int B, int d, int C) {
    const int b = blockIdx.x, g = blockIdx.y, G = gridDim.y;
    const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    const int n_chunks = (s + C - 1) / C;
    float M[MAXR][MAXC], S[MAXR][MAXC];
    load_rows(M, ckM, 0, b, B, d, warp, lane, g, G);
    if (rule == TITANS) load_rows(S, ckS, 0, b, B, d, warp, lane, g, G);
    Step x;
    for (int t = 0; t < s; ++t) {
        load_step<rule>(x, k, q, ret, th, eta, t, b, B, d, lane);
        const long long vo = ((long long)t * B + b) * d;
        for (int ri = 0; ri < MAXR; ++ri) {
            const int row = row_of(warp, ri, g, G);
            if (row >= d) break;                 // warp-uniform
            const float e = step_row<rule>(x, v[vo + row], M[ri], S[ri]);
            float mq = 0.0f;
            for (int r = 0; r < MAXC; ++r) mq += M[ri][r] * x.q[r];
            mq = warp_sum(mq);
            if (lane == 0) {
                y[vo + row] = mq;
                if (rule != HEBBIAN) E[vo + row] = e;
            }
        }
        const int t1 = t + 1;
        long long slot = -1;
        if (t1 == s) slot = n_chunks;
        else if (t1 % C == 0) slot = t1 / C;
        if (slot >= 0) {
            store_rows(ckM, M, slot, b, B, d, warp, lane, g, G);
            if (rule == TITANS) store_rows(ckS, S, slot, b, B, d, warp, lane, g, G);
        }
    }
}

// Re-run chunk [t0, t1) from checkpoint c into scratch slots 0..t1-t0. Rows are independent,
// so the re-run goes row by row and keeps one row in registers (the cotangents already hold
// the rest); each thread writes, and later reads back, only its own elements, so no
// synchronisation is needed between the re-run and the sweep.
template <int rule>
__device__ __forceinline__ void rerun_chunk(const float* k, const float* v,
                                            const float* ret, const float* th,
                                            const float* eta, const float* ckM,
                                            const float* ckS, float* scrM, float* scrS, int c,
                                            int t0, int t1, int b, int B, int d, int warp,
                                            int lane, int g, int G) {
    for (int ri = 0; ri < MAXR; ++ri) {
        const int row = row_of(warp, ri, g, G);
        if (row >= d) break;                     // warp-uniform
        float M[MAXC], S[MAXC];
        for (int r = 0; r < MAXC; ++r) {
            const int col = lane + WARP * r;
            const bool ok = col < d;
            M[r] = ok ? ckM[sidx(c, b, B, d, row, col)] : 0.0f;
            S[r] = (ok && rule == TITANS) ? ckS[sidx(c, b, B, d, row, col)] : 0.0f;
            if (ok) {
                scrM[sidx(0, b, B, d, row, col)] = M[r];
                if (rule == TITANS) scrS[sidx(0, b, B, d, row, col)] = S[r];
            }
        }
        Step x;
        for (int t = t0; t < t1; ++t) {
            const long long vo = ((long long)t * B + b) * d;
            for (int r = 0; r < MAXC; ++r) {
                const int col = lane + WARP * r;
                x.k[r] = col < d ? k[vo + col] : 0.0f;
            }
            const long long go = (long long)t * B + b;
            x.ret = ret[go];
            x.th = rule == HEBBIAN ? 0.0f : th[go];
            x.eta = rule == TITANS ? eta[go] : 0.0f;
            step_row<rule>(x, v[vo + row], M, S);
            for (int r = 0; r < MAXC; ++r) {
                const int col = lane + WARP * r;
                if (col < d) {
                    scrM[sidx(t - t0 + 1, b, B, d, row, col)] = M[r];
                    if (rule == TITANS) scrS[sidx(t - t0 + 1, b, B, d, row, col)] = S[r];
                }
            }
        }
    }
}

// One reverse step of one row: adds this row's terms to the block-wide partial sums and
// updates the row's cotangents G (of M) and GS (of S) in place. Fixed-size array references
// keep everything in registers once the caller's row loop is unrolled.
template <int rule>
__device__ __forceinline__ void reverse_row(
        const Step& x, int row, int i, long long vo, int b, int B, int d, int lane,
        const float* baseM, const float* baseS, const float* v, const float* E, const float* dy,
        float* dv, float (&G)[MAXC], float (&GS)[MAXC], float (&pk)[MAXC], float (&pq)[MAXC],
        float& p_alpha, float& p_th, float& p_eta) {
    const float dy_row = dy[vo + row];
    float Mt[MAXC], Mn[MAXC], St[MAXC];
#pragma unroll
    for (int r = 0; r < MAXC; ++r) {
        const int col = lane + WARP * r;
        const bool ok = col < d;
        Mt[r] = ok ? baseM[sidx(i, b, B, d, row, col)] : 0.0f;
        Mn[r] = ok ? baseM[sidx(i + 1, b, B, d, row, col)] : 0.0f;
        St[r] = (ok && rule == TITANS) ? baseS[sidx(i, b, B, d, row, col)] : 0.0f;
    }
#pragma unroll
    for (int r = 0; r < MAXC; ++r) {
        pq[r] += dy_row * Mn[r];           // dq_t = M_{t+1}^T dy_t
        G[r] += dy_row * x.q[r];           // y_t = M_{t+1} q_t
        p_alpha += G[r] * Mt[r];           // dalpha_t = -<G, M_t>
    }
    if (rule == HEBBIAN) {
        const float v_row = v[vo + row];
        float gk = 0.0f;
#pragma unroll
        for (int r = 0; r < MAXC; ++r) {
            gk += G[r] * x.k[r];
            pk[r] += v_row * G[r];         // dk_t = G^T v_t
        }
        gk = warp_sum(gk);
        if (lane == 0) dv[vo + row] = gk;  // dv_t = G k_t
#pragma unroll
        for (int r = 0; r < MAXC; ++r) G[r] *= x.ret;
    } else {
        // H: the cotangent reaching the e k^T term (S' for titans, which also receives M''s).
        float H[MAXC];
#pragma unroll
        for (int r = 0; r < MAXC; ++r) {
            if (rule == TITANS) {
                GS[r] += G[r];                 // M' = ret M + S'
                p_eta += GS[r] * St[r];        // deta_t = <H, S_t>
                H[r] = GS[r];
            } else {
                H[r] = G[r];
            }
        }
        const float e = E[vo + row];
        float hk = 0.0f;
#pragma unroll
        for (int r = 0; r < MAXC; ++r) hk += H[r] * x.k[r];
        hk = warp_sum(hk);
        if (lane == 0) p_th += e * hk;         // dth_t = -e . H k
        const float de = -x.th * hk;
        if (lane == 0) dv[vo + row] = -de;
#pragma unroll
        for (int r = 0; r < MAXC; ++r) {
            pk[r] += -x.th * H[r] * e + de * Mt[r];   // -th H^T e + M_t^T de
            G[r] = x.ret * G[r] + de * x.k[r];
            if (rule == TITANS) GS[r] *= x.eta;
        }
    }
}

// Reverse sweep. GM (and GS) hold the cotangents of the final states on entry and the
// cotangents of the initial states on exit. dy is zero where no cotangent reached y.
// Gradients are written for every argument; the caller discards the ones it does not need.
template <int rule>
__device__ void memory_backward_impl(const float* __restrict__ k, const float* __restrict__ v,
                const float* __restrict__ q, const float* __restrict__ ret,
                const float* __restrict__ th, const float* __restrict__ eta,
                const float* __restrict__ E, const float* ckM, const float* ckS, float* scrM,
                float* scrS, const float* __restrict__ dy, float* GM_io, float* GS_io,
                float* __restrict__ dk, float* __restrict__ dv, float* __restrict__ dq,
                float* __restrict__ dalpha, float* __restrict__ dth, float* __restrict__ deta,
                int s, int B, int d, int C) {
    // Double-buffered by step parity: one barrier per step suffices (see the note below).
    __shared__ float red_k[2][NWARP][WARP * MAXC];
    __shared__ float red_q[2][NWARP][WARP * MAXC];
    __shared__ float red_s[2][NWARP][3];
    const int b = blockIdx.x, g = blockIdx.y, G = gridDim.y;
    const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    const int n_chunks = (s + C - 1) / C;
    const bool full = C == 1;
    // This block's slice of the partial sums: dk, dq [G, s, B, d], gate gradients [G, s, B].
    const long long part_v = (long long)g * s * B * d, part_g = (long long)g * s * B;
    float GM[MAXR][MAXC], GS[MAXR][MAXC];
    load_rows(GM, GM_io, 0, b, B, d, warp, lane, g, G);
    if (rule == TITANS) load_rows(GS, GS_io, 0, b, B, d, warp, lane, g, G);
    Step x;
    int parity = 0;
    for (int c = n_chunks - 1; c >= 0; --c) {
        const int t0 = c * C, t1 = min(s, t0 + C);
        // With every state stored, slot i of ck is the state at time i; otherwise rebuild
        // this chunk's states in scratch, where slot i is the state at time t0 + i.
        const float* baseM = full ? ckM : scrM;
        const float* baseS = full ? ckS : scrS;
        const int off = full ? 0 : t0;
        if (!full)
            rerun_chunk<rule>(k, v, ret, th, eta, ckM, ckS, scrM, scrS, c, t0, t1, b, B, d, warp,
                              lane, g, G);
        for (int t = t1 - 1; t >= t0; --t) {
            const int i = t - off;
            load_step<rule>(x, k, q, ret, th, eta, t, b, B, d, lane);
            const long long vo = ((long long)t * B + b) * d;
            float pk[MAXC], pq[MAXC];
            for (int r = 0; r < MAXC; ++r) pk[r] = pq[r] = 0.0f;
            float p_alpha = 0.0f, p_th = 0.0f, p_eta = 0.0f;
#pragma unroll
            for (int ri = 0; ri < MAXR; ++ri) {
                const int row = row_of(warp, ri, g, G);
                if (row < d)                     // warp-uniform
                    reverse_row<rule>(x, row, i, vo, b, B, d, lane, baseM, baseS, v, E, dy, dv,
                                GM[ri], GS[ri], pk, pq, p_alpha, p_th, p_eta);
            }
            // Block reductions. Buffer `parity` is written here and read after the barrier;
            // the next step writes the other buffer, and the step after that is behind the
            // next barrier, which every reader of this step has passed: no second barrier.
            p_alpha = warp_sum(p_alpha);
            p_th = warp_sum(p_th);
            p_eta = warp_sum(p_eta);
            for (int r = 0; r < MAXC; ++r) {
                red_k[parity][warp][lane + WARP * r] = pk[r];
                red_q[parity][warp][lane + WARP * r] = pq[r];
            }
            if (lane == 0) {
                red_s[parity][warp][0] = p_alpha;
                red_s[parity][warp][1] = p_th;
                red_s[parity][warp][2] = p_eta;
            }
            __syncthreads();
            for (int col = threadIdx.x; col < d; col += blockDim.x) {
                float sk = 0.0f, sq = 0.0f;
                for (int w = 0; w < NWARP; ++w) {
                    sk += red_k[parity][w][col];
                    sq += red_q[parity][w][col];
                }
                dk[part_v + vo + col] = sk;
                dq[part_v + vo + col] = sq;
            }
            if (threadIdx.x == 0) {
                float sa = 0.0f, st = 0.0f, se = 0.0f;
                for (int w = 0; w < NWARP; ++w) {
                    sa += red_s[parity][w][0];
                    st += red_s[parity][w][1];
                    se += red_s[parity][w][2];
                }
                const long long go = part_g + (long long)t * B + b;
                dalpha[go] = -sa;
                if (rule != HEBBIAN) dth[go] = -st;
                if (rule == TITANS) deta[go] = se;
            }
            parity ^= 1;
        }
    }
    store_rows(GM_io, GM, 0, b, B, d, warp, lane, g, G);
    if (rule == TITANS) store_rows(GS_io, GS, 0, b, B, d, warp, lane, g, G);
}

#define MEMORY_ENTRY_POINTS(NAME, RULE)                                                        \
extern "C" __global__ void __launch_bounds__(NWARP * WARP)                                     \
memory_forward_##NAME(const float* k, const float* v, const float* q, const float* ret,       \
                      const float* th, const float* eta, float* ckM, float* ckS, float* y,    \
                      float* E, int s, int B, int d, int C) {                                 \
    memory_forward_impl<RULE>(k, v, q, ret, th, eta, ckM, ckS, y, E, s, B, d, C);             \
}                                                                                              \
extern "C" __global__ void __launch_bounds__(NWARP * WARP)                                     \
memory_backward_##NAME(const float* k, const float* v, const float* q, const float* ret,      \
                       const float* th, const float* eta, const float* E, const float* ckM,   \
                       const float* ckS, float* scrM, float* scrS, const float* dy,           \
                       float* GM_io, float* GS_io, float* dk, float* dv, float* dq,           \
                       float* dalpha, float* dth, float* deta, int s, int B, int d, int C) {  \
    memory_backward_impl<RULE>(k, v, q, ret, th, eta, E, ckM, ckS, scrM, scrS, dy, GM_io,     \
                               GS_io, dk, dv, dq, dalpha, dth, deta, s, B, d, C);             \
}

MEMORY_ENTRY_POINTS(delta, DELTA)
MEMORY_ENTRY_POINTS(titans, TITANS)
MEMORY_ENTRY_POINTS(hebbian, HEBBIAN)
