// Prefill products on the tensor cores: mmt_T / mmgt_T / mmgw_T and the
// split-input mmx_T / mmgx_T. (After tiled_products.cuh.)

// ---------------------------------------------------------------------------
// Prefill products on the tensor cores, for the types whose prep8_T gives
// small integers q (|q| <= 128, exact in bf16) and per-chunk multipliers:
// Σ_j w_j·x_j = A·Σ q_j·x_j + B·Σ x_j over each 8-value chunk (tcq_T below
// turns prep8_T's (a, b) into (A, B)). Each input x is split into two bf16
// halves, hi = bf16(x) and lo = bf16(x − hi) (x − hi is exact in f32), so
// hi + lo keeps 16 of x's 24 significant bits (relative error <= 2^-17, far
// below the 2^-8 of 8-bit activations); the products q·hi and q·lo are exact
// and the tensor cores sum them in f32. Per group of chunks that share A:
// D = Σ (Q·Xhi + Q·Xlo) (mma.m16n8k16 bf16 over chunk pairs), then
// acc += A·D + B·Σx per (row, token).
//
// A block of 128 threads (WR × WT warps) computes BR = WR·16·MT rows × BT =
// WT·8·NT tokens; per step of 32 inputs it stages the weight tile's q as
// bf16 pairs with A and B, and the input tile's hi and lo pairs with the
// chunk sums, in shared memory (rows padded to 20 words: the fragment loads
// of a warp hit 32 different banks). n_in must be a multiple of 256.
// tab: the type's lookup table in shared memory (TCT_T bytes; IQ1_M only).
#define TCQ_PLAIN(T)                                                                        \
    __device__ __forceinline__ void tcq_##T(const uint8_t* blk, int c, W8& w,               \
                                            const uint64_t* tab) {                          \
        prep8_##T(blk, c, w);                                                               \
        w.b = 0.f;                                                                          \
    }
TCQ_PLAIN(Q8_0)
TCQ_PLAIN(Q6_K)
TCQ_PLAIN(IQ2_XS)
__device__ __forceinline__ void tcq_Q4_K(const uint8_t* blk, int c, W8& w, const uint64_t* tab) {
    prep8_Q4_K(blk, c, w);
    w.b = -w.b;
}
__device__ __forceinline__ void tcq_Q5_K(const uint8_t* blk, int c, W8& w, const uint64_t* tab) {
    prep8_Q5_K(blk, c, w);
    w.b = -w.b;
}
__device__ __forceinline__ void tcq_IQ1_M(const uint8_t* blk, int c, W8& w,
                                          const uint64_t* tab) {
    prep8_IQ1_M_g(blk, c, w, tab);
    w.b = w.a * w.b;
}
// Per type: chunks that share A (TCG_T: 2 or 4, the products of a group
// are summed before one scaling), and how B goes (TCB_T: 0 none, 1 one per
// group, 2 one per chunk).
#define TCG_Q8_0 4
#define TCB_Q8_0 0
#define TCG_Q4_K 4
#define TCB_Q4_K 1
#define TCG_Q5_K 4
#define TCB_Q5_K 1
#define TCG_Q6_K 2
#define TCB_Q6_K 0
#define TCG_IQ1_M 2
#define TCB_IQ1_M 2
#define TCG_IQ2_XS 2
// Bytes of the type's lookup table copied into shared memory (IQ1_M's grid:
// its random 8-byte lookups are cheaper there than through L1).
#define TCT_Q8_0 0
#define TCT_Q4_K 0
#define TCT_Q5_K 0
#define TCT_Q6_K 0
#define TCT_IQ1_M 16384
#define TCT_IQ2_XS 0
// Copy the TCT bytes of the type's table to shared memory at d.
template <int TT>
__device__ __forceinline__ void tc_load_table(uint64_t* d) {
    if (TT == 16384)
        for (int i = threadIdx.x; i < 2048; i += blockDim.x) d[i] = rl_iq1s_grid[i];
}
#define TCB_IQ2_XS 0
// The types with a tensor-core prefill kernel (mmt_T, mmgt_T, mmgw_T).
#define REDLITE_TC_TYPES(X) X(Q8_0) X(Q4_K) X(Q5_K) X(Q6_K) X(IQ1_M) X(IQ2_XS)

// Two floats as a bf16 pair (lo in the low half), rounded to nearest.
__device__ __forceinline__ uint32_t rl_bf2(float lo, float hi) {
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
// d = A(16×16, row) · B(16×8, col) + c in f32 (a: rows g and g+8 at columns
// 2·tig, +1, then the same rows 8 columns on; b: rows 2·tig, +1, then 8 on).
__device__ __forceinline__ void rl_mma_bf16_k16(float d[4], const uint32_t a[4],
                                                const uint32_t b[2], const float c[4]) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%10,%11,%12,%13};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]),
          "f"(c[2]), "f"(c[3]));
}

#define TC_PAD 20
template <int WR, int WT, int MT, int NT>
struct TcTile {
    static constexpr int BR = WR * 16 * MT, BT = WT * 8 * NT;
    uint32_t wq[BR][TC_PAD];  // q pairs of the rows' 32 inputs
    float wa[4][BR], wb[4][BR];
    uint32_t xh[BT][TC_PAD], xl[BT][TC_PAD];  // hi and lo pairs of the tokens' inputs
    float xs[4][BT];                          // the tokens' chunk sums
    const float* xr[BT];                      // each token's input row (null: none)
    float* yr[BT];                            // each token's output row
};
// The weights come in steps of 256 inputs (RB bytes of a row: one block of
// the 256-value types, 8 of Q8_0), copied with cp.async into one of two
// shared buffers while the tensor cores work on the other; a row's bytes
// sit in a window of SW bytes that starts on the 16-byte boundary below them
// (so a block keeps its alignment; rows may end up to 15 bytes past their
// last block, within the 64 bytes of padding behind every weight buffer).
#define TC_RB(QK, BS) ((BS) * (256 / (QK)))
#define TC_SW(QK, BS) (16 * ((TC_RB(QK, BS) + 30) / 16))
// Dynamic shared memory of a launch: the tile, then the two weight buffers
// (the host's `tc_smem_bytes` computes the same).
#define TC_SMEM(TILE, QK, BS, TT) (sizeof(TILE) + 2 * TILE::BR * TC_SW(QK, BS) + (TT))

