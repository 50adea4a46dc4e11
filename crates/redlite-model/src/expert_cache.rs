//! Expert streaming: the routed experts read from the GGUF file on demand,
//! through a cache with a byte budget, instead of all resident.
//!
//! An entry is one expert of one layer: its gate, up and down bytes, exactly
//! as stored in the file, each slice in a page-aligned buffer. Entries are
//! handed out as `Arc`s, so a forward pass holds the experts it selected while
//! it computes even if the cache evicts them meanwhile (the memory in use can
//! exceed the budget by the experts of one layer in flight). Misses are read
//! with positioned reads (`pread`), one request per slice, on reader threads
//! blocked on a queue, so a layer's missing slices all reach the disk at
//! once; optionally with `O_DIRECT` (bypassing the page cache: the aligned
//! range around each slice is read into the buffer and the slice used in
//! place). Buffers are recycled through a pool faulted in up front (fresh
//! memory is slower than the disk on some machines). What is evicted first
//! is the policy's choice (`cache_policy`: frequency with ageing by default,
//! or LRU; optionally per-layer quotas).
//!
//! The bytes are those the mapping would have given, and the kernels are the
//! same: outputs are bit-identical to the all-resident model.
//!
//! Prefetch: [`ExpertCache::prefetch`] starts reading a layer's predicted
//! experts in the background, on a smaller pool of its own (so at most that
//! many prefetch requests are in flight beside the demand reads). A
//! (layer, expert) being read is in the in-flight set: nobody reads it a
//! second time, and [`ExpertCache::get`] waits for it instead. Fetched entries
//! are inserted as normal entries.

use std::collections::{HashMap, HashSet, VecDeque};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use redlite_gguf::GgufFile;

use crate::weights::{Experts, Weights};
use crate::ModelError;

/// Alignment of buffers, file offsets and lengths for `O_DIRECT`.
pub const ALIGN: usize = 4096;

/// Reader threads of the expert cache (each between 1 and
/// [`ExpertReaders::MAX`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExpertReaders {
    /// Threads of demand reads, one request (one slice: an expert's gate,
    /// up or down) each; by default 32, so a layer's misses of a token (10
    /// experts, 30 slices) all reach the disk at once.
    pub demand: usize,
    /// Threads of prefetch: the most prefetch requests in flight, so reads
    /// ahead never crowd out the demand reads a step waits on; by default 6.
    pub prefetch: usize,
}

impl ExpertReaders {
    /// The most threads of either kind.
    pub const MAX: usize = 256;
}

impl Default for ExpertReaders {
    fn default() -> ExpertReaders {
        ExpertReaders {
            demand: 32,
            prefetch: 6,
        }
    }
}

impl std::str::FromStr for ExpertReaders {
    type Err = String;

    /// `DEMAND,PREFETCH`, e.g. `32,6`.
    fn from_str(s: &str) -> Result<ExpertReaders, String> {
        let bad = || {
            format!(
                "{s:?}: give the demand and prefetch reader threads as DEMAND,PREFETCH (e.g. \
                 32,6), each from 1 to {}",
                ExpertReaders::MAX
            )
        };
        let (a, b) = s.split_once(',').ok_or_else(bad)?;
        let r = ExpertReaders {
            demand: a.trim().parse().map_err(|_| bad())?,
            prefetch: b.trim().parse().map_err(|_| bad())?,
        };
        r.valid().then_some(r).ok_or_else(bad)
    }
}

impl ExpertReaders {
    fn valid(&self) -> bool {
        let ok = |n: usize| (1..=Self::MAX).contains(&n);
        ok(self.demand) && ok(self.prefetch)
    }
}

/// How the routed experts are streamed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExpertCacheOptions {
    /// Bytes of expert entries the cache keeps (at least one expert's entry:
    /// [`ExpertCache::min_budget`]).
    pub budget: u64,
    /// Read with `O_DIRECT` (no page cache); falls back to buffered reads,
    /// with a warning, where the filesystem refuses it.
    pub direct_io: bool,
    /// Read the next layer's predicted experts in the background while a
    /// layer computes (decode steps of one token).
    pub prefetch: bool,
    /// How many of the predicted experts to read ahead (the most likely
    /// first); `None`: [`default_prefetch_count`] of the experts per token.
    pub prefetch_top: Option<usize>,
    /// The eviction order (see [`CachePolicy`]).
    pub policy: CachePolicy,
    /// Each layer holds at most `budget / layers` bytes.
    pub per_layer: bool,
    /// Threads reading the experts from the file.
    pub readers: ExpertReaders,
}

/// Predicted experts read ahead by default: 60% of the experts per token,
/// rounded up (6 of Qwen3-Next's 10). Measured on the 512-expert cf2 file
/// with a 4 GiB cache on an SSD of 1.1 GB/s: reading all ten predictions
/// wastes 40% of the reads (the prediction holds 60% of the time) and
/// decodes 1.81 tok/s, no prefetch 1.88–1.91, the top 6 2.30 (top 5: 2.10,
/// top 8: 2.28): the most likely experts are the right ones more often
/// (72% for the top 6).
pub fn default_prefetch_count(experts_per_token: usize) -> usize {
    (experts_per_token * 3).div_ceil(5)
}

