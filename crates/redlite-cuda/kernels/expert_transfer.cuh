// The decode prefetch of routed experts placed in host memory.

// ---------------------------------------------------------------------------
// Expert prefetch (routed experts placed apart, one-token decode). Layer M's
// experts are predicted by its router applied to x ⊙ w (x: the input of layer
// M - 1, w: layer M's MoE input norm; the norm's positive scale does not change
// the top k), and the predicted ones held in pinned host memory are copied into
// a device staging area on a side stream while layer M - 1 computes. Layer M's
// expert tables point at the copies until the list is restored (by the next
// prefetch into the same staging area, or xp_restore at the end of the step),
// so every other pass sees the tables as uploaded. The copies are the same
// bytes: outputs do not change.
//
// A prefetch list (XP_WORDS words): [0] redirected entries, [1..4) the layer's
// gate / up / down tables, [XP_K] predicted ids, [XP_TOP] of them copied (the
// most likely first), [XP_IDS ..) the predicted ids,
// from XP_RED per redirected entry (expert, its gate, up and down addresses).
#define XP_K 4
#define XP_TOP 5
#define XP_IDS 8
#define XP_RED 40
#define XP_WORDS (XP_RED + 4 * 32)
__device__ void xp_restore_list(u64* pl) {
    const int n = (int)pl[0];
    u64* tg = (u64*)pl[1];
    u64* tu = (u64*)pl[2];
    u64* td = (u64*)pl[3];
    for (int i = 0; i < n; i++) {
        const u64* r = pl + XP_RED + 4 * i;
        tg[r[0]] = r[1];
        tu[r[0]] = r[2];
        td[r[0]] = r[3];
    }
    pl[0] = 0;
}

// Restore n lists (XP_WORDS apart) at pl and clear the n routers' marks
// (xp_mark's done, xpc_stride ints apart); one thread.
extern "C" __global__ void xp_restore(u64* pl, int n, int* xpc, int xpc_stride) {
    RL_PDL_ENTER();
    if (threadIdx.x == 0 && blockIdx.x == 0)
        for (int i = 0; i < n; i++) {
            xp_restore_list(pl + (u64)i * XP_WORDS);
            if (xpc) ((volatile int*)xpc)[(u64)i * xpc_stride] = 0;
        }
}

#ifndef XP_U
#define XP_U 8
#endif
// Copy the first top of the k predicted experts (pred, most likely first)
// that lie in pinned host memory (id >= vram; expert e's record at host +
// (e - vram)·rec) into staging slot j
// (stage + j·rec) and point the tables at them; grid (blocks per expert, k).
// Block (0, 0) first restores the list the staging area served before.
// stats[4] += experts copied. A copy stops once the layer's router has
// chosen (xpc[0] == tag, xp_mark) without it (xpc[4 + e] != tag): that
// expert is not used this step, and the bus is left to the ones that are;
// stats[5] += the bytes left uncopied. wait (tests): every block first waits
// for the router, so an expert it did not choose is not copied at all.
extern "C" __global__ void __launch_bounds__(256)
xp_fetch(const int* __restrict__ pred, int k, int top, int vram, const uint8_t* __restrict__ host,
         u64 rec, uint8_t* __restrict__ stage, u64* __restrict__ pl, u64* tg, u64* tu, u64* td,
         u64 off_u, u64 off_d, unsigned long long* __restrict__ stats, const int* xpc, int tag,
         int wait) {
    __shared__ int stop[2];
    const int j = blockIdx.y;
    if (blockIdx.x == 0 && j == 0 && threadIdx.x == 0) {
        xp_restore_list(pl);
        int n = 0;
        for (int i = 0; i < k; i++) {
            const int e = pred[i];
            pl[XP_IDS + i] = (u64)e;
            if (e < vram || i >= top) continue;
            u64* r = pl + XP_RED + 4 * n;
            r[0] = (u64)e;
            r[1] = tg[e];
            r[2] = tu[e];
            r[3] = td[e];
            const u64 s = (u64)(stage + (u64)i * rec);
            tg[e] = s;
            tu[e] = s + off_u;
            td[e] = s + off_d;
            n++;
        }
        pl[0] = (u64)n;
        pl[1] = (u64)tg;
        pl[2] = (u64)tu;
        pl[3] = (u64)td;
        pl[XP_K] = (u64)k;
        pl[XP_TOP] = (u64)top;
        if (stats) atomicAdd(stats + 4, (unsigned long long)n);
    }
    const int e = pred[j];
    if (e < vram || j >= top) return;
    const uint4* src = (const uint4*)(host + (u64)(e - vram) * rec);
    uint4* dst = (uint4*)(stage + (u64)j * rec);
    const u64 n16 = rec / 16;
    const u64 per = (n16 + gridDim.x - 1) / gridDim.x;
    const u64 a = (u64)blockIdx.x * per, b = min(n16, a + per);
    const volatile int* vx = (const volatile int*)xpc;
    const u64 step = (u64)XP_U * blockDim.x;
    if (vx && wait) {
        if (threadIdx.x == 0) {
            while (vx[0] != tag) __nanosleep(1000);
            __threadfence();
            stop[0] = vx[4 + e] != tag;
            if (stop[0] && stats && a < b) atomicAdd(stats + 5, (unsigned long long)(b - a) * 16ull);
        }
        __syncthreads();
        if (stop[0]) return;
        __syncthreads();
    }
    // Every thread runs the same iterations (the block's decision to stop is
    // shared through stop[], one word per iteration parity).
    int it = 0;
    for (u64 base = a; base < b; base += step, it++) {
        // Thread 0 asks whether to stop before its loads, and decides after.
        int done = 0;
        if (threadIdx.x == 0 && vx) done = vx[0];
        uint4 v[XP_U];
#pragma unroll
        for (int u = 0; u < XP_U; u++) {
            const u64 i = base + threadIdx.x + (u64)u * blockDim.x;
            if (i < b) v[u] = src[i];
        }
#pragma unroll
        for (int u = 0; u < XP_U; u++) {
            const u64 i = base + threadIdx.x + (u64)u * blockDim.x;
            if (i < b) dst[i] = v[u];
        }
        if (!vx) continue;
        if (threadIdx.x == 0) {
            int s = 0;
            if (done == tag) {
                __threadfence();
                s = vx[4 + e] != tag;
            }
            stop[it & 1] = s;
            if (s && stats && base + step < b) atomicAdd(stats + 5, (unsigned long long)(b - base - step) * 16ull);
        }
        __syncthreads();
        if (stop[it & 1]) break;
    }
}