// One tile: rows r0 .. r0 + BR of the matrix at Wb against the tokens whose
// rows t.xr / t.yr hold (set, and synchronised, by the caller), the first
// nv of them real (the tensor cores skip 8-token groups past them); raw: the
// two weight buffers. n_in must be a multiple of 256.
template <int WR, int WT, int MT, int NT, void (*TCQ)(const uint8_t*, int, W8&, const uint64_t*),
          int QK, int BS,
          int G, int BM>
__device__ __forceinline__ void mmt_tile(TcTile<WR, WT, MT, NT>& t, uint8_t* raw,
                                         const uint8_t* Wb, u64 row_bytes, int n_in, int n_out,
                                         int r0, int nv, const uint64_t* tab) {
    constexpr int BR = WR * 16 * MT, BT = WT * 8 * NT, NTH = WR * WT * 32;
    constexpr int RB = TC_RB(QK, BS), SW = TC_SW(QK, BS), NP = SW / 16, CPB = QK / 8;
    constexpr int XI = (BT * 4 + NTH - 1) / NTH;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, tig = lane & 3;
    const int wr0 = (warp / WT) * 16 * MT, wt0 = (warp % WT) * 8 * NT;
    const int nraw = n_in / 256;
    float acc[MT][NT][4];
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int i = 0; i < 4; i++) acc[m][n][i] = 0.f;
    // Where row `row`'s bytes of weight step rr start.
    auto wsrc = [&](int row, int rr) -> const uint8_t* {
        return Wb + (u64)min(r0 + row, n_out - 1) * row_bytes + (u64)rr * RB;
    };
    auto issue = [&](int rr) {
        uint8_t* dst = raw + (rr & 1) * BR * SW;
        for (int it = tid; it < BR * NP; it += NTH) {
            const int row = it / NP, pc = it - row * NP;
            const u64 p = (u64)wsrc(row, rr);
            // Only the pieces that hold the row's bytes (at most 15 past them).
            if (16 * pc >= (int)(p & 15) + RB) continue;
            const uint4* src = (const uint4*)(p & ~(u64)15) + pc;
            const unsigned sa = (unsigned)__cvta_generic_to_shared(dst + row * SW + 16 * pc);
            asm volatile(RL_CP_OP " [%0], [%1], 16;\n" ::"r"(sa), "l"(src));
        }
        asm volatile("cp.async.commit_group;\n" ::);
    };
    float4 xa[XI], xb[XI];
    auto load_x = [&](int k0) {
#pragma unroll
        for (int j = 0; j < XI; j++) {
            const int it = tid + j * NTH;
            const float* xp = it < BT * 4 ? t.xr[it >> 2] : nullptr;
            if (xp) {
                xa[j] = *(const float4*)(xp + k0 + 8 * (it & 3));
                xb[j] = *(const float4*)(xp + k0 + 8 * (it & 3) + 4);
            } else {
                xa[j] = xb[j] = make_float4(0.f, 0.f, 0.f, 0.f);
            }
        }
    };
    issue(0);
    load_x(0);
    for (int rr = 0; rr < nraw; rr++) {
        if (rr + 1 < nraw) {
            issue(rr + 1);
            asm volatile("cp.async.wait_group 1;\n" ::);
        } else {
            asm volatile("cp.async.wait_group 0;\n" ::);
        }
        __syncthreads();
        const uint8_t* buf = raw + (rr & 1) * BR * SW;
        for (int s = 0; s < 8; s++) {
            const int k0 = 256 * rr + 32 * s;
            for (int it = tid; it < BR * 4; it += NTH) {
                const int row = it >> 2, c = it & 3;
                const int shift = (int)((u64)wsrc(row, rr) & 15);
                const int ch = 4 * s + c;
                const int b = ch / CPB;
                W8 w;
                TCQ(buf + row * SW + shift + b * BS, ch - b * CPB, w, tab);
                uint4 p;
                p.x = rl_bf2(w.q[0], w.q[1]);
                p.y = rl_bf2(w.q[2], w.q[3]);
                p.z = rl_bf2(w.q[4], w.q[5]);
                p.w = rl_bf2(w.q[6], w.q[7]);
                *(uint4*)&t.wq[row][4 * c] = p;
                t.wa[c][row] = w.a;
                t.wb[c][row] = w.b;
            }
#pragma unroll
            for (int j = 0; j < XI; j++) {
                const int it = tid + j * NTH;
                if (it < BT * 4) {
                    const int tok = it >> 2, c = it & 3;
                    const float v[8] = {xa[j].x, xa[j].y, xa[j].z, xa[j].w,
                                        xb[j].x, xb[j].y, xb[j].z, xb[j].w};
                    float sum = 0.f;
                    uint32_t hp[4], lp[4];
#pragma unroll
                    for (int q = 0; q < 4; q++) {
                        sum += v[2 * q];
                        sum += v[2 * q + 1];
                        hp[q] = rl_bf2(v[2 * q], v[2 * q + 1]);
                        const float h0 = __uint_as_float(hp[q] << 16);
                        const float h1 = __uint_as_float(hp[q] & 0xffff0000u);
                        lp[q] = rl_bf2(v[2 * q] - h0, v[2 * q + 1] - h1);
                    }
                    *(uint4*)&t.xh[tok][4 * c] = make_uint4(hp[0], hp[1], hp[2], hp[3]);
                    *(uint4*)&t.xl[tok][4 * c] = make_uint4(lp[0], lp[1], lp[2], lp[3]);
                    t.xs[c][tok] = sum;
                }
            }
            if (k0 + 32 < n_in) load_x(k0 + 32);
            __syncthreads();
            // Groups of G chunks share A (and, BM = 1, B): their products
            // are summed by the tensor cores (m16n8k16 over chunk pairs)
            // before one scaling.
#pragma unroll
            for (int c0 = 0; c0 < 4; c0 += G) {
                uint32_t af[MT][G / 2][4];
                float am[MT][2], bm[MT][BM == 2 ? G : 1][2];
#pragma unroll
                for (int m = 0; m < MT; m++) {
                    const int r = wr0 + 16 * m + g;
#pragma unroll
                    for (int p = 0; p < G / 2; p++) {
                        const int c = c0 + 2 * p;
                        af[m][p][0] = t.wq[r][4 * c + tig];
                        af[m][p][1] = t.wq[r + 8][4 * c + tig];
                        af[m][p][2] = t.wq[r][4 * c + 4 + tig];
                        af[m][p][3] = t.wq[r + 8][4 * c + 4 + tig];
                    }
                    am[m][0] = t.wa[c0][r];
                    am[m][1] = t.wa[c0][r + 8];
#pragma unroll
                    for (int cc = 0; cc < (BM == 2 ? G : 1); cc++) {
                        bm[m][cc][0] = BM ? t.wb[c0 + cc][r] : 0.f;
                        bm[m][cc][1] = BM ? t.wb[c0 + cc][r + 8] : 0.f;
                    }
                }
#pragma unroll
                for (int n = 0; n < NT; n++) {
                    const int tk = wt0 + 8 * n;
                    if (tk >= nv) break;
                    uint32_t bh[G / 2][2], bl[G / 2][2];
#pragma unroll
                    for (int p = 0; p < G / 2; p++) {
                        const int c = c0 + 2 * p;
                        bh[p][0] = t.xh[tk + g][4 * c + tig];
                        bh[p][1] = t.xh[tk + g][4 * c + 4 + tig];
                        bl[p][0] = t.xl[tk + g][4 * c + tig];
                        bl[p][1] = t.xl[tk + g][4 * c + 4 + tig];
                    }
                    float2 sx[BM == 2 ? G : 1];
                    if (BM == 1) {
                        sx[0] = make_float2(0.f, 0.f);
#pragma unroll
                        for (int cc = 0; cc < G; cc++) {
                            const float2 v = *(const float2*)&t.xs[c0 + cc][tk + 2 * tig];
                            sx[0].x += v.x;
                            sx[0].y += v.y;
                        }
                    } else if (BM == 2) {
#pragma unroll
                        for (int cc = 0; cc < G; cc++)
                            sx[cc] = *(const float2*)&t.xs[c0 + cc][tk + 2 * tig];
                    }
#pragma unroll
                    for (int m = 0; m < MT; m++) {
                        float d[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
                        for (int p = 0; p < G / 2; p++) {
                            rl_mma_bf16_k16(d, af[m][p], bh[p], d);
                            rl_mma_bf16_k16(d, af[m][p], bl[p], d);
                        }
                        float* ac = acc[m][n];
                        if (BM) {
#pragma unroll
                            for (int cc = 0; cc < (BM == 2 ? G : 1); cc++) {
                                ac[0] = fmaf(bm[m][cc][0], sx[cc].x, ac[0]);
                                ac[1] = fmaf(bm[m][cc][0], sx[cc].y, ac[1]);
                                ac[2] = fmaf(bm[m][cc][1], sx[cc].x, ac[2]);
                                ac[3] = fmaf(bm[m][cc][1], sx[cc].y, ac[3]);
                            }
                        }
                        ac[0] = fmaf(am[m][0], d[0], ac[0]);
                        ac[1] = fmaf(am[m][0], d[1], ac[1]);
                        ac[2] = fmaf(am[m][1], d[2], ac[2]);
                        ac[3] = fmaf(am[m][1], d[3], ac[3]);
                    }
                }
            }
            __syncthreads();
        }
    }
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int row = r0 + wr0 + 16 * m + g + 8 * (i >> 1);
                float* yp = t.yr[wt0 + 8 * n + 2 * tig + (i & 1)];
                if (row < n_out && yp) yp[row] = acc[m][n][i];
            }
}

