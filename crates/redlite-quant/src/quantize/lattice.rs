//! Lattice quantizers IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S and IQ1_M: ports of
//! ggml's `iq2xs_init_impl` (the grid, the map from 8 two-bit levels to a
//! grid index, and each off-grid point's nearest grid points), the neighbour
//! searches and `quantize_row_iq2_xxs_impl`, `quantize_row_iq2_xs_impl`,
//! `quantize_row_iq2_s_impl`, `quantize_row_iq1_s_impl`,
//! `quantize_row_iq1_m_impl`.
//!
//! The grids are rebuilt from the decoding tables in `iq_tables` (each grid
//! byte names a level `l` in 0..3, the search works with `2l + 1`).
//! Sorting follows glibc's `qsort` as llama.cpp's builds use it: a stable
//! merge sort, so equal keys keep their order.

// Index loops mirror the C they port, statement for statement.
#![allow(clippy::needless_range_loop)]

use std::sync::OnceLock;

use super::{f16_bytes, nearest_int, GROUP_MAX_EPS};
use crate::iq_tables::{IQ1S_DELTA, IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID};

const QK_K: usize = 256;
const KMAP_SIZE: usize = 43692;
const GROUP_MAX_EPS_IQ1_M: f32 = 1e-7;
const GROUP_MAX_EPS_IQ1_S: f32 = 1e-12;
const GROUP_MAX_EPS_IQ2_S: f32 = 1e-8;

/// One grid with its search tables (`iq2_data[gindex]`).
pub(super) struct Grid {
    /// Grid points as `2l + 1` per coordinate.
    pub points: Vec<[i8; 8]>,
    /// The same points as f32 (what the SIMD neighbour search gathers).
    pub points_f32: Vec<[f32; 8]>,
    /// The same points as levels `l` (what the SIMD IQ1 search gathers).
    pub levels: Vec<[i32; 8]>,
    /// Index of the 8 two-bit levels → grid index, or `-(offset + 1)` into
    /// `neighbours` for points off the grid.
    pub map: Vec<i32>,
    /// At each offset: a count `n`, then `n` grid indices.
    pub neighbours: Vec<u16>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum GridKind {
    Iq2Xxs,
    Iq2Xs,
    Iq2S,
    Iq1,
}

fn build(kind: GridKind) -> Grid {
    let levels: Vec<[u8; 8]> = match kind {
        GridKind::Iq2Xxs => IQ2XXS_GRID.iter().map(|&g| levels_2bit(g)).collect(),
        GridKind::Iq2Xs => IQ2XS_GRID.iter().map(|&g| levels_2bit(g)).collect(),
        GridKind::Iq2S => IQ2S_GRID.iter().map(|&g| levels_2bit(g)).collect(),
        GridKind::Iq1 => IQ1S_GRID
            .iter()
            .map(|&g| std::array::from_fn(|i| ((g >> (8 * i)) as u8 as i8 + 1) as u8))
            .collect(),
    };
    let nwant = match kind {
        GridKind::Iq1 => 3,
        GridKind::Iq2S => 1,
        _ => 2,
    };
    let points: Vec<[i8; 8]> = levels
        .iter()
        .map(|l| std::array::from_fn(|i| 2 * l[i] as i8 + 1))
        .collect();
    let mut map = vec![-1i32; KMAP_SIZE];
    for (i, l) in levels.iter().enumerate() {
        let mut index = 0usize;
        for k in 0..8 {
            index |= (l[k] as usize) << (2 * k);
        }
        map[index] = i as i32;
    }
    // Each off-grid point's neighbours: every grid point at the `nwant`
    // smallest distances, by distance then index (what ggml's sort of
    // (distance, index) pairs and its scan give), found with a histogram of
    // the squared distances (at most 8·6² = 288).
    let mut neighbours = Vec::new();
    let mut dist2 = vec![0u16; points.len()];
    for i in 0..KMAP_SIZE {
        if map[i] >= 0 {
            continue;
        }
        let pos: [i32; 8] = std::array::from_fn(|k| 2 * ((i >> (2 * k)) & 3) as i32 + 1);
        let mut hist = [0u32; 289];
        for (j, pg) in points.iter().enumerate() {
            let mut d2 = 0i32;
            for k in 0..8 {
                let d = pg[k] as i32 - pos[k];
                d2 += d * d;
            }
            dist2[j] = d2 as u16;
            hist[d2 as usize] += 1;
        }
        map[i] = -(neighbours.len() as i32 + 1);
        let start = neighbours.len();
        neighbours.push(0);
        let mut n = 0u16;
        let mut nhave = 0;
        for (d, &count) in hist.iter().enumerate() {
            if count == 0 {
                continue;
            }
            for (j, &dj) in dist2.iter().enumerate() {
                if dj as usize == d {
                    neighbours.push(j as u16);
                    n += 1;
                }
            }
            nhave += 1;
            if nhave == nwant {
                break;
            }
        }
        neighbours[start] = n;
    }
    let points_f32 = points
        .iter()
        .map(|p| std::array::from_fn(|i| p[i] as f32))
        .collect();
    let levels = points
        .iter()
        .map(|p| std::array::from_fn(|i| ((p[i] - 1) / 2) as i32))
        .collect();
    Grid {
        points,
        points_f32,
        levels,
        map,
        neighbours,
    }
}

fn levels_2bit(g: u64) -> [u8; 8] {
    std::array::from_fn(|i| match (g >> (8 * i)) as u8 {
        0x08 => 0,
        0x19 => 1,
        0x2b => 2,
        _ => 3,
    })
}

pub(super) fn grid(kind: GridKind) -> &'static Grid {
    static G: [OnceLock<Grid>; 4] = [
        OnceLock::new(),
        OnceLock::new(),
        OnceLock::new(),
        OnceLock::new(),
    ];
    let i = match kind {
        GridKind::Iq2Xxs => 0,
        GridKind::Iq2Xs => 1,
        GridKind::Iq1 => 2,
        GridKind::Iq2S => 3,
    };
    G[i].get_or_init(|| build(kind))
}

impl Grid {
    fn neighbours_at(&self, map_value: i32) -> &[u16] {
        let off = (-map_value - 1) as usize;
        let n = self.neighbours[off] as usize;
        &self.neighbours[off + 1..off + 1 + n]
    }

    /// `iq2_find_best_neighbour`.
    fn best_neighbour(
        &self,
        nb: &[u16],
        xval: &[f32],
        weight: &[f32],
        scale: f32,
        l: &mut [i8],
    ) -> usize {
        let grid_index = self.nearest(nb, xval, weight, scale);
        let pg = &self.points[grid_index];
        for i in 0..8 {
            l[i] = (pg[i] - 1) / 2;
        }
        grid_index
    }

    /// The first of `nb` at the smallest weighted distance
    /// `Σ w·(scale·q − x)²`: the AVX2 twin where the CPU has it (eight
    /// neighbours at a time, the same operations in the same order per
    /// neighbour, so the same answer), else the scalar reference.
    fn nearest(&self, nb: &[u16], xval: &[f32], weight: &[f32], scale: f32) -> usize {
        #[cfg(target_arch = "x86_64")]
        if nb.len() >= 8 && crate::isa() >= crate::Isa::Avx2 {
            // SAFETY: AVX2 is present (`isa()` detected it at run time); every
            // neighbour index is a grid index (built with the grid).
            return unsafe { nearest_avx2(&self.points_f32, nb, xval, weight, scale) };
        }
        nearest_scalar(&self.points, nb, xval, weight, scale)
    }