/// Hits, misses, bytes read and time waited on reads (of one layer or all).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExpertCacheCounters {
    /// Expert uses served from the cache.
    pub hits: u64,
    /// Expert uses that read the expert from the file.
    pub misses: u64,
    /// Expert bytes read from the file (gate + up + down of each miss; with
    /// `O_DIRECT` the device reads up to a page more around each slice).
    pub bytes_read: u64,
    /// Entries dropped to stay within the budget.
    pub evictions: u64,
    /// Wall time the forward pass waited on reads (I/O stall), its own and
    /// in-flight prefetches.
    pub stall: Duration,
    /// Experts predicted for this layer (from the previous layer's input)
    /// whose use was then seen.
    pub predictions: u64,
    /// Of those, the ones this layer then used.
    pub prediction_hits: u64,
    /// Experts read in the background by prefetch (not in `misses`).
    pub prefetches: u64,
    /// Expert bytes read by prefetch (not in `bytes_read`).
    pub prefetch_bytes: u64,
    /// Uses (counted in `hits`) that waited for an in-flight prefetch.
    pub waits: u64,
}

impl ExpertCacheCounters {
    fn add(&mut self, o: &ExpertCacheCounters) {
        self.hits += o.hits;
        self.misses += o.misses;
        self.bytes_read += o.bytes_read;
        self.evictions += o.evictions;
        self.stall += o.stall;
        self.predictions += o.predictions;
        self.prediction_hits += o.prediction_hits;
        self.prefetches += o.prefetches;
        self.prefetch_bytes += o.prefetch_bytes;
        self.waits += o.waits;
    }

    /// Prediction hits over predictions (0 when none).
    pub fn prediction_accuracy(&self) -> f64 {
        if self.predictions == 0 {
            0.0
        } else {
            self.prediction_hits as f64 / self.predictions as f64
        }
    }

    /// Hits over uses (0 when unused).
    pub fn hit_rate(&self) -> f64 {
        let uses = self.hits + self.misses;
        if uses == 0 {
            0.0
        } else {
            self.hits as f64 / uses as f64
        }
    }
}

/// A snapshot of the cache: its settings, what it holds, and its counters per
/// layer.
#[derive(Clone, Debug)]
pub struct ExpertCacheStats {
    pub budget: u64,
    /// Bytes of the largest entry (one expert of one layer).
    pub entry_bytes: u64,
    /// Bytes of the entries held now.
    pub resident_bytes: u64,
    pub entries: usize,
    /// Whether reads go through `O_DIRECT`.
    pub direct_io: bool,
    /// Whether the next layer's experts are prefetched.
    pub prefetch: bool,
    pub layers: Vec<ExpertCacheCounters>,
}

impl ExpertCacheStats {
    /// The counters summed over layers.
    pub fn total(&self) -> ExpertCacheCounters {
        let mut t = ExpertCacheCounters::default();
        for l in &self.layers {
            t.add(l);
        }
        t
    }
}

/// One matrix of every expert of a layer in the file.
#[derive(Clone, Debug)]
struct Slice {
    tensor: String,
    /// The matrix's type (a slice of Q4_K / Q5_K is repacked after its
    /// read when the cache holds the lanes layout).
    ty: redlite_gguf::GgmlType,
    shard: usize,
    /// Absolute file offset of expert 0's bytes.
    first: u64,
    stride: u64,
    len: usize,
    n_exp: usize,
}

impl Slice {
    /// Bytes reserved for this slice in an entry: enough for the aligned
    /// range around it wherever it starts.
    fn section(&self) -> usize {
        self.len.div_ceil(ALIGN) * ALIGN + ALIGN
    }
}

/// Gate, up, down of one layer.
struct LayerLayout {
    parts: [Slice; 3],
    entry_bytes: usize,
}

/// One expert's gate, up and down bytes, each slice in its own page-aligned
/// buffer (each slice is read by its own request).
pub struct ExpertEntry {
    bufs: [Option<Buf>; 3],
    /// `(start, len)` of gate, up, down in their buffers.
    parts: [(usize, usize); 3],
    bytes: usize,
    /// Where the buffers go when the entry is dropped (evicted and no longer
    /// used by a forward pass).
    pool: Weak<BufPool>,
}

impl Drop for ExpertEntry {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.upgrade() {
            pool.give(self.bufs.iter_mut().filter_map(Option::take));
        }
    }
}

