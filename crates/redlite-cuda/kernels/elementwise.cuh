// Row norms, the SwiGLU, and the random normal fill.

// ---------------------------------------------------------------------------
// Norms. Row r of `rows` is read at in + (r / per)·in_outer + (r % per)·in_inner
// and written at the same place in `out` (out_outer, out_inner).
// mode 0 (RMS): s = 1/sqrt(Σx²/dim + eps); mode 1 (L2): s = mul/sqrt(Σx² + eps).
// out = x·s·w (w may be null). Sums in f64, as the CPU reference.
extern "C" __global__ void norm_rows(const float* __restrict__ in, float* __restrict__ out,
                                     const float* __restrict__ w, int dim, int per,
                                     u64 in_outer, u64 in_inner, u64 out_outer, u64 out_inner,
                                     float eps, int mode, double mul) {
    RL_PDL_ENTER();
    int r = blockIdx.x;
    const float* xi = in + (u64)(r / per) * in_outer + (u64)(r % per) * in_inner;
    float* xo = out + (u64)(r / per) * out_outer + (u64)(r % per) * out_inner;
    double ss = 0.0;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) ss += (double)xi[i] * (double)xi[i];
    ss = block_sum_d(ss);
    float s = mode == 0 ? (float)(1.0 / sqrt(ss / dim + (double)eps))
                        : (float)(mul / sqrt(ss + (double)eps));
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        float v = xi[i] * s;
        xo[i] = w ? v * w[i] : v;
    }
}

// DeltaNet output: o = rmsnorm(o_head)·w ⊙ silu(z), in place, one block per
// (token, value head) row of dim values; z has the same layout as o.
extern "C" __global__ void gated_rmsnorm(float* __restrict__ o, const float* __restrict__ z,
                                         const float* __restrict__ w, int dim, float eps) {
    u64 base = (u64)blockIdx.x * dim;
    // The thread's first gate and weight before the wait: z comes from a
    // product at least two launches back (RL_PDL_EARLY).
    const int i0 = threadIdx.x;
    const float z0 = i0 < dim ? z[base + i0] : 0.f, w0 = i0 < dim ? w[i0] : 0.f;
    RL_PDL_ENTER();
    double ss = 0.0;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) ss += (double)o[base + i] * (double)o[base + i];
    ss = block_sum_d(ss);
    float s = (float)(1.0 / sqrt(ss / dim + (double)eps));
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        const bool first = i == i0;
        float v = o[base + i] * s * (first ? w0 : w[i]);
        o[base + i] = v * silu_f(first ? z0 : z[base + i]);
    }
}

// a = silu(a) ⊙ b
extern "C" __global__ void swiglu(float* __restrict__ a, const float* __restrict__ b, u64 n) {
    RL_PDL_ENTER();
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) a[i] = silu_f(a[i]) * b[i];
}

// ---------------------------------------------------------------------------
// Random normal fill (for decode timing at depth): x[i] = scale·N(0,1) from a
// counter hash (SplitMix64, Box-Muller).
__device__ __forceinline__ u64 splitmix(u64 z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
extern "C" __global__ void fill_normal(float* __restrict__ x, u64 n, u64 seed, float scale) {
    RL_PDL_ENTER();
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    u64 a = splitmix(seed ^ (2 * i)), b = splitmix(seed ^ (2 * i + 1));
    double u1 = fmax((double)(a >> 11) / 9007199254740992.0, 1e-300);
    double u2 = (double)(b >> 11) / 9007199254740992.0;
    x[i] = scale * (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}