    /// `iq1_find_best_neighbour2`.
    #[allow(clippy::too_many_arguments)]
    fn best_neighbour_iq1(
        &self,
        nb: &[u16],
        xval: &[f32],
        weight: &[f32],
        scale: f32,
        xg: &[f32; 3],
        l: &mut [i8],
    ) -> usize {
        let grid_index = self.nearest_iq1(nb, xval, weight, scale, xg);
        let pg = &self.points[grid_index];
        for i in 0..8 {
            l[i] = (pg[i] - 1) / 2;
        }
        grid_index
    }

    /// The first of `nb` at the smallest `Σ w·(scale·xg[level] − x)²`: the
    /// AVX2 twin where the CPU has it, else the scalar reference.
    fn nearest_iq1(
        &self,
        nb: &[u16],
        xval: &[f32],
        weight: &[f32],
        scale: f32,
        xg: &[f32; 3],
    ) -> usize {
        #[cfg(target_arch = "x86_64")]
        if nb.len() >= 8 && crate::isa() >= crate::Isa::Avx2 {
            // SAFETY: AVX2 is present (`isa()` detected it at run time); every
            // neighbour index is a grid index (built with the grid).
            return unsafe { nearest_iq1_avx2(&self.levels, nb, xval, weight, scale, xg) };
        }
        nearest_iq1_scalar(&self.points, nb, xval, weight, scale, xg)
    }

    fn index_of(&self, l: &[i8]) -> i32 {
        let mut u = 0usize;
        for i in 0..8 {
            u |= (l[i] as usize) << (2 * i);
        }
        self.map[u]
    }
}

/// The scalar reference of [`Grid::nearest`] (`iq2_find_best_neighbour`'s loop).
fn nearest_scalar(
    points: &[[i8; 8]],
    nb: &[u16],
    xval: &[f32],
    weight: &[f32],
    scale: f32,
) -> usize {
    let mut best_d2 = f32::MAX;
    let mut grid_index = nb[0] as usize;
    for &j in nb {
        let pg = &points[j as usize];
        let mut d2 = 0.0f32;
        for i in 0..8 {
            let q = pg[i] as f32;
            let diff = scale * q - xval[i];
            d2 += weight[i] * diff * diff;
        }
        if d2 < best_d2 {
            best_d2 = d2;
            grid_index = j as usize;
        }
    }
    grid_index
}

/// The AVX2 twin of [`nearest_scalar`]: eight neighbours per vector, one
/// lane each, every lane's sum built in the scalar order with separate
/// multiplies and adds (no fused multiply-add), then the lanes compared in
/// order with the scalar's strict `<`; the remainder goes through the
/// scalar loop.
///
/// # Safety
/// The CPU must have AVX2, and every index in `nb` must be below
/// `points.len()`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn nearest_avx2(
    points: &[[f32; 8]],
    nb: &[u16],
    xval: &[f32],
    weight: &[f32],
    scale: f32,
) -> usize {
    use std::arch::x86_64::*;
    let mut best_d2 = f32::MAX;
    let mut grid_index = nb[0] as usize;
    let vs = _mm256_set1_ps(scale);
    let base = points.as_ptr() as *const f32;
    let chunks = nb.chunks_exact(8);
    let rest = chunks.remainder();
    let mut d = [0f32; 8];
    for c in chunks {
        let idx = _mm256_setr_epi32(
            c[0] as i32 * 8,
            c[1] as i32 * 8,
            c[2] as i32 * 8,
            c[3] as i32 * 8,
            c[4] as i32 * 8,
            c[5] as i32 * 8,
            c[6] as i32 * 8,
            c[7] as i32 * 8,
        );
        let mut d2 = _mm256_setzero_ps();
        for i in 0..8 {
            // SAFETY: lane k reads points[c[k]][i], inside `points` by the
            // caller's guarantee on the indices.
            let q = unsafe { _mm256_i32gather_ps::<4>(base.add(i), idx) };
            let diff = _mm256_sub_ps(_mm256_mul_ps(vs, q), _mm256_set1_ps(xval[i]));
            let t = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(weight[i]), diff), diff);
            d2 = _mm256_add_ps(d2, t);
        }
        // SAFETY: `d` holds 8 f32.
        unsafe { _mm256_storeu_ps(d.as_mut_ptr(), d2) };
        for k in 0..8 {
            if d[k] < best_d2 {
                best_d2 = d[k];
                grid_index = c[k] as usize;
            }
        }
    }
    for &j in rest {
        let pg = &points[j as usize];
        let mut d2 = 0.0f32;
        for i in 0..8 {
            let diff = scale * pg[i] - xval[i];
            d2 += weight[i] * diff * diff;
        }
        if d2 < best_d2 {
            best_d2 = d2;
            grid_index = j as usize;
        }
    }
    grid_index
}

/// The scalar reference of [`Grid::nearest_iq1`] (`iq1_find_best_neighbour2`'s loop).
fn nearest_iq1_scalar(
    points: &[[i8; 8]],
    nb: &[u16],
    xval: &[f32],
    weight: &[f32],
    scale: f32,
    xg: &[f32; 3],
) -> usize {
    let mut best = f32::MAX;
    let mut grid_index = nb[0] as usize;
    for &j in nb {
        let pg = &points[j as usize];
        let mut d2 = 0.0f32;
        for i in 0..8 {
            let q = xg[((pg[i] - 1) / 2) as usize];
            let w = weight[i];
            let diff = scale * q - xval[i];
            d2 += w * diff * diff;
        }
        if d2 < best {
            best = d2;
            grid_index = j as usize;
        }
    }
    grid_index
}

/// The AVX2 twin of [`nearest_iq1_scalar`]: as [`nearest_avx2`], with each
/// lane's value `xg[level]` picked by a permute from the gathered levels.
///
/// # Safety
/// The CPU must have AVX2, and every index in `nb` must be below
/// `levels.len()`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn nearest_iq1_avx2(
    levels: &[[i32; 8]],
    nb: &[u16],
    xval: &[f32],
    weight: &[f32],
    scale: f32,
    xg: &[f32; 3],
) -> usize {
    use std::arch::x86_64::*;
    let mut best = f32::MAX;
    let mut grid_index = nb[0] as usize;
    let vs = _mm256_set1_ps(scale);
    let vxg = _mm256_setr_ps(xg[0], xg[1], xg[2], 0.0, 0.0, 0.0, 0.0, 0.0);
    let base = levels.as_ptr() as *const i32;
    let chunks = nb.chunks_exact(8);
    let rest = chunks.remainder();
    let mut d = [0f32; 8];
    for c in chunks {
        let idx = _mm256_setr_epi32(
            c[0] as i32 * 8,
            c[1] as i32 * 8,
            c[2] as i32 * 8,
            c[3] as i32 * 8,
            c[4] as i32 * 8,
            c[5] as i32 * 8,
            c[6] as i32 * 8,
            c[7] as i32 * 8,
        );
        let mut d2 = _mm256_setzero_ps();
        for i in 0..8 {
            // SAFETY: lane k reads levels[c[k]][i], inside `levels` by the
            // caller's guarantee on the indices.
            let lv = unsafe { _mm256_i32gather_epi32::<4>(base.add(i), idx) };
            let q = _mm256_permutevar8x32_ps(vxg, lv);
            let diff = _mm256_sub_ps(_mm256_mul_ps(vs, q), _mm256_set1_ps(xval[i]));
            let t = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(weight[i]), diff), diff);
            d2 = _mm256_add_ps(d2, t);
        }
        // SAFETY: `d` holds 8 f32.
        unsafe { _mm256_storeu_ps(d.as_mut_ptr(), d2) };
        for k in 0..8 {
            if d[k] < best {
                best = d[k];
                grid_index = c[k] as usize;
            }
        }
    }
    for &j in rest {
        let lv = &levels[j as usize];
        let mut d2 = 0.0f32;
        for i in 0..8 {
            let q = xg[lv[i] as usize];
            let w = weight[i];
            let diff = scale * q - xval[i];
            d2 += w * diff * diff;
        }
        if d2 < best {
            best = d2;
            grid_index = j as usize;
        }
    }
    grid_index
}

