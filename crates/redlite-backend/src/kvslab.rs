//! Storage of whole KV cache blocks in 2 MiB slabs that the kernel may back
//! with transparent huge pages.
//!
//! Decode attention reads every KV block of a long context once a token.
//! In 4 KiB pages a block of 256 KiB spans 64 pages, and the reads pay a
//! page walk every few rows (measured: attention at 32K positions 7–15 %
//! faster in huge pages). So whole blocks ([`KvBuf::block`]) come from
//! slabs of 2 MiB, aligned to 2 MiB and advised `MADV_HUGEPAGE` (a hint:
//! where transparent huge pages are off, they are ordinary pages). A slab
//! holds as many blocks of one size as fit, and is unmapped as soon as all
//! of them are free. Sizes under 64 KiB (small models), every other
//! buffer, and any block whose slab cannot be mapped (or on systems other
//! than Linux) use the ordinary allocator.

use std::fmt;
use std::ops::Deref;
use std::ptr::NonNull;
use std::sync::Mutex;

/// Bytes of a slab, and its alignment.
pub const SLAB: usize = 2 << 20;
/// Smallest block a slab holds.
const MIN_SLOT: usize = 64 << 10;

/// A growable buffer of `T` for KV data: a `Vec`, or a fixed-capacity slot
/// of a slab (which moves to a `Vec` if it must grow past its slot).
pub struct KvBuf<T: Copy> {
    inner: Inner<T>,
}

enum Inner<T: Copy> {
    Heap(Vec<T>),
    Slab {
        ptr: NonNull<T>,
        len: usize,
        cap: usize,
    },
}

// SAFETY: a slab slot is owned by exactly one `KvBuf` (as a `Vec` owns its
// allocation); the pool is behind a mutex.
unsafe impl<T: Copy + Send> Send for KvBuf<T> {}
// SAFETY: shared access only reads the slot.
unsafe impl<T: Copy + Sync> Sync for KvBuf<T> {}

impl<T: Copy> KvBuf<T> {
    /// An empty heap buffer with room for `cap` values.
    pub fn with_capacity(cap: usize) -> KvBuf<T> {
        KvBuf {
            inner: Inner::Heap(Vec::with_capacity(cap)),
        }
    }

    /// An empty buffer with room for exactly `cap` values in a slab slot
    /// where the size suits one (a whole KV block), else on the heap.
    pub fn block(cap: usize) -> KvBuf<T> {
        let bytes = cap * std::mem::size_of::<T>();
        match slot_alloc(bytes) {
            Some(p) => KvBuf {
                inner: Inner::Slab {
                    ptr: p.cast(),
                    len: 0,
                    cap,
                },
            },
            None => KvBuf::with_capacity(cap),
        }
    }

    /// Whether the values are in a slab slot.
    pub fn in_slab(&self) -> bool {
        matches!(self.inner, Inner::Slab { .. })
    }

    /// Append `x`.
    pub fn extend_from_slice(&mut self, x: &[T]) {
        match &mut self.inner {
            Inner::Heap(v) => v.extend_from_slice(x),
            Inner::Slab { ptr, len, cap } => {
                if *len + x.len() <= *cap {
                    // SAFETY: the slot holds `cap` values and `len + x.len()
                    // <= cap`; `x` cannot overlap a slot this buffer owns
                    // mutably.
                    unsafe {
                        std::ptr::copy_nonoverlapping(x.as_ptr(), ptr.as_ptr().add(*len), x.len())
                    };
                    *len += x.len();
                } else {
                    let (p, bytes) = (ptr.cast(), *cap * std::mem::size_of::<T>());
                    let mut v = Vec::with_capacity(*len + x.len());
                    v.extend_from_slice(self);
                    v.extend_from_slice(x);
                    // The slot is given back once nothing refers to it.
                    self.inner = Inner::Heap(v);
                    slot_free(p, bytes);
                }
            }
        }
    }

    /// Append the values of `it`.
    pub fn extend(&mut self, it: impl IntoIterator<Item = T>) {
        match &mut self.inner {
            Inner::Heap(v) => v.extend(it),
            Inner::Slab { .. } => {
                for x in it {
                    self.push(x);
                }
            }
        }
    }

