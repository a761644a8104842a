// The sequential parts of the chunkwise-parallel memories (kernels/cuda_memory_chunked.py); the
// rest of the chunked algorithm is batched matrix products (cuBLAS through CuPy).
//
// chunk_unit_lower_inverse: T = (I + diag(th) A)^-1 for a batch of C x C chunk matrices (only
//   the strictly lower part of A is read). One block per matrix. Column j of T solves
//   L x = e_j by forward substitution, independently of every other column, so thread j owns
//   column j and no barrier is needed between rows. The strictly lower part of L and the
//   strictly lower part of T (stored transposed, i.e. in the upper triangle) share one
//   C x (C + 1) shared array: thread j writes only row j above the diagonal and reads L below
//   it, so no two threads ever touch the same element.
//
// chunk_carry: the state carried across chunks, for each chunk c in turn (ascending, or
//   descending for the reverse sweep): record[c] = X; X = X P[c] + add[c] (P[c] transposed in
//   the reverse sweep of a matrix carry), or X = g[c] X + add[c] (a scalar decay per chunk).
//   Rows of X evolve independently, so a block owns CARRY_ROWS rows of one batch entry and
//   holds them in registers across all chunks (thread t: columns t and t + blockDim.x); the
//   grid is (batch, row groups): the batch on x, which has no 65535 limit. P[c] goes through
//   shared memory CARRY_TILE rows at a time, loaded coalesced in either orientation. Every sum
//   has a fixed order: deterministic.
//
// Layouts (C-ordered): A, T [count, C, C]; th [count, C]; X, final [B, R, D];
// P [B, N, D, D]; g [B, N]; add, record [B, N, R, D]. Entry points for float and double.

#define TRI_MAXC 64              // chunk size limit of the inverse (shared: C x (C + 1))
#define CARRY_ROWS 4             // state rows per block
#define CARRY_MAXCOL 2           // columns per thread: D <= 2 * blockDim.x
#define CARRY_MAXD 256           // columns of the carried state: 2d for Titans with d <= 128
#define CARRY_TILE 16            // rows of P per shared-memory stage
#define CARRY_MATRIX 0
#define CARRY_MATRIX_T 1
#define CARRY_SCALE 2

template <typename T>
__device__ void chunk_unit_lower_inverse_impl(const T* __restrict__ A, const T* __restrict__ th,
                                              T* __restrict__ out, int C) {
    __shared__ T S[TRI_MAXC][TRI_MAXC + 1];
    const long long m = blockIdx.x;
    const long long base = m * C * C;
    for (int idx = threadIdx.x; idx < C * C; idx += blockDim.x) {
        const int i = idx / C, j = idx % C;
        if (j < i) S[i][j] = th[m * C + i] * A[base + idx];
    }
    __syncthreads();
    const int j = threadIdx.x;
    if (j < C) {
        for (int i = j + 1; i < C; ++i) {
            T s = S[i][j];                                   // L_ij T_jj with T_jj = 1
            for (int k = j + 1; k < i; ++k) s += S[i][k] * S[j][k];   // L_ik T_kj
            S[j][i] = -s;                                    // T_ij
        }
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < C * C; idx += blockDim.x) {
        const int i = idx / C, k = idx % C;
        out[base + idx] = k < i ? S[k][i] : (k == i ? T(1) : T(0));
    }
}

