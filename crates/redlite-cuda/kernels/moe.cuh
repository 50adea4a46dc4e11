// MoE: top k, grouping of slots by expert, the combine with the next
// layer's input norm, and the residual add with its norm.

// ---------------------------------------------------------------------------
// MoE.

extern "C" __global__ void moe_topk(const float* __restrict__ logits, int ne, int k,
                                    int* __restrict__ ids, float* __restrict__ wts) {
    RL_PDL_ENTER();
    int t = blockIdx.x;
    topk_row(logits + (u64)t * ne, ne, k, ids + t * k, wts + t * k);
}

// Group the n routed slots (ids[q] = expert of slot q) by expert: counts,
// offsets (exclusive prefix sum) and perm (the slots of each expert, in any
// order: every slot's product is computed on its own). One block.
extern "C" __global__ void moe_group(const int* __restrict__ ids, int n, int ne,
                                     int* __restrict__ counts, int* __restrict__ offsets,
                                     int* __restrict__ perm) {
    RL_PDL_ENTER();
    extern __shared__ int gsh[];
    int* cnt = gsh;
    int* pos = gsh + ne;
    for (int e = threadIdx.x; e < ne; e += blockDim.x) cnt[e] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) atomicAdd(&cnt[ids[i]], 1);
    __syncthreads();
    if (threadIdx.x == 0) {
        int run = 0;
        for (int e = 0; e < ne; e++) {
            pos[e] = run;
            offsets[e] = run;
            counts[e] = cnt[e];
            run += cnt[e];
        }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) perm[atomicAdd(&pos[ids[i]], 1)] = i;
}

// The MoE output, one token per block: x[t] += Σ_r wts[t][r]·down[t·k + r] +
// sigmoid(h[t]·sh_inp)·sh[t]; then (w non-null) the next layer's input norm
// out[t] = rmsnorm(x[t])·w. out may be h (each block reads its row of h
// before the first barrier and writes it after the last).
//
// With expert prefetch (decode, pw non-null): pout = x ⊙ pw as well (the
// prediction input of layer + 2, whose input norm is pw; see xp_fetch), and
// (stats non-null) how this layer's chosen experts (ids) compare with its
// prediction (list pl): stats[0] += chosen, [1] += chosen and predicted,
// [2] += chosen from pinned host memory (id >= vram), [3] += those copied
// ahead (predicted among the first top).
//
// Before griddepcontrol.wait it reads only what the kernel launched just
// before it does not write: the weights, and h, x and wts, written two or
// more kernels back (the post-attention norm, the router). That is safe
// because this kernel starts only once every block of the kernel before has
// passed its own wait (RL_PDL_ENTER in every block of every kernel), which
// returns once the kernels before that one have finished. So the shared
// gate's dot product and block sum, the weights and the residual are ready
// when the down products finish; after the wait each thread issues all of
// its loads of down and sh at once (CN_KR experts per batch, CN_IT values
// per thread), with every sum in the order of the plain loops (the gate's
// per thread and block sum as before, y over r from 0, ss over the thread's
// values in increasing index), so the results are those bits.
#define CN_KR 16
#define CN_IT 2
extern "C" __global__ void __launch_bounds__(1024) moe_combine_norm(float* __restrict__ x, const float* __restrict__ down,
                                            const float* __restrict__ wts, int k,
                                            const float* __restrict__ sh, const float* h,
                                            const float* __restrict__ sh_inp, int d,
                                            const float* __restrict__ w, float* out,
                                            float eps, const float* __restrict__ pw,
                                            float* __restrict__ pout,
                                            const int* __restrict__ ids,
                                            const u64* __restrict__ pl,
                                            unsigned long long* __restrict__ stats, int vram) {
    __shared__ float ws[32];
    const int t = blockIdx.x, nb = blockDim.x;
    const bool wsm = k <= 32;
    if (wsm && threadIdx.x < k) ws[threadIdx.x] = wts[t * k + threadIdx.x];
    float gl = 0.f;
    for (int i = threadIdx.x; i < d; i += nb) gl += h[(u64)t * d + i] * sh_inp[i];
    gl = block_sum_f(gl);  // its barriers also publish ws
    const float gate = sigmoid_f(gl);
    float* xt = x + (u64)t * d;
    const float* sht = sh + (u64)t * d;
    const float* dt = down + (u64)t * k * d;
    // The first CN_IT values of this thread: residual and weights loaded
    // before the wait, kept for the norm's pass.
    float xv[CN_IT], wv[CN_IT], pv[CN_IT];
#pragma unroll
    for (int j = 0; j < CN_IT; j++) {
        const int i = threadIdx.x + j * nb;
        if (i < d) {
            xv[j] = xt[i];
            wv[j] = w ? w[i] : 0.f;
            pv[j] = pw ? pw[i] : 0.f;
        }
    }
    RL_PDL_ENTER();
    if (stats && t == 0 && threadIdx.x == 0) {
        const int np = (int)pl[XP_K], top = (int)pl[XP_TOP];
        unsigned long long c[4] = {0, 0, 0, 0};
        for (int r = 0; r < k; r++) {
            const int e = ids[r];
            int at = np;
            for (int j = 0; j < np; j++)
                if ((int)pl[XP_IDS + j] == e) at = j;
            c[0] += 1;
            c[1] += at < np;
            c[2] += e >= vram;
            c[3] += at < top && e >= vram;
        }
        for (int j = 0; j < 4; j++) atomicAdd(stats + j, c[j]);
    }
    double ss = 0.0;
    float vk[CN_IT];
    for (int i0 = threadIdx.x; i0 < d; i0 += CN_IT * nb) {
        const bool first = i0 == (int)threadIdx.x;
        float y[CN_IT], sv[CN_IT];
#pragma unroll
        for (int j = 0; j < CN_IT; j++) {
            y[j] = 0.f;
            const int i = i0 + j * nb;
            if (i < d) sv[j] = sht[i];
        }
        for (int r0 = 0; r0 < k; r0 += CN_KR) {
            float dv[CN_IT][CN_KR];
#pragma unroll
            for (int r = 0; r < CN_KR; r++)
#pragma unroll
                for (int j = 0; j < CN_IT; j++) {
                    const int i = i0 + j * nb;
                    dv[j][r] = r0 + r < k && i < d ? dt[(u64)(r0 + r) * d + i] : 0.f;
                }
#pragma unroll
            for (int r = 0; r < CN_KR; r++) {
                if (r0 + r < k) {
                    const float wr = wsm ? ws[r0 + r] : wts[t * k + r0 + r];
#pragma unroll
                    for (int j = 0; j < CN_IT; j++) y[j] += wr * dv[j][r];
                }
            }
        }
#pragma unroll
        for (int j = 0; j < CN_IT; j++) {
            const int i = i0 + j * nb;
            if (i < d) {
                float v = (first ? xv[j] : xt[i]) + (y[j] + gate * sv[j]);
                xt[i] = v;
                if (pw) pout[(u64)t * d + i] = v * (first ? pv[j] : pw[i]);
                ss += (double)v * (double)v;
                if (first) vk[j] = v;
            }
        }
    }
    if (!w) return;
    ss = block_sum_d(ss);
    float s = (float)(1.0 / sqrt(ss / d + (double)eps));
#pragma unroll
    for (int j = 0; j < CN_IT; j++) {
        const int i = threadIdx.x + j * nb;
        if (i < d) {
            float v = vk[j] * s;
            out[(u64)t * d + i] = v * wv[j];
        }
    }
    for (int i = threadIdx.x + CN_IT * nb; i < d; i += nb) {
        float v = xt[i] * s;
        out[(u64)t * d + i] = v * w[i];
    }
}

