//! IQ3_XXS and IQ3_S: ports of ggml's `iq3xs_init_impl` (the 256- and
//! 512-point grids of 4 three-bit levels, the map from 4 levels to a grid
//! index and each off-grid point's nearest grid points),
//! `iq3_find_best_neighbour`, `quantize_row_iq3_xxs_impl` (grid 256) and
//! `quantize_row_iq3_s_impl` (block size 32).
//!
//! The grids are rebuilt from the decoding tables in `iq_tables`: each byte
//! of an IQ3_XXS grid entry is one of 4, 12, …, 52, 62 (level 0…7), each
//! byte of an IQ3_S entry is `2l + 1`.

// Index loops mirror the C they port, statement for statement.
#![allow(clippy::needless_range_loop)]

use std::sync::OnceLock;

use super::{f16_bytes, nearest_int};
use crate::iq_tables::{IQ3S_GRID, IQ3XXS_GRID};

const QK_K: usize = 256;
const KMAP_SIZE: usize = 4096;
const GROUP_MAX_EPS_IQ3_XXS: f32 = 1e-8;
const K_MAX_Q: i32 = 8;

/// One grid with its search tables (`iq3_data[gindex]`).
pub(super) struct Grid3 {
    /// Grid points as `2l + 1` per coordinate.
    pub points: Vec<[i8; 4]>,
    /// Index of the 4 three-bit levels → grid index, or `-(offset + 1)`
    /// into `neighbours` for points off the grid.
    pub map: Vec<i32>,
    /// At each offset: a count `n`, then `n` grid indices.
    pub neighbours: Vec<u16>,
}

const XXS_LEVELS: [u8; 8] = [4, 12, 20, 28, 36, 44, 52, 62];