impl ExpertEntry {
    fn part(&self, i: usize) -> &[u8] {
        let (s, n) = self.parts[i];
        self.bufs[i].as_ref().map_or(&[][..], |b| &b[s..s + n])
    }
    pub fn gate(&self) -> &[u8] {
        self.part(0)
    }
    pub fn up(&self) -> &[u8] {
        self.part(1)
    }
    pub fn down(&self) -> &[u8] {
        self.part(2)
    }
    /// Bytes this entry counts against the budget.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

struct Shard {
    path: PathBuf,
    buffered: File,
    /// The same file opened with `O_DIRECT`, when asked for and allowed.
    direct: Option<File>,
}

use crate::cache_policy::{CachePolicy, Key, Residency};

struct Inner {
    map: HashMap<Key, Arc<ExpertEntry>>,
    /// What is held, in eviction order (the policy).
    residency: Residency,
    stats: Vec<ExpertCacheCounters>,
    /// Entries being read (by `get` or a prefetch).
    inflight: HashSet<Key>,
    /// Per layer: the experts last predicted for it, until its next `get`.
    predicted: Vec<Option<Vec<usize>>>,
}

impl Inner {
    /// The entry of `key` if held, re-ranked by the policy (`used`: by a
    /// forward pass, which counts as a use; not by a prefetch).
    fn touch(&mut self, key: Key, used: bool) -> Option<Arc<ExpertEntry>> {
        let entry = self.map.get(&key)?.clone();
        self.residency.touch(key, used);
        Some(entry)
    }
}

/// The routed-expert cache of a model (see the module docs).
pub struct ExpertCache {
    layers: Vec<LayerLayout>,
    shards: Vec<Arc<Shard>>,
    budget: u64,
    inner: Mutex<Inner>,
    warnings: Vec<String>,
    /// Buffers of dropped entries (and, at start, of the whole budget),
    /// reused for the next misses.
    pool: Arc<BufPool>,
    /// Bytes of buffers faulted in at start, and the time it took.
    reserved: (u64, Duration),
    /// Signalled whenever reads leave the in-flight set.
    done: Condvar,
    prefetch: bool,
    prefetch_top: Option<usize>,
    /// The threads that read, one request (one slice) each at a time:
    /// persistent (no thread started per read), one pool for demand reads
    /// and a smaller one for prefetch.
    demand_io: Readers,
    prefetch_io: Readers,
    /// Q4_K / Q5_K slices are repacked into the lanes layout after their
    /// read ([`ExpertCache::set_lanes`]), as the resident experts are.
    lanes: Arc<std::sync::atomic::AtomicBool>,
}

/// A page-aligned buffer of anonymous memory, from the pool or mapped by a
/// reader thread ([`faulted_buf`]) (never a heap `vec![0; n]`: at this size it was memset on
/// the thread handing out the reads, a quarter of the run time).
type Buf = memmap2::MmapMut;

/// One slice read into its buffer: the bytes start at `start`.
struct SliceRead {
    buf: Buf,
    start: usize,
}

/// The three slice reads of one prefetched expert. Each read holds it; the
/// last to finish (or to be dropped, on failure or panic) inserts the entry
/// when all three succeeded, then takes the key out of the in-flight set and
/// wakes the waiters, so a failed read never leaves it claimed.
struct PendingPrefetch {
    cache: Arc<ExpertCache>,
    key: Key,
    got: Mutex<[Option<SliceRead>; 3]>,
}

impl Drop for PendingPrefetch {
    fn drop(&mut self) {
        let cache = &self.cache;
        let (il, _) = self.key;
        let got = std::mem::take(self.got.get_mut().unwrap_or_else(|p| p.into_inner()));
        let entry = cache
            .layers
            .get(il)
            .and_then(|layout| cache.assemble(layout, got));
        let mut g = cache.lock();
        if let Some(entry) = entry {
            g.stats[il].prefetches += 1;
            g.stats[il].prefetch_bytes += cache.expert_bytes(il);
            cache.insert(&mut g, self.key, Arc::new(entry), false);
        }
        g.inflight.remove(&self.key);
        drop(g);
        cache.done.notify_all();
    }
}

/// Work for a reader thread.
type Job = Box<dyn FnOnce() + Send + 'static>;

/// Reader threads blocked on a queue: handing in a job wakes one of them at
/// once (no spinning, no wake-up ramp), so every request of a batch reaches
/// the disk together. The threads end when the pool is dropped and the
/// queue is empty.
struct Readers {
    shared: Arc<ReadersShared>,
}

struct ReadersShared {
    /// Waiting jobs, and whether the pool is closed.
    queue: Mutex<(VecDeque<Job>, bool)>,
    ready: Condvar,
}

impl Readers {
    fn new(n: usize, name: &str) -> Result<Readers, ModelError> {
        let shared = Arc::new(ReadersShared {
            queue: Mutex::new((VecDeque::new(), false)),
            ready: Condvar::new(),
        });
        for i in 0..n {
            let sh = Arc::clone(&shared);
            std::thread::Builder::new()
                .name(format!("{name}-{i}"))
                .spawn(move || sh.work())
                .map_err(|e| {
                    ModelError::Input(format!("starting the expert reader threads: {e}"))
                })?;
        }
        Ok(Readers { shared })
    }

