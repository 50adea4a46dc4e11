//! Expert streaming: the routed experts read from the GGUF file on demand,
//! through a cache with a byte budget, instead of all resident.
//!
//! An entry is one expert of one layer: its gate, up and down bytes, exactly
//! as stored in the file, together in one 4096-aligned buffer. Entries are
//! handed out as `Arc`s, so a forward pass holds the experts it selected while
//! it computes even if the cache evicts them meanwhile (the memory in use can
//! exceed the budget by the experts of one layer in flight). Misses are read
//! with positioned reads (`pread`) on a pool of reader threads, a layer's
//! missing experts and each expert's three slices at once, optionally with
//! `O_DIRECT` (bypassing the page cache: the aligned range
//! around each slice is read into the aligned buffer and the slice used in
//! place). Eviction is least-recently-used.
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

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use redlite_gguf::GgufFile;

use crate::weights::{Experts, Weights};
use crate::ModelError;

/// Alignment of buffers, file offsets and lengths for `O_DIRECT`.
pub const ALIGN: usize = 4096;

/// Reader threads of demand reads (a layer's misses, each expert's three
/// slices at once): the most requests a forward pass keeps in flight.
const DEMAND_READERS: usize = 16;
/// Reader threads of prefetch: the most prefetch requests in flight, so
/// reads ahead never crowd out the demand reads a step waits on.
const PREFETCH_READERS: usize = 6;

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

/// One expert's gate, up and down bytes in one aligned buffer.
pub struct ExpertEntry {
    buf: Vec<u8>,
    /// `(start, len)` in `buf` of gate, up, down.
    parts: [(usize, usize); 3],
    bytes: usize,
}

impl ExpertEntry {
    fn part(&self, i: usize) -> &[u8] {
        let (s, n) = self.parts[i];
        &self.buf[s..s + n]
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

type Key = (usize, usize);

#[derive(Default)]
struct Inner {
    map: HashMap<Key, (Arc<ExpertEntry>, u64)>,
    lru: BTreeMap<u64, Key>,
    tick: u64,
    used: u64,
    stats: Vec<ExpertCacheCounters>,
    /// Entries being read (by `get` or a prefetch).
    inflight: HashSet<Key>,
    /// Per layer: the experts last predicted for it, until its next `get`.
    predicted: Vec<Option<Vec<usize>>>,
}

impl Inner {
    /// The entry of `key` if held, made most recently used.
    fn touch(&mut self, key: Key) -> Option<Arc<ExpertEntry>> {
        self.tick += 1;
        let tick = self.tick;
        let (entry, last) = self.map.get_mut(&key)?;
        let old = std::mem::replace(last, tick);
        let entry = entry.clone();
        self.lru.remove(&old);
        self.lru.insert(tick, key);
        Some(entry)
    }
}

/// The routed-expert cache of a model (see the module docs).
pub struct ExpertCache {
    layers: Vec<LayerLayout>,
    shards: Vec<Shard>,
    budget: u64,
    inner: Mutex<Inner>,
    warnings: Vec<String>,
    /// Buffers of evicted entries, reused for the next misses (a fresh
    /// buffer costs zeroing and page faults on every miss otherwise).
    pool: Mutex<Vec<Vec<u8>>>,
    /// Signalled whenever reads leave the in-flight set.
    done: Condvar,
    prefetch: bool,
    prefetch_top: Option<usize>,
    /// The threads that read: persistent (no thread started per read), one
    /// pool for demand reads and a smaller one for prefetch.
    demand_io: rayon::ThreadPool,
    prefetch_io: rayon::ThreadPool,
}

/// Takes a key out of the in-flight set (and wakes the waiters) when
/// dropped, so that a failed or panicking read never leaves it claimed.
struct Release<'a> {
    cache: &'a ExpertCache,
    key: Key,
}

impl Drop for Release<'_> {
    fn drop(&mut self) {
        self.cache.lock().inflight.remove(&self.key);
        self.cache.done.notify_all();
    }
}

/// Most buffers kept for reuse (memory beyond the budget: at most this
/// many entries).
const POOL_MAX: usize = 32;