// The launch must give the kernel TC_SMEM bytes of dynamic shared memory
// (the host computes the same sum); with less it stops at once.
__device__ __forceinline__ void tc_check_smem(unsigned need) {
    unsigned have;
    asm("mov.u32 %0, %%dynamic_smem_size;\n" : "=r"(have));
    if (have < need) __trap();
}

// A tensor-core kernel's start: its dynamic shared memory holds the tile,
// then the two weight buffers, then the type's lookup table (TT bytes,
// loaded here); returns the table.
template <class Tile, int QK, int BS, int TT>
__device__ __forceinline__ uint64_t* tc_enter(uint8_t* smem) {
    static_assert(sizeof(Tile) % 16 == 0, "weight buffers 16-byte aligned");
    tc_check_smem(TC_SMEM(Tile, QK, BS, TT));
    uint64_t* tab = (uint64_t*)(smem + sizeof(Tile) + 2 * Tile::BR * TC_SW(QK, BS));
    tc_load_table<TT>(tab);
    return tab;
}

// Dense: as mm_T (same arguments), a block of 64 rows × 64 tokens.
#define MMT_D 2, 2, 2, 4
// Grouped experts: as mmg_T, a block of 64 rows × 16 of the expert's slots
// at a time (mmgt_T), or × 64 (mmgw_T: for passes with many slots per
// expert, each expert's weights unpacked once per 64 slots instead of per 16;
// warps past the last slot skip the tensor-core work).
#define MMT_G 4, 1, 1, 2
#define MMT_W 2, 2, 2, 4
#define DEF_MMT(T)                                                                          \
    extern "C" __global__ void __launch_bounds__(128)                                       \
        mmt_##T(const uint8_t* __restrict__ Wb, u64 row_bytes, int n_in, int n_out,         \
                const float* __restrict__ x, int ldx, float* __restrict__ y, int ldy,       \
                int n_tok) {                                                                \
        typedef TcTile<MMT_D> Tile;                                                         \
        extern __shared__ __align__(16) uint8_t tc_smem[];                                  \
        uint64_t* tab = tc_enter<Tile, QK_##T, BS_##T, TCT_##T>(tc_smem);                   \
        Tile& t = *(Tile*)tc_smem;                                                          \
        RL_PDL_ENTER();                                                                     \
        const int t0 = blockIdx.y * Tile::BT;                                               \
        for (int i = threadIdx.x; i < Tile::BT; i += blockDim.x) {                          \
            const bool ok = t0 + i < n_tok;                                                 \
            t.xr[i] = ok ? x + (u64)(t0 + i) * ldx : nullptr;                               \
            t.yr[i] = ok ? y + (u64)(t0 + i) * ldy : nullptr;                               \
        }                                                                                   \
        __syncthreads();                                                                    \
        mmt_tile<MMT_D, tcq_##T, QK_##T, BS_##T, TCG_##T, TCB_##T>(                         \
            t, tc_smem + sizeof(Tile), Wb, row_bytes, n_in, n_out, blockIdx.x * Tile::BR,   \
            min(n_tok - t0, Tile::BT), tab);                                                \
    }                                                                                       \
    DEF_MMGT(mmgt, T, MMT_G)                                                                \
    DEF_MMGT(mmgw, T, MMT_W)
