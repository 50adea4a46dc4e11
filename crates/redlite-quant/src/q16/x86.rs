//! The x86-64 drivers of the integer kernels: the AVX2 activation
//! quantizer, the generic drivers per instruction level (AVX2, AVX-512,
//! AVX-512 VNNI) over any [`Unpack`] type, the Q4_K / Q5_K byte-plane
//! kernels and the register-unpacking lattice dots. Each is chosen at run
//! time only where the CPU has the features it enables, and each equals
//! its scalar twin in `mod.rs` (bit for bit where the tests say so).

use super::*;
use std::arch::x86_64::*;

/// [`Q16Act::quantize`] with AVX2: the same scale, the same
/// round-half-to-even conversion, the same sums.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn quantize_avx2(x: &[f32], d: &mut [f32], q: &mut [i16], sums: &mut [i32]) -> bool {
    let nb = x.len() / QK;
    assert!(d.len() >= nb && q.len() >= x.len() && sums.len() >= 8 * nb);
    let abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
    let mut finite = true;
    for b in 0..nb {
        let xp = x.as_ptr().add(b * QK);
        let mut mx = _mm256_setzero_ps();
        let mut nan = _mm256_setzero_ps();
        for i in 0..32 {
            let v = _mm256_loadu_ps(xp.add(8 * i));
            mx = _mm256_max_ps(mx, _mm256_and_ps(v, abs_mask));
            nan = _mm256_or_ps(nan, _mm256_cmp_ps::<_CMP_UNORD_Q>(v, v));
        }
        let m128 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps::<1>(mx));
        let m128 = _mm_max_ps(m128, _mm_movehl_ps(m128, m128));
        let m128 = _mm_max_ss(m128, _mm_movehdup_ps(m128));
        let amax = _mm_cvtss_f32(m128);
        if !amax.is_finite() || _mm256_movemask_ps(nan) != 0 {
            finite = false;
        }
        let (db, id) = if amax > 0.0 && amax.is_finite() {
            (amax / XMAX, XMAX / amax)
        } else {
            (0.0, 0.0)
        };
        *d.get_unchecked_mut(b) = db;
        let idv = _mm256_set1_ps(id);
        let lim = _mm256_set1_ps(XMAX);
        let nlim = _mm256_set1_ps(-XMAX);
        let qp = q.as_mut_ptr().add(b * QK);
        for j in 0..8 {
            let mut s = _mm256_setzero_si256();
            for h in 0..2 {
                let o = 32 * j + 16 * h;
                let conv = |k: usize| {
                    let v = _mm256_mul_ps(_mm256_loadu_ps(xp.add(o + 8 * k)), idv);
                    // Clamp as the scalar code does. (A NaN input quantizes
                    // differently here, but the vector is then reported
                    // non-finite and its quantization is not used.)
                    _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(v, nlim), lim))
                };
                let (a, c) = (conv(0), conv(1));
                s = _mm256_add_epi32(s, _mm256_add_epi32(a, c));
                // packs interleaves 128-bit lanes: restore order.
                let p = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packs_epi32(a, c));
                _mm256_storeu_si256(qp.add(o) as *mut __m256i, p);
            }
            let s = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256::<1>(s));
            let s = _mm_hadd_epi32(s, s);
            let s = _mm_hadd_epi32(s, s);
            *sums.get_unchecked_mut(8 * b + j) = _mm_cvtsi128_si32(s);
        }
    }
    finite
}

/// How far ahead of the block being read the dot kernels ask for the
/// weights' cache lines (software prefetch). The weights stream from
/// memory once per token; the hardware prefetchers alone left one core at
/// about 6 GB/s on a Xeon (decode of the 64-expert cf2 file, 2 threads:
/// 4.5 tok/s without; one line per block 2, 4 or 8 KiB ahead 5.0, 5.2
/// and 5.1–5.3; every line of each block 4 KiB ahead 5.5).
const PREFETCH: usize = 4096;

/// Hint the cache lines of the `len` bytes `PREFETCH` bytes past offset
/// `off` of `data` (possibly past its end: a prefetch never faults).
#[inline(always)]
pub(crate) unsafe fn prefetch_ahead(data: &[u8], off: usize, len: usize) {
    if PREFETCH > 0 {
        let mut o = 0;
        while o < len {
            _mm_prefetch::<_MM_HINT_T0>(data.as_ptr().wrapping_add(off + o + PREFETCH).cast());
            o += 64;
        }
    }
}

