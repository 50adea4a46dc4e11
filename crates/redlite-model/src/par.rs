//! The forward pass's own loops (copies, splits, gates, norms, gathers) on
//! all of the backend's threads.
//!
//! A prefill pass runs these between the backend's operations; run on one
//! thread they cost little on two cores but grow into the largest part of
//! the pass as cores are added (Amdahl), since the products shrink with the
//! thread count and they do not. Each helper here computes every element
//! exactly as the serial loop did, one element or one row at a time, so the
//! bits do not depend on the split; below [`PAR_MIN`] elements (a decode
//! step) it runs the serial loop in place, with no parallel region.
//!
//! The CPU forward pass runs inside the backend's pool
//! ([`redlite_backend::Backend::within`]), so rayon's parallel iterators
//! here use that pool's threads.

use rayon::prelude::*;
use std::mem::MaybeUninit;

/// Elements from which a loop runs as a parallel region.
pub(crate) const PAR_MIN: usize = 1 << 15;

/// Elements per task of the element-wise loops.
const CHUNK: usize = 1 << 14;

/// Rows per task so that each task holds about [`CHUNK`] elements.
fn rows_per_task(width: usize) -> usize {
    (CHUNK / width.max(1)).max(1)
}

/// `n` zeros; the clearing of a large buffer is shared by the threads.
pub(crate) fn zeros(n: usize) -> Vec<f32> {
    if n < PAR_MIN {
        return vec![0f32; n];
    }
    let mut v: Vec<f32> = Vec::with_capacity(n);
    v.spare_capacity_mut()[..n]
        .par_chunks_mut(CHUNK)
        .for_each(|c| c.fill(MaybeUninit::new(0.0)));
    // SAFETY: the capacity is at least `n` and the first `n` elements were
    // just written above.
    unsafe { v.set_len(n) };
    v
}

/// A copy of `x`, the copying shared by the threads.
pub(crate) fn copy(x: &[f32]) -> Vec<f32> {
    if x.len() < PAR_MIN {
        return x.to_vec();
    }
    let mut v: Vec<f32> = Vec::with_capacity(x.len());
    v.spare_capacity_mut()[..x.len()]
        .par_chunks_mut(CHUNK)
        .zip(x.par_chunks(CHUNK))
        .for_each(|(d, s)| {
            d.iter_mut().zip(s).for_each(|(d, &s)| {
                d.write(s);
            })
        });
    // SAFETY: the capacity is at least `x.len()` and every one of the first
    // `x.len()` elements was written above.
    unsafe { v.set_len(x.len()) };
    v
}

/// `f(&mut a[i], b[i])` for every element.
pub(crate) fn zip_mut<F>(a: &mut [f32], b: &[f32], f: F)
where
    F: Fn(&mut f32, f32) + Sync + Send,
{
    assert_eq!(a.len(), b.len(), "zip_mut: operand sizes");
    if a.len() < PAR_MIN {
        a.iter_mut().zip(b).for_each(|(a, &b)| f(a, b));
        return;
    }
    a.par_chunks_mut(CHUNK)
        .zip(b.par_chunks(CHUNK))
        .for_each(|(a, b)| a.iter_mut().zip(b).for_each(|(a, &b)| f(a, b)));
}

/// Elements from which a loop of `exp`s runs as a parallel region.
pub(crate) const PAR_MIN_EXP: usize = 1 << 12;

/// [`zip_mut`] for an `f` that takes an `exp` or so per element (a gate):
/// parallel from [`PAR_MIN_EXP`] elements, i.e. also in a decode step.
pub(crate) fn zip_mut_exp<F>(a: &mut [f32], b: &[f32], f: F)
where
    F: Fn(&mut f32, f32) + Sync + Send,
{
    assert_eq!(a.len(), b.len(), "zip_mut_exp: operand sizes");
    if a.len() < PAR_MIN_EXP || a.len() >= PAR_MIN {
        return zip_mut(a, b, f);
    }
    let per = a
        .len()
        .div_ceil(rayon::current_num_threads().max(1))
        .max(256);
    a.par_chunks_mut(per)
        .zip(b.par_chunks(per))
        .for_each(|(a, b)| a.iter_mut().zip(b).for_each(|(a, &b)| f(a, b)));
}

/// `a[i] += b[i]` for every element.
pub(crate) fn add_into(a: &mut [f32], b: &[f32]) {
    zip_mut(a, b, |a, b| *a += b);
}

/// `f(r, row)` for every row `r` of `width` values of `x`.
pub(crate) fn rows_mut<F>(x: &mut [f32], width: usize, f: F)
where
    F: Fn(usize, &mut [f32]) + Sync + Send,
{
    if width == 0 {
        return;
    }
    if x.len() < PAR_MIN {
        x.chunks_mut(width)
            .enumerate()
            .for_each(|(r, row)| f(r, row));
        return;
    }
    let per = rows_per_task(width);
    x.par_chunks_mut(per * width)
        .enumerate()
        .for_each(|(ci, rows)| {
            for (j, row) in rows.chunks_mut(width).enumerate() {
                f(ci * per + j, row)
            }
        });
}