/// The sign handling shared by IQ2_XXS and IQ2_XS: `|x|` per group of 8,
/// with an even number of flips (the smallest weighted value keeps its sign
/// flipped otherwise); returns the 7 stored sign bits.
fn even_signs(xb: &[f32], weight: &[f32], xval: &mut [f32]) -> u8 {
    let mut nflip = 0;
    let mut s = 0u8;
    for i in 0..8 {
        if xb[i] >= 0.0 {
            xval[i] = xb[i];
        } else {
            xval[i] = -xb[i];
            nflip += 1;
            s |= 1 << i;
        }
    }
    if nflip % 2 == 1 {
        let mut imin = 0;
        let mut min = weight[0] * xb[0] * xb[0];
        for i in 1..8 {
            let ax = weight[i] * xb[i] * xb[i];
            if ax < min {
                min = ax;
                imin = i;
            }
        }
        xval[imin] = -xval[imin];
        s ^= 1 << imin;
    }
    s & 127
}

/// Quantize a group of 8 to the nearest levels at `id`, then onto the grid.
fn levels_for(id: f32, xval: &[f32], k_max_q: i32, l: &mut [i8]) {
    for i in 0..8 {
        let q = nearest_int(0.5 * (id * xval[i] - 1.0));
        l[i] = q.clamp(0, k_max_q - 1) as i8;
    }
}

fn sum_qx_q2(weight: &[f32], xval: &[f32], l: &[i8]) -> (f32, f32) {
    let mut sumqx = 0.0f32;
    let mut sumq2 = 0.0f32;
    for i in 0..l.len() {
        let w = weight[i];
        let q = (2 * l[i] as i32 + 1) as f32;
        sumqx += w * xval[i] * q;
        sumq2 += w * q * q;
    }
    (sumqx, sumq2)
}

/// `quantize_row_iq2_xxs_impl` for one row.
pub(super) fn iq2_xxs_row(x: &[f32], y: &mut [u8], qw_row: &[f32]) {
    let g = grid(GridKind::Iq2Xxs);
    let k_max_q = 3;
    for (ibl, (xbl, yb)) in x.chunks_exact(QK_K).zip(y.chunks_exact_mut(66)).enumerate() {
        yb[0..2].copy_from_slice(&f16_bytes(0.0));
        let mut q2 = [0u32; 16];
        let mut scales = [0f32; 8];
        let mut max_scale = 0.0f32;
        let mut sumx2 = 0.0f32;
        for &v in xbl {
            sumx2 += v * v;
        }
        let sigma2 = sumx2 / QK_K as f32;
        for ib in 0..8 {
            let xb = &xbl[32 * ib..32 * ib + 32];
            let qw = &qw_row[QK_K * ibl + 32 * ib..];
            let mut weight = [0f32; 32];
            let mut waux = [0f32; 32];
            let mut xval = [0f32; 32];
            let mut l = [0i8; 32];
            let mut laux = [0i8; 32];
            let mut block_signs = [0u8; 4];
            for i in 0..32 {
                weight[i] = qw[i] * (sigma2 + xb[i] * xb[i]).sqrt();
            }
            for i in 0..32 {
                waux[i] = weight[i].sqrt();
            }
            for k in 0..4 {
                block_signs[k] =
                    even_signs(&xb[8 * k..], &weight[8 * k..], &mut xval[8 * k..8 * k + 8]);
            }
            let mut max = xval[0];
            for &v in &xval[1..] {
                max = max.max(v);
            }
            if max < GROUP_MAX_EPS {
                scales[ib] = 0.0;
                continue;
            }
            let mut lq = [0u8; 32];
            let mut scale =
                super::kquants::make_qp_quants(32, k_max_q + 1, &xval, &mut lq, &weight);
            let eff_max = scale * k_max_q as f32;
            if eff_max <= 0.0 {
                scales[ib] = 0.0;
                continue;
            }
            for i in 0..32 {
                l[i] = lq[i] as i8;
            }
            let mut best = 0.0f32;
            for is in -6i32..=6 {
                let id = ((2 * k_max_q - 1) as f32 + is as f32 * 0.1f32) / eff_max;
                let this_scale = 1.0 / id;
                for k in 0..4 {
                    levels_for(id, &xval[8 * k..], k_max_q, &mut laux[8 * k..8 * k + 8]);
                    let gi = g.index_of(&laux[8 * k..8 * k + 8]);
                    if gi < 0 {
                        let nb = g.neighbours_at(gi);
                        g.best_neighbour(
                            nb,
                            &xval[8 * k..],
                            &waux[8 * k..],
                            this_scale,
                            &mut laux[8 * k..8 * k + 8],
                        );
                    }
                }
                let (sumqx, sumq2) = sum_qx_q2(&weight, &xval, &laux);
                if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
                    scale = sumqx / sumq2;
                    best = scale * sumqx;
                    l = laux;
                }
            }
            if scale > 0.0 {
                let id = 1.0 / scale;
                for k in 0..4 {
                    let mut lk = [0i8; 8];
                    levels_for(id, &xval[8 * k..], k_max_q, &mut lk);
                    let mut gi = g.index_of(&lk);
                    if gi < 0 {
                        let nb = g.neighbours_at(gi);
                        gi = g.best_neighbour(
                            nb,
                            &xval[8 * k..],
                            &waux[8 * k..],
                            scale,
                            &mut l[8 * k..8 * k + 8],
                        ) as i32;
                    }
                    let pg = &g.points[gi as usize];
                    for i in 0..8 {
                        l[8 * k + i] = (pg[i] - 1) / 2;
                    }
                }
                let (sumqx, sumq2) = sum_qx_q2(&weight, &xval, &l);
                if sumq2 > 0.0 {
                    scale = sumqx / sumq2;
                }
            }
            if scale < 0.0 {
                scale = -scale;
                for s in &mut block_signs {
                    *s = !*s & 127;
                }
            }
            for k in 0..4 {
                let gi = g.index_of(&l[8 * k..8 * k + 8]).max(0) as u32;
                q2[2 * ib] |= gi << (8 * k);
                q2[2 * ib + 1] |= (block_signs[k] as u32) << (7 * k);
            }
            scales[ib] = scale;
            max_scale = max_scale.max(scale);
        }
        if max_scale == 0.0 {
            yb[2..66].fill(0);
            continue;
        }
        let d = max_scale / 31.0;
        yb[0..2].copy_from_slice(&f16_bytes(d));
        let id = 1.0 / d;
        for ib in 0..8 {
            let l = nearest_int(0.5 * (id * scales[ib] - 1.0)).clamp(0, 15);
            q2[2 * ib + 1] |= (l as u32) << 28;
        }
        for (i, q) in q2.iter().enumerate() {
            yb[2 + 4 * i..6 + 4 * i].copy_from_slice(&q.to_le_bytes());
        }
    }
}