/// `vpdpwssd` (512 bits), written out: given the intrinsic, LLVM's
/// machine combiner (without the `fast-dpwssd` tuning, which no
/// `target_feature` can enable) splits chains of them into `vpmaddwd` +
/// `vpaddd` to shorten their latency, which costs throughput where many
/// short chains are in flight (the micro-kernels, the multi-token dots).
/// The integer sums are exact either way.
///
/// # Safety
/// The CPU has AVX-512 F and VNNI.
#[target_feature(enable = "avx512f,avx512vnni")]
#[inline]
pub(crate) unsafe fn dpwssd512(mut acc: __m512i, w: __m512i, x: __m512i) -> __m512i {
    // SAFETY: a register-only instruction of a feature the caller has.
    unsafe {
        std::arch::asm!(
            "vpdpwssd {acc}, {w}, {x}",
            acc = inout(zmm_reg) acc,
            w = in(zmm_reg) w,
            x = in(zmm_reg) x,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    acc
}

/// [`dpwssd512`] on 256 bits (the EVEX form).
///
/// # Safety
/// The CPU has AVX-512 F, VL and VNNI.
#[target_feature(enable = "avx512f,avx512vl,avx512vnni")]
#[inline]
pub(crate) unsafe fn dpwssd256(mut acc: __m256i, w: __m256i, x: __m256i) -> __m256i {
    // SAFETY: a register-only instruction of features the caller has.
    unsafe {
        std::arch::asm!(
            "vpdpwssd {acc}, {w}, {x}",
            acc = inout(ymm_reg) acc,
            w = in(ymm_reg) w,
            x = in(ymm_reg) x,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    acc
}

/// One super-block of the AVX-512 driver for one token: the integer dot
/// of the unpacked weights `u` with block `b` of `x`, scaled into the
/// token's accumulators. The single- and multi-token drivers both run
/// exactly this, so their results agree bit for bit.
#[inline(always)]
unsafe fn block512<U: Unpack, const VNNI: bool>(
    u: &Unpacked,
    x: &Q16Ref<'_>,
    b: usize,
    acc: &mut [__m256; 2],
    accm: &mut __m256,
) {
    let xq = x.q.as_ptr().add(b * QK);
    let wp = u.w.as_ptr();
    let dx = *x.d.get_unchecked(b);
    if U::UNIFORM {
        // Four independent integer chains (the dot's latency, not
        // its throughput, bounds a single chain).
        let mut is = [_mm256_setzero_si256(); 4];
        for j in 0..16 {
            let w0 = _mm256_load_si256(wp.add(16 * j) as *const _);
            let x0 = _mm256_loadu_si256(xq.add(16 * j) as *const _);
            is[j % 4] = if VNNI {
                dpwssd256(is[j % 4], w0, x0)
            } else {
                _mm256_add_epi32(is[j % 4], _mm256_madd_epi16(w0, x0))
            };
        }
        let s01 = _mm256_add_ps(_mm256_cvtepi32_ps(is[0]), _mm256_cvtepi32_ps(is[1]));
        let s23 = _mm256_add_ps(_mm256_cvtepi32_ps(is[2]), _mm256_cvtepi32_ps(is[3]));
        acc[b % 2] = _mm256_fmadd_ps(
            _mm256_add_ps(s01, s23),
            _mm256_set1_ps(u.s[0] * dx),
            acc[b % 2],
        );
    } else {
        for j in 0..8 {
            let w0 = _mm256_load_si256(wp.add(32 * j) as *const _);
            let x0 = _mm256_loadu_si256(xq.add(32 * j) as *const _);
            let w1 = _mm256_load_si256(wp.add(32 * j + 16) as *const _);
            let x1 = _mm256_loadu_si256(xq.add(32 * j + 16) as *const _);
            let is = if VNNI {
                dpwssd256(_mm256_madd_epi16(w0, x0), w1, x1)
            } else {
                _mm256_add_epi32(_mm256_madd_epi16(w0, x0), _mm256_madd_epi16(w1, x1))
            };
            acc[j % 2] = _mm256_fmadd_ps(
                _mm256_cvtepi32_ps(is),
                _mm256_set1_ps(u.s[j] * dx),
                acc[j % 2],
            );
        }
    }
    if U::MIN {
        mins_step(&u.m, x, b, dx, accm);
    }
}

/// The offsets' part of block `b` for one token (types with a minimum):
/// `accm += (m · dx) ⊙ Σq` per 32 values. Every driver's block step ends
/// with it.
#[inline(always)]
unsafe fn mins_step(m: &[f32; 8], x: &Q16Ref<'_>, b: usize, dx: f32, accm: &mut __m256) {
    let mm = _mm256_mul_ps(_mm256_load_ps(m.as_ptr()), _mm256_set1_ps(dx));
    let sv = _mm256_cvtepi32_ps(_mm256_loadu_si256(
        x.sums.as_ptr().add(8 * b) as *const __m256i
    ));
    *accm = _mm256_fmadd_ps(mm, sv, *accm);
}

/// The AVX-512 driver's final sum of one token's accumulators (its two
/// chains added, then as the AVX2 driver finishes).
#[inline(always)]
unsafe fn finish512<U: Unpack>(acc: &[__m256; 2], accm: __m256) -> f32 {
    finish_avx2::<U>(_mm256_add_ps(acc[0], acc[1]), accm)
}

/// The body of the AVX-512 driver; inlined into wrappers that enable
/// the target features (with or without VNNI). It works on 256-bit
/// vectors: the unpackers store 256-bit halves, and a 512-bit load
/// spanning two of them would miss store-to-load forwarding; CPUs that
/// split 512-bit operations in two lose nothing by it.
#[inline(always)]
unsafe fn body512<U: Unpack, const VNNI: bool>(data: &[u8], x: Q16Ref<'_>) -> f32 {
    let mut u = Unpacked::default();
    let mut acc = [_mm256_setzero_ps(); 2];
    let mut accm = _mm256_setzero_ps();
    let nb = data.len() / U::BYTES;
    for b in 0..nb {
        prefetch_ahead(data, b * U::BYTES, U::BYTES);
        U::avx2(&data[b * U::BYTES..(b + 1) * U::BYTES], &mut u);
        block512::<U, VNNI>(&u, &x, b, &mut acc, &mut accm);
    }
    finish512::<U>(&acc, accm)
}

/// One super-block for one token as [`block512`] computes it, with the
/// unpacked weights already in eight 512-bit registers (`w[i]` = values
/// `32i .. 32i + 32`): each 512-bit widening dot fills the two 256-bit
/// integer chains that [`block512`] fills with two, so every 32-bit
/// lane holds the same integer and the f32 steps are the same.
#[inline(always)]
unsafe fn block512_z<U: Unpack, const VNNI: bool>(
    w: &[__m512i; 8],
    s: &[f32; 8],
    m: &[f32; 8],
    x: &Q16Ref<'_>,
    b: usize,
    acc: &mut [__m256; 2],
    accm: &mut __m256,
) {
    let xq = x.q.as_ptr().add(b * QK);
    let dx = *x.d.get_unchecked(b);
    let dot = |z: __m512i, w: __m512i, x: __m512i| {
        if VNNI {
            dpwssd512(z, w, x)
        } else {
            _mm512_add_epi32(z, _mm512_madd_epi16(w, x))
        }
    };
    let lo = _mm512_castsi512_si256;
    let hi = _mm512_extracti64x4_epi64::<1>;
    if U::UNIFORM {
        // Chains 0|1 and 2|3 of block512 (16-value chunk j goes to chain j % 4).
        let mut za = _mm512_setzero_si512();
        let mut zb = _mm512_setzero_si512();
        for i in 0..4 {
            za = dot(za, w[2 * i], _mm512_loadu_si512(xq.add(64 * i) as *const _));
            zb = dot(
                zb,
                w[2 * i + 1],
                _mm512_loadu_si512(xq.add(64 * i + 32) as *const _),
            );
        }
        let s01 = _mm256_add_ps(_mm256_cvtepi32_ps(lo(za)), _mm256_cvtepi32_ps(hi(za)));
        let s23 = _mm256_add_ps(_mm256_cvtepi32_ps(lo(zb)), _mm256_cvtepi32_ps(hi(zb)));
        acc[b % 2] = _mm256_fmadd_ps(
            _mm256_add_ps(s01, s23),
            _mm256_set1_ps(s[0] * dx),
            acc[b % 2],
        );
    } else {
        for (j, &wj) in w.iter().enumerate() {
            let z = dot(
                _mm512_setzero_si512(),
                wj,
                _mm512_loadu_si512(xq.add(32 * j) as *const _),
            );
            let is = _mm256_add_epi32(lo(z), hi(z));
            acc[j % 2] = _mm256_fmadd_ps(
                _mm256_cvtepi32_ps(is),
                _mm256_set1_ps(s[j] * dx),
                acc[j % 2],
            );
        }
    }
    if U::MIN {
        mins_step(m, x, b, dx, accm);
    }
}

/// [`body512`] for up to [`NMAX`] tokens: each super-block unpacked once
/// into registers, then every token's block step ([`block512_z`], the
/// same integers and f32 steps as the single-token driver).
#[inline(always)]
unsafe fn body512_n<U: Unpack, const VNNI: bool>(data: &[u8], xs: &[Q16Ref<'_>], out: &mut [f32]) {
    let n = xs.len().min(NMAX);
    let mut u = Unpacked::default();
    let mut acc = [[_mm256_setzero_ps(); 2]; NMAX];
    let mut accm = [_mm256_setzero_ps(); NMAX];
    let nb = data.len() / U::BYTES;
    for b in 0..nb {
        prefetch_ahead(data, b * U::BYTES, U::BYTES);
        U::avx2(&data[b * U::BYTES..(b + 1) * U::BYTES], &mut u);
        let mut w = [_mm512_setzero_si512(); 8];
        for (i, wi) in w.iter_mut().enumerate() {
            *wi = _mm512_load_si512(u.w.as_ptr().add(32 * i) as *const _);
        }
        for t in 0..n {
            if U::UNIFORM {
                block512_z::<U, VNNI>(&w, &u.s, &u.m, &xs[t], b, &mut acc[t], &mut accm[t]);
            } else {
                // Eight scales: the 256-bit steps measured no slower.
                block512::<U, VNNI>(&u, &xs[t], b, &mut acc[t], &mut accm[t]);
            }
        }
    }
    for t in 0..n {
        out[t] = finish512::<U>(&acc[t], accm[t]);
    }
}

/// One Q4_K / Q5_K super-block made ready for [`kb_apply`]: the 4- or
/// 5-bit quants of each 32 as bytes, the integer sub-block scales and
/// minima, and the two f16 scales.
struct KbBlock {
    q: [__m256i; 8],
    sc: [u8; 8],
    m: [u8; 8],
    d: f32,
    dmin: f32,
}

#[inline(always)]
unsafe fn kb_prep<const FIVE: bool>(blk: &[u8]) -> KbBlock {
    let m4 = _mm256_set1_epi8(0x0F);
    let p = blk.as_ptr();
    let (sc, m) = crate::kquants::scale_min_k4(&blk[4..16]);
    let qs = p.add(if FIVE { 48 } else { 16 });
    let qh = if FIVE {
        _mm256_loadu_si256(p.add(16) as *const __m256i)
    } else {
        _mm256_setzero_si256()
    };
    let mut q = [_mm256_setzero_si256(); 8];
    for j in 0..4 {
        let v = _mm256_loadu_si256(qs.add(32 * j) as *const __m256i);
        let mut lo = _mm256_and_si256(v, m4);
        let mut hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), m4);
        if FIVE {
            // The fifth bit of sub-block k: bit k of qh, as 16.
            let bit = |k: usize| crate::kquants::simd::bit_to(qh, 1 << k, 16);
            lo = _mm256_or_si256(lo, bit(2 * j));
            hi = _mm256_or_si256(hi, bit(2 * j + 1));
        }
        q[2 * j] = lo;
        q[2 * j + 1] = hi;
    }
    KbBlock {
        q,
        sc,
        m,
        d: crate::util::f16_ptr(p),
        dmin: crate::util::f16_ptr(p.add(2)),
    }
}

/// One prepared Q4_K / Q5_K super-block against block `b` of one
/// token's byte planes, into that token's accumulators.
#[inline(always)]
unsafe fn kb_apply(k: &KbBlock, x: &Q16Ref<'_>, b: usize, acc: &mut __m256, accm: &mut __m256) {
    let xh = x.h.as_ptr().add(b * QK);
    let xl = x.l.as_ptr().add(b * QK);
    let mut ah = _mm256_setzero_si256();
    let mut al = _mm256_setzero_si256();
    for (kk, &q) in k.q.iter().enumerate() {
        let s = _mm256_set1_epi16(k.sc[kk] as i16);
        let h = _mm256_loadu_si256(xh.add(32 * kk) as *const __m256i);
        let l = _mm256_loadu_si256(xl.add(32 * kk) as *const __m256i);
        ah = _mm256_add_epi32(ah, _mm256_madd_epi16(_mm256_maddubs_epi16(q, h), s));
        al = _mm256_add_epi32(al, _mm256_madd_epi16(_mm256_maddubs_epi16(q, l), s));
    }
    let dx = *x.d.get_unchecked(b);
    let is = _mm256_fmadd_ps(
        _mm256_cvtepi32_ps(ah),
        _mm256_set1_ps(255.0),
        _mm256_cvtepi32_ps(al),
    );
    *acc = _mm256_fmadd_ps(is, _mm256_set1_ps(k.d * dx), *acc);
    let mv = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(
        k.m.as_ptr() as *const __m128i
    )));
    let sv = _mm256_cvtepi32_ps(_mm256_loadu_si256(
        x.sums.as_ptr().add(8 * b) as *const __m256i
    ));
    *accm = _mm256_fmadd_ps(_mm256_mul_ps(mv, _mm256_set1_ps(k.dmin * dx)), sv, *accm);
}

/// Q4_K / Q5_K against the byte planes of the activations: the unsigned
/// 4- or 5-bit quants multiply `h` and `l` with `vpmaddubsw` (no
/// widening, no stores), `vpmaddwd` applies the sub-block scales, and
/// the block's sum is `255·Σh + Σl` (integers exact; one f32 rounding).
///
/// # Safety
/// AVX2, FMA and F16C; `data` whole blocks of the type, `x` at least as
/// many blocks.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_k_bytes<const FIVE: bool>(data: &[u8], x: Q16Ref<'_>) -> f32 {
    let bytes = if FIVE { 176 } else { 144 };
    let nb = data.len() / bytes;
    let mut acc = _mm256_setzero_ps();
    let mut accm = _mm256_setzero_ps();
    for b in 0..nb {
        prefetch_ahead(data, b * bytes, bytes);
        let k = kb_prep::<FIVE>(&data[b * bytes..(b + 1) * bytes]);
        kb_apply(&k, &x, b, &mut acc, &mut accm);
    }
    crate::util::hsum256(_mm256_sub_ps(acc, accm))
}

