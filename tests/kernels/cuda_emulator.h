// A small CPU emulator of the CUDA features the kernels of kernels/cuda use, so that their logic
// (indexing, masking, reductions, barriers, warp shuffles) is tested without a GPU.
//
// Each CUDA thread is a fiber (ucontext) run by a cooperative round-robin scheduler; blocks run
// one after another, so `__shared__` arrays become `static` (emulator.py rewrites the source)
// and dynamic shared memory is one global buffer. `__syncthreads` and the shuffles are barriers
// on which a fiber yields until every thread of its block or warp has arrived. A launch in which
// a full round of the scheduler makes no progress is reported as a deadlock (a barrier not
// reached by every thread: a real bug on a GPU as well).
//
// It checks logic, not timing or memory-model races: fibers switch only at barriers.
#pragma once
#include <cmath>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <functional>
#include <vector>
#include <ucontext.h>

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)

struct dim3_ { unsigned x = 0, y = 0, z = 0; };
static dim3_ threadIdx, blockIdx, blockDim, gridDim;

using std::min;
using std::max;

static inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
static inline float __int_as_float(unsigned i) { float f; std::memcpy(&f, &i, 4); return f; }
static inline float __uint_as_float(unsigned i) { float f; std::memcpy(&f, &i, 4); return f; }

alignas(16) float smem[1 << 16];              // dynamic shared memory (256 KiB)

namespace emu {

struct Fiber {
    ucontext_t ctx;
    std::vector<char> stack;
    bool done = false;
    unsigned tid = 0;
};

static ucontext_t scheduler;
static std::vector<Fiber> fibers;
static Fiber* current = nullptr;
static long long progress = 0;
static std::function<void()> body;

struct Barrier {
    unsigned n = 0, count = 0;
    long long gen = 0;
    void wait() {
        const long long g = gen;
        if (++count == n) {
            count = 0;
            ++gen;
            ++progress;
            return;
        }
        while (gen == g) swapcontext(&current->ctx, &scheduler);
    }
};

static Barrier block_barrier;
static std::vector<Barrier> warp_barriers;
static std::vector<float> warp_buffers;

static void entry() {
    body();
    current->done = true;
    ++progress;
}

// Run `kernel` over the grid; returns 0, or 1 on a deadlock.
static int run(unsigned gx, unsigned gy, unsigned gz, unsigned bx, std::function<void()> k) {
    body = std::move(k);
    gridDim.x = gx; gridDim.y = gy; gridDim.z = gz;
    blockDim.x = bx; blockDim.y = 1; blockDim.z = 1;
    fibers.assign(bx, Fiber());
    for (auto& f : fibers) f.stack.resize(1 << 17);
    const unsigned nwarps = (bx + 31) / 32;
    for (unsigned z = 0; z < gz; ++z)
    for (unsigned y = 0; y < gy; ++y)
    for (unsigned x = 0; x < gx; ++x) {
        blockIdx.x = x; blockIdx.y = y; blockIdx.z = z;
        block_barrier = Barrier();
        block_barrier.n = bx;
        warp_barriers.assign(nwarps, Barrier());
        for (unsigned w = 0; w < nwarps; ++w) warp_barriers[w].n = std::min(32u, bx - 32 * w);
        warp_buffers.assign(nwarps * 32, 0.0f);
        for (unsigned t = 0; t < bx; ++t) {
            Fiber& f = fibers[t];
            f.done = false;
            f.tid = t;
            getcontext(&f.ctx);
            f.ctx.uc_stack.ss_sp = f.stack.data();
            f.ctx.uc_stack.ss_size = f.stack.size();
            f.ctx.uc_link = &scheduler;
            makecontext(&f.ctx, entry, 0);
        }
        unsigned alive = bx;
        while (alive) {
            const long long before = progress;
            alive = 0;
            for (auto& f : fibers) {
                if (f.done) continue;
                current = &f;
                threadIdx.x = f.tid; threadIdx.y = 0; threadIdx.z = 0;
                swapcontext(&scheduler, &f.ctx);
                if (!f.done) ++alive;
            }
            if (alive && progress == before) {
                std::fprintf(stderr, "emulator: deadlock in block (%u, %u, %u)\n", x, y, z);
                return 1;
            }
        }
    }
    return 0;
}

static inline float exchange(float v, unsigned src_lane) {
    const unsigned w = current->tid / 32, lane = current->tid % 32;
    warp_buffers[w * 32 + lane] = v;
    warp_barriers[w].wait();
    const float r = warp_buffers[w * 32 + (src_lane % 32)];
    warp_barriers[w].wait();
    return r;
}

}  // namespace emu

static inline void __syncthreads() { emu::block_barrier.wait(); }
static inline float __shfl_xor_sync(unsigned, float v, int o) {
    return emu::exchange(v, (emu::current->tid % 32) ^ (unsigned)o);
}
static inline float __shfl_sync(unsigned, float v, int src) { return emu::exchange(v, src); }