/// `quantize_row_iq2_xs_impl` for one row.
pub(super) fn iq2_xs_row(x: &[f32], y: &mut [u8], qw_row: &[f32]) {
    let g = grid(GridKind::Iq2Xs);
    let k_max_q = 3;
    for (ibl, (xbl, yb)) in x.chunks_exact(QK_K).zip(y.chunks_exact_mut(74)).enumerate() {
        yb[0..2].copy_from_slice(&f16_bytes(0.0));
        let mut q2 = [0u16; 32];
        yb[66..74].fill(0);
        let mut scales = [0f32; 16];
        let mut max_scale = 0.0f32;
        let mut sumx2 = 0.0f32;
        for &v in xbl {
            sumx2 += v * v;
        }
        let sigma2 = sumx2 / QK_K as f32;
        for ib in 0..16 {
            let xb = &xbl[16 * ib..16 * ib + 16];
            let qw = &qw_row[QK_K * ibl + 16 * ib..];
            let mut weight = [0f32; 16];
            let mut waux = [0f32; 16];
            let mut xval = [0f32; 16];
            let mut laux = [0i8; 16];
            let mut block_signs = [0u8; 2];
            let mut is_on_grid = [true; 2];
            let mut is_on_grid_aux = [true; 2];
            for i in 0..16 {
                weight[i] = qw[i] * (sigma2 + xb[i] * xb[i]).sqrt();
            }
            for i in 0..16 {
                waux[i] = weight[i].sqrt();
            }
            for k in 0..2 {
                block_signs[k] =
                    even_signs(&xb[8 * k..], &weight[8 * k..], &mut xval[8 * k..8 * k + 8]);
            }
            let mut max = xval[0];
            for &v in &xval[1..] {
                max = max.max(v);
            }
            let mut l = [0i8; 16];
            if max < GROUP_MAX_EPS {
                scales[ib] = 0.0;
                continue;
            }
            let mut best = 0.0f32;
            let mut scale = max / (2 * k_max_q - 1) as f32;
            for is in -9i32..=9 {
                let id = ((2 * k_max_q - 1) as f32 + is as f32 * 0.1f32) / max;
                let this_scale = 1.0 / id;
                for k in 0..2 {
                    levels_for(id, &xval[8 * k..], k_max_q, &mut laux[8 * k..8 * k + 8]);
                    let gi = g.index_of(&laux[8 * k..8 * k + 8]);
                    is_on_grid_aux[k] = true;
                    if gi < 0 {
                        is_on_grid_aux[k] = false;
                        let nb = g.neighbours_at(gi);
                        g.best_neighbour(
                            nb,
                            &xval[8 * k..],
                            &waux[8 * k..],
                            this_scale,
                            &mut laux[8 * k..8 * k + 8],
                        );
                    }
                }
                let (sumqx, sumq2) = sum_qx_q2(&weight, &xval, &laux);
                if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
                    scale = sumqx / sumq2;
                    best = scale * sumqx;
                    l = laux;
                    is_on_grid = is_on_grid_aux;
                }
            }
            let n_not_ongrid = is_on_grid.iter().filter(|&&b| !b).count();
            if n_not_ongrid > 0 && scale > 0.0 {
                let id = 1.0 / scale;
                for k in 0..2 {
                    if is_on_grid[k] {
                        continue;
                    }
                    levels_for(id, &xval[8 * k..], k_max_q, &mut l[8 * k..8 * k + 8]);
                    let gi = g.index_of(&l[8 * k..8 * k + 8]);
                    if gi < 0 {
                        let nb = g.neighbours_at(gi);
                        g.best_neighbour(
                            nb,
                            &xval[8 * k..],
                            &waux[8 * k..],
                            scale,
                            &mut l[8 * k..8 * k + 8],
                        );
                    }
                }
                let (sumqx, sumq2) = sum_qx_q2(&weight, &xval, &l);
                if sumq2 > 0.0 {
                    scale = sumqx / sumq2;
                }
            }
            if scale < 0.0 {
                scale = -scale;
                for s in &mut block_signs {
                    *s = !*s & 127;
                }
            }
            for k in 0..2 {
                let gi = g.index_of(&l[8 * k..8 * k + 8]).max(0) as u16;
                q2[2 * ib + k] = gi | ((block_signs[k] as u16) << 9);
            }
            scales[ib] = scale;
            max_scale = max_scale.max(scale);
        }
        if max_scale == 0.0 {
            yb[2..66].fill(0);
            continue;
        }
        let d = max_scale / 31.0;
        yb[0..2].copy_from_slice(&f16_bytes(d));
        let id = 1.0 / d;
        for ib in 0..16 {
            let l = nearest_int(0.5 * (id * scales[ib] - 1.0)).clamp(0, 15) as u8;
            if ib % 2 == 0 {
                yb[66 + ib / 2] = l;
            } else {
                yb[66 + ib / 2] |= l << 4;
            }
        }
        for (i, q) in q2.iter().enumerate() {
            yb[2 + 2 * i..4 + 2 * i].copy_from_slice(&q.to_le_bytes());
        }
    }
}

/// `quantize_row_iq2_s_impl` for one row (`qw_row` may be absent: weights
/// `σ²/4 + x²`). Block: d, 32 grid low bytes, 32 sign bytes, 8 bytes of
/// grid high bits, 8 bytes of 4-bit scales.
pub(super) fn iq2_s_row(x: &[f32], y: &mut [u8], qw_row: Option<&[f32]>) {
    let g = grid(GridKind::Iq2S);
    let k_max_q = 3;
    for (ibl, (xbl, yb)) in x.chunks_exact(QK_K).zip(y.chunks_exact_mut(82)).enumerate() {
        yb.fill(0);
        let mut scales = [0f32; QK_K / 16];
        let mut max_scale = 0.0f32;
        let mut sumx2 = 0.0f32;
        for &v in xbl {
            sumx2 += v * v;
        }
        let sigma2 = 2.0 * sumx2 / QK_K as f32;
        for ib in 0..QK_K / 16 {
            let xb = &xbl[16 * ib..16 * ib + 16];
            let mut weight = [0f32; 16];
            let mut waux = [0f32; 16];
            let mut xval = [0f32; 16];
            let mut laux = [0i8; 16];
            let mut block_signs = [0u8; 2];
            let mut is_on_grid = [true; 2];
            let mut is_on_grid_aux = [true; 2];
            match qw_row {
                Some(qw) => {
                    let qw = &qw[QK_K * ibl + 16 * ib..];
                    for i in 0..16 {
                        weight[i] = qw[i] * (sigma2 + xb[i] * xb[i]).sqrt();
                    }
                }
                None => {
                    for i in 0..16 {
                        weight[i] = 0.25 * sigma2 + xb[i] * xb[i];
                    }
                }
            }
            for i in 0..16 {
                waux[i] = weight[i].sqrt();
            }
            for k in 0..2 {
                let mut s = 0u8;
                for i in 0..8 {
                    if xb[8 * k + i] >= 0.0 {
                        xval[8 * k + i] = xb[8 * k + i];
                    } else {
                        xval[8 * k + i] = -xb[8 * k + i];
                        s |= 1 << i;
                    }
                }
                block_signs[k] = s;
            }
            let mut max = xval[0];
            for &v in &xval[1..] {
                max = max.max(v);
            }
            let mut l = [0i8; 16];
            if max < GROUP_MAX_EPS_IQ2_S {
                scales[ib] = 0.0;
                continue;
            }
            let mut best = 0.0f32;
            let mut scale = max / (2 * k_max_q - 1) as f32;
            for is in -9i32..=9 {
                let id = ((2 * k_max_q - 1) as f32 + is as f32 * 0.1f32) / max;
                let this_scale = 1.0 / id;
                for k in 0..2 {
                    levels_for(id, &xval[8 * k..], k_max_q, &mut laux[8 * k..8 * k + 8]);
                    let gi = g.index_of(&laux[8 * k..8 * k + 8]);
                    is_on_grid_aux[k] = true;
                    if gi < 0 {
                        is_on_grid_aux[k] = false;
                        let nb = g.neighbours_at(gi);
                        g.best_neighbour(
                            nb,
                            &xval[8 * k..],
                            &waux[8 * k..],
                            this_scale,
                            &mut laux[8 * k..8 * k + 8],
                        );
                    }
                }
                let (sumqx, sumq2) = sum_qx_q2(&weight, &xval, &laux);
                if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
                    scale = sumqx / sumq2;
                    best = scale * sumqx;
                    l = laux;
                    is_on_grid = is_on_grid_aux;
                }
            }
            let n_not_ongrid = is_on_grid.iter().filter(|&&b| !b).count();
            if n_not_ongrid > 0 && scale > 0.0 {
                let id = 1.0 / scale;
                for k in 0..2 {
                    if is_on_grid[k] {
                        continue;
                    }
                    levels_for(id, &xval[8 * k..], k_max_q, &mut l[8 * k..8 * k + 8]);
                    let gi = g.index_of(&l[8 * k..8 * k + 8]);
                    if gi < 0 {
                        let nb = g.neighbours_at(gi);
                        g.best_neighbour(
                            nb,
                            &xval[8 * k..],
                            &waux[8 * k..],
                            scale,
                            &mut l[8 * k..8 * k + 8],
                        );
                    }
                }
                let (sumqx, sumq2) = sum_qx_q2(&weight, &xval, &l);
                if sumq2 > 0.0 {
                    scale = sumqx / sumq2;
                }
            }
            if scale < 0.0 {
                scale = -scale;
                for s in &mut block_signs {
                    *s = !*s;
                }
            }
            for k in 0..2 {
                // Every level set here is on the grid (C aborts otherwise).
                let gi = g.index_of(&l[8 * k..8 * k + 8]).max(0) as usize;
                let i8 = 2 * ib + k;
                yb[2 + i8] = (gi & 255) as u8;
                yb[66 + i8 / 4] |= ((gi >> 8) << (2 * (i8 % 4))) as u8;
                yb[2 + QK_K / 8 + i8] = block_signs[k];
            }
            scales[ib] = scale;
            max_scale = max_scale.max(scale);
        }
        if max_scale == 0.0 {
            continue;
        }
        let d = max_scale / 31.0;
        yb[0..2].copy_from_slice(&f16_bytes(d * 0.9875f32));
        let id = 1.0 / d;
        for ib in 0..QK_K / 16 {
            let l = nearest_int(0.5 * (id * scales[ib] - 1.0)).clamp(0, 15) as u8;
            if ib % 2 == 0 {
                yb[74 + ib / 2] = l;
            } else {
                yb[74 + ib / 2] |= l << 4;
            }
        }
    }
}