/// [`dot_k_bytes`] for up to [`NMAX`] tokens, each block prepared once.
///
/// # Safety
/// As [`dot_k_bytes`], for every `xs[t]`; `out.len() >= xs.len()`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_k_bytes_n<const FIVE: bool>(data: &[u8], xs: &[Q16Ref<'_>], out: &mut [f32]) {
    let bytes = if FIVE { 176 } else { 144 };
    let nb = data.len() / bytes;
    let n = xs.len().min(NMAX);
    let mut acc = [_mm256_setzero_ps(); NMAX];
    let mut accm = [_mm256_setzero_ps(); NMAX];
    for b in 0..nb {
        prefetch_ahead(data, b * bytes, bytes);
        let k = kb_prep::<FIVE>(&data[b * bytes..(b + 1) * bytes]);
        for t in 0..n {
            kb_apply(&k, &xs[t], b, &mut acc[t], &mut accm[t]);
        }
    }
    for t in 0..n {
        out[t] = crate::util::hsum256(_mm256_sub_ps(acc[t], accm[t]));
    }
}

/// One Q4_K / Q5_K super-block made ready for the AVX-512 kernels: four
/// 64-byte registers of quants (register `r`: sub-blocks `SB_ORDER[2r]`
/// then `SB_ORDER[2r + 1]`, 32 bytes each, as the `hb` / `lb` planes
/// order them), the integer sub-block scales and minima, the two f16
/// scales.
struct Kb512 {
    q: [__m512i; 4],
    /// The eight 6-bit scales, byte `j` sub-block `j`.
    sc: u64,
    /// The eight 6-bit minima, likewise.
    m: u64,
    d: f32,
    dmin: f32,
}