fn tensor_err(path: &Path, tensor: &str, msg: String) -> ModelError {
    ModelError::Tensor {
        path: path.to_path_buf(),
        tensor: tensor.to_string(),
        msg,
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
            shards.push(Shard {
                path: path.to_path_buf(),
                buffered,
                direct,
            });
        }
        let inner = Inner {
            stats: vec![ExpertCacheCounters::default(); layers.len()],
            predicted: vec![None; layers.len()],
            ..Inner::default()
        };
        let readers = |n: usize, name: &'static str| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(n)
                .thread_name(move |i| format!("{name}-{i}"))
                .build()
                .map_err(|e| ModelError::Input(format!("starting the expert reader threads: {e}")))
        };
        Ok(ExpertCache {
            layers,
            shards,
            budget: opts.budget,
            inner: Mutex::new(inner),
            warnings,
            pool: Mutex::new(Vec::new()),
            done: Condvar::new(),
            prefetch: opts.prefetch,
            prefetch_top: opts.prefetch_top,
            demand_io: readers(DEMAND_READERS, "expert-read")?,
            prefetch_io: readers(PREFETCH_READERS, "expert-prefetch")?,
        })
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
            resident_bytes: g.used,
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
                    if let Some(entry) = g.touch(key) {
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
                            self.insert(&mut g, key, entry.clone());
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
                if e >= n_exp || g.touch(key).is_some() || g.inflight.contains(&key) {
                    continue;
                }
                g.inflight.insert(key);
                claimed.push(e);
            }
        }
        for e in claimed {
            let cache = Arc::clone(self);
            self.prefetch_io.spawn(move || cache.prefetch_one(il, e));
        }
    }

    /// Read expert `e` of layer `il` (claimed in flight) and insert it; a
    /// failed read is dropped (the demand read reports it).
    fn prefetch_one(&self, il: usize, e: usize) {
        let _release = Release {
            cache: self,
            key: (il, e),
        };
        let Some(layout) = self.layers.get(il) else {
            return;
        };
        if let Ok(entry) = self.read(layout, e) {
            let mut g = self.lock();
            g.stats[il].prefetches += 1;
            g.stats[il].prefetch_bytes += self.expert_bytes(il);
            self.insert(&mut g, (il, e), Arc::new(entry));
        }
    }

    /// Experts `ids` of a layer read from the file, all at once on the
    /// demand readers (each expert's slices in parallel too).
    fn read_many(
        &self,
        layout: &LayerLayout,
        ids: impl Iterator<Item = usize>,
    ) -> Vec<Result<ExpertEntry, ModelError>> {
        let ids: Vec<usize> = ids.collect();
        let mut read: Vec<Option<Result<ExpertEntry, ModelError>>> =
            (0..ids.len()).map(|_| None).collect();
        self.demand_io.scope(|s| {
            for (slot, &e) in read.iter_mut().zip(&ids) {
                s.spawn(move |_| *slot = Some(self.read(layout, e)));
            }
        });
        read.into_iter()
            .map(|r| {
                r.unwrap_or_else(|| Err(ModelError::Input("an expert read did not run".into())))
            })
            .collect()
    }

    /// Insert `entry` as the most recently used, evicting the least
    /// recently used to stay within the budget.
    fn insert(&self, g: &mut Inner, key: Key, entry: Arc<ExpertEntry>) {
        let bytes = entry.bytes as u64;
        while g.used + bytes > self.budget {
            let Some((_, old_key)) = g.lru.pop_first() else {
                break;
            };
            if let Some((old, _)) = g.map.remove(&old_key) {
                g.used -= old.bytes as u64;
                g.stats[old_key.0].evictions += 1;
                // Not in use by a forward pass: keep its buffer.
                if let Ok(old) = Arc::try_unwrap(old) {
                    let mut pool = self.pool.lock().unwrap_or_else(|p| p.into_inner());
                    if pool.len() < POOL_MAX {
                        pool.push(old.buf);
                    }
                }
            }
        }
        g.tick += 1;
        let tick = g.tick;
        if let Some((old, last)) = g.map.insert(key, (entry, tick)) {
            // Read twice: keep the newer.
            g.used -= old.bytes as u64;
            g.lru.remove(&last);
        }
        g.lru.insert(tick, key);
        g.used += bytes;
    }

    /// Read expert `e` of a layer from the file.
    fn read(&self, layout: &LayerLayout, e: usize) -> Result<ExpertEntry, ModelError> {
        let want = layout.entry_bytes + ALIGN;
        let pooled = self
            .pool
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop()
            .filter(|b| b.len() == want);
        let mut buf = pooled.unwrap_or_else(|| vec![0u8; want]);
        let base = buf.as_ptr().align_offset(ALIGN).min(ALIGN);
        // The three slices (gate, up, down) are read at once, each into its
        // own section of the buffer: three requests in flight instead of one
        // after another keeps the disk's queue fuller.
        let mut jobs = Vec::with_capacity(layout.parts.len());
        {
            let mut rest = &mut buf[base..];
            for p in &layout.parts {
                let shard = &self.shards[p.shard];
                if e >= p.n_exp {
                    return Err(tensor_err(
                        &shard.path,
                        &p.tensor,
                        format!("expert {e} of {}", p.n_exp),
                    ));
                }
                let (dst, tail) = std::mem::take(&mut rest).split_at_mut(p.section());
                rest = tail;
                jobs.push((p, shard, p.first + e as u64 * p.stride, dst));
            }
        }
        let read_one = |(p, shard, off, dst): (&Slice, &Shard, u64, &mut [u8])| {
            read_slice(shard, off, p.len, dst).map_err(|ioe| {
                tensor_err(
                    &shard.path,
                    &p.tensor,
                    format!(
                        "reading expert {e} ({} bytes at byte {off} of {}): {ioe}",
                        p.len,
                        shard.path.display()
                    ),
                )
            })
        };
        // On the reader pool this runs in (demand or prefetch): the first
        // slice here, the others on the pool's other threads.
        let mut starts: Vec<Option<Result<usize, ModelError>>> =
            (0..jobs.len()).map(|_| None).collect();
        rayon::scope(|sc| {
            let mut it = starts.iter_mut().zip(jobs);
            let first = it.next();
            for (slot, j) in it {
                sc.spawn(move |_| *slot = Some(read_one(j)));
            }
            if let Some((slot, j)) = first {
                *slot = Some(read_one(j));
            }
        });
        let starts = starts.into_iter().map(|r| {
            r.unwrap_or_else(|| Err(ModelError::Input("an expert slice read did not run".into())))
        });
        let mut parts = [(0usize, 0usize); 3];
        let mut at = base;
        for (k, (p, start)) in layout.parts.iter().zip(starts).enumerate() {
            parts[k] = (at + start?, p.len);
            at += p.section();
        }
        Ok(ExpertEntry {
            buf,
            parts,
            bytes: layout.entry_bytes,
        })
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