/// The values sorted ascending with their positions (glibc's stable `qsort`).
fn sorted_idx(xb: &[f32]) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..xb.len()).collect();
    idx.sort_by(|&a, &b| {
        if xb[a] < xb[b] {
            std::cmp::Ordering::Less
        } else if xb[a] > xb[b] {
            std::cmp::Ordering::Greater
        } else {
            std::cmp::Ordering::Equal
        }
    });
    idx
}

/// `quantize_row_iq1_s_impl` for one row.
pub(super) fn iq1_s_row(x: &[f32], y: &mut [u8], qw_row: &[f32]) {
    let g = grid(GridKind::Iq1);
    const BS: usize = 32;
    let x_p = [-1.0 + IQ1S_DELTA, IQ1S_DELTA, 1.0 + IQ1S_DELTA];
    let x_m = [-1.0 - IQ1S_DELTA, -IQ1S_DELTA, 1.0 - IQ1S_DELTA];
    for (ibl, (xbl, yb)) in x.chunks_exact(QK_K).zip(y.chunks_exact_mut(50)).enumerate() {
        yb.fill(0);
        let mut qh = [0u16; 8];
        let mut scales = [0f32; 8];
        let mut shifts = [0i8; 8];
        let mut max_scale = 0.0f32;
        let mut sumx2 = 0.0f32;
        for &v in xbl {
            sumx2 += v * v;
        }
        let sigma2 = 2.0 * sumx2 / QK_K as f32;
        for ib in 0..QK_K / BS {
            let xb = &xbl[BS * ib..BS * ib + BS];
            let qw = &qw_row[QK_K * ibl + BS * ib..];
            let mut weight = [0f32; BS];
            for i in 0..BS {
                weight[i] = qw[i] * (sigma2 + xb[i] * xb[i]).sqrt();
            }
            let mut max = xb[0].abs();
            for &v in &xb[1..] {
                max = max.max(v.abs());
            }
            if max < GROUP_MAX_EPS_IQ1_S {
                scales[ib] = 0.0;
                shifts[ib] = 1;
                continue;
            }
            let idx = sorted_idx(xb);
            let mut sumx = [0f32; BS + 1];
            let mut sumw = [0f32; BS + 1];
            for j in 0..BS {
                let i = idx[j];
                sumx[j + 1] = sumx[j] + weight[i] * xb[i];
                sumw[j + 1] = sumw[j] + weight[i];
            }
            let mut best_score = -f32::MAX;
            let mut scale = max;
            let (mut besti1, mut besti2, mut best_shift) = (-1i32, -1i32, 0i32);
            for i1 in 0..=BS {
                for i2 in i1..=BS {
                    for (xs, shift) in [(&x_p, 1), (&x_m, -1)] {
                        let sumqx = (sumx[i1] - sumx[0]) * xs[0]
                            + (sumx[i2] - sumx[i1]) * xs[1]
                            + (sumx[BS] - sumx[i2]) * xs[2];
                        let sumq2 = (sumw[i1] - sumw[0]) * xs[0] * xs[0]
                            + (sumw[i2] - sumw[i1]) * xs[1] * xs[1]
                            + (sumw[BS] - sumw[i2]) * xs[2] * xs[2];
                        if sumq2 > 0.0 && sumqx * sumqx > best_score * sumq2 {
                            scale = sumqx / sumq2;
                            best_score = scale * sumqx;
                            besti1 = i1 as i32;
                            besti2 = i2 as i32;
                            best_shift = shift;
                        }
                    }
                }
            }
            if besti1 < 0 || besti2 < 0 || best_shift == 0 {
                scales[ib] = 0.0;
                shifts[ib] = 1;
                continue;
            }
            let mut l = [0i8; BS];
            for j in 0..BS {
                l[idx[j]] = if (j as i32) < besti1 {
                    0
                } else if (j as i32) < besti2 {
                    1
                } else {
                    2
                };
            }
            if scale < 0.0 {
                for v in &mut l {
                    *v = 2 - *v;
                }
                scale = -scale;
                best_shift = -best_shift;
            }
            let xx = if best_shift == 1 { &x_p } else { &x_m };
            let mut all_on_grid = true;
            let mut index = [0usize; BS / 8];
            for k in 0..BS / 8 {
                let gi = g.index_of(&l[8 * k..8 * k + 8]);
                index[k] = if gi < 0 {
                    all_on_grid = false;
                    let nb = g.neighbours_at(gi);
                    g.best_neighbour_iq1(
                        nb,
                        &xb[8 * k..],
                        &weight[8 * k..],
                        scale,
                        xx,
                        &mut l[8 * k..8 * k + 8],
                    )
                } else {
                    gi as usize
                };
            }
            if !all_on_grid {
                let mut sumqx = 0.0f32;
                let mut sumq2 = 0.0f32;
                for k in 0..BS / 8 {
                    let pg = &g.points[index[k]];
                    for j in 0..8 {
                        let w = weight[8 * k + j];
                        let q = xx[((pg[j] - 1) / 2) as usize];
                        sumqx += w * q * xb[8 * k + j];
                        sumq2 += w * q * q;
                    }
                }
                if sumqx > 0.0 && sumq2 > 0.0 {
                    scale = sumqx / sumq2;
                }
            }
            let mut h = 0u16;
            for k in 0..BS / 8 {
                yb[2 + (BS / 8) * ib + k] = (index[k] & 255) as u8;
                h |= ((index[k] >> 8) as u16) << (3 * k);
            }
            qh[ib] = h;
            scales[ib] = scale;
            shifts[ib] = best_shift as i8;
            max_scale = max_scale.max(scale);
        }
        if max_scale != 0.0 {
            let d = max_scale / 15.0;
            yb[0..2].copy_from_slice(&f16_bytes(d * 1.125));
            let id = 1.0 / d;
            for ib in 0..QK_K / BS {
                let mut l = nearest_int(0.5 * (id * scales[ib] - 1.0)).clamp(0, 7);
                if shifts[ib] == -1 {
                    l |= 8;
                }
                qh[ib] |= (l as u16) << 12;
            }
        }
        for (i, q) in qh.iter().enumerate() {
            yb[34 + 2 * i..36 + 2 * i].copy_from_slice(&q.to_le_bytes());
        }
    }
}