/// [`crate::kquants::scale_min_k4`] on 32-bit words (general
/// registers, leaving the vector ports to the products): the scales
/// and minima as bytes of two `u64`.
#[inline(always)]
fn scale_min_words(s: &[u8]) -> (u64, u64) {
    let w = |o: usize| u32::from_le_bytes([s[o], s[o + 1], s[o + 2], s[o + 3]]);
    let (a, b, c) = (w(0), w(4), w(8));
    let sc_lo = a & 0x3F3F_3F3F;
    let m_lo = b & 0x3F3F_3F3F;
    // Byte j of (a >> 2) & 0x30: bits 6 and 7 of byte j at 4 and 5.
    let sc_hi = (c & 0x0F0F_0F0F) | ((a >> 2) & 0x3030_3030);
    let m_hi = ((c >> 4) & 0x0F0F_0F0F) | ((b >> 2) & 0x3030_3030);
    (
        sc_lo as u64 | (sc_hi as u64) << 32,
        m_lo as u64 | (m_hi as u64) << 32,
    )
}

/// The sub-blocks of register `r` of [`Kb512`].
const KB_PAIRS: [(usize, usize); 4] = [
    (SB_ORDER[0], SB_ORDER[1]),
    (SB_ORDER[2], SB_ORDER[3]),
    (SB_ORDER[4], SB_ORDER[5]),
    (SB_ORDER[6], SB_ORDER[7]),
];