#define DEF_MMGT(NAME, T, CFG)                                                              \
    extern "C" __global__ void __launch_bounds__(128)                                       \
        NAME##_##T(const uint8_t* __restrict__ W, u64 row_bytes, int n_in, int n_out,         \
                 u64 w_zstride, const float* __restrict__ x, int x_div, u64 x_zstride,      \
                 float* __restrict__ y, u64 y_zstride, const int* __restrict__ counts,      \
                 const int* __restrict__ offsets, const int* __restrict__ perm) {           \
        typedef TcTile<CFG> Tile;                                                           \
        extern __shared__ __align__(16) uint8_t tc_smem[];                                  \
        uint64_t* tab = tc_enter<Tile, QK_##T, BS_##T, TCT_##T>(tc_smem);                   \
        Tile& t = *(Tile*)tc_smem;                                                          \
        RL_PDL_ENTER();                                                                     \
        const int e = blockIdx.z;                                                           \
        const int cnt = counts[e];                                                          \
        if (cnt == 0) return;                                                               \
        const int off = offsets[e];                                                         \
        const uint8_t* Wb = mat_at(W, (u64)e, w_zstride);                                  \
        for (int t0 = 0; t0 < cnt; t0 += Tile::BT) {                                        \
            if (t0) __syncthreads(); /* the last tile's stores read t.yr */                 \
            for (int i = threadIdx.x; i < Tile::BT; i += blockDim.x) {                      \
                const bool ok = t0 + i < cnt;                                               \
                const int q = ok ? perm[off + t0 + i] : 0;                                  \
                t.xr[i] = ok ? x + (u64)(q / x_div) * x_zstride : nullptr;                  \
                t.yr[i] = ok ? y + (u64)q * y_zstride : nullptr;                            \
            }                                                                               \
            __syncthreads();                                                                \
            mmt_tile<CFG, tcq_##T, QK_##T, BS_##T, TCG_##T, TCB_##T>(                       \
                t, tc_smem + sizeof(Tile), Wb, row_bytes, n_in, n_out,                      \
                blockIdx.x * Tile::BR, min(cnt - t0, Tile::BT), tab);                       \
        }                                                                                   \
    }
REDLITE_TC_TYPES(DEF_MMT)

// ---------------------------------------------------------------------------
// Prefill products on the tensor cores, second form (mmx_T dense, mmgx_T
// grouped; small grids, short grouped rows and devices short of shared
// memory keep mmt_T / mmgt_T / mmgw_T above). The same
// numbers as those (q exact in bf16, x = hi + lo, D = Σ Q·Xhi + Q·Xlo in f32,
// acc += A·D + B·Σx), organised for more tensor-core work per instruction
// and per barrier:
// - tc_split turns the product's inputs into bf16 hi and lo rows and f32
//   sums over 32 values once, in device memory (4.125 bytes a value, about
//   what the f32 inputs take), instead of in every row-tile block;
// - a block of 256 threads (8 warps) works on BR = 128 or 256 rows × BT =
//   128 or 64 tokens in steps of 64 inputs, one barrier a step: while the
//   tensor cores take step s from shared buffers (the weights' q as bf16,
//   the inputs' hi and lo, fragments read with ldmatrix), the threads
//   unpack step s + 1's weights into the other weight buffer, interleaved
//   with the products, and cp.async brings step s + 2's inputs (three input
//   buffers); the raw weights come per 256 inputs, two buffers deep;
// - the per-type unpackers (txd_T) give 8 q as 4 bf16 pairs with the
//   group's A (and B); IQ1_M folds its 3-bit scale and its delta into q
//   (q = (2s + 1)·(8·grid ± 1), |q| <= 135, exact in bf16) so that A = d/8
//   holds for the whole 256-value block and B is gone, and IQ1_M / IQ2_XS
//   read their grids as bf16 from shared memory.
// Rows of staged tiles: 64 inputs + 8 of padding (144 bytes: the eight row
// addresses of an ldmatrix phase fall in distinct bank groups).
#define TX_KS 64
#define TX_LD 72