/// `quantize_row_iq1_m_impl` for one row (`qw_row` may be absent: weights `x²`).
pub(super) fn iq1_m_row(x: &[f32], y: &mut [u8], qw_row: Option<&[f32]>) {
    let g = grid(GridKind::Iq1);
    const BS: usize = 16;
    let delta = IQ1S_DELTA;
    let x_p = [-1.0 + delta, delta, 1.0 + delta];
    let x_m = [-1.0 - delta, -delta, 1.0 - delta];
    let masks = [0x00u8, 0x80, 0x08, 0x88];
    for (ibl, (xbl, yb)) in x.chunks_exact(QK_K).zip(y.chunks_exact_mut(56)).enumerate() {
        yb.fill(0);
        // qs[0..32] qh[32..48] scales[48..56]
        let mut scales = [0f32; QK_K / BS];
        let mut shifts = [0i8; QK_K / BS];
        let mut max_scale = 0.0f32;
        let mut sumx2 = 0.0f32;
        for &v in xbl {
            sumx2 += v * v;
        }
        let sigma2 = 2.0 * sumx2 / QK_K as f32;
        let weights_for = |ib: usize, xb: &[f32], weight: &mut [f32; BS]| match qw_row {
            Some(qw) => {
                let qw = &qw[QK_K * ibl + BS * ib..];
                for i in 0..BS {
                    weight[i] = qw[i] * (sigma2 + xb[i] * xb[i]).sqrt();
                }
            }
            None => {
                for i in 0..BS {
                    weight[i] = xb[i] * xb[i];
                }
            }
        };
        for ib in 0..QK_K / BS {
            let xb = &xbl[BS * ib..BS * ib + BS];
            let mut weight = [0f32; BS];
            weights_for(ib, xb, &mut weight);
            let mut max = xb[0].abs();
            for &v in &xb[1..] {
                max = max.max(v.abs());
            }
            if max < GROUP_MAX_EPS_IQ1_M {
                scales[ib] = 0.0;
                shifts[ib] = 0;
                continue;
            }
            let idx = sorted_idx(xb);
            let mut px = [[0f32; BS + 1]; 2];
            let mut pw = [[0f32; BS + 1]; 2];
            for j in 0..BS {
                let i = idx[j];
                let h = if i < BS / 2 { 0 } else { 1 };
                px[h][j + 1] = px[h][j] + weight[i] * xb[i];
                px[1 - h][j + 1] = px[1 - h][j];
                pw[h][j + 1] = pw[h][j] + weight[i];
                pw[1 - h][j + 1] = pw[1 - h][j];
            }
            let mut st = Iq1mBest {
                best_score: -f32::MAX,
                scale: max,
                besti1: -1,
                besti2: -1,
                best_k: -1,
            };
            iq1m_search(&px, &pw, &x_p, &x_m, &mut st);
            let Iq1mBest {
                mut scale,
                besti1,
                besti2,
                mut best_k,
                ..
            } = st;
            if besti1 < 0 || besti2 < 0 || best_k < 0 {
                scales[ib] = 0.0;
                shifts[ib] = 0;
                continue;
            }
            let mut l = [0i8; BS];
            for j in 0..BS {
                l[idx[j]] = if (j as i32) < besti1 {
                    0
                } else if (j as i32) < besti2 {
                    1
                } else {
                    2
                };
            }
            if scale < 0.0 {
                for v in &mut l {
                    *v = 2 - *v;
                }
                scale = -scale;
                best_k = 3 - best_k;
            }
            let mut all_on_grid = true;
            let mut index = [0usize; BS / 8];
            for k in 0..BS / 8 {
                let xx = half_xx_static(k, best_k, &x_p, &x_m);
                let gi = g.index_of(&l[8 * k..8 * k + 8]);
                index[k] = if gi < 0 {
                    all_on_grid = false;
                    let nb = g.neighbours_at(gi);
                    g.best_neighbour_iq1(
                        nb,
                        &xb[8 * k..],
                        &weight[8 * k..],
                        scale,
                        xx,
                        &mut l[8 * k..8 * k + 8],
                    )
                } else {
                    gi as usize
                };
            }
            if !all_on_grid {
                let mut sumqx_f = 0.0f32;
                let mut sumq2_f = 0.0f32;
                for k in 0..BS / 8 {
                    let xx = half_xx_static(k, best_k, &x_p, &x_m);
                    let pg = &g.points[index[k]];
                    for j in 0..8 {
                        let w = weight[8 * k + j];
                        let q = xx[((pg[j] - 1) / 2) as usize];
                        sumqx_f += w * q * xb[8 * k + j];
                        sumq2_f += w * q * q;
                    }
                }
                if sumqx_f > 0.0 && sumq2_f > 0.0 {
                    scale = sumqx_f / sumq2_f;
                }
            }
            yb[2 * ib] = (index[0] & 255) as u8;
            yb[2 * ib + 1] = (index[1] & 255) as u8;
            yb[32 + ib] = ((index[0] >> 8) | ((index[1] >> 8) << 4)) as u8;
            scales[ib] = scale;
            shifts[ib] = best_k as i8;
            max_scale = max_scale.max(scale);
        }
        if max_scale == 0.0 {
            continue;
        }
        let mut sc = [0u16; 4];
        let mut d = max_scale / 15.0;
        let id = 1.0 / d;
        let mut sumqx_f = 0.0f32;
        let mut sumq2_f = 0.0f32;
        for ib in 0..QK_K / BS {
            let l = nearest_int(0.5 * (id * scales[ib] - 1.0)).clamp(0, 7);
            sc[ib / 4] |= (l as u16) << (3 * (ib % 4));
            yb[32 + ib] |= masks[shifts[ib] as usize];
            let xb = &xbl[BS * ib..BS * ib + BS];
            let mut weight = [0f32; BS];
            weights_for(ib, xb, &mut weight);
            for k in 0..BS / 8 {
                let xx = half_xx_static(k, shifts[ib] as i32, &x_p, &x_m);
                let gi =
                    yb[2 * ib + k] as usize + (((yb[32 + ib] as usize) << (8 - 4 * k)) & 0x700);
                let pg = &g.points[gi];
                for j in 0..8 {
                    let w = weight[8 * k + j];
                    let q = xx[((pg[j] - 1) / 2) as usize] * (2 * l + 1) as f32;
                    sumqx_f += w * q * xb[8 * k + j];
                    sumq2_f += w * q * q;
                }
            }
        }
        if sumq2_f > 0.0 {
            d = sumqx_f / sumq2_f;
        }
        let s = half::f16::from_f32(d * 1.1125).to_bits();
        sc[0] |= (s & 0x000f) << 12;
        sc[1] |= (s & 0x00f0) << 8;
        sc[2] |= (s & 0x0f00) << 4;
        sc[3] |= s & 0xf000;
        for (i, v) in sc.iter().enumerate() {
            yb[48 + 2 * i..50 + 2 * i].copy_from_slice(&v.to_le_bytes());
        }
    }
}

const IQ1M_BS: usize = 16;

/// The running best of the IQ1_M split search.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Iq1mBest {
    best_score: f32,
    scale: f32,
    besti1: i32,
    besti2: i32,
    best_k: i32,
}