    fn submit(&self, job: Job) {
        let mut q = self.shared.queue.lock().unwrap_or_else(|p| p.into_inner());
        q.0.push_back(job);
        drop(q);
        self.shared.ready.notify_one();
    }
}

impl ReadersShared {
    fn work(&self) {
        loop {
            let job = {
                let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
                loop {
                    if let Some(j) = q.0.pop_front() {
                        break j;
                    }
                    if q.1 {
                        return;
                    }
                    q = self.ready.wait(q).unwrap_or_else(|p| p.into_inner());
                }
            };
            // A panicking job drops what it holds (its result sender, its
            // pending prefetch), which reports the failure; the thread goes on.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
        }
    }
}

impl Drop for Readers {
    fn drop(&mut self) {
        // Not joined: the last owner of the cache may be a reader thread
        // finishing a prefetch.
        self.shared
            .queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .1 = true;
        self.shared.ready.notify_all();
    }
}

/// Slice buffers for reuse. Fresh memory is slow: the kernel zeroes every
/// page on first touch, and on a virtual machine the host may back it then
/// too (1.3 GB/s measured on one, against 5.6 MB of misses a layer); a
/// cache that filled its budget with fresh buffers spent half its time
/// there. So buffers are recycled, and the budget is faulted in up front.
struct BufPool {
    inner: Mutex<(Vec<Buf>, u64)>,
    /// Most bytes held (the budget: entries leaving the cache feed it, reads
    /// drain it, so cache plus pool stay near the budget).
    cap: u64,
}

impl BufPool {
    /// A buffer of `len` bytes from the pool. When none has that size, one
    /// of another size is released (so that allocating a fresh one keeps
    /// the total where it was) and `None` returned.
    fn take(&self, len: usize) -> Option<Buf> {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let i = match g.0.iter().rposition(|b| b.len() == len) {
            Some(i) => i,
            None => {
                if let Some(b) = g.0.pop() {
                    g.1 -= b.len() as u64;
                }
                return None;
            }
        };
        let b = g.0.swap_remove(i);
        g.1 -= b.len() as u64;
        Some(b)
    }

    /// Bytes held now.
    fn held(&self) -> u64 {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).1
    }

    fn give(&self, bufs: impl IntoIterator<Item = Buf>) {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        for b in bufs {
            if g.1 + b.len() as u64 <= self.cap {
                g.1 += b.len() as u64;
                g.0.push(b);
            }
        }
    }
}

/// A fresh buffer of `len` bytes with its pages faulted in by the kernel
/// when it is mapped (`MAP_POPULATE`).
fn faulted_buf(len: usize) -> std::io::Result<Buf> {
    memmap2::MmapOptions::new().len(len).populate().map_anon()
}

/// The pool with the budget's worth of entries of the first layer's slice
/// sizes faulted in, at most every expert of the file (where every layer has
/// those sizes; otherwise empty, and buffers are made as reads need them).
/// 4 GiB took 6.6–7.7 s on a virtual machine where fresh memory is slow.
fn prefaulted_pool(layers: &[LayerLayout], budget: u64) -> Result<Arc<BufPool>, ModelError> {
    use rayon::prelude::*;
    let pool = BufPool {
        inner: Mutex::new((Vec::new(), 0)),
        cap: budget,
    };
    let sections = |l: &LayerLayout| l.parts.each_ref().map(Slice::section);
    if let Some(first) = layers.first() {
        if layers.iter().all(|l| sections(l) == sections(first)) && first.entry_bytes > 0 {
            // No more than every expert of the file (a budget may be larger).
            let all = layers.len() as u64 * first.parts[0].n_exp as u64;
            let n = (budget / first.entry_bytes as u64).min(all) as usize;
            let sec = sections(first);
            let bufs = (0..3 * n)
                .into_par_iter()
                .map(|i| faulted_buf(sec[i % 3]))
                .collect::<std::io::Result<Vec<Buf>>>()
                .map_err(|e| {
                    ModelError::Input(format!(
                        "reserving the expert cache ({budget} bytes of memory): {e}"
                    ))
                })?;
            pool.give(bufs);
        }
    }
    Ok(Arc::new(pool))
}

fn tensor_err(path: &Path, tensor: &str, msg: String) -> ModelError {
    ModelError::Tensor {
        path: path.to_path_buf(),
        tensor: tensor.to_string(),
        msg,
    }
}

/// Repack whole blocks of `ty` in place into the lanes layout (a block at
/// a time through a copy); other types are left as they are.
fn repack_in_place(ty: redlite_gguf::GgmlType, data: &mut [u8]) {
    use redlite_quant::q16::lanes;
    let Some((bytes, _)) = lanes::layout(ty) else {
        return;
    };
    let mut tmp = [0u8; 256];
    for blk in data.chunks_exact_mut(bytes) {
        tmp[..bytes].copy_from_slice(blk);
        lanes::repack(ty, &tmp[..bytes], blk);
    }
}

