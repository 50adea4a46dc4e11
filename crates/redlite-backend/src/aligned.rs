//! f32 buffers that start on a cache line.
//!
//! The attention kernels read their query rows with 32-byte loads many
//! times over (once per cache row); a row that starts 16 bytes past a
//! 32-byte boundary makes every other load straddle two cache lines, which
//! costs the load-bound score kernel about a third of its speed. The
//! allocator only promises 16 bytes, so the buffers those kernels reread
//! are [`LineBuf`]s.

use std::ops::{Deref, DerefMut};

/// Sixteen f32 on one 64-byte line.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([f32; 16]);

/// A zero-initialised run of f32 whose first value starts a 64-byte line.
pub struct LineBuf {
    lines: Vec<Line>,
    len: usize,
}

impl LineBuf {
    /// `len` zeros.
    pub fn zeroed(len: usize) -> Self {
        LineBuf {
            lines: vec![Line([0.0; 16]); len.div_ceil(16)],
            len,
        }
    }

    /// A copy of `x` with every value mapped by `f`.
    pub fn from_map(x: &[f32], f: impl Fn(f32) -> f32) -> Self {
        let mut b = Self::zeroed(x.len());
        b.iter_mut().zip(x).for_each(|(d, &s)| *d = f(s));
        b
    }
}

impl Deref for LineBuf {
    type Target = [f32];
    fn deref(&self) -> &[f32] {
        // SAFETY: `Line` is `repr(C)` over `[f32; 16]` with no padding (64
        // bytes, align 64), so the lines are `16 · lines.len() ≥ len`
        // contiguous, initialised f32; the borrow of `self` covers the slice.
        unsafe { std::slice::from_raw_parts(self.lines.as_ptr().cast::<f32>(), self.len) }
    }
}

impl DerefMut for LineBuf {
    fn deref_mut(&mut self) -> &mut [f32] {
        // SAFETY: as in `deref`, and the unique borrow of `self` makes the
        // slice the only access to the lines.
        unsafe { std::slice::from_raw_parts_mut(self.lines.as_mut_ptr().cast::<f32>(), self.len) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_a_line_and_holds_the_values() {
        for len in [0, 1, 15, 16, 17, 4096, 4099] {
            let x: Vec<f32> = (0..len).map(|i| i as f32 * 0.5 - 3.0).collect();
            let b = LineBuf::from_map(&x, |v| v * 2.0);
            assert_eq!(b.len(), len);
            assert_eq!(b.as_ptr() as usize % 64, 0, "len {len}");
            assert!(b.iter().zip(&x).all(|(&a, &s)| a == s * 2.0), "len {len}");
            let mut z = LineBuf::zeroed(len);
            assert!(z.iter().all(|&v| v == 0.0));
            z.iter_mut().enumerate().for_each(|(i, v)| *v = i as f32);
            assert!(z.iter().enumerate().all(|(i, &v)| v == i as f32));
        }
    }
}