    fn push(&mut self, x: T) {
        if let Inner::Slab { ptr, len, cap } = &mut self.inner {
            if *len < *cap {
                // SAFETY: `len < cap`, inside the slot.
                unsafe { ptr.as_ptr().add(*len).write(x) };
                *len += 1;
                return;
            }
        }
        self.extend_from_slice(&[x]);
    }

    /// Keep the first `n` values.
    pub fn truncate(&mut self, n: usize) {
        match &mut self.inner {
            Inner::Heap(v) => v.truncate(n),
            Inner::Slab { len, .. } => *len = (*len).min(n),
        }
    }
}

impl<T: Copy> From<Vec<T>> for KvBuf<T> {
    fn from(v: Vec<T>) -> KvBuf<T> {
        KvBuf {
            inner: Inner::Heap(v),
        }
    }
}

impl<T: Copy> Deref for KvBuf<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        match &self.inner {
            Inner::Heap(v) => v,
            // SAFETY: the first `len` values of the slot were written.
            Inner::Slab { ptr, len, .. } => unsafe {
                std::slice::from_raw_parts(ptr.as_ptr(), *len)
            },
        }
    }
}

impl<T: Copy> Clone for KvBuf<T> {
    /// A copy with the same room, in a slab slot if the source is in one.
    fn clone(&self) -> KvBuf<T> {
        let mut c = match &self.inner {
            Inner::Heap(v) => return KvBuf::from(v.clone()),
            Inner::Slab { cap, .. } => KvBuf::block(*cap),
        };
        c.extend_from_slice(self);
        c
    }
}

impl<T: Copy> Drop for KvBuf<T> {
    fn drop(&mut self) {
        if let Inner::Slab { ptr, cap, .. } = &self.inner {
            slot_free(ptr.cast(), cap * std::mem::size_of::<T>());
        }
    }
}

impl<T: Copy> fmt::Debug for KvBuf<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "KvBuf {{ len: {}, slab: {} }}",
            self.len(),
            self.in_slab()
        )
    }
}

/// One slab: its base address and its free slots.
struct Slab {
    base: usize,
    free: Vec<u32>,
    slots: u32,
}

/// The slabs of one slot size.
struct Class {
    bytes: usize,
    slabs: Vec<Slab>,
    /// A slab that had a free slot at the last allocation.
    hint: usize,
}

static POOL: Mutex<Vec<Class>> = Mutex::new(Vec::new());

/// Slabs mapped now (for tests and statistics).
pub fn slabs_mapped() -> usize {
    let pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
    pool.iter().map(|c| c.slabs.len()).sum()
}

fn slot_alloc(bytes: usize) -> Option<NonNull<u8>> {
    if !(MIN_SLOT..=SLAB).contains(&bytes) {
        return None;
    }
    let mut pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
    let ci = match pool.iter().position(|c| c.bytes == bytes) {
        Some(i) => i,
        None => {
            pool.push(Class {
                bytes,
                slabs: Vec::new(),
                hint: 0,
            });
            pool.len() - 1
        }
    };
    let class = &mut pool[ci];
    let hinted = class
        .slabs
        .get(class.hint)
        .is_some_and(|s| !s.free.is_empty());
    let si = if hinted {
        Some(class.hint)
    } else {
        class.slabs.iter().position(|s| !s.free.is_empty())
    };
    let si = match si {
        Some(i) => i,
        None => {
            let base = map_slab()?;
            let slots = (SLAB / bytes) as u32;
            class.slabs.push(Slab {
                base,
                free: (0..slots).rev().collect(),
                slots,
            });
            class.slabs.len() - 1
        }
    };
    class.hint = si;
    let s = &mut class.slabs[si];
    let slot = s.free.pop()?;
    NonNull::new((s.base + slot as usize * bytes) as *mut u8)
}