#[inline(always)]
unsafe fn kb_prep512<const FIVE: bool>(blk: &[u8]) -> Kb512 {
    let m4 = _mm512_set1_epi8(0x0F);
    let p = blk.as_ptr();
    let (sc, m) = scale_min_words(&blk[4..16]);
    let qs = p.add(if FIVE { 48 } else { 16 });
    // Bytes 0..63 of the quants: low nibbles are sub-blocks 0 and 2,
    // high nibbles 1 and 3; bytes 64..127 likewise 4, 6 and 5, 7.
    let v0 = _mm512_loadu_si512(qs as *const _);
    let v1 = _mm512_loadu_si512(qs.add(64) as *const _);
    let mut q = [
        _mm512_and_si512(v0, m4),
        _mm512_and_si512(_mm512_srli_epi16::<4>(v0), m4),
        _mm512_and_si512(v1, m4),
        _mm512_and_si512(_mm512_srli_epi16::<4>(v1), m4),
    ];
    if FIVE {
        // The fifth bit of value i of sub-block k is bit k of qh[i].
        let qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(p.add(16) as *const __m256i));
        let sixteen = _mm512_set1_epi8(0x10);
        for (r, &(a, b)) in KB_PAIRS.iter().enumerate() {
            let bits = _mm512_mask_blend_epi8(
                0xFFFF_FFFF_0000_0000,
                _mm512_set1_epi8(1 << a),
                _mm512_set1_epi8((1u8 << b) as i8),
            );
            let k = _mm512_test_epi8_mask(qh, bits);
            q[r] = _mm512_mask_add_epi8(q[r], k, q[r], sixteen);
        }
    }
    Kb512 {
        q,
        sc,
        m,
        d: crate::util::f16_ptr(p),
        dmin: crate::util::f16_ptr(p.add(2)),
    }
}

/// `acc + Σ pairs a·b` (`vpdpwssd`, or `vpmaddwd` + `vpaddd`): the same
/// integers either way.
#[inline(always)]
unsafe fn dp512<const VNNI: bool>(acc: __m512i, a: __m512i, b: __m512i) -> __m512i {
    if VNNI {
        dpwssd512(acc, a, b)
    } else {
        _mm512_add_epi32(acc, _mm512_madd_epi16(a, b))
    }
}

/// A block's integer lanes `z` (16 × 32 bits) scaled into the token's
/// accumulator, and the minima's terms `m_j · Σ_{i∈j} q_i` (exact
/// integers below `63 · 32 · 16383 < 2^25`, one `vpmulld` for the eight)
/// scaled into the eight lanes of its minima accumulator, summed at the
/// end; the one- and multi-token kernels both end each block with
/// exactly this. (Against a scalar loop summing the eight products into
/// one integer, then one f32 step a block: single-thread Q4_K from L2
/// 14.4 -> 18.9 GB/s, from memory 9.1-9.3 -> 9.4-9.5; the general
/// registers' ports no longer compete with the byte products.)
#[inline(always)]
unsafe fn kb_tail512(
    z: __m512i,
    k: &Kb512,
    x: &Q16Ref<'_>,
    b: usize,
    acc: &mut __m512,
    accm: &mut __m256,
) {
    let dx = *x.d.get_unchecked(b);
    *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(z), _mm512_set1_ps(k.d * dx), *acc);
    let sp = x.sums.as_ptr().add(8 * b);
    let mv = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(k.m as i64));
    let p = _mm256_mullo_epi32(mv, _mm256_loadu_si256(sp as *const __m256i));
    *accm = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(k.dmin * dx), *accm);
}

#[inline(always)]
unsafe fn kb_finish512(acc: __m512, accm: __m256) -> f32 {
    let hi = _mm512_castpd_ps(_mm512_castpd256_pd512(_mm512_extractf64x4_pd::<1>(
        _mm512_castps_pd(acc),
    )));
    let a8 = _mm256_add_ps(_mm512_castps512_ps256(acc), _mm512_castps512_ps256(hi));
    crate::util::hsum256(a8) - crate::util::hsum256(accm)
}