impl Iq1mBest {
    /// One candidate, as ggml's loop weighs it.
    #[inline(always)]
    fn consider(&mut self, sumqx: f32, sumq2: f32, i1: usize, i2: usize, k: usize) {
        if sumq2 > 0.0 && sumqx * sumqx > self.best_score * sumq2 {
            self.scale = sumqx / sumq2;
            self.best_score = self.scale * sumqx;
            self.besti1 = i1 as i32;
            self.besti2 = i2 as i32;
            self.best_k = k as i32;
        }
    }
}

/// The IQ1_M search over the two split points `i1 ≤ i2` of the sorted
/// values and the four shift pairs (the hot loop of
/// `quantize_row_iq1_m_impl`): the AVX2 twin where the CPU has it, else the
/// scalar reference.
fn iq1m_search(
    px: &[[f32; IQ1M_BS + 1]; 2],
    pw: &[[f32; IQ1M_BS + 1]; 2],
    x_p: &[f32; 3],
    x_m: &[f32; 3],
    st: &mut Iq1mBest,
) {
    #[cfg(target_arch = "x86_64")]
    if crate::isa() >= crate::Isa::Avx2 {
        // SAFETY: AVX2 is present (`isa()` detected it at run time).
        unsafe { iq1m_search_avx2(px, pw, x_p, x_m, st) };
        return;
    }
    iq1m_search_scalar(px, pw, x_p, x_m, st)
}

/// The scalar reference of [`iq1m_search`], ggml's loop as written.
fn iq1m_search_scalar(
    px: &[[f32; IQ1M_BS + 1]; 2],
    pw: &[[f32; IQ1M_BS + 1]; 2],
    x_p: &[f32; 3],
    x_m: &[f32; 3],
    st: &mut Iq1mBest,
) {
    const BS: usize = IQ1M_BS;
    let txs = [px[0][BS], px[1][BS]];
    let tws = [pw[0][BS], pw[1][BS]];
    let p2 = x_p[2];
    let m2 = x_m[2];
    let cp1 = x_p[0] * x_p[0] - x_p[1] * x_p[1];
    let cp2 = x_p[1] * x_p[1] - x_p[2] * x_p[2];
    let cm1 = x_m[0] * x_m[0] - x_m[1] * x_m[1];
    let cm2 = x_m[1] * x_m[1] - x_m[2] * x_m[2];
    for i1 in 0..=BS {
        for i2 in i1..=BS {
            let mut qx_p = [0f32; 2];
            let mut qx_m = [0f32; 2];
            let mut q2_p = [0f32; 2];
            let mut q2_m = [0f32; 2];
            for h in 0..2 {
                let sx = px[h][i1] + px[h][i2];
                qx_p[h] = txs[h] * p2 - sx;
                qx_m[h] = txs[h] * m2 - sx;
                q2_p[h] = tws[h] * p2 * p2 + pw[h][i1] * cp1 + pw[h][i2] * cp2;
                q2_m[h] = tws[h] * m2 * m2 + pw[h][i1] * cm1 + pw[h][i2] * cm2;
            }
            let sumqx = [
                qx_p[0] + qx_p[1],
                qx_p[0] + qx_m[1],
                qx_m[0] + qx_p[1],
                qx_m[0] + qx_m[1],
            ];
            let sumq2 = [
                q2_p[0] + q2_p[1],
                q2_p[0] + q2_m[1],
                q2_m[0] + q2_p[1],
                q2_m[0] + q2_m[1],
            ];
            for k in 0..4 {
                st.consider(sumqx[k], sumq2[k], i1, i2, k);
            }
        }
    }
}

/// The AVX2 twin of [`iq1m_search_scalar`]: for each `i1`, eight `i2` at a
/// time, every lane's sums computed with the scalar's operations in its
/// order (separate multiplies and adds). A group of eight whose every
/// candidate fails the test against the current best cannot change it (the
/// best only changes on a success), so it is skipped; otherwise its
/// candidates are weighed one by one in the scalar's order, with the
/// scalar's arithmetic on the same values. Same answer, bit for bit.
///
/// # Safety
/// The CPU must have AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn iq1m_search_avx2(
    px: &[[f32; IQ1M_BS + 1]; 2],
    pw: &[[f32; IQ1M_BS + 1]; 2],
    x_p: &[f32; 3],
    x_m: &[f32; 3],
    st: &mut Iq1mBest,
) {
    use std::arch::x86_64::*;
    const BS: usize = IQ1M_BS;
    const PAD: usize = BS + 1 + 8;
    let txs = [px[0][BS], px[1][BS]];
    let tws = [pw[0][BS], pw[1][BS]];
    let p2 = x_p[2];
    let m2 = x_m[2];
    let cp1 = x_p[0] * x_p[0] - x_p[1] * x_p[1];
    let cp2 = x_p[1] * x_p[1] - x_p[2] * x_p[2];
    let cm1 = x_m[0] * x_m[0] - x_m[1] * x_m[1];
    let cm2 = x_m[1] * x_m[1] - x_m[2] * x_m[2];
    let mut pxp = [[0f32; PAD]; 2];
    let mut pwp = [[0f32; PAD]; 2];
    for h in 0..2 {
        pxp[h][..BS + 1].copy_from_slice(&px[h]);
        pwp[h][..BS + 1].copy_from_slice(&pw[h]);
    }
    let zero = _mm256_setzero_ps();
    let lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    let mut sqx = [[0f32; 8]; 4];
    let mut sq2 = [[0f32; 8]; 4];
    for i1 in 0..=BS {
        // The per-i1 parts, as the scalar computes them.
        let tp: [f32; 2] = std::array::from_fn(|h| txs[h] * p2);
        let tm: [f32; 2] = std::array::from_fn(|h| txs[h] * m2);
        let cp: [f32; 2] = std::array::from_fn(|h| tws[h] * p2 * p2 + pw[h][i1] * cp1);
        let cm: [f32; 2] = std::array::from_fn(|h| tws[h] * m2 * m2 + pw[h][i1] * cm1);
        let mut i2 = i1;
        while i2 <= BS {
            let nvalid = (BS + 1 - i2).min(8);
            let mut qxp = [zero; 2];
            let mut qxm = [zero; 2];
            let mut q2p = [zero; 2];
            let mut q2m = [zero; 2];
            for h in 0..2 {
                // SAFETY: i2 + 8 <= BS + 8 < PAD.
                let vx = unsafe { _mm256_loadu_ps(pxp[h].as_ptr().add(i2)) };
                // SAFETY: as above.
                let vw = unsafe { _mm256_loadu_ps(pwp[h].as_ptr().add(i2)) };
                let sx = _mm256_add_ps(_mm256_set1_ps(px[h][i1]), vx);
                qxp[h] = _mm256_sub_ps(_mm256_set1_ps(tp[h]), sx);
                qxm[h] = _mm256_sub_ps(_mm256_set1_ps(tm[h]), sx);
                q2p[h] = _mm256_add_ps(
                    _mm256_set1_ps(cp[h]),
                    _mm256_mul_ps(vw, _mm256_set1_ps(cp2)),
                );
                q2m[h] = _mm256_add_ps(
                    _mm256_set1_ps(cm[h]),
                    _mm256_mul_ps(vw, _mm256_set1_ps(cm2)),
                );
            }
            let vqx = [
                _mm256_add_ps(qxp[0], qxp[1]),
                _mm256_add_ps(qxp[0], qxm[1]),
                _mm256_add_ps(qxm[0], qxp[1]),
                _mm256_add_ps(qxm[0], qxm[1]),
            ];
            let vq2 = [
                _mm256_add_ps(q2p[0], q2p[1]),
                _mm256_add_ps(q2p[0], q2m[1]),
                _mm256_add_ps(q2m[0], q2p[1]),
                _mm256_add_ps(q2m[0], q2m[1]),
            ];
            let best = _mm256_set1_ps(st.best_score);
            let valid =
                _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(nvalid as i32), lane));
            let mut any = _mm256_setzero_ps();
            for k in 0..4 {
                let pos = _mm256_cmp_ps::<_CMP_GT_OQ>(vq2[k], zero);
                let gain = _mm256_cmp_ps::<_CMP_GT_OQ>(
                    _mm256_mul_ps(vqx[k], vqx[k]),
                    _mm256_mul_ps(best, vq2[k]),
                );
                any = _mm256_or_ps(any, _mm256_and_ps(pos, gain));
            }
            if _mm256_movemask_ps(_mm256_and_ps(any, valid)) != 0 {
                for k in 0..4 {
                    // SAFETY: each row of sqx/sq2 holds 8 f32.
                    unsafe {
                        _mm256_storeu_ps(sqx[k].as_mut_ptr(), vqx[k]);
                        _mm256_storeu_ps(sq2[k].as_mut_ptr(), vq2[k]);
                    }
                }
                for j in 0..nvalid {
                    for k in 0..4 {
                        st.consider(sqx[k][j], sq2[k][j], i1, i2 + j, k);
                    }
                }
            }
            i2 += 8;
        }
    }
}