template <typename T>
__device__ void chunk_carry_impl(const T* __restrict__ P, const T* __restrict__ g,
                                 const T* __restrict__ add, const T* __restrict__ init,
                                 T* __restrict__ record, T* __restrict__ final_state, int N,
                                 int R, int D, int mode, int reverse) {
    __shared__ T rows[CARRY_ROWS][CARRY_MAXD];
    __shared__ T tile[CARRY_TILE][CARRY_MAXD + 1];
    const int b = blockIdx.x, r0 = blockIdx.y * CARRY_ROWS;
    const int nt = blockDim.x;
    T X[CARRY_ROWS][CARRY_MAXCOL];
    for (int rr = 0; rr < CARRY_ROWS; ++rr) {
        const int row = r0 + rr;
        for (int cc = 0; cc < CARRY_MAXCOL; ++cc) {
            const int col = threadIdx.x + nt * cc;
            X[rr][cc] = (row < R && col < D) ? init[((long long)b * R + row) * D + col] : T(0);
        }
    }
    for (int step = 0; step < N; ++step) {
        const int c = reverse ? N - 1 - step : step;
        const long long chunk = (long long)b * N + c;
        T acc[CARRY_ROWS][CARRY_MAXCOL];
        for (int rr = 0; rr < CARRY_ROWS; ++rr) {
            const int row = r0 + rr;
            for (int cc = 0; cc < CARRY_MAXCOL; ++cc) {
                const int col = threadIdx.x + nt * cc;
                acc[rr][cc] = T(0);
                if (row < R && col < D) {
                    const long long o = (chunk * R + row) * D + col;
                    record[o] = X[rr][cc];
                    acc[rr][cc] = add[o];
                }
            }
        }
        if (mode == CARRY_SCALE) {
            const T gc = g[chunk];
            for (int rr = 0; rr < CARRY_ROWS; ++rr)
                for (int cc = 0; cc < CARRY_MAXCOL; ++cc) acc[rr][cc] += gc * X[rr][cc];
        } else {
            __syncthreads();                 // the previous chunk's readers of `rows` are done
            for (int rr = 0; rr < CARRY_ROWS; ++rr)
                for (int cc = 0; cc < CARRY_MAXCOL; ++cc) {
                    const int col = threadIdx.x + nt * cc;
                    if (col < D) rows[rr][col] = X[rr][cc];
                }
            const T* Pc = P + chunk * D * D;
            for (int k0 = 0; k0 < D; k0 += CARRY_TILE) {
                const int kt = min(CARRY_TILE, D - k0);
                __syncthreads();             // `rows` written; the previous tile consumed
                for (int idx = threadIdx.x; idx < kt * D; idx += nt) {
                    if (mode == CARRY_MATRIX) {          // tile[kk][j] = P[k0 + kk][j]
                        const int kk = idx / D, jj = idx % D;
                        tile[kk][jj] = Pc[(long long)(k0 + kk) * D + jj];
                    } else {                             // tile[kk][j] = P[j][k0 + kk]
                        const int jj = idx / kt, kk = idx % kt;
                        tile[kk][jj] = Pc[(long long)jj * D + k0 + kk];
                    }
                }
                __syncthreads();
                for (int kk = 0; kk < kt; ++kk)
                    for (int rr = 0; rr < CARRY_ROWS; ++rr) {
                        const T x = rows[rr][k0 + kk];
                        for (int cc = 0; cc < CARRY_MAXCOL; ++cc) {
                            const int col = threadIdx.x + nt * cc;
                            if (col < D) acc[rr][cc] += x * tile[kk][col];
                        }
                    }
            }
        }
        for (int rr = 0; rr < CARRY_ROWS; ++rr)
            for (int cc = 0; cc < CARRY_MAXCOL; ++cc) X[rr][cc] = acc[rr][cc];
    }
    for (int rr = 0; rr < CARRY_ROWS; ++rr) {
        const int row = r0 + rr;
        for (int cc = 0; cc < CARRY_MAXCOL; ++cc) {
            const int col = threadIdx.x + nt * cc;
            if (row < R && col < D) final_state[((long long)b * R + row) * D + col] = X[rr][cc];
        }
    }
}

#define CHUNKED_ENTRY_POINTS(SUFFIX, T)                                                        \
extern "C" __global__ void __launch_bounds__(TRI_MAXC)                                         \
chunk_unit_lower_inverse_##SUFFIX(const T* A, const T* th, T* out, int C) {                    \
    chunk_unit_lower_inverse_impl<T>(A, th, out, C);                                           \
}                                                                                              \
extern "C" __global__ void __launch_bounds__(CARRY_MAXD / CARRY_MAXCOL)                        \
chunk_carry_##SUFFIX(const T* P, const T* g, const T* add, const T* init, T* record,           \
                     T* final_state, int N, int R, int D, int mode, int reverse) {             \
    chunk_carry_impl<T>(P, g, add, init, record, final_state, N, R, D, mode, reverse);         \
}

CHUNKED_ENTRY_POINTS(f32, float)
CHUNKED_ENTRY_POINTS(f64, double)