// x += y, then out = rmsnorm(x)·w, one block per row of dim values.
#define AR_IT 2
extern "C" __global__ void add_rmsnorm(float* __restrict__ x, const float* __restrict__ y,
                                       const float* __restrict__ w, float* __restrict__ out,
                                       int dim, float eps) {
    u64 base = (u64)blockIdx.x * dim;
    const int nb = blockDim.x;
    // The thread's first AR_IT residual values and weights before the wait:
    // the residual was last written by the layer before's combine, several
    // launches back (RL_PDL_EARLY); y is the product just before.
    float xv[AR_IT], wv[AR_IT];
#pragma unroll
    for (int j = 0; j < AR_IT; j++) {
        const int i = threadIdx.x + j * nb;
        xv[j] = i < dim ? x[base + i] : 0.f;
        wv[j] = i < dim ? w[i] : 0.f;
    }
    RL_PDL_ENTER();
    double ss = 0.0;
#pragma unroll
    for (int j = 0; j < AR_IT; j++) {
        const int i = threadIdx.x + j * nb;
        if (i < dim) {
            xv[j] += y[base + i];
            x[base + i] = xv[j];
            ss += (double)xv[j] * (double)xv[j];
        }
    }
    for (int i = threadIdx.x + AR_IT * nb; i < dim; i += nb) {
        float v = x[base + i] + y[base + i];
        x[base + i] = v;
        ss += (double)v * (double)v;
    }
    ss = block_sum_d(ss);
    float s = (float)(1.0 / sqrt(ss / dim + (double)eps));
#pragma unroll
    for (int j = 0; j < AR_IT; j++) {
        const int i = threadIdx.x + j * nb;
        if (i < dim) out[base + i] = xv[j] * s * wv[j];
    }
    for (int i = threadIdx.x + AR_IT * nb; i < dim; i += nb) out[base + i] = x[base + i] * s * w[i];
}