fn half_xx_static<'a>(k: usize, shift: i32, x_p: &'a [f32; 3], x_m: &'a [f32; 3]) -> &'a [f32; 3] {
    if k == 0 {
        if shift < 2 {
            x_p
        } else {
            x_m
        }
    } else if shift % 2 == 0 {
        x_p
    } else {
        x_m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The AVX2 neighbour search against the scalar reference on random
    /// neighbour lists, values, weights and scales (ties included: zero
    /// weights, repeated indices), for every 8-coordinate grid.
    /// The AVX2 IQ1_M split search against the scalar reference on random
    /// sorted blocks and weights (zero weights and repeated values included).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn iq1m_search_avx2_equals_scalar() {
        use rand::{Rng, SeedableRng};
        if !std::arch::is_x86_feature_detected!("avx2") {
            eprintln!("no AVX2 on this CPU: nothing to compare");
            return;
        }
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let delta = IQ1S_DELTA;
        let x_p = [-1.0 + delta, delta, 1.0 + delta];
        let x_m = [-1.0 - delta, -delta, 1.0 - delta];
        const BS: usize = IQ1M_BS;
        for case in 0..20000 {
            let mut xb = [0f32; BS];
            let mut weight = [0f32; BS];
            for i in 0..BS {
                xb[i] = match case % 5 {
                    0 => (rng.gen_range(-3i32..=3) as f32) * 0.25,
                    _ => rng.gen_range(-2.0f32..2.0),
                };
                weight[i] = match case % 7 {
                    0 => 0.0,
                    1 => 1.0,
                    _ => rng.gen_range(0.0f32..2.0),
                };
            }
            if case % 11 == 0 {
                weight[rng.gen_range(0..BS)] = 0.0;
            }
            let idx = sorted_idx(&xb);
            let mut px = [[0f32; BS + 1]; 2];
            let mut pw = [[0f32; BS + 1]; 2];
            for j in 0..BS {
                let i = idx[j];
                let h = if i < BS / 2 { 0 } else { 1 };
                px[h][j + 1] = px[h][j] + weight[i] * xb[i];
                px[1 - h][j + 1] = px[1 - h][j];
                pw[h][j + 1] = pw[h][j] + weight[i];
                pw[1 - h][j + 1] = pw[1 - h][j];
            }
            let start = Iq1mBest {
                best_score: -f32::MAX,
                scale: 1.5,
                besti1: -1,
                besti2: -1,
                best_k: -1,
            };
            let mut want = start;
            iq1m_search_scalar(&px, &pw, &x_p, &x_m, &mut want);
            let mut got = start;
            // SAFETY: AVX2 checked above.
            unsafe { iq1m_search_avx2(&px, &pw, &x_p, &x_m, &mut got) };
            assert_eq!(got.besti1, want.besti1, "case {case}");
            assert_eq!(got.besti2, want.besti2, "case {case}");
            assert_eq!(got.best_k, want.best_k, "case {case}");
            assert_eq!(got.scale.to_bits(), want.scale.to_bits(), "case {case}");
            assert_eq!(
                got.best_score.to_bits(),
                want.best_score.to_bits(),
                "case {case}"
            );
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn nearest_avx2_equals_scalar() {
        use rand::{Rng, SeedableRng};
        if !std::arch::is_x86_feature_detected!("avx2") {
            eprintln!("no AVX2 on this CPU: nothing to compare");
            return;
        }
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for kind in [
            GridKind::Iq2Xxs,
            GridKind::Iq2Xs,
            GridKind::Iq2S,
            GridKind::Iq1,
        ] {
            let g = grid(kind);
            let n = g.points.len();
            for case in 0..4000 {
                let len = rng.gen_range(1..=300);
                let nb: Vec<u16> = (0..len).map(|_| rng.gen_range(0..n) as u16).collect();
                let mut xval = [0f32; 8];
                let mut weight = [0f32; 8];
                for i in 0..8 {
                    xval[i] = rng.gen_range(0.0f32..4.0);
                    weight[i] = match case % 4 {
                        0 => 0.0,
                        1 => 1.0,
                        _ => rng.gen_range(0.0f32..3.0),
                    };
                }
                let scale = match case % 3 {
                    0 => 1.0,
                    _ => rng.gen_range(1e-3f32..2.0),
                };
                let want = nearest_scalar(&g.points, &nb, &xval, &weight, scale);
                // SAFETY: AVX2 checked above; indices are below n.
                let got = unsafe { nearest_avx2(&g.points_f32, &nb, &xval, &weight, scale) };
                assert_eq!(got, want, "case {case}: {len} neighbours");
                if kind != GridKind::Iq1 {
                    continue;
                }
                let d = IQ1S_DELTA;
                let xg = if case % 2 == 0 {
                    [-1.0 + d, d, 1.0 + d]
                } else {
                    [-1.0 - d, -d, 1.0 - d]
                };
                let want = nearest_iq1_scalar(&g.points, &nb, &xval, &weight, scale, &xg);
                // SAFETY: AVX2 checked above; indices are below n.
                let got = unsafe { nearest_iq1_avx2(&g.levels, &nb, &xval, &weight, scale, &xg) };
                assert_eq!(got, want, "iq1 case {case}: {len} neighbours");
            }
        }
    }

    /// The grids rebuilt from the decoding tables against the first entries
    /// of ggml's `kgrid_2bit_256` and `kgrid_1bit_2048` (2 bits per coordinate).
    #[test]
    fn grids_match_ggml_kgrid() {
        let enc =
            |p: &[i8; 8]| -> u16 { (0..8).map(|i| (((p[i] - 1) / 2) as u16) << (2 * i)).sum() };
        let g = grid(GridKind::Iq2Xxs);
        let want = [
            0u16, 2, 5, 8, 10, 17, 20, 32, 34, 40, 42, 65, 68, 80, 88, 97,
        ];
        let got: Vec<u16> = g.points[..16].iter().map(enc).collect();
        assert_eq!(got, want);
        let g = grid(GridKind::Iq1);
        let want = [
            0u16, 2, 5, 8, 10, 17, 21, 32, 34, 40, 42, 69, 81, 84, 86, 101,
        ];
        let got: Vec<u16> = g.points[..16].iter().map(enc).collect();
        assert_eq!(got, want);
        // Every off-grid point has neighbours, every grid point maps to itself.
        for (i, p) in g.points.iter().enumerate() {
            let l: [i8; 8] = std::array::from_fn(|k| (p[k] - 1) / 2);
            assert_eq!(g.index_of(&l), i as i32);
        }
        assert!(g
            .map
            .iter()
            .filter(|&&m| m < 0)
            .all(|&m| !g.neighbours_at(m).is_empty()));
    }
}