impl ExpertCache {
    /// A cache over the routed experts of `weights` in `f`. Errors if the
    /// budget is below one expert's entry (the message gives the minimum) or a
    /// shard cannot be opened.
    pub(crate) fn new(
        f: &GgufFile,
        weights: &Weights,
        n_exp: usize,
        opts: &ExpertCacheOptions,
    ) -> Result<ExpertCache, ModelError> {
        let slice = |x: &Experts| -> Result<Slice, ModelError> {
            let t = &f.tensors[x.tensor];
            let row = x.ty.row_bytes(x.n_in as u64).unwrap_or(0) as usize;
            let len = x.n_out * row;
            if n_exp == 0 || x.offset + len > x.stride || x.stride * n_exp > t.n_bytes as usize {
                return Err(tensor_err(
                    f.path(),
                    &t.name,
                    format!(
                        "expert slices ({len} bytes at {} every {} bytes, {n_exp} experts) do \
                         not fit the tensor's {} bytes",
                        x.offset, x.stride, t.n_bytes
                    ),
                ));
            }
            Ok(Slice {
                tensor: t.name.clone(),
                ty: x.ty,
                shard: t.shard,
                first: t.abs_offset + x.offset as u64,
                stride: x.stride as u64,
                len,
                n_exp,
            })
        };
        let mut layers = Vec::with_capacity(weights.layers.len());
        for l in &weights.layers {
            let m = &l.moe;
            let parts = [slice(&m.gate)?, slice(&m.up)?, slice(&m.down)?];
            let entry_bytes = parts.iter().map(Slice::section).sum();
            layers.push(LayerLayout { parts, entry_bytes });
        }
        let min = layers.iter().map(|l| l.entry_bytes).max().unwrap_or(0) as u64;
        if opts.budget < min {
            return Err(ModelError::Input(format!(
                "{}: an expert cache of {} bytes cannot hold one expert: the minimum is {} bytes \
                 ({:.2} MiB: gate, up and down of the largest expert, page-aligned)",
                f.path().display(),
                opts.budget,
                min,
                min as f64 / (1u64 << 20) as f64
            )));
        }
        if !opts.readers.valid() {
            return Err(ModelError::Input(format!(
                "{}: expert cache readers {} (demand) and {} (prefetch): each must be from 1 to {}",
                f.path().display(),
                opts.readers.demand,
                opts.readers.prefetch,
                ExpertReaders::MAX
            )));
        }
        let mut warnings = Vec::new();
        let mut shards = Vec::new();
        for path in f.shard_paths() {
            let io = |e: std::io::Error| {
                ModelError::Input(format!("{}: opening for expert reads: {e}", path.display()))
            };
            let buffered = File::open(path).map_err(io)?;
            let direct = if opts.direct_io {
                match open_direct(path) {
                    Ok(d) => Some(d),
                    Err(e) => {
                        warnings.push(format!(
                            "{}: O_DIRECT refused ({e}); expert reads go through the page cache",
                            path.display()
                        ));
                        None
                    }
                }
            } else {
                None
            };
            shards.push(Arc::new(Shard {
                path: path.to_path_buf(),
                buffered,
                direct,
            }));
        }
        let inner = Inner {
            map: HashMap::new(),
            residency: Residency::new(opts.policy, opts.per_layer, opts.budget, layers.len()),
            stats: vec![ExpertCacheCounters::default(); layers.len()],
            inflight: HashSet::new(),
            predicted: vec![None; layers.len()],
        };
        let t0 = Instant::now();
        let pool = prefaulted_pool(&layers, opts.budget)?;
        let reserved = (pool.held(), t0.elapsed());
        Ok(ExpertCache {
            layers,
            shards,
            budget: opts.budget,
            inner: Mutex::new(inner),
            warnings,
            pool,
            reserved,
            done: Condvar::new(),
            prefetch: opts.prefetch,
            prefetch_top: opts.prefetch_top,
            demand_io: Readers::new(opts.readers.demand, "expert-read")?,
            prefetch_io: Readers::new(opts.readers.prefetch, "expert-prefetch")?,
            lanes: Arc::new(std::sync::atomic::AtomicBool::new(false)),
        })
    }

