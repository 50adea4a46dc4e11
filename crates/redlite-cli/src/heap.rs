//! The C allocator's settings for this process.
//!
//! A prefill pass allocates its intermediates (a projection's output of
//! 512 tokens is tens of MiB) and frees them within the pass. glibc's
//! defaults return such blocks to the kernel as soon as they are freed (by
//! `mmap` / `munmap` above its dynamic threshold, or by trimming the heap's
//! top), so the next layer's buffer of the same size page-faults and is
//! cleared by the kernel again: 0.8 M faults and about 6 % of a 512-token
//! pass on the 64-expert synthetic model (RESULTS, 2026-12-07, "CPU on
//! AVX2: … freed blocks kept in the heap …"). Keeping blocks below 1 GiB in
//! the heap and not trimming it gives each freed block back to the next
//! allocation instead. Memory in use is unchanged; what the process holds
//! between passes is at most its peak, which it reached during the pass
//! anyway. Blocks of 1 GiB and more
//! (a long context's KV slabs) are still mapped and unmapped on their own.
//!
//! Only the batch commands (`run`, `bench`, `logits`, `perplexity`,
//! `imatrix`) take these settings. The server keeps glibc's defaults: a
//! long-running process must give back what one request used (a 64 MB body
//! held at its peak, and copied when it grows in the heap instead of being
//! remapped, broke the server's memory bound in `serve_lifecycle`).

/// Largest block kept in the heap (larger ones are mapped on their own).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MMAP_THRESHOLD: i32 = 1 << 30;
/// The fallback where glibc refuses the larger threshold: the cap some
/// glibc versions put on it (half their 64 MiB arena heap).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MMAP_THRESHOLD_OLD_CAP: i32 = 32 << 20;

/// Apply the settings; call before any thread starts. Returns the mapping
/// threshold glibc accepted (`None` where there is no glibc, or it took
/// none).
pub fn tune() -> Option<usize> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: `mallopt` only changes the allocator's parameters under
        // its own lock; the values are in range for an `int`.
        unsafe {
            if libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX) == 0 {
                return None;
            }
            for t in [MMAP_THRESHOLD, MMAP_THRESHOLD_OLD_CAP] {
                if libc::mallopt(libc::M_MMAP_THRESHOLD, t) == 1 {
                    return Some(t as usize);
                }
            }
        }
        None
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        None
    }
}

#[cfg(test)]
mod tests {
    /// glibc takes both settings (a glibc that refused them would leave
    /// the prefill passes faulting again, silently).
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn glibc_accepts_the_thresholds() {
        let t = super::tune().expect("glibc refused the allocator settings");
        assert!(t >= super::MMAP_THRESHOLD_OLD_CAP as usize);
        // A block under the threshold now comes from the heap: freeing it
        // and asking again gives the same memory back (mapped blocks
        // would move or be faulted in afresh).
        let n = 24 << 20;
        let a = vec![1u8; n];
        let pa = a.as_ptr() as usize;
        drop(a);
        let b = vec![2u8; n];
        assert_eq!(b.as_ptr() as usize, pa, "a 24 MiB block was not reused");
    }
}