/// `f(r, row_a, row_b)` for every row `r` of two row-aligned buffers, of
/// `wa` and `wb` values a row.
pub(crate) fn rows2_mut<F>(a: &mut [f32], wa: usize, b: &mut [f32], wb: usize, f: F)
where
    F: Fn(usize, &mut [f32], &mut [f32]) + Sync + Send,
{
    if wa == 0 || wb == 0 {
        return;
    }
    assert_eq!(a.len() / wa, b.len() / wb, "rows2_mut: row counts");
    if a.len() + b.len() < PAR_MIN {
        for (r, (ra, rb)) in a.chunks_mut(wa).zip(b.chunks_mut(wb)).enumerate() {
            f(r, ra, rb);
        }
        return;
    }
    let per = rows_per_task(wa + wb);
    a.par_chunks_mut(per * wa)
        .zip(b.par_chunks_mut(per * wb))
        .enumerate()
        .for_each(|(ci, (ra, rb))| {
            for (j, (ra, rb)) in ra.chunks_mut(wa).zip(rb.chunks_mut(wb)).enumerate() {
                f(ci * per + j, ra, rb)
            }
        });
}

/// Row `j` of `dst` (rows of `width` values) becomes row `src[j]` of `x`:
/// the gathering of each expert's tokens.
pub(crate) fn gather_rows(dst: &mut [f32], x: &[f32], width: usize, src: &[usize]) {
    assert_eq!(dst.len(), src.len() * width, "gather_rows: sizes");
    rows_mut(dst, width, |j, row| {
        row.copy_from_slice(&x[src[j] * width..(src[j] + 1) * width])
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(n: usize) -> Vec<f32> {
        (0..n)
            .map(|i| ((i * 7919) % 1013) as f32 * 0.37 - 50.0)
            .collect()
    }

    /// Every helper against its serial loop, below and above the size at
    /// which it goes parallel, on widths that do not divide the chunk.
    #[test]
    fn helpers_equal_serial_loops() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .expect("pool");
        pool.install(|| {
            for n_rows in [3usize, 40, 60, 700] {
                let w = 97;
                let n = n_rows * w;
                let x = values(n);
                let y: Vec<f32> = values(n + 5)[5..].to_vec();

                assert!(zeros(n).iter().all(|&v| v == 0.0) && zeros(n).len() == n);
                assert_eq!(copy(&x), x);

                let mut a = x.clone();
                zip_mut(&mut a, &y, |a, b| *a = *a * 1.5 - b);
                let want: Vec<f32> = x.iter().zip(&y).map(|(a, b)| a * 1.5 - b).collect();
                assert_eq!(a, want);

                let mut a = x.clone();
                zip_mut_exp(&mut a, &y, |a, b| *a = *a * 1.5 - b);
                assert_eq!(a, want);

                let mut a = x.clone();
                add_into(&mut a, &y);
                let want: Vec<f32> = x.iter().zip(&y).map(|(a, b)| a + b).collect();
                assert_eq!(a, want);

                let mut a = x.clone();
                rows_mut(&mut a, w, |r, row| {
                    row.iter_mut().for_each(|v| *v += r as f32)
                });
                let want: Vec<f32> = x
                    .iter()
                    .enumerate()
                    .map(|(i, v)| v + (i / w) as f32)
                    .collect();
                assert_eq!(a, want);

                let (wa, wb) = (w, 13);
                let mut a = x.clone();
                let mut b = values(n_rows * wb);
                let b0 = b.clone();
                rows2_mut(&mut a, wa, &mut b, wb, |r, ra, rb| {
                    ra[0] = r as f32;
                    rb[wb - 1] = -(r as f32);
                });
                for r in 0..n_rows {
                    assert_eq!(a[r * wa], r as f32);
                    assert_eq!(a[r * wa + 1..(r + 1) * wa], x[r * wa + 1..(r + 1) * wa]);
                    assert_eq!(b[r * wb + wb - 1], -(r as f32));
                    assert_eq!(b[r * wb..r * wb + wb - 1], b0[r * wb..r * wb + wb - 1]);
                }

                let src: Vec<usize> = (0..n_rows).map(|j| (j * 5 + 3) % n_rows).collect();
                let mut g = vec![f32::NAN; n];
                gather_rows(&mut g, &x, w, &src);
                for (j, &s) in src.iter().enumerate() {
                    assert_eq!(g[j * w..(j + 1) * w], x[s * w..(s + 1) * w]);
                }
            }
        });
    }
}