/// Q4_K / Q5_K against one token's `hb` / `lb` planes with AVX-512: per
/// register of 64 quants, `vpmaddubsw` multiplies them with the signed
/// high bytes and the unsigned low bytes, and `vpdpwssd` (or `vpmaddwd`)
/// applies the two sub-blocks' scales (picked by `vpshufb` from one
/// broadcast of the eight) into `zh` and `zl`; the block's lanes are
/// `256·zh + zl`, exact integers (lane `L` sums the values `4·(L mod 8)`
/// to `4·(L mod 8) + 3` of the sub-blocks `SB_ORDER[2r + L / 8]` of every
/// register `r`), then one f32 rounding each.
#[inline(always)]
unsafe fn kb_one512<const FIVE: bool, const VNNI: bool>(data: &[u8], x: Q16Ref<'_>) -> f32 {
    let bytes = if FIVE { 176 } else { 144 };
    let nb = data.len() / bytes;
    let mut acc = _mm512_setzero_ps();
    let mut accm = _mm256_setzero_ps();
    // vpshufb indices: word w of register r takes scale byte a (w < 16)
    // or b, its high byte zero (index 0x80).
    let sidx: [__m512i; 4] = {
        let mut v = [_mm512_setzero_si512(); 4];
        for (r, &(a, b)) in KB_PAIRS.iter().enumerate() {
            v[r] = _mm512_mask_blend_epi16(
                0xFFFF_0000,
                _mm512_set1_epi16((0x8000u16 | a as u16) as i16),
                _mm512_set1_epi16((0x8000u16 | b as u16) as i16),
            );
        }
        v
    };
    for b in 0..nb {
        prefetch_ahead(data, b * bytes, bytes);
        let k = kb_prep512::<FIVE>(&data[b * bytes..(b + 1) * bytes]);
        let sv = _mm512_set1_epi64(k.sc as i64);
        let xh = x.hb.as_ptr().add(b * QK);
        let xl = x.lb.as_ptr().add(b * QK);
        let mut zh = _mm512_setzero_si512();
        let mut zl = _mm512_setzero_si512();
        for (r, (&idx, &q)) in sidx.iter().zip(&k.q).enumerate() {
            let s = _mm512_shuffle_epi8(sv, idx);
            let h = _mm512_loadu_si512(xh.add(64 * r) as *const _);
            let l = _mm512_loadu_si512(xl.add(64 * r) as *const _);
            zh = dp512::<VNNI>(zh, _mm512_maddubs_epi16(q, h), s);
            zl = dp512::<VNNI>(zl, _mm512_maddubs_epi16(l, q), s);
        }
        let z = _mm512_add_epi32(_mm512_slli_epi32::<8>(zh), zl);
        kb_tail512(z, &k, &x, b, &mut acc, &mut accm);
    }
    kb_finish512(acc, accm)
}

/// [`kb_one512`] with VNNI.
///
/// # Safety
/// AVX-512 F/BW/VL/VNNI, AVX2, FMA, F16C; `data` whole blocks of the
/// type, `x` at least as many blocks with its `hb` / `lb` planes.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn dot_k_b512_vnni<const FIVE: bool>(data: &[u8], x: Q16Ref<'_>) -> f32 {
    kb_one512::<FIVE, true>(data, x)
}

/// [`kb_one512`] without VNNI.
///
/// # Safety
/// AVX-512 F/BW/VL, AVX2, FMA, F16C; sizes as [`dot_k_b512_vnni`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
pub unsafe fn dot_k_b512<const FIVE: bool>(data: &[u8], x: Q16Ref<'_>) -> f32 {
    kb_one512::<FIVE, false>(data, x)
}

/// The multi-token twin of [`kb_one512`]: each block's quants are
/// widened once to 16 bits with their sub-block scales multiplied in and
/// permuted (`vpermt2w`) into eight slots of the `p` plane's order
/// ([`p_index`]), and every token then needs one widening dot per 32
/// values. Each 32-bit lane gathers the same products as the one-token
/// kernel's (integers exact, the same tail), so the results are its
/// results bit for bit.
#[inline(always)]
unsafe fn kb_n512<const FIVE: bool, const VNNI: bool>(
    data: &[u8],
    xs: &[Q16Ref<'_>],
    out: &mut [f32],
) {
    let bytes = if FIVE { 176 } else { 144 };
    let nb = data.len() / bytes;
    let n = xs.len().min(NMAX);
    // Slot k of register r: lane L takes words 4·(L mod 8) + 2k and the
    // next from the first sub-block (L < 8, indices 0..31) or the second
    // (indices 32..63).
    let pidx: [__m512i; 2] = {
        let mut t = [[0i16; 32]; 2];
        for (k, tk) in t.iter_mut().enumerate() {
            for (w, v) in tk.iter_mut().enumerate() {
                let (lane, e) = (w / 2, w % 2);
                let base = if lane < 8 { 0 } else { 32 };
                *v = (base + 4 * (lane % 8) + 2 * k + e) as i16;
            }
        }
        [
            _mm512_loadu_si512(t[0].as_ptr() as *const _),
            _mm512_loadu_si512(t[1].as_ptr() as *const _),
        ]
    };
    let mut acc = [_mm512_setzero_ps(); NMAX];
    let mut accm = [_mm256_setzero_ps(); NMAX];
    for b in 0..nb {
        prefetch_ahead(data, b * bytes, bytes);
        let k = kb_prep512::<FIVE>(&data[b * bytes..(b + 1) * bytes]);
        let mut w = [_mm512_setzero_si512(); 8];
        for (r, &(sa, sb)) in KB_PAIRS.iter().enumerate() {
            let wa = _mm512_mullo_epi16(
                _mm512_cvtepu8_epi16(_mm512_castsi512_si256(k.q[r])),
                _mm512_set1_epi16(((k.sc >> (8 * sa)) & 0xFF) as i16),
            );
            let wb = _mm512_mullo_epi16(
                _mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64::<1>(k.q[r])),
                _mm512_set1_epi16(((k.sc >> (8 * sb)) & 0xFF) as i16),
            );
            w[2 * r] = _mm512_permutex2var_epi16(wa, pidx[0], wb);
            w[2 * r + 1] = _mm512_permutex2var_epi16(wa, pidx[1], wb);
        }
        for t in 0..n {
            let x = &xs[t];
            let xp = x.p.as_ptr().add(b * QK);
            let mut z = _mm512_setzero_si512();
            for (s, &ws) in w.iter().enumerate() {
                let xv = _mm512_loadu_si512(xp.add(32 * s) as *const _);
                z = dp512::<VNNI>(z, ws, xv);
            }
            kb_tail512(z, &k, x, b, &mut acc[t], &mut accm[t]);
        }
    }
    for t in 0..n {
        out[t] = kb_finish512(acc[t], accm[t]);
    }
}