// After layer M's router and the join of its prefetch (list pl complete):
// copy each chosen expert (ids, k of them) that lies in pinned host memory
// and was not copied ahead (not among pl's first top predictions) into slot
// r of the late staging area (late + r·rec), many blocks per expert at once,
// and point the tables at the copy; the redirects are appended to pl, so the
// list's restore puts them back too. The same bytes: outputs do not change.
// Grid (blocks per expert, k); no early launch of the next kernel (it reads
// the tables). stats[6] += experts copied late.
extern "C" __global__ void __launch_bounds__(256)
xp_late(const int* __restrict__ ids, int k, int vram, const uint8_t* __restrict__ host, u64 rec,
        uint8_t* __restrict__ late, u64* __restrict__ pl, u64* tg, u64* tu, u64* td, u64 off_u,
        u64 off_d, unsigned long long* __restrict__ stats) {
    RL_PDL_WAIT();
    const int np = (int)pl[XP_K], top = (int)pl[XP_TOP];
    auto ahead = [&](int e) {
        for (int j = 0; j < np && j < top; j++)
            if ((int)pl[XP_IDS + j] == e) return true;
        return false;
    };
    const int r = blockIdx.y;
    const int e = ids[r];
    const bool mine = e >= vram && !ahead(e);
    // Block (0, 0) writes only pl[0] and the redirects, which the others do
    // not read.
    if (blockIdx.x == 0 && r == 0 && threadIdx.x == 0) {
        int n = (int)pl[0], c = 0;
        for (int q = 0; q < k; q++) {
            const int eq = ids[q];
            if (eq < vram || ahead(eq) || n >= 32) continue;
            u64* red = pl + XP_RED + 4 * n;
            red[0] = (u64)eq;
            red[1] = tg[eq];
            red[2] = tu[eq];
            red[3] = td[eq];
            const u64 sq = (u64)(late + (u64)q * rec);
            tg[eq] = sq;
            tu[eq] = sq + off_u;
            td[eq] = sq + off_d;
            n++;
            c++;
        }
        pl[0] = (u64)n;
        if (stats) atomicAdd(stats + 6, (unsigned long long)c);
    }
    if (mine) {
        const uint4* src = (const uint4*)(host + (u64)(e - vram) * rec);
        uint4* dst = (uint4*)(late + (u64)r * rec);
        const u64 n16 = rec / 16;
        const u64 per = (n16 + gridDim.x - 1) / gridDim.x;
        const u64 a = (u64)blockIdx.x * per, b = min(n16, a + per);
        for (u64 base = a + threadIdx.x; base < b; base += (u64)XP_U * blockDim.x) {
            uint4 v[XP_U];
#pragma unroll
            for (int u = 0; u < XP_U; u++) {
                const u64 i = base + (u64)u * blockDim.x;
                if (i < b) v[u] = src[i];
            }
#pragma unroll
            for (int u = 0; u < XP_U; u++) {
                const u64 i = base + (u64)u * blockDim.x;
                if (i < b) dst[i] = v[u];
            }
        }
    }
    __threadfence();
}

// out_z = x ⊙ w_z for the z-th of two weights (the prediction inputs of
// layers 0 and 1, from the embeddings); one block per z.
extern "C" __global__ void xp_scale(const float* __restrict__ x, const float* __restrict__ w0,
                                    const float* __restrict__ w1, float* __restrict__ o0,
                                    float* __restrict__ o1, int d) {
    RL_PDL_ENTER();
    const float* w = blockIdx.x ? w1 : w0;
    float* o = blockIdx.x ? o1 : o0;
    for (int i = threadIdx.x; i < d; i += blockDim.x) o[i] = x[i] * w[i];
}

