// The router: top k of the logits, and the router products fused with it.
// (After products.cuh, whose one-token rows it stages.)

// Router: the top k of each token's logits (ties: lower id) and their
// softmax weights renormalised over the top k (in f64 after an f32 max
// subtraction; only the k winners' exponentials are needed). One warp per
// token; ne <= 32·TOPK_PER = 512.
#define TOPK_PER 16
#ifndef RL_TOPK_REDUX
#define RL_TOPK_REDUX 1
#endif
// An order-preserving unsigned key of a float (−0 taken as +0, so equal
// values have equal keys) and its inverse.
__device__ __forceinline__ unsigned rl_okey(float f) {
    unsigned u = __float_as_uint(f == 0.f ? 0.f : f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float rl_okey_inv(unsigned k) {
    return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}
// The largest of l[0..16) and its slot, ties to the lower slot (a tree of
// strict comparisons: the right one wins only when larger).
__device__ __forceinline__ void rl_best16(const float* l, float& bv, int& bj) {
    float v[8];
    int jj[8];
#pragma unroll
    for (int i = 0; i < 8; i++) {
        bool b = l[2 * i + 1] > l[2 * i];
        v[i] = b ? l[2 * i + 1] : l[2 * i];
        jj[i] = b ? 2 * i + 1 : 2 * i;
    }
#pragma unroll
    for (int w = 4; w >= 1; w >>= 1) {
#pragma unroll
        for (int i = 0; i < w; i++) {
            bool b = v[2 * i + 1] > v[2 * i];
            v[i] = b ? v[2 * i + 1] : v[2 * i];
            jj[i] = b ? jj[2 * i + 1] : jj[2 * i];
        }
    }
    bv = v[0];
    bj = jj[0];
}
__device__ __forceinline__ void topk_row(const float* row, int ne, int k, int* ids,
                                         float* wts) {
    int lane = threadIdx.x & 31;
    float l[TOPK_PER];
#pragma unroll
    for (int j = 0; j < TOPK_PER; j++) {
        int e = lane + j * WARP;
        l[j] = e < ne ? __ldcg(row + e) : -INFINITY;
    }
    // Top k by repeated arg-max over the logits (the softmax is monotonic;
    // ties go to the lower id, as the reference's stable order); lane r keeps
    // the r-th winner.
    int chosen = -1;
    float chosen_l = -INFINITY;
#if RL_TOPK_REDUX && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    // Each lane keeps its own best (value, slot j); a round takes the warp's
    // largest value with one redux.sync on an order-preserving key and the
    // lowest id holding it with a second, and only the winning lane looks
    // for its next best. (Entries past ne are -inf with ids >= ne, so they
    // lose every tie; k <= ne.)
    float bv;
    int bj;
    rl_best16(l, bv, bj);
    for (int r = 0; r < k; r++) {
        unsigned key = rl_okey(bv);
        unsigned mk = __reduce_max_sync(FULL, key);
        unsigned id = (unsigned)(lane + bj * WARP);
        unsigned mid = __reduce_min_sync(FULL, key == mk ? id : 0xffffffffu);
        if (lane == r) {
            chosen = (int)mid;
            chosen_l = rl_okey_inv(mk);
        }
        if (id == mid) {
#pragma unroll
            for (int j = 0; j < TOPK_PER; j++)
                if (j == bj) l[j] = -INFINITY;
            rl_best16(l, bv, bj);
        }
    }
#else
    for (int r = 0; r < k; r++) {
        float best = -INFINITY;
        int bid = 0x7fffffff;
#pragma unroll
        for (int j = 0; j < TOPK_PER; j++) {
            int e = lane + j * WARP;
            if (e < ne && (l[j] > best || (l[j] == best && e < bid))) {
                best = l[j];
                bid = e;
            }
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            float ob = __shfl_xor_sync(FULL, best, o);
            int oi = __shfl_xor_sync(FULL, bid, o);
            if (ob > best || (ob == best && oi < bid)) {
                best = ob;
                bid = oi;
            }
        }
        if (lane == r) {
            chosen = bid;
            chosen_l = best;
        }
        // Remove the winner from its owner's registers.
#pragma unroll
        for (int j = 0; j < TOPK_PER; j++)
            if (lane + j * WARP == bid) l[j] = -INFINITY;
    }
#endif
    // The winners' weights: softmax probabilities renormalised over the top
    // k, p_r / Σ p = e^(l_r − max) / Σ_top e^(l_j − max) (the softmax's
    // denominator cancels; the reference's floor of 6.1035e-5 under Σ p never
    // applies, the top k holding at least k / ne >= 1/512 of the mass), each
    // in its lane, summed in rank order. The max is the first winner's.
    const float mx = __shfl_sync(FULL, chosen_l, 0);
    double p = lane < k ? exp((double)(chosen_l - mx)) : 0.0;
    double wsum = 0.0;
    for (int r = 0; r < k; r++) wsum += __shfl_sync(FULL, p, r);
    if (lane < k) {
        ids[lane] = chosen;
        wts[lane] = (float)(p / wsum);
    }
}
// A decode step's layer whose experts were predicted and are being copied
// (xp_fetch) marks what its router chose, for the copies to stop on the
// experts it did not choose: chosen[e] = tag for the k chosen ids, then, after
// a fence, done = tag (xpc[0]; chosen at xpc + 4). One warp; ids written by
// its lanes (lane r the r-th). xp_restore clears done at the end of the step.
__device__ __forceinline__ void xp_mark(const int* ids, int k, int* xpc, int tag) {
    const int lane = threadIdx.x & 31;
    if (lane < k) ((volatile int*)xpc)[4 + ids[lane]] = tag;
    __threadfence();
    __syncwarp();
    if (lane == 0) ((volatile int*)xpc)[0] = tag;
}
// The router and its top-k in one launch, one token per slot z (blockIdx.z):
// logits[z] = W·x_z as mv1_T computes it, then the block that finishes last
// (counted in counter[z], reset for the next launch) takes the token's top k
// with topk_row. x_z = x + z·n_in; ids / wts at z·k. xpc non-null (a decode
// step with the layer's experts being copied in): xp_mark(xpc, tag) after it.
#define DEF_ROUTER(T, ID)                                                                   \
    extern "C" __global__ void __launch_bounds__(MV_WARPS * WARP, MV1_MINB)                 \
        router_##T(const uint8_t* __restrict__ W, u64 row_bytes, int n_in, int ne,          \
                   const float* __restrict__ x, float* logits, int k, int* __restrict__ ids, \
                   float* __restrict__ wts, int* counter, int* xpc, int tag) {             \
        __shared__ __align__(16) uint8_t smem[MV_WARPS][MV1_R][MV_SEG + 32];                \
        __shared__ __align__(16) float xs[MV_XS];                                           \
        __shared__ float xsum8[MV_XS / 8];                                                  \
        __shared__ int last;                                                                \
        int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;                               \
        int row0 = (blockIdx.x * MV_WARPS + warp) * MV1_R;                                  \
        int z = blockIdx.z;                                                                 \
        bool live = row0 < ne;                                                              \
        const uint8_t* src[MV1_R];                                                          \
        int nr = mv1_row_src(W, row_bytes, row0, ne, src);                                  \
        int shift[MV1_R];                                                                   \
        if (live)                                                                           \
            mv1_issue_##T(src, 0, min(MV_SEG / BS_##T, n_in / QK_##T), smem[warp], lane, shift); \
        RL_PDL_ENTER();                                                                     \
        mv1_stage_x(xs, xsum8, x + (u64)z * n_in, 0, n_in);                                 \
        float* lz = logits + (u64)z * ne;                                                   \
        if (live) {                                                                         \
            float acc[MV1_R];                                                               \
            _Pragma("unroll") for (int r = 0; r < MV1_R; r++) acc[r] = 0.f;                 \
            mv1_rows_##T(src, n_in, xs, xsum8, smem[warp], lane, shift, acc);               \
            _Pragma("unroll") for (int r = 0; r < MV1_R; r++) {                             \
                float s = warp_sum(acc[r]);                                                 \
                if (lane == 0 && r < nr) lz[row0 + r] = s;                                  \
            }                                                                               \
        }                                                                                   \
        __threadfence();                                                                    \
        __syncthreads();                                                                    \
        if (threadIdx.x == 0) last = atomicAdd(counter + z, 1) == (int)gridDim.x - 1;       \
        __syncthreads();                                                                    \
        if (!last) return;                                                                  \
        __threadfence();                                                                    \
        if (warp == 0) topk_row(lz, ne, k, ids + z * k, wts + z * k);                       \
        if (warp == 0 && xpc) xp_mark(ids + z * k, k, xpc, tag);                            \
        if (threadIdx.x == 0) counter[z] = 0;                                               \
    }
REDLITE_DQ_TYPES(DEF_ROUTER)

// The router of an F32 matrix with rows of n_in <= 32·8·RD_J values (n_in a
// multiple of 256), one row per warp: every lane loads all of its chunks
// (chunk ci = lane + 32·j, in that order, as mv1_F32 takes them) into
// registers at once, before waiting on the kernel before, so the whole
// matrix is one trip to memory instead of mv1_F32's four staged segments.
// Then as router_T: the block that finishes last takes the top k. Same
// parameters as router_T (rows row_bytes apart); launched with 4 rows per
// block instead of 4·MV1_R.
#define RD_J 8
// The body of router_f32 and router_f32n. NORM (router_f32n): the input is
// first formed as add_rmsnorm forms it, in each block: v = xres + y (y the
// product just before, xres the residual, read before the wait as
// RL_PDL_EARLY allows), out = v·s·nw with s = 1/sqrt(Σv²/n_in + eps) (Σ in
// f64), and the block that takes the top k (the last, so every block has
// read the residual by then) writes v back to xres and out to hout for the
// kernels after; otherwise x is the input.
template <bool NORM>
__device__ __forceinline__ void router_f32_body(
    const uint8_t* __restrict__ W, u64 row_bytes, int n_in, int ne, const float* __restrict__ x,
    float* __restrict__ xres, const float* __restrict__ y, const float* __restrict__ nw,
    float* __restrict__ hout, float eps, float* logits, int k, int* __restrict__ ids,
    float* __restrict__ wts, int* counter, int* xpc, int tag) {
    __shared__ __align__(16) float xs[32 * 8 * RD_J];
    __shared__ int last;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int row = blockIdx.x * 4 + warp;
    int z = blockIdx.z;
    bool live = row < ne;
    int nj = n_in >> 8;
    const float4* wr = (const float4*)(W + (u64)(live ? row : 0) * row_bytes);
    float4 wv[RD_J][2];
#pragma unroll
    for (int j = 0; j < RD_J; j++) {
        if (j < nj) {
            wv[j][0] = __ldg(wr + 2 * (lane + 32 * j));
            wv[j][1] = __ldg(wr + 2 * (lane + 32 * j) + 1);
        }
    }
    // NORM: this thread's residual and norm weights (16-byte words i =
    // threadIdx.x + 128·j) before the wait.
    constexpr int XJ = RD_J * 64 / 128;
    float4 rv[XJ], nv[XJ];
    if (NORM) {
        const float4* r4 = (const float4*)(xres + (u64)z * n_in);
#pragma unroll
        for (int j = 0; j < XJ; j++) {
            const int i = threadIdx.x + 128 * j;
            if (i < n_in / 4) {
                rv[j] = r4[i];
                nv[j] = ((const float4*)nw)[i];
            }
        }
    }
    RL_PDL_ENTER();
    if (NORM) {
        const float4* y4 = (const float4*)(y + (u64)z * n_in);
        double ss = 0.0;
#pragma unroll
        for (int j = 0; j < XJ; j++) {
            const int i = threadIdx.x + 128 * j;
            if (i < n_in / 4) {
                const float4 b = y4[i];
                rv[j].x += b.x;
                rv[j].y += b.y;
                rv[j].z += b.z;
                rv[j].w += b.w;
                ss += (double)rv[j].x * (double)rv[j].x;
                ss += (double)rv[j].y * (double)rv[j].y;
                ss += (double)rv[j].z * (double)rv[j].z;
                ss += (double)rv[j].w * (double)rv[j].w;
            }
        }
        ss = block_sum_d(ss);
        const float sc = (float)(1.0 / sqrt(ss / n_in + (double)eps));
#pragma unroll
        for (int j = 0; j < XJ; j++) {
            const int i = threadIdx.x + 128 * j;
            if (i < n_in / 4) {
                float4 o;
                o.x = rv[j].x * sc * nv[j].x;
                o.y = rv[j].y * sc * nv[j].y;
                o.z = rv[j].z * sc * nv[j].z;
                o.w = rv[j].w * sc * nv[j].w;
                ((float4*)xs)[i] = o;
            }
        }
    } else {
        const float* xz = x + (u64)z * n_in;
        {
            // The input as 16-byte words, all of a thread's at once (n_in is a
            // multiple of 256, at most 32·8·RD_J).
            const float4* x4 = (const float4*)xz;
            float4 xv[RD_J * 64 / 128];
#pragma unroll
            for (int j = 0; j < RD_J * 64 / 128; j++) {
                const int i = threadIdx.x + 128 * j;
                if (i < n_in / 4) xv[j] = x4[i];
            }
#pragma unroll
            for (int j = 0; j < RD_J * 64 / 128; j++) {
                const int i = threadIdx.x + 128 * j;
                if (i < n_in / 4) ((float4*)xs)[i] = xv[j];
            }
        }
    }
    __syncthreads();
    float* lz = logits + (u64)z * ne;
    if (live) {
        float acc = 0.f;
#pragma unroll
        for (int j = 0; j < RD_J; j++) {
            if (j < nj) {
                W8 w;
                w.q[0] = wv[j][0].x; w.q[1] = wv[j][0].y; w.q[2] = wv[j][0].z; w.q[3] = wv[j][0].w;
                w.q[4] = wv[j][1].x; w.q[5] = wv[j][1].y; w.q[6] = wv[j][1].z; w.q[7] = wv[j][1].w;
                acc += apply8_F32(w, xs + 8 * (lane + 32 * j), 0.f);
            }
        }
        float s = warp_sum(acc);
        if (lane == 0) lz[row] = s;
    }
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(counter + z, 1) == (int)gridDim.x - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    if (NORM) {
        // The last block, once every block has read the residual: v back to
        // it and the normed input to hout for the kernels after.
#pragma unroll
        for (int j = 0; j < XJ; j++) {
            const int i = threadIdx.x + 128 * j;
            if (i < n_in / 4) {
                ((float4*)(xres + (u64)z * n_in))[i] = rv[j];
                ((float4*)(hout + (u64)z * n_in))[i] = ((const float4*)xs)[i];
            }
        }
    }
    if (warp == 0) topk_row(lz, ne, k, ids + z * k, wts + z * k);
    if (warp == 0 && xpc) xp_mark(ids + z * k, k, xpc, tag);
    if (threadIdx.x == 0) counter[z] = 0;
}
extern "C" __global__ void __launch_bounds__(128)
    router_f32(const uint8_t* __restrict__ W, u64 row_bytes, int n_in, int ne,
               const float* __restrict__ x, float* logits, int k, int* __restrict__ ids,
               float* __restrict__ wts, int* counter, int* xpc, int tag) {
    router_f32_body<false>(W, row_bytes, n_in, ne, x, nullptr, nullptr, nullptr, nullptr, 0.f,
                           logits, k, ids, wts, counter, xpc, tag);
}
// router_f32 on the residual stream: add_rmsnorm's residual add and post
// norm in each block (x += y written back, the normed input to h), then
// the router and its top k; the arguments of router_f32 with the input
// replaced by (x, y, w, h, eps).
extern "C" __global__ void __launch_bounds__(128)
    router_f32n(const uint8_t* __restrict__ W, u64 row_bytes, int n_in, int ne,
                float* __restrict__ x, const float* __restrict__ y, const float* __restrict__ w,
                float* __restrict__ h, float eps, float* logits, int k, int* __restrict__ ids,
                float* __restrict__ wts, int* counter, int* xpc, int tag) {
    router_f32_body<true>(W, row_bytes, n_in, ne, h, x, y, w, h, eps, logits, k, ids, wts,
                          counter, xpc, tag);
}