/// [`kb_n512`] with VNNI.
///
/// # Safety
/// AVX-512 F/BW/VL/VNNI, AVX2, FMA, F16C; sizes as [`dot_k_bytes_n`],
/// with the `p` planes.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn dot_k_n512_vnni<const FIVE: bool>(data: &[u8], xs: &[Q16Ref<'_>], out: &mut [f32]) {
    kb_n512::<FIVE, true>(data, xs, out)
}

/// [`kb_n512`] without VNNI.
///
/// # Safety
/// AVX-512 F/BW/VL, AVX2, FMA, F16C; sizes as [`dot_k_n512_vnni`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
pub unsafe fn dot_k_n512<const FIVE: bool>(data: &[u8], xs: &[Q16Ref<'_>], out: &mut [f32]) {
    kb_n512::<FIVE, false>(data, xs, out)
}

/// A lattice type's AVX-512 register unpacker: block `b` as the eight
/// 512-bit weight registers [`block512_z`] takes (the integers of the
/// type's unpacker) and its f32 scale.
pub(crate) trait ZUnpack: Unpack {
    /// # Safety
    /// The CPU has AVX-512 F/BW/VL, AVX2, FMA and F16C; `b` points at a
    /// whole block of `BYTES` bytes.
    unsafe fn zmm(b: *const u8, w: &mut [__m512i; 8]) -> f32;
}
impl ZUnpack for super::IQ1M {
    #[inline(always)]
    unsafe fn zmm(b: *const u8, w: &mut [__m512i; 8]) -> f32 {
        // SAFETY: the caller's promise, passed on.
        unsafe { super::simd_iq::zmm_iq1_m(b, w) }
    }
}
impl ZUnpack for super::Q6K {
    #[inline(always)]
    unsafe fn zmm(b: *const u8, w: &mut [__m512i; 8]) -> f32 {
        // SAFETY: the caller's promise, passed on.
        unsafe { super::simd_iq::zmm_q6_k(b, w) }
    }
}
impl ZUnpack for super::IQ2XS {
    #[inline(always)]
    unsafe fn zmm(b: *const u8, w: &mut [__m512i; 8]) -> f32 {
        // SAFETY: the caller's promise, passed on.
        unsafe { super::simd_iq::zmm_iq2_xs(b, w) }
    }
}

/// [`body512`] with each block unpacked straight into registers by
/// [`ZUnpack::zmm`] (table rows gathered, nothing stored and read back),
/// then [`block512_z`]: the same integers and f32 steps, so the same bits.
#[inline(always)]
unsafe fn body_zmm<U: ZUnpack, const VNNI: bool>(data: &[u8], x: Q16Ref<'_>) -> f32 {
    let mut acc = [_mm256_setzero_ps(); 2];
    let mut accm = _mm256_setzero_ps();
    let m = [0f32; 8];
    let mut w = [_mm512_setzero_si512(); 8];
    let nb = data.len() / U::BYTES;
    for b in 0..nb {
        prefetch_ahead(data, b * U::BYTES, U::BYTES);
        let s = U::zmm(data.as_ptr().add(b * U::BYTES), &mut w);
        block512_z::<U, VNNI>(&w, &[s; 8], &m, &x, b, &mut acc, &mut accm);
    }
    finish512::<U>(&acc, accm)
}

/// [`body512_n`] with the register unpacker of [`body_zmm`].
#[inline(always)]
unsafe fn body_zmm_n<U: ZUnpack, const VNNI: bool>(
    data: &[u8],
    xs: &[Q16Ref<'_>],
    out: &mut [f32],
) {
    let n = xs.len().min(NMAX);
    let mut acc = [[_mm256_setzero_ps(); 2]; NMAX];
    let mut accm = [_mm256_setzero_ps(); NMAX];
    let m = [0f32; 8];
    let mut w = [_mm512_setzero_si512(); 8];
    let nb = data.len() / U::BYTES;
    for b in 0..nb {
        prefetch_ahead(data, b * U::BYTES, U::BYTES);
        let s = [U::zmm(data.as_ptr().add(b * U::BYTES), &mut w); 8];
        for t in 0..n {
            block512_z::<U, VNNI>(&w, &s, &m, &xs[t], b, &mut acc[t], &mut accm[t]);
        }
    }
    for t in 0..n {
        out[t] = finish512::<U>(&acc[t], accm[t]);
    }
}

/// [`body_zmm`] with AVX-512 VNNI.
///
/// # Safety
/// The CPU has AVX-512 F/BW/VL/VNNI, AVX2, FMA and F16C; `data` holds
/// whole blocks and `x` the activations of as many.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn dot_zmm_vnni<U: ZUnpack>(data: &[u8], x: Q16Ref<'_>) -> f32 {
    body_zmm::<U, true>(data, x)
}

/// [`body_zmm`] with AVX-512 without VNNI (safety as [`dot_zmm_vnni`]).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
pub unsafe fn dot_zmm_512<U: ZUnpack>(data: &[u8], x: Q16Ref<'_>) -> f32 {
    body_zmm::<U, false>(data, x)
}

/// [`body_zmm_n`] with AVX-512 VNNI (safety as [`dot_zmm_vnni`], for
/// every token).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn dot_n_zmm_vnni<U: ZUnpack>(data: &[u8], xs: &[Q16Ref<'_>], out: &mut [f32]) {
    body_zmm_n::<U, true>(data, xs, out)
}