// The inputs' split (rows × n_in, ldx apart): hi and lo bf16 rows of n_in
// values, and per 32 values their f32 sum (((s0 + s1) + s2) + s3 of the
// chunks' sums, each from zero in input order, as mmt_tile sums them).
// One thread per 8 values; n_in must be a multiple of 256.
extern "C" __global__ void __launch_bounds__(256)
    tc_split(const float* __restrict__ x, int ldx, int n_in, int rows,
             uint32_t* __restrict__ hi, uint32_t* __restrict__ lo, float* __restrict__ sums) {
    RL_PDL_ENTER();
    const int per = n_in / 8;
    const u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    const int r = (int)(i / (u64)per), c = (int)(i - (u64)r * per);
    const bool ok = r < rows;
    float v[8];
    if (ok) {
        const float4 a = *(const float4*)(x + (u64)r * ldx + 8 * c);
        const float4 b = *(const float4*)(x + (u64)r * ldx + 8 * c + 4);
        v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
        v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
    } else {
#pragma unroll
        for (int j = 0; j < 8; j++) v[j] = 0.f;
    }
    float sum = 0.f;
    uint32_t hp[4], lp[4];
#pragma unroll
    for (int q = 0; q < 4; q++) {
        sum += v[2 * q];
        sum += v[2 * q + 1];
        hp[q] = rl_bf2(v[2 * q], v[2 * q + 1]);
        const float h0 = __uint_as_float(hp[q] << 16);
        const float h1 = __uint_as_float(hp[q] & 0xffff0000u);
        lp[q] = rl_bf2(v[2 * q] - h0, v[2 * q + 1] - h1);
    }
    // Every warp is whole (rows · per is a multiple of 32), in range or not.
    const float s1 = __shfl_down_sync(FULL, sum, 1);
    const float s2 = __shfl_down_sync(FULL, sum, 2);
    const float s3 = __shfl_down_sync(FULL, sum, 3);
    if (!ok) return;
    const u64 o = (u64)r * (n_in / 2) + 4 * c;
    *(uint4*)(hi + o) = make_uint4(hp[0], hp[1], hp[2], hp[3]);
    *(uint4*)(lo + o) = make_uint4(lp[0], lp[1], lp[2], lp[3]);
    if ((c & 3) == 0) sums[(u64)r * (n_in / 32) + c / 4] = ((sum + s1) + s2) + s3;
}