fn slot_free(p: NonNull<u8>, bytes: usize) {
    let mut pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
    let addr = p.as_ptr() as usize;
    let base = addr & !(SLAB - 1);
    let Some(class) = pool.iter_mut().find(|c| c.bytes == bytes) else {
        debug_assert!(false, "a slab slot of an unknown size");
        return;
    };
    let Some(si) = class.slabs.iter().rposition(|s| s.base == base) else {
        debug_assert!(false, "a slab slot outside every slab");
        return;
    };
    let s = &mut class.slabs[si];
    s.free.push(((addr - base) / bytes) as u32);
    if s.free.len() == s.slots as usize {
        let s = class.slabs.swap_remove(si);
        unmap_slab(s.base);
        if class.hint >= class.slabs.len() {
            class.hint = 0;
        }
    }
}

/// A fresh 2 MiB-aligned anonymous mapping of [`SLAB`] bytes, advised to
/// use huge pages.
#[cfg(target_os = "linux")]
fn map_slab() -> Option<usize> {
    // SAFETY: an anonymous private mapping (no file, no fixed address); the
    // result is checked before use.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            2 * SLAB,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return None;
    }
    let a = p as usize;
    let base = (a + SLAB - 1) & !(SLAB - 1);
    let end = a + 2 * SLAB;
    // SAFETY: the ranges cut off lie inside the mapping just made and hold
    // nothing; the kept range is advised, a hint that cannot fail harmfully.
    unsafe {
        if base > a {
            libc::munmap(a as *mut libc::c_void, base - a);
        }
        if end > base + SLAB {
            libc::munmap((base + SLAB) as *mut libc::c_void, end - base - SLAB);
        }
        libc::madvise(base as *mut libc::c_void, SLAB, libc::MADV_HUGEPAGE);
    }
    Some(base)
}

#[cfg(not(target_os = "linux"))]
fn map_slab() -> Option<usize> {
    None
}

#[cfg(target_os = "linux")]
fn unmap_slab(base: usize) {
    // SAFETY: `base` is a slab mapped by `map_slab`, none of whose slots is
    // in use any more.
    unsafe { libc::munmap(base as *mut libc::c_void, SLAB) };
}

#[cfg(not(target_os = "linux"))]
fn unmap_slab(_: usize) {}

#[cfg(test)]
mod tests {
    use super::*;

    /// Blocks in slabs hold what was written, grow past their slot onto
    /// the heap, clone into a slot, and their slabs are unmapped when the
    /// last block goes (the tests of this module are the only users of a
    /// 96 KiB slot size, so the count is theirs).
    #[test]
    fn slots_hold_values_and_slabs_go_when_empty() {
        let cap = 96 << 10; // bytes of u8: 21 slots a slab
        let before = slabs_mapped();
        let mut bufs: Vec<KvBuf<u8>> = (0..30)
            .map(|i| {
                let mut b = KvBuf::<u8>::block(cap);
                b.extend((0..cap).map(|j| (i * 7 + j) as u8));
                b
            })
            .collect();
        if cfg!(target_os = "linux") {
            assert!(bufs.iter().all(|b| b.in_slab()));
            assert_eq!(slabs_mapped(), before + 2);
        }
        for (i, b) in bufs.iter().enumerate() {
            assert!(b.iter().enumerate().all(|(j, &x)| x == (i * 7 + j) as u8));
        }
        let c = bufs[3].clone();
        assert_eq!(&c[..], &bufs[3][..]);
        assert_eq!(c.in_slab(), bufs[3].in_slab());
        bufs[5].truncate(10);
        assert_eq!(bufs[5].len(), 10);
        bufs[5].extend_from_slice(&vec![9u8; cap]);
        assert!(!bufs[5].in_slab());
        assert_eq!(bufs[5].len(), cap + 10);
        assert!(bufs[5][..10]
            .iter()
            .enumerate()
            .all(|(j, &x)| x == (35 + j) as u8));
        drop(bufs);
        drop(c);
        assert_eq!(slabs_mapped(), before);
        // Small or odd sizes stay on the heap.
        assert!(!KvBuf::<u8>::block(1000).in_slab());
        assert!(!KvBuf::<u8>::with_capacity(cap).in_slab());
    }
}