/// [`body_zmm_n`] with AVX-512 without VNNI.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
pub unsafe fn dot_n_zmm_512<U: ZUnpack>(data: &[u8], xs: &[Q16Ref<'_>], out: &mut [f32]) {
    body_zmm_n::<U, false>(data, xs, out)
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn dot_avx512_vnni<U: Unpack>(data: &[u8], x: Q16Ref<'_>) -> f32 {
    body512::<U, true>(data, x)
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
pub unsafe fn dot_avx512<U: Unpack>(data: &[u8], x: Q16Ref<'_>) -> f32 {
    body512::<U, false>(data, x)
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn dot_n_avx512_vnni<U: Unpack>(data: &[u8], xs: &[Q16Ref<'_>], out: &mut [f32]) {
    body512_n::<U, true>(data, xs, out)
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
pub unsafe fn dot_n_avx512<U: Unpack>(data: &[u8], xs: &[Q16Ref<'_>], out: &mut [f32]) {
    body512_n::<U, false>(data, xs, out)
}

/// One super-block of the AVX2 driver for one token (see [`block512`]).
#[inline(always)]
unsafe fn block_avx2<U: Unpack>(
    u: &Unpacked,
    x: &Q16Ref<'_>,
    b: usize,
    acc: &mut __m256,
    accm: &mut __m256,
) {
    let xq = x.q.as_ptr().add(b * QK);
    let wp = u.w.as_ptr();
    let dx = *x.d.get_unchecked(b);
    if U::UNIFORM {
        // Two accumulators: each 32-bit lane sees 16 products.
        let mut is0 = _mm256_setzero_si256();
        let mut is1 = _mm256_setzero_si256();
        for j in 0..8 {
            let w0 = _mm256_load_si256(wp.add(32 * j) as *const _);
            let x0 = _mm256_loadu_si256(xq.add(32 * j) as *const _);
            let w1 = _mm256_load_si256(wp.add(32 * j + 16) as *const _);
            let x1 = _mm256_loadu_si256(xq.add(32 * j + 16) as *const _);
            is0 = _mm256_add_epi32(is0, _mm256_madd_epi16(w0, x0));
            is1 = _mm256_add_epi32(is1, _mm256_madd_epi16(w1, x1));
        }
        let is = _mm256_add_ps(_mm256_cvtepi32_ps(is0), _mm256_cvtepi32_ps(is1));
        *acc = _mm256_fmadd_ps(is, _mm256_set1_ps(u.s[0] * dx), *acc);
    } else {
        for j in 0..8 {
            let w0 = _mm256_load_si256(wp.add(32 * j) as *const _);
            let x0 = _mm256_loadu_si256(xq.add(32 * j) as *const _);
            let w1 = _mm256_load_si256(wp.add(32 * j + 16) as *const _);
            let x1 = _mm256_loadu_si256(xq.add(32 * j + 16) as *const _);
            let is = _mm256_add_epi32(_mm256_madd_epi16(w0, x0), _mm256_madd_epi16(w1, x1));
            *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), _mm256_set1_ps(u.s[j] * dx), *acc);
        }
    }
    if U::MIN {
        mins_step(&u.m, x, b, dx, accm);
    }
}

#[inline(always)]
unsafe fn finish_avx2<U: Unpack>(acc: __m256, accm: __m256) -> f32 {
    let r = crate::util::hsum256(acc);
    if U::MIN {
        r - crate::util::hsum256(accm)
    } else {
        r
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_avx2<U: Unpack>(data: &[u8], x: Q16Ref<'_>) -> f32 {
    let mut u = Unpacked::default();
    let mut acc = _mm256_setzero_ps();
    let mut accm = _mm256_setzero_ps();
    let nb = data.len() / U::BYTES;
    for b in 0..nb {
        prefetch_ahead(data, b * U::BYTES, U::BYTES);
        U::avx2(&data[b * U::BYTES..(b + 1) * U::BYTES], &mut u);
        block_avx2::<U>(&u, &x, b, &mut acc, &mut accm);
    }
    finish_avx2::<U>(acc, accm)
}

/// [`dot_avx2`] for up to [`NMAX`] tokens, each block unpacked once.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_n_avx2<U: Unpack>(data: &[u8], xs: &[Q16Ref<'_>], out: &mut [f32]) {
    let n = xs.len().min(NMAX);
    let mut u = Unpacked::default();
    let mut acc = [_mm256_setzero_ps(); NMAX];
    let mut accm = [_mm256_setzero_ps(); NMAX];
    let nb = data.len() / U::BYTES;
    for b in 0..nb {
        prefetch_ahead(data, b * U::BYTES, U::BYTES);
        U::avx2(&data[b * U::BYTES..(b + 1) * U::BYTES], &mut u);
        for t in 0..n {
            block_avx2::<U>(&u, &xs[t], b, &mut acc[t], &mut accm[t]);
        }
    }
    for t in 0..n {
        out[t] = finish_avx2::<U>(acc[t], accm[t]);
    }
}