fn build(grid_size: usize) -> Grid3 {
    let levels: Vec<[u8; 4]> = if grid_size == 256 {
        IQ3XXS_GRID
            .iter()
            .map(|&g| {
                std::array::from_fn(|i| {
                    let b = (g >> (8 * i)) as u8;
                    XXS_LEVELS.iter().position(|&v| v == b).unwrap_or(0) as u8
                })
            })
            .collect()
    } else {
        IQ3S_GRID
            .iter()
            .map(|&g| std::array::from_fn(|i| ((g >> (8 * i)) as u8).saturating_sub(1) / 2))
            .collect()
    };
    let nwant = if grid_size == 256 { 2 } else { 3 };
    let points: Vec<[i8; 4]> = levels
        .iter()
        .map(|l| std::array::from_fn(|i| 2 * l[i] as i8 + 1))
        .collect();
    let mut map = vec![-1i32; KMAP_SIZE];
    for (i, l) in levels.iter().enumerate() {
        let mut index = 0usize;
        for k in 0..4 {
            index |= (l[k] as usize) << (3 * k);
        }
        map[index] = i as i32;
    }
    // Each off-grid point's neighbours: every grid point at the `nwant`
    // smallest distances, by distance then index (what ggml's sort of
    // (distance, index) pairs and its scan give), found with a histogram of
    // the squared distances (at most 4·14² = 784).
    let mut neighbours = Vec::new();
    let mut dist2 = vec![0u16; points.len()];
    for i in 0..KMAP_SIZE {
        if map[i] >= 0 {
            continue;
        }
        let pos: [i32; 4] = std::array::from_fn(|k| 2 * ((i >> (3 * k)) & 7) as i32 + 1);
        let mut hist = [0u32; 785];
        for (j, pg) in points.iter().enumerate() {
            let mut d2 = 0i32;
            for k in 0..4 {
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
    Grid3 {
        points,
        map,
        neighbours,
    }
}

pub(super) fn grid3(grid_size: usize) -> &'static Grid3 {
    static G: [OnceLock<Grid3>; 2] = [OnceLock::new(), OnceLock::new()];
    if grid_size == 256 {
        G[0].get_or_init(|| build(256))
    } else {
        G[1].get_or_init(|| build(512))
    }
}

impl Grid3 {
    fn index_of(&self, l: &[i8]) -> i32 {
        let mut u = 0usize;
        for i in 0..4 {
            u |= (l[i] as usize) << (3 * i);
        }
        self.map[u]
    }

    fn neighbours_at(&self, map_value: i32) -> &[u16] {
        let off = (-map_value - 1) as usize;
        let n = self.neighbours[off] as usize;
        &self.neighbours[off + 1..off + 1 + n]
    }

    /// `iq3_find_best_neighbour`: the grid point nearest `xval` (weighted)
    /// among `nb`; writes its levels to `l`.
    fn best_neighbour(
        &self,
        nb: &[u16],
        xval: &[f32],
        weight: &[f32],
        scale: f32,
        l: &mut [i8],
    ) -> usize {
        let mut best_d2 = f32::MAX;
        let mut grid_index = nb[0] as usize;
        for &j in nb {
            let pg = &self.points[j as usize];
            let mut d2 = 0.0f32;
            for i in 0..4 {
                let q = pg[i] as f32;
                let diff = scale * q - xval[i];
                d2 += weight[i] * diff * diff;
            }
            if d2 < best_d2 {
                best_d2 = d2;
                grid_index = j as usize;
            }
        }
        let pg = &self.points[grid_index];
        for i in 0..4 {
            l[i] = (pg[i] - 1) / 2;
        }
        grid_index
    }

    /// Levels of the 4 values at `id`, then the grid index, moving off-grid
    /// points to their best neighbour at `scale`.
    fn quantize4(
        &self,
        id: f32,
        scale: f32,
        xval: &[f32],
        waux: &[f32],
        l: &mut [i8],
    ) -> (usize, bool) {
        for i in 0..4 {
            let q = nearest_int(0.5 * (id * xval[i] - 1.0));
            l[i] = q.clamp(0, K_MAX_Q - 1) as i8;
        }
        let gi = self.index_of(l);
        if gi >= 0 {
            return (gi as usize, true);
        }
        let nb = self.neighbours_at(gi);
        (self.best_neighbour(nb, xval, waux, scale, l), false)
    }
}

impl Grid3 {
    /// ggml's scale search of IQ3_XXS and IQ3_S over 32 values: for each
    /// trial inverse scale `(2 K_MAX_Q - 1 + 0.2 is) / max`, `is` in
    /// `-steps..=steps`, the eight groups of four are put on the grid
    /// (levels into `laux`) and the weighted least-squares scale kept when
    /// it is better (its levels copied to `l`). Returns the scale and which
    /// groups landed on the grid; `on_grid0` is what ggml starts those flags
    /// at, and they stand when no trial wins.
    #[allow(clippy::too_many_arguments)]
    fn search_scale(
        &self,
        steps: i32,
        max: f32,
        xval: &[f32; 32],
        waux: &[f32; 32],
        weight: &[f32; 32],
        laux: &mut [i8; 32],
        l: &mut [i8; 32],
        on_grid0: bool,
    ) -> (f32, [bool; 8]) {
        let mut best = 0.0f32;
        let mut scale = max / (2 * K_MAX_Q - 1) as f32;
        let mut is_on_grid = [on_grid0; 8];
        let mut is_on_grid_aux = [on_grid0; 8];
        for is in -steps..=steps {
            let id = ((2 * K_MAX_Q - 1) as f32 + is as f32 * 0.2f32) / max;
            let this_scale = 1.0 / id;
            for k in 0..8 {
                let r = 4 * k..4 * k + 4;
                is_on_grid_aux[k] = self
                    .quantize4(
                        id,
                        this_scale,
                        &xval[r.clone()],
                        &waux[r.clone()],
                        &mut laux[r],
                    )
                    .1;
            }
            let (sumqx, sumq2) = sum_qx_q2(weight, xval, laux);
            if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
                scale = sumqx / sumq2;
                best = scale * sumqx;
                *l = *laux;
                is_on_grid = is_on_grid_aux;
            }
        }
        (scale, is_on_grid)
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

fn block_weights(
    qw_row: Option<&[f32]>,
    at: usize,
    xb: &[f32],
    sigma2: f32,
    weight: &mut [f32],
    waux: &mut [f32],
) {
    match qw_row {
        Some(qw) => {
            let qw = &qw[at..];
            for i in 0..xb.len() {
                weight[i] = qw[i] * (sigma2 + xb[i] * xb[i]).sqrt();
            }
        }
        None => {
            for i in 0..xb.len() {
                weight[i] = xb[i] * xb[i];
            }
        }
    }
    for i in 0..xb.len() {
        waux[i] = weight[i].sqrt();
    }
}

/// `quantize_row_iq3_xxs_impl(256, …)` for one row (`qw_row` may be
/// absent: weights `x²`). Block: d, 64 grid indices, 8 words of
/// 4×7 sign bits and a 4-bit scale.
pub(super) fn iq3_xxs_row(x: &[f32], y: &mut [u8], qw_row: Option<&[f32]>) {
    let g = grid3(256);
    for (ibl, (xbl, yb)) in x.chunks_exact(QK_K).zip(y.chunks_exact_mut(98)).enumerate() {
        yb.fill(0);
        let mut q3 = [0u8; QK_K / 4];
        let mut scales_and_signs = [0u32; QK_K / 32];
        let mut scales = [0f32; QK_K / 32];
        let mut max_scale = 0.0f32;
        let mut sumx2 = 0.0f32;
        for &v in xbl {
            sumx2 += v * v;
        }
        let sigma2 = 2.0 * sumx2 / QK_K as f32;
        for ib in 0..QK_K / 32 {
            let xb = &xbl[32 * ib..32 * ib + 32];
            let mut weight = [0f32; 32];
            let mut waux = [0f32; 32];
            let mut xval = [0f32; 32];
            let mut laux = [0i8; 32];
            let mut block_signs = [0u8; 4];
            block_weights(
                qw_row,
                QK_K * ibl + 32 * ib,
                xb,
                sigma2,
                &mut weight,
                &mut waux,
            );
            for k in 0..4 {
                let mut nflip = 0;
                let mut s = 0u8;
                for i in 0..8 {
                    if xb[8 * k + i] >= 0.0 {
                        xval[8 * k + i] = xb[8 * k + i];
                    } else {
                        xval[8 * k + i] = -xb[8 * k + i];
                        nflip += 1;
                        s |= 1 << i;
                    }
                }
                if nflip % 2 == 1 {
                    let mut imin = 0;
                    let mut min = weight[8 * k] * xb[8 * k] * xb[8 * k];
                    for i in 1..8 {
                        let ax = weight[8 * k + i] * xb[8 * k + i] * xb[8 * k + i];
                        if ax < min {
                            min = ax;
                            imin = i;
                        }
                    }
                    xval[8 * k + imin] = -xval[8 * k + imin];
                    s ^= 1 << imin;
                }
                block_signs[k] = s & 127;
            }
            let mut max = xval[0];
            for &v in &xval[1..] {
                max = max.max(v);
            }
            let mut l = [0i8; 32];
            if max < GROUP_MAX_EPS_IQ3_XXS {
                scales[ib] = 0.0;
                continue;
            }
            let (mut scale, is_on_grid) =
                g.search_scale(15, max, &xval, &waux, &weight, &mut laux, &mut l, true);
            let n_not_ongrid = is_on_grid.iter().filter(|&&b| !b).count();
            if n_not_ongrid > 0 && scale > 0.0 {
                let id = 1.0 / scale;
                for k in 0..8 {
                    if is_on_grid[k] {
                        continue;
                    }
                    let r = 4 * k..4 * k + 4;
                    let (gi, _) =
                        g.quantize4(id, scale, &xval[r.clone()], &waux[r.clone()], &mut l[r]);
                    let pg = &g.points[gi];
                    for i in 0..4 {
                        l[4 * k + i] = (pg[i] - 1) / 2;
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
            for k in 0..8 {
                // Every level set here is on the grid (C aborts otherwise).
                q3[8 * ib + k] = g.index_of(&l[4 * k..4 * k + 4]).max(0) as u8;
            }
            scales_and_signs[ib] = block_signs[0] as u32
                | (block_signs[1] as u32) << 7
                | (block_signs[2] as u32) << 14
                | (block_signs[3] as u32) << 21;
            scales[ib] = scale;
            max_scale = max_scale.max(scale);
        }
        if max_scale == 0.0 {
            continue;
        }
        let d = max_scale / 31.0;
        yb[0..2].copy_from_slice(&f16_bytes(d * 1.0125f32));
        let id = 1.0 / d;
        for ib in 0..QK_K / 32 {
            let l = nearest_int(0.5 * (id * scales[ib] - 1.0)).clamp(0, 15);
            scales_and_signs[ib] |= (l as u32) << 28;
        }
        yb[2..2 + QK_K / 4].copy_from_slice(&q3);
        for (i, v) in scales_and_signs.iter().enumerate() {
            let o = 2 + QK_K / 4 + 4 * i;
            yb[o..o + 4].copy_from_slice(&v.to_le_bytes());
        }
    }
}

/// `quantize_row_iq3_s_impl(32, …)` for one row (`qw_row` may be absent:
/// weights `x²`). Block: d, 64 grid low bytes, 8 bytes of grid high bits,
/// 32 sign bytes, 4 bytes of 4-bit scales.
pub(super) fn iq3_s_row(x: &[f32], y: &mut [u8], qw_row: Option<&[f32]>) {
    const BS: usize = 32;
    const BS4: usize = BS / 4;
    const BS8: usize = BS / 8;
    const QS: usize = 2;
    const QH: usize = QS + QK_K / 4;
    const SIGNS: usize = QH + QK_K / 32;
    const SCALES: usize = SIGNS + QK_K / 8;
    let g = grid3(512);
    for (ibl, (xbl, yb)) in x
        .chunks_exact(QK_K)
        .zip(y.chunks_exact_mut(110))
        .enumerate()
    {
        yb.fill(0);
        // ggml advances its qs and signs pointers only past the groups it
        // quantizes (an all-zero group leaves them in place): kept as is.
        let mut qs = QS;
        let mut signs = SIGNS;
        let mut scales = [0f32; QK_K / BS];
        let mut max_scale = 0.0f32;
        let mut sumx2 = 0.0f32;
        for &v in xbl {
            sumx2 += v * v;
        }
        let sigma2 = 2.0 * sumx2 / QK_K as f32;
        for ib in 0..QK_K / BS {
            let xb = &xbl[BS * ib..BS * ib + BS];
            let mut weight = [0f32; BS];
            let mut waux = [0f32; BS];
            let mut xval = [0f32; BS];
            let mut laux = [0i8; BS];
            let mut block_signs = [0u8; BS8];
            block_weights(
                qw_row,
                QK_K * ibl + BS * ib,
                xb,
                sigma2,
                &mut weight,
                &mut waux,
            );
            for k in 0..BS8 {
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
            let mut l = [0i8; BS];
            if max == 0.0 {
                scales[ib] = 0.0;
                continue;
            }
            let (mut scale, is_on_grid) =
                g.search_scale(9, max, &xval, &waux, &weight, &mut laux, &mut l, false);
            let n_not_ongrid = is_on_grid.iter().filter(|&&b| !b).count();
            if n_not_ongrid > 0 && scale > 0.0 {
                let id = 1.0 / scale;
                // ggml redoes every group here, on the grid or not.
                for k in 0..BS4 {
                    let r = 4 * k..4 * k + 4;
                    let (gi, _) =
                        g.quantize4(id, scale, &xval[r.clone()], &waux[r.clone()], &mut l[r]);
                    let pg = &g.points[gi];
                    for i in 0..4 {
                        l[4 * k + i] = (pg[i] - 1) / 2;
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
            for k in 0..BS4 {
                // Every level set here is on the grid (C aborts otherwise).
                let gi = g.index_of(&l[4 * k..4 * k + 4]).max(0) as usize;
                yb[qs + k] = (gi & 255) as u8;
                let bit = ib * BS4 + k;
                yb[QH + bit / 8] |= ((gi >> 8) << (bit % 8)) as u8;
            }
            qs += BS4;
            yb[signs..signs + BS8].copy_from_slice(&block_signs);
            signs += BS8;
            scales[ib] = scale;
            max_scale = max_scale.max(scale);
        }
        if max_scale == 0.0 {
            continue;
        }
        let d = max_scale / 31.0;
        yb[0..2].copy_from_slice(&f16_bytes(d * 1.033f32));
        let id = 1.0 / d;
        for ib in (0..QK_K / BS).step_by(2) {
            let l1 = nearest_int(0.5 * (id * scales[ib] - 1.0)).clamp(0, 15);
            let l2 = nearest_int(0.5 * (id * scales[ib + 1] - 1.0)).clamp(0, 15);
            yb[SCALES + ib / 2] = (l1 | (l2 << 4)) as u8;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The grids rebuilt from the decoding tables against the first entries
    /// of ggml's `kgrid_256` and `kgrid_512` (3 bits per coordinate).
    #[test]
    fn grids_match_ggml_kgrid() {
        let enc =
            |p: &[i8; 4]| -> u16 { (0..4).map(|i| (((p[i] - 1) / 2) as u16) << (3 * i)).sum() };
        let g = grid3(256);
        let want = [
            0u16, 2, 4, 9, 11, 15, 16, 18, 25, 34, 59, 61, 65, 67, 72, 74,
        ];
        let got: Vec<u16> = g.points[..16].iter().map(enc).collect();
        assert_eq!(got, want);
        assert_eq!(enc(&g.points[255]), 3992);
        let g = grid3(512);
        let want = [0u16, 1, 2, 5, 7, 8, 9, 10, 12, 14, 16, 17, 21, 27, 32, 34];
        let got: Vec<u16> = g.points[..16].iter().map(enc).collect();
        assert_eq!(got, want);
        assert_eq!(enc(&g.points[511]), 4032);
        for g in [grid3(256), grid3(512)] {
            for (i, p) in g.points.iter().enumerate() {
                let l: [i8; 4] = std::array::from_fn(|k| (p[k] - 1) / 2);
                assert_eq!(g.index_of(&l), i as i32);
            }
            assert!(g
                .map
                .iter()
                .filter(|&&m| m < 0)
                .all(|&m| !g.neighbours_at(m).is_empty()));
        }
    }
}