    /// Repack every Q4_K / Q5_K slice read from now on into the lanes
    /// layout (`redlite_quant::q16::lanes`), where this CPU has its kernels,
    /// so streamed experts compute exactly as repacked resident ones do.
    /// Called before the first read (entries already held keep their layout).
    pub(crate) fn set_lanes(&self, on: bool) {
        self.lanes.store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether slices are repacked into the lanes layout.
    pub fn lanes(&self) -> bool {
        self.lanes.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Bytes of entry buffers faulted in when the cache was made (the
    /// budget, where every layer's experts have the same shape), and the
    /// time that took.
    pub fn reserved(&self) -> (u64, Duration) {
        self.reserved
    }

    /// The smallest budget that holds one expert of every layer.
    pub fn min_budget(&self) -> u64 {
        self.layers.iter().map(|l| l.entry_bytes).max().unwrap_or(0) as u64
    }

    /// Bytes of one expert of layer `il` in the file (gate + up + down): what
    /// a miss reads.
    pub fn expert_bytes(&self, il: usize) -> u64 {
        self.layers
            .get(il)
            .map_or(0, |l| l.parts.iter().map(|p| p.len as u64).sum())
    }

    /// How many experts' entries fit the budget (at least 1): the group a
    /// prefill reads at a time.
    pub fn group_size(&self) -> usize {
        (self.budget / self.min_budget().max(1)).max(1) as usize
    }

    /// What could not be done as asked (e.g. `O_DIRECT` refused).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Whether the next layer's predicted experts are prefetched.
    pub fn prefetch_enabled(&self) -> bool {
        self.prefetch && self.prefetch_top != Some(0)
    }

    /// How many of a layer's `experts_per_token` predicted experts to read
    /// ahead.
    pub fn prefetch_count(&self, experts_per_token: usize) -> usize {
        self.prefetch_top
            .unwrap_or_else(|| default_prefetch_count(experts_per_token))
            .min(experts_per_token)
    }

    /// Whether every shard is read with `O_DIRECT`.
    pub fn direct_io(&self) -> bool {
        !self.shards.is_empty() && self.shards.iter().all(|s| s.direct.is_some())
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic elsewhere while holding the lock leaves consistent data
        // (every update is complete before the next starts).
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn stats(&self) -> ExpertCacheStats {
        let g = self.lock();
        ExpertCacheStats {
            budget: self.budget,
            entry_bytes: self.min_budget(),
            resident_bytes: g.residency.used(),
            entries: g.map.len(),
            direct_io: self.direct_io(),
            prefetch: self.prefetch,
            layers: g.stats.clone(),
        }
    }

    /// Zero the counters (the entries stay).
    pub fn reset_stats(&self) {
        let mut g = self.lock();
        g.stats
            .iter_mut()
            .for_each(|s| *s = ExpertCacheCounters::default());
    }

    /// The entries of `experts` (distinct expert ids) of layer `il`, in
    /// order: hits from the cache, misses read from the file in parallel;
    /// an expert being read already (by a prefetch) is waited for, not read
    /// again.
    pub fn get(&self, il: usize, experts: &[usize]) -> Result<Vec<Arc<ExpertEntry>>, ModelError> {
        let layout = self
            .layers
            .get(il)
            .ok_or_else(|| ModelError::Input(format!("expert cache: no layer {il}")))?;
        let mut out: Vec<Option<Arc<ExpertEntry>>> = vec![None; experts.len()];
        let mut waited = vec![false; experts.len()];
        let mut todo: Vec<usize> = (0..experts.len()).collect();
        let mut stall = Duration::ZERO;
        {
            let mut g = self.lock();
            if let Some(pred) = g.predicted[il].take() {
                let hits = experts.iter().filter(|e| pred.contains(e)).count();
                g.stats[il].predictions += pred.len() as u64;
                g.stats[il].prediction_hits += hits as u64;
            }
        }
        let result = loop {
            if todo.is_empty() {
                break Ok(());
            }
            // Hits; misses nobody reads (claimed here); misses in flight.
            let (mut missing, mut waiting) = (Vec::new(), Vec::new());
            {
                let mut g = self.lock();
                for &i in &todo {
                    let key = (il, experts[i]);
                    if let Some(entry) = g.touch(key, true) {
                        out[i] = Some(entry);
                        g.stats[il].hits += 1;
                        if waited[i] {
                            g.stats[il].waits += 1;
                        }
                    } else if g.inflight.contains(&key) {
                        waiting.push(i);
                    } else {
                        g.inflight.insert(key);
                        missing.push(i);
                    }
                }
            }
            if !missing.is_empty() {
                let t0 = Instant::now();
                let read = self.read_many(layout, missing.iter().map(|&i| experts[i]));
                stall += t0.elapsed();
                let mut g = self.lock();
                let mut failed = None;
                for (&i, r) in missing.iter().zip(read) {
                    let key = (il, experts[i]);
                    g.inflight.remove(&key);
                    match r {
                        Ok(entry) => {
                            let entry = Arc::new(entry);
                            g.stats[il].misses += 1;
                            g.stats[il].bytes_read += self.expert_bytes(il);
                            self.insert(&mut g, key, entry.clone(), true);
                            out[i] = Some(entry);
                        }
                        Err(e) => {
                            failed.get_or_insert(e);
                        }
                    }
                }
                drop(g);
                self.done.notify_all();
                if let Some(e) = failed {
                    break Err(e);
                }
            }
            if !waiting.is_empty() {
                let t0 = Instant::now();
                let mut g = self.lock();
                while waiting
                    .iter()
                    .any(|&i| g.inflight.contains(&(il, experts[i])))
                {
                    g = self.done.wait(g).unwrap_or_else(|p| p.into_inner());
                }
                drop(g);
                stall += t0.elapsed();
                waiting.iter().for_each(|&i| waited[i] = true);
            }
            // What was waited for is a hit now, or (evicted at once, or its
            // read failed) read here in the next round.
            todo = waiting;
        };
        self.lock().stats[il].stall += stall;
        result?;
        Ok(out.into_iter().flatten().collect())
    }

    /// Start reading experts `experts` of layer `il` in the background (on
    /// the prefetch readers), except those held or in flight; held ones become most
    /// recently used. Records them as the layer's prediction (scored at its
    /// next `get`). Nothing when prefetch is off.
    pub fn prefetch(self: &Arc<Self>, il: usize, experts: &[usize]) {
        let Some(layout) = self.layers.get(il) else {
            return;
        };
        if !self.prefetch {
            return;
        }
        let n_exp = layout.parts[0].n_exp;
        let mut claimed = Vec::new();
        {
            let mut g = self.lock();
            g.predicted[il] = Some(experts.to_vec());
            for &e in experts {
                let key = (il, e);
                if e >= n_exp || g.touch(key, false).is_some() || g.inflight.contains(&key) {
                    continue;
                }
                g.inflight.insert(key);
                claimed.push(e);
            }
        }
        for e in claimed {
            let pending = Arc::new(PendingPrefetch {
                cache: Arc::clone(self),
                key: (il, e),
                got: Mutex::new([None, None, None]),
            });
            for (k, p) in layout.parts.iter().enumerate() {
                let pending = Arc::clone(&pending);
                let job = self.slice_job(p, e, move |r| {
                    if let Ok(r) = r {
                        pending.got.lock().unwrap_or_else(|p| p.into_inner())[k] = Some(r);
                    }
                });
                self.prefetch_io.submit(job);
            }
        }
    }

    /// The job that reads expert `e`'s slice of `p` into a buffer of its own
    /// (a pooled one, or one mapped and faulted in by the reader thread) and hands the
    /// result to `done` (on the reader thread).
    fn slice_job(
        &self,
        p: &Slice,
        e: usize,
        done: impl FnOnce(std::io::Result<SliceRead>) + Send + 'static,
    ) -> Job {
        let shard = Arc::clone(&self.shards[p.shard]);
        let off = p.first + e as u64 * p.stride;
        let (len, section) = (p.len, p.section());
        let pooled = self.pool.take(section);
        let lanes = self.lanes().then_some(p.ty);
        Box::new(move || {
            let mut buf = match pooled {
                Some(b) => b,
                None => match faulted_buf(section) {
                    Ok(b) => b,
                    Err(e) => return done(Err(e)),
                },
            };
            let r = read_slice(&shard, off, len, &mut buf[..section]).map(|start| {
                if let Some(ty) = lanes {
                    repack_in_place(ty, &mut buf[start..start + len]);
                }
                SliceRead { buf, start }
            });
            done(r)
        })
    }

    /// The entry made of three slice reads (`None` unless all three are
    /// there; the buffers of an incomplete set go back to the pool).
    fn assemble(&self, layout: &LayerLayout, got: [Option<SliceRead>; 3]) -> Option<ExpertEntry> {
        match got {
            [Some(g), Some(u), Some(d)] => Some(ExpertEntry {
                parts: [
                    (g.start, layout.parts[0].len),
                    (u.start, layout.parts[1].len),
                    (d.start, layout.parts[2].len),
                ],
                bufs: [Some(g.buf), Some(u.buf), Some(d.buf)],
                bytes: layout.entry_bytes,
                pool: Arc::downgrade(&self.pool),
            }),
            got => {
                self.pool.give(got.into_iter().flatten().map(|r| r.buf));
                None
            }
        }
    }

    /// Experts `ids` of a layer read from the file, every slice of every
    /// expert a request of its own, all handed to the demand readers at once.
    fn read_many(
        &self,
        layout: &LayerLayout,
        ids: impl Iterator<Item = usize>,
    ) -> Vec<Result<ExpertEntry, ModelError>> {
        let ids: Vec<usize> = ids.collect();
        let mut errs: Vec<Option<ModelError>> = (0..ids.len()).map(|_| None).collect();
        let (tx, rx) = std::sync::mpsc::channel();
        for (i, &e) in ids.iter().enumerate() {
            if let Some(p) = layout.parts.iter().find(|p| e >= p.n_exp) {
                errs[i] = Some(tensor_err(
                    &self.shards[p.shard].path,
                    &p.tensor,
                    format!("expert {e} of {}", p.n_exp),
                ));
                continue;
            }
            for (k, p) in layout.parts.iter().enumerate() {
                let tx = tx.clone();
                let job = self.slice_job(p, e, move |r| {
                    let _ = tx.send((i, k, r));
                });
                self.demand_io.submit(job);
            }
        }
        // Ends when every job has sent (or, panicking, dropped) its sender.
        drop(tx);
        let mut got: Vec<[Option<SliceRead>; 3]> =
            (0..ids.len()).map(|_| [None, None, None]).collect();
        for (i, k, r) in rx {
            match r {
                Ok(r) => got[i][k] = Some(r),
                Err(ioe) => {
                    let p = &layout.parts[k];
                    let shard = &self.shards[p.shard];
                    let off = p.first + ids[i] as u64 * p.stride;
                    errs[i].get_or_insert(tensor_err(
                        &shard.path,
                        &p.tensor,
                        format!(
                            "reading expert {} ({} bytes at byte {off} of {}): {ioe}",
                            ids[i],
                            p.len,
                            shard.path.display()
                        ),
                    ));
                }
            }
        }
        got.into_iter()
            .zip(errs)
            .map(|(got, err)| match err {
                Some(e) => {
                    self.pool.give(got.into_iter().flatten().map(|r| r.buf));
                    Err(e)
                }
                None => self
                    .assemble(layout, got)
                    .ok_or_else(|| ModelError::Input("an expert slice read did not run".into())),
            })
            .collect()
    }

    /// Insert `entry` (`used`: read on demand, a use; a prefetch is not),
    /// evicting what the policy ranks lowest to stay within the budget (and
    /// the layer's quota).
    fn insert(&self, g: &mut Inner, key: Key, entry: Arc<ExpertEntry>, used: bool) {
        let bytes = entry.bytes as u64;
        // Read twice (a demand read beside a prefetch): keep the newer.
        g.map.insert(key, entry);
        for old in g.residency.admit(key, bytes, used) {
            g.stats[old.0].evictions += 1;
            // Its buffers return to the pool when the last user drops it.
            g.map.remove(&old);
        }
    }
}

/// Read `len` bytes at `off` into `dst` (page-aligned, at least
/// `len` rounded up to pages plus one page); returns where they start in
/// `dst`. With `O_DIRECT` the page-aligned range around them is read.
fn read_slice(shard: &Shard, off: u64, len: usize, dst: &mut [u8]) -> std::io::Result<usize> {
    let lead = (off % ALIGN as u64) as usize;
    let Some(direct) = &shard.direct else {
        shard
            .buffered
            .read_exact_at(&mut dst[lead..lead + len], off)?;
        return Ok(lead);
    };
    let a0 = off - lead as u64;
    let need = lead + len;
    let span = need.div_ceil(ALIGN) * ALIGN;
    let mut got = 0usize;
    while got < need {
        if !got.is_multiple_of(ALIGN) {
            // A short read mid-file left an unaligned position: finish the
            // rest through the page cache.
            shard
                .buffered
                .read_exact_at(&mut dst[got..need], a0 + got as u64)?;
            return Ok(lead);
        }
        match direct.read_at(&mut dst[got..span], a0 + got as u64) {
            Ok(0) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!("file ends {} bytes short", need - got),
                ))
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                // The filesystem took the open but refuses the read.
                shard
                    .buffered
                    .read_exact_at(&mut dst[got..need], a0 + got as u64)?;
                return Ok(lead);
            }
            Err(e) => return Err(e),
        }
    }
    Ok(lead)
}

/// Open `path` with `O_DIRECT` and check that an aligned read works.
fn open_direct(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)?;
    let mut buf = vec![0u8; 2 * ALIGN];
    let base = buf.as_ptr().align_offset(ALIGN).min(ALIGN);
    f.read_at(&mut buf[base..base + ALIGN], 0)?;
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page() -> Buf {
        faulted_buf(ALIGN).expect("mapping one page")
    }

    #[test]
    fn buffer_pool_is_bounded_and_trades_sizes() {
        let pool = BufPool {
            inner: Mutex::new((Vec::new(), 0)),
            cap: 3 * ALIGN as u64,
        };
        pool.give((0..4).map(|_| page()));
        assert_eq!(pool.held(), 3 * ALIGN as u64, "the cap bounds what is kept");
        let b = pool.take(ALIGN).expect("a buffer of the size held");
        assert_eq!(b.len(), ALIGN);
        assert_eq!(pool.held(), 2 * ALIGN as u64);
        // No buffer of that size: one of another size is released instead.
        assert!(pool.take(2 * ALIGN).is_none());
        assert_eq!(pool.held(), ALIGN as u64);
        pool.give([b]);
        assert_eq!(pool.held(), 2 * ALIGN as u64);
    }

    #[test]
    fn faulted_buffers_are_zero_and_page_aligned() {
        let b = faulted_buf(5 * ALIGN).expect("mapping");
        assert_eq!(b.len(), 5 * ALIGN);
        assert_eq!(b.as_ptr() as usize % ALIGN, 0);
        assert!(b.iter().all(|&x| x == 0));
    }
}
