// The kernels of the qwen3next forward pass, one file per family
// (`kernel_source` concatenates them in the order of `FORWARD_PARTS`, this
// one first). Compiled at first use by NVRTC for the device's architecture,
// after the dequantizers (dequant.cuh and its tables), which define QK_<T>,
// BS_<T>, dq8_<T> and REDLITE_DQ_TYPES, and the integer activations
// (q16.cuh).
//
// This file: the shared definitions, programmatic dependent launch and the
// warp and block reductions.
//
// Activations are f32 everywhere; weights are dequantized in registers, 8
// values at a time, exactly as the CPU's scalar dequantizers give them.

#define WARP 32
#define FULL 0xffffffffu
typedef unsigned long long u64;
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif

// Programmatic dependent launch (sm_90 and later, RL_PDL): every kernel may be
// launched while the one before it on the stream still runs. RL_PDL_WAIT()
// returns once every earlier kernel has finished and its writes are visible,
// so each kernel calls it before its first read of anything the kernel just
// before it may write and before its first global write. Loads of weights
// (never written by a kernel) come before it, and so may loads of what only
// kernels two or more launches back wrote (RL_PDL_EARLY): a kernel starts
// once every block of the one before it has passed its own wait (or ended),
// so those have finished. RL_PDL_ENTER() then lets the next
// kernel start (its blocks take free SM slots and issue their own weight
// loads), one kernel ahead at most. Launched without the attribute, or on an
// older GPU, both are no-ops.
#ifndef RL_PDL
#define RL_PDL 1
#endif
#if RL_PDL && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define RL_PDL_WAIT() asm volatile("griddepcontrol.wait;\n" ::: "memory")
#define RL_PDL_NEXT() asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory")
#else
#define RL_PDL_WAIT()
#define RL_PDL_NEXT()
#endif
#define RL_PDL_ENTER() \
    do {               \
        RL_PDL_WAIT(); \
        RL_PDL_NEXT(); \
    } while (0)

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL, v, o);
    return v;
}
__device__ __forceinline__ double warp_sum_d(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(FULL, v, o));
    return v;
}
// Sum over a block of up to 1024 threads (every thread gets the result).
__device__ double block_sum_d(double v) {
    __shared__ double red[32];
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = warp_sum_d(v);
    __syncthreads();
    if (lane == 0) red[w] = v;
    __syncthreads();
    // Every warp folds the partials by the same butterfly (one load a lane,
    // five steps) instead of a serial loop over them: the same sum in every
    // thread, in a fixed order.
    return warp_sum_d(lane < nw ? red[lane] : 0.0);
}
__device__ float block_sum_f(float v) {
    __shared__ float redf[32];
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) redf[w] = v;
    __syncthreads();
    return warp_sum(lane < nw ? redf[lane] : 0.f);
}
__device__ __forceinline__ float sigmoid_f(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float silu_f(float x) { return x * sigmoid_f(x); }