__device__ __forceinline__ void rl_ldsm4(uint32_t r[4], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
__device__ __forceinline__ uint32_t rl_fma_bf2(uint32_t a, uint32_t b, uint32_t c) {
    uint32_t d;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
__device__ __forceinline__ uint4 rl_pack_q(const W8& w) {
    return make_uint4(rl_bf2(w.q[0], w.q[1]), rl_bf2(w.q[2], w.q[3]), rl_bf2(w.q[4], w.q[5]),
                      rl_bf2(w.q[6], w.q[7]));
}

// Unpackers: dec(row, c, p, a, b, tab) gives chunk c (0 .. 31) of the 256
// inputs whose bytes start at row: q as bf16 pairs and the multipliers
// (Σ w·x = a·Σ q·x + b·Σx), the same for every chunk of a group of GA
// inputs (B: BM = 1, once per 32); TT bytes of table in shared memory,
// filled by load_tab (every thread of the block takes part).
#define TXD_PLAIN(T, GAV)                                                                   \
    struct txd_##T {                                                                        \
        static constexpr int GA = GAV, BM = TCB_##T ? 1 : 0, TT = 0;                        \
        static __device__ __forceinline__ void load_tab(uint8_t*) {}                        \
        static __device__ __forceinline__ void dec(const uint8_t* row, int c, uint4& p,     \
                                                   float& a, float& b, const uint8_t*) {    \
            const int bk = c / (QK_##T / 8);                                                \
            W8 w;                                                                           \
            tcq_##T(row + bk * BS_##T, c - bk * (QK_##T / 8), w, nullptr);                  \
            p = rl_pack_q(w);                                                               \
            a = w.a;                                                                        \
            b = w.b;                                                                        \
        }                                                                                   \
    };
TXD_PLAIN(Q8_0, 32)
TXD_PLAIN(Q4_K, 32)
TXD_PLAIN(Q5_K, 32)
TXD_PLAIN(Q6_K, 16)
// IQ1_M: w = d·(2s + 1)·(grid + δ), δ = ±1/8, as (d/8)·q with q = (2s+1)·(8·grid ± 1)
// (one fused bf16 multiply-add per pair: products and sums are small
// integers, exact); the grid as bf16 (2048 × 16 bytes).
struct txd_IQ1_M {
    static constexpr int GA = 64, BM = 0, TT = 32768;
    static __device__ __forceinline__ void load_tab(uint8_t* t) {
        for (int i = threadIdx.x; i < 2048; i += blockDim.x) {
            const uint64_t g = rl_iq1s_grid[i];
            uint32_t p[4];
#pragma unroll
            for (int j = 0; j < 4; j++)
                p[j] = rl_bf2((float)(int8_t)(g >> (16 * j)), (float)(int8_t)(g >> (16 * j + 8)));
            ((uint4*)t)[i] = make_uint4(p[0], p[1], p[2], p[3]);
        }
    }
    static __device__ __forceinline__ void dec(const uint8_t* blk, int c, uint4& p, float& a,
                                               float& b, const uint8_t* t) {
        const uint32_t s01 = rl_w32(blk + 48), s23 = rl_w32(blk + 52);
        const uint32_t s0 = s01 & 0xffffu, s1 = s01 >> 16, s2 = s23 & 0xffffu, s3 = s23 >> 16;
        a = rl_f16_to_f32(rl_iq1m_dbits(s0, s1, s2, s3)) * 0.125f;
        b = 0.f;
        const int ib = c >> 2;
        const int l = c & 3;
        const uint32_t sw = (ib >> 1) == 0 ? s0 : (ib >> 1) == 1 ? s1 : (ib >> 1) == 2 ? s2 : s3;
        const float m = (float)(2 * ((sw >> (6 * (ib & 1) + 3 * (l >> 1))) & 7) + 1);
        const uint32_t nib = (uint32_t)blk[32 + (c >> 1)] >> (4 * (c & 1));
        const uint32_t idx = (uint32_t)blk[c] | ((nib & 7) << 8);
        const uint32_t m8 = rl_bf2(8.f * m, 8.f * m);
        const float dl = (nib & 8) ? -m : m;
        const uint32_t dd = rl_bf2(dl, dl);
        const uint4 g = ((const uint4*)t)[idx];
        p = make_uint4(rl_fma_bf2(g.x, m8, dd), rl_fma_bf2(g.y, m8, dd), rl_fma_bf2(g.z, m8, dd),
                       rl_fma_bf2(g.w, m8, dd));
    }
};
// IQ2_XS: the grid as bf16 (512 × 16 bytes), then the 128 sign patterns as
// masks of the bf16 sign bits (128 × 16 bytes).
struct txd_IQ2_XS {
    static constexpr int GA = 16, BM = 0, TT = 8192 + 2048;
    static __device__ __forceinline__ void load_tab(uint8_t* t) {
        for (int i = threadIdx.x; i < 512 + 128; i += blockDim.x) {
            uint32_t p[4];
            if (i < 512) {
                const uint64_t g = rl_iq2xs_grid[i];
#pragma unroll
                for (int j = 0; j < 4; j++)
                    p[j] = rl_bf2((float)(uint32_t)((g >> (16 * j)) & 255),
                                  (float)(uint32_t)((g >> (16 * j + 8)) & 255));
            } else {
                const uint32_t s = rl_ksigns_iq2xs[i - 512];
#pragma unroll
                for (int j = 0; j < 4; j++)
                    p[j] = (((s >> (2 * j)) & 1u) << 15) | (((s >> (2 * j + 1)) & 1u) << 31);
            }
            ((uint4*)t)[i] = make_uint4(p[0], p[1], p[2], p[3]);
        }
    }
    static __device__ __forceinline__ void dec(const uint8_t* blk, int c, uint4& p, float& a,
                                               float& b, const uint8_t* t) {
        const float d = rl_ld_f16(blk);
        const int ib = c >> 2;
        const int l = c & 3;
        const uint32_t sc = (blk[66 + ib] >> (4 * (l >> 1))) & 15;
        a = d * (0.5f + (float)sc) * 0.25f;
        b = 0.f;
        const uint32_t q = rl_ld_u16(blk + 2 + 2 * c);
        const uint4 g = ((const uint4*)t)[q & 511];
        const uint4 s = ((const uint4*)t)[512 + (q >> 9)];
        p = make_uint4(g.x ^ s.x, g.y ^ s.y, g.z ^ s.z, g.w ^ s.w);
    }
};

// Shared memory of a block (BR rows × BT tokens, type T): byte offsets of
// its parts, the end being the launch's dynamic shared memory (the host's
// `tcx_smem_bytes` computes the same).
template <int BR, int BT, int GA, int BM, int SW, int TT>
struct TxMem {
    static constexpr int WQ = 0;                                // [2][BR][TX_LD] bf16
    static constexpr int XH = WQ + 2 * BR * TX_LD * 2;          // [3][BT][TX_LD] bf16
    static constexpr int XL = XH + 3 * BT * TX_LD * 2;          // [3][BT][TX_LD] bf16
    static constexpr int WA = XL + 3 * BT * TX_LD * 2;          // [2][KS/GA][BR] f32
    static constexpr int WB = WA + 2 * (TX_KS / GA) * BR * 4;   // [2][2][BR] f32 (BM)
    static constexpr int XS = WB + (BM ? 2 * 2 * BR * 4 : 0);   // [3][2][BT] f32 (BM)
    static constexpr int YR = XS + (BM ? 3 * 2 * BT * 4 : 0);   // [BT] output rows
    static constexpr int XR = YR + BT * 8;                      // [BT] split rows (-1: none)
    static constexpr int RAW = (XR + BT * 4 + 15) / 16 * 16;    // [2][BR][SW] raw weights
    static constexpr int TAB = RAW + 2 * BR * SW;               // the unpacker's table
    static constexpr int END = TAB + TT;
};

// One tile: rows r0 .. r0 + BR of the matrix at Wb against the tokens
// whose split rows and output rows the caller has put in the XR and YR
// parts of smem (and synchronised), the first nv of them real; hi, lo,
// sums: the split (n_in values a row). n_in must be a multiple of 256.
template <int WR, int WT, int MT, int NT, class D, int QK, int BS>
__device__ __forceinline__ void mmx_tile(uint8_t* smem, const uint8_t* Wb, u64 row_bytes,
                                         int n_in, int n_out, int r0, int nv,
                                         const uint16_t* __restrict__ hi,
                                         const uint16_t* __restrict__ lo,
                                         const float* __restrict__ sums) {
    constexpr int BR = WR * 16 * MT, BT = WT * 8 * NT, NTH = WR * WT * 32;
    constexpr int RB = TC_RB(QK, BS), SW = TC_SW(QK, BS), NP = SW / 16;
    constexpr int GA = D::GA, BM = D::BM, NG = TX_KS / GA, KG = GA / 16;
    typedef TxMem<BR, BT, GA, BM, SW, D::TT> L;
    constexpr int TPR = NTH / BR, CPT = 8 / TPR;  // unpacking: threads a row, chunks a thread
    static_assert(NTH % BR == 0 && CPT % 4 == 0, "unpacking layout");
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, tig = lane & 3;
    const int wr0 = (warp / WT) * 16 * MT, wt0 = (warp % WT) * 8 * NT;
    const int nstep = n_in / TX_KS;
    const unsigned sbase = (unsigned)__cvta_generic_to_shared(smem);
    const int* xrow = (const int*)(smem + L::XR);
    float* const* yr = (float* const*)(smem + L::YR);
    uint8_t* raw = smem + L::RAW;
    const uint8_t* tab = smem + L::TAB;
    // This thread's unpacking: row ur, chunks uc .. uc + CPT of each step.
    const int ur = tid / TPR, uc = (tid % TPR) * CPT;
    const uint8_t* urow = Wb + (u64)min(r0 + ur, n_out - 1) * row_bytes;

    auto issue_raw = [&](int rr) {
        uint8_t* dst = raw + (rr & 1) * BR * SW;
        for (int it = tid; it < BR * NP; it += NTH) {
            const int row = it / NP, pc = it - row * NP;
            const u64 p = (u64)(Wb + (u64)min(r0 + row, n_out - 1) * row_bytes + (u64)rr * RB);
            if (16 * pc >= (int)(p & 15) + RB) continue;
            const uint4* src = (const uint4*)(p & ~(u64)15) + pc;
            const unsigned sa = (unsigned)__cvta_generic_to_shared(dst + row * SW + 16 * pc);
            asm volatile(RL_CP_OP " [%0], [%1], 16;\n" ::"r"(sa), "l"(src));
        }
    };
    // Step s's inputs: per token 8 + 8 pieces of 16 bytes (hi, lo), and
    // (BM) its two 32-value sums.
    auto issue_x = [&](int s) {
        const int b = s % 3;
        for (int it = tid; it < BT * 16; it += NTH) {
            const int tok = it >> 4, pc = it & 15;
            const int xr = xrow[tok];
            if (xr < 0) continue;
            const uint16_t* src = (pc < 8 ? hi : lo) + (u64)xr * n_in + s * TX_KS + 8 * (pc & 7);
            const unsigned sa = sbase + (pc < 8 ? L::XH : L::XL) +
                                ((b * BT + tok) * TX_LD + 8 * (pc & 7)) * 2;
            asm volatile(RL_CP_OP " [%0], [%1], 16;\n" ::"r"(sa), "l"(src));
        }
        if (BM) {
            for (int it = tid; it < BT * 2; it += NTH) {
                const int tok = it >> 1, j = it & 1;
                const int xr = xrow[tok];
                if (xr < 0) continue;
                const float* src = sums + (u64)xr * (n_in / 32) + 2 * s + j;
                const unsigned sa = sbase + L::XS + ((b * 2 + j) * BT + tok) * 4;
                asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(sa), "l"(src));
            }
        }
    };
    // Unpack part kk (of 4) of step s's weights (from raw buffer (s / 4) & 1)
    // into buffer s & 1.
    auto unpack = [&](int s, int kk) {
        const int b = s & 1, rr = s >> 2;
        const u64 p = (u64)(urow + (u64)rr * RB);
        const uint8_t* src = raw + (rr & 1) * BR * SW + ur * SW + (int)(p & 15);
        uint8_t* wq = smem + L::WQ + ((b * BR + ur) * TX_LD) * 2;
        float* wa = (float*)(smem + L::WA) + b * NG * BR;
        float* wb = (float*)(smem + L::WB) + b * 2 * BR;
#pragma unroll
        for (int j = kk * CPT / 4; j < (kk + 1) * CPT / 4; j++) {
            const int cs = uc + j;            // chunk of the step (0 .. 7)
            const int c = 8 * (s & 3) + cs;   // chunk of the 256 inputs
            uint4 q;
            float a, bb;
            D::dec(src, c, q, a, bb, tab);
            *(uint4*)(wq + 16 * cs) = q;
            if ((8 * cs) % GA == 0) {
                wa[(8 * cs / GA) * BR + ur] = a;
                if (BM && (cs & 3) == 0) wb[(cs >> 2) * BR + ur] = bb;
            }
        }
    };

    float acc[MT][NT][4];
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int i = 0; i < 4; i++) acc[m][n][i] = 0.f;

    // Prologue: raw blocks 0 (and 1), steps 0 and 1's inputs; step 0 unpacked.
    issue_raw(0);
    if (nstep > 4) issue_raw(1);
    issue_x(0);
    if (nstep > 1) issue_x(1);
    asm volatile("cp.async.commit_group;\n" ::);
    asm volatile("cp.async.wait_group 0;\n" ::);
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < 4; kk++) unpack(0, kk);
    __syncthreads();
    // Step s: one commit group (step s + 2's inputs, and every fourth step
    // a raw block), waited for two steps on; the weights of step s + 1
    // unpacked a quarter before each quarter of step s's products (after
    // the last step into the unused buffer, from stale bytes: harmless, and
    // it keeps the step free of branches).
    for (int s = 0; s < nstep; s++) {
        const int b = s & 1, bx3 = s % 3;
        if (s + 2 < nstep) issue_x(s + 2);
        // Raw block rb + 1 once block rb - 1's last step is unpacked.
        if (((s + 1) & 3) == 0 && (s + 1) / 4 + 1 < nstep / 4) issue_raw((s + 1) / 4 + 1);
        asm volatile("cp.async.commit_group;\n" ::);
        // The tensor cores on step s.
        float d[MT][NT][4];
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
            unpack(s + 1, kk);
            if (kk % KG == 0) {
#pragma unroll
                for (int m = 0; m < MT; m++)
#pragma unroll
                    for (int n = 0; n < NT; n++)
#pragma unroll
                        for (int i = 0; i < 4; i++) d[m][n][i] = 0.f;
            }
            uint32_t af[MT][4];
#pragma unroll
            for (int m = 0; m < MT; m++)
                rl_ldsm4(af[m], sbase + L::WQ +
                                    ((b * BR + wr0 + 16 * m + (lane & 15)) * TX_LD + 16 * kk +
                                     8 * (lane >> 4)) * 2);
#pragma unroll
            for (int n = 0; n < NT; n++) {
                if (wt0 + 8 * n >= nv) break;
                uint32_t bx[4];  // hi k0-7, hi k8-15, lo k0-7, lo k8-15
                const int j = lane >> 3;
                rl_ldsm4(bx, sbase + (j < 2 ? L::XH : L::XL) +
                                 ((bx3 * BT + wt0 + 8 * n + (lane & 7)) * TX_LD + 16 * kk +
                                  8 * (j & 1)) * 2);
                const uint32_t bh[2] = {bx[0], bx[1]}, bl[2] = {bx[2], bx[3]};
#pragma unroll
                for (int m = 0; m < MT; m++) {
                    rl_mma_bf16_k16(d[m][n], af[m], bh, d[m][n]);
                    rl_mma_bf16_k16(d[m][n], af[m], bl, d[m][n]);
                }
            }
            if (kk % KG == KG - 1) {
                // acc += B·Σx, then A·D, for the group ending here.
                const int grp = kk / KG;
                const float* wa = (const float*)(smem + L::WA) + (b * NG + grp) * BR;
                const float* wb = (const float*)(smem + L::WB) + (b * 2 + grp) * BR;
                const float* xs = (const float*)(smem + L::XS) + (bx3 * 2 + grp) * BT;
#pragma unroll
                for (int m = 0; m < MT; m++) {
                    const int r = wr0 + 16 * m + g;
                    const float a0 = wa[r], a1 = wa[r + 8];
                    const float b0 = BM ? wb[r] : 0.f, b1 = BM ? wb[r + 8] : 0.f;
#pragma unroll
                    for (int n = 0; n < NT; n++) {
                        if (wt0 + 8 * n >= nv) break;
                        float* ac = acc[m][n];
                        if (BM) {
                            const float2 sx = *(const float2*)&xs[wt0 + 8 * n + 2 * tig];
                            ac[0] = fmaf(b0, sx.x, ac[0]);
                            ac[1] = fmaf(b0, sx.y, ac[1]);
                            ac[2] = fmaf(b1, sx.x, ac[2]);
                            ac[3] = fmaf(b1, sx.y, ac[3]);
                        }
                        ac[0] = fmaf(a0, d[m][n][0], ac[0]);
                        ac[1] = fmaf(a0, d[m][n][1], ac[1]);
                        ac[2] = fmaf(a1, d[m][n][2], ac[2]);
                        ac[3] = fmaf(a1, d[m][n][3], ac[3]);
                    }
                }
            }
        }
        asm volatile("cp.async.wait_group 1;\n" ::);
        __syncthreads();
    }
    asm volatile("cp.async.wait_group 0;\n" ::);
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int row = r0 + wr0 + 16 * m + g + 8 * (i >> 1);
                float* yp = yr[wt0 + 8 * n + 2 * tig + (i & 1)];
                if (row < n_out && yp) yp[row] = acc[m][n][i];
            }
}

// Dense (mmx_T): as mm_T, and the split of x (tc_split over the n_tok
// rows); a block of 128 rows × 128 tokens.
#define MMX_D 2, 4, 4, 4
// Grouped (mmgx_T): as mmg_T, and the split of the rows that the slots
// read (row q / x_div for slot q); a block of 256 rows × 64 of the expert's
// slots at a time, every warp on all of them (a warp's 32 rows × 64 slots).
#define MMX_G 8, 1, 2, 8
template <int WR, int WT, int MT, int NT, class D, int QK, int BS>
__device__ __forceinline__ uint8_t* tx_enter(uint8_t* smem) {
    constexpr int BR = WR * 16 * MT, BT = WT * 8 * NT;
    typedef TxMem<BR, BT, D::GA, D::BM, TC_SW(QK, BS), D::TT> L;
    tc_check_smem(L::END);
    D::load_tab(smem + L::TAB);
    return smem;
}
#define DEF_MMX(T)                                                                          \
    extern "C" __global__ void __launch_bounds__(256, 1)                                    \
        mmx_##T(const uint8_t* __restrict__ Wb, u64 row_bytes, int n_in, int n_out,         \
                const uint16_t* __restrict__ hi, const uint16_t* __restrict__ lo,           \
                const float* __restrict__ sums, float* __restrict__ y, int ldy, int n_tok) { \
        typedef TxMem<128, 128, txd_##T::GA, txd_##T::BM, TC_SW(QK_##T, BS_##T), txd_##T::TT> L; \
        extern __shared__ __align__(16) uint8_t tx_smem[];                                  \
        uint8_t* sm = tx_enter<MMX_D, txd_##T, QK_##T, BS_##T>(tx_smem);                    \
        RL_PDL_ENTER();                                                                     \
        const int t0 = blockIdx.y * 128;                                                    \
        for (int i = threadIdx.x; i < 128; i += blockDim.x) {                               \
            const bool ok = t0 + i < n_tok;                                                 \
            ((int*)(sm + L::XR))[i] = ok ? t0 + i : -1;                                     \
            ((float**)(sm + L::YR))[i] = ok ? y + (u64)(t0 + i) * ldy : nullptr;            \
        }                                                                                   \
        __syncthreads();                                                                    \
        mmx_tile<MMX_D, txd_##T, QK_##T, BS_##T>(sm, Wb, row_bytes, n_in, n_out,            \
                                                 blockIdx.x * 128, min(n_tok - t0, 128), hi, \
                                                 lo, sums);                                 \
    }                                                                                       \
    extern "C" __global__ void __launch_bounds__(256, 1)                                    \
        mmgx_##T(const uint8_t* __restrict__ W, u64 row_bytes, int n_in, int n_out,         \
                 u64 w_zstride, const uint16_t* __restrict__ hi,                            \
                 const uint16_t* __restrict__ lo, const float* __restrict__ sums, int x_div, \
                 float* __restrict__ y, u64 y_zstride, const int* __restrict__ counts,      \
                 const int* __restrict__ offsets, const int* __restrict__ perm) {           \
        typedef TxMem<256, 64, txd_##T::GA, txd_##T::BM, TC_SW(QK_##T, BS_##T), txd_##T::TT> L; \
        extern __shared__ __align__(16) uint8_t tx_smem[];                                  \
        uint8_t* sm = tx_enter<MMX_G, txd_##T, QK_##T, BS_##T>(tx_smem);                    \
        RL_PDL_ENTER();                                                                     \
        const int e = blockIdx.z;                                                           \
        const int cnt = counts[e];                                                          \
        if (cnt == 0) return;                                                               \
        const int off = offsets[e];                                                         \
        const uint8_t* Wb = mat_at(W, (u64)e, w_zstride);                                  \
        for (int t0 = 0; t0 < cnt; t0 += 64) {                                              \
            if (t0) __syncthreads(); /* the last tile's stores read YR */                   \
            for (int i = threadIdx.x; i < 64; i += blockDim.x) {                            \
                const bool ok = t0 + i < cnt;                                               \
                const int q = ok ? perm[off + t0 + i] : 0;                                  \
                ((int*)(sm + L::XR))[i] = ok ? q / x_div : -1;                              \
                ((float**)(sm + L::YR))[i] = ok ? y + (u64)q * y_zstride : nullptr;         \
            }                                                                               \
            __syncthreads();                                                                \
            mmx_tile<MMX_G, txd_##T, QK_##T, BS_##T>(sm, Wb, row_bytes, n_in, n_out,        \
                                                     blockIdx.x * 256, min(cnt - t0, 64), hi, \
                                                     lo, sums);                             \
        }                                                                                   \
    }
REDLITE_TC_TYPES(DEF_MMX)

