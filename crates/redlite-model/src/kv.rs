//! The KV cache of one attention layer, in fixed-size blocks shared between
//! a sequence, its forks and its snapshots.
//!
//! A [`KvCache`] is a block table: block `i` holds positions
//! `i * KV_BLOCK_TOKENS ..` of the layer's keys and values. Blocks are
//! reference counted ([`Arc`]): forking a sequence or restoring a snapshot
//! copies the table, not the blocks, and a sequence copies a block only
//! when it writes into one that is shared (the partially filled last block:
//! full blocks are never written again, except when a rollback cuts into
//! one). [`KvCache::snapshot`] shares the full blocks and copies the partial
//! last one at its exact size, so the sequence goes on writing in place and
//! the snapshot holds no spare capacity.
//!
//! Each block has an id, unique for the life of the process (a copy gets a
//! new one), so a store of snapshots can count every block once however
//! many snapshots share it ([`KvCache::blocks`]). The attention kernel reads
//! the blocks in place through [`KvBlocks`], a table addressed by block
//! index: a device backend can keep the same table as indices into its own
//! pool of device blocks.
//!
//! Whole blocks are allocated in 2 MiB slabs advised to use huge pages
//! (`redlite_backend::kvslab`: long-context decode reads every block a
//! token, and 4 KiB pages make it wait on page walks); a snapshot's exact
//! copy of a partial block stays on the heap.
//!
//! The elements of a block are stored in the cache's [`KvTypes`] (f32,
//! f16, bf16, q8_0 or q4_0 for keys and values each, [`KvData`]): rows are
//! converted when appended, and the attention kernel converts them back a
//! chunk at a time as it reads.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use redlite_backend::{KvBlocks, KvData, KvRows, KvType, KvTypes};

/// Positions per KV block: a multiple of the CPU attention kernel's key
/// chunk, so attention over blocks sums exactly as over one array.
pub const KV_BLOCK_TOKENS: usize = 256;

static NEXT_BLOCK_ID: AtomicU64 = AtomicU64::new(1);

fn next_id() -> u64 {
    NEXT_BLOCK_ID.fetch_add(1, Ordering::Relaxed)
}

/// Up to [`KV_BLOCK_TOKENS`] positions of one layer's keys and values.
#[derive(Debug)]
pub(crate) struct KvBlock {
    id: u64,
    /// Values of keys (or values) in a whole block.
    full: usize,
    pub(crate) k: KvData,
    pub(crate) v: KvData,
}

impl Clone for KvBlock {
    /// A copy to write into (copy on write): a new id, room for a whole
    /// block.
    fn clone(&self) -> KvBlock {
        KvBlock {
            id: next_id(),
            full: self.full,
            k: self.k.copy_block(self.k.len(), self.full),
            v: self.v.copy_block(self.v.len(), self.full),
        }
    }
}

impl KvBlock {
    fn bytes(&self) -> usize {
        self.k.bytes() + self.v.bytes()
    }
}

/// One attention layer's KV cache: a table of shared blocks.
#[derive(Clone, Debug)]
pub struct KvCache {
    /// Values per position (`n_head_kv * head_dim`).
    row: usize,
    /// Element types of keys and values.
    types: KvTypes,
    /// Positions held.
    len: usize,
    blocks: Vec<Arc<KvBlock>>,
}

impl KvCache {
    /// An empty f32 cache of rows of `row` values.
    pub fn new(row: usize) -> KvCache {
        KvCache::with_types(row, KvTypes::default())
    }

    /// An empty cache of rows of `row` values stored as `types` (q8_0 needs
    /// rows of whole 32-value blocks: see [`redlite_backend::KvType::fits_row`]).
    pub fn with_types(row: usize, types: KvTypes) -> KvCache {
        debug_assert!(types.k.fits_row(row) && types.v.fits_row(row));
        KvCache {
            row,
            types,
            len: 0,
            blocks: Vec::new(),
        }
    }

    /// Element types of keys and values.
    pub fn types(&self) -> KvTypes {
        self.types
    }

    /// Positions held.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Values per position.
    pub fn row(&self) -> usize {
        self.row
    }

    /// Bytes of the keys and values held (positions × row in each type).
    pub fn bytes(&self) -> usize {
        self.blocks.iter().map(|b| b.bytes()).sum()
    }

    /// The blocks as (id, bytes): blocks shared with other caches have the
    /// same id in each.
    pub fn blocks(&self) -> impl Iterator<Item = (u64, usize)> + '_ {
        self.blocks.iter().map(|b| (b.id, b.bytes()))
    }

    /// Append positions: `k` and `v` hold whole rows, as many of each.
    /// Writes into the last block (copied first if it is shared), then into
    /// new blocks.
    pub fn append(&mut self, k: &[f32], v: &[f32]) {
        let row = self.row.max(1);
        debug_assert!(k.len() == v.len() && k.len().is_multiple_of(row));
        let n = k.len() / row;
        let mut done = 0;
        while done < n {
            let off = self.len % KV_BLOCK_TOKENS;
            if off == 0 {
                self.blocks.push(Arc::new(KvBlock {
                    id: next_id(),
                    full: KV_BLOCK_TOKENS * row,
                    k: KvData::block(self.types.k, KV_BLOCK_TOKENS * row),
                    v: KvData::block(self.types.v, KV_BLOCK_TOKENS * row),
                }));
            }
            let take = (KV_BLOCK_TOKENS - off).min(n - done);
            let Some(last) = self.blocks.last_mut() else {
                unreachable!("a block was pushed above when none had room")
            };
            let b = Arc::make_mut(last);
            b.k.push(&k[done * row..(done + take) * row]);
            b.v.push(&v[done * row..(done + take) * row]);
            done += take;
            self.len += take;
        }
    }

    /// Keep the first `pos` positions (at most [`KvCache::len`]). A shared
    /// block that is cut is copied first.
    pub fn truncate(&mut self, pos: usize) {
        if pos >= self.len {
            return;
        }
        self.blocks.truncate(pos.div_ceil(KV_BLOCK_TOKENS));
        let off = pos % KV_BLOCK_TOKENS;
        if off != 0 {
            if let Some(last) = self.blocks.last_mut() {
                let b = Arc::make_mut(last);
                b.k.truncate(off * self.row);
                b.v.truncate(off * self.row);
            }
        }
        self.len = pos;
    }

    /// A copy that evolves independently and holds no spare room: the full
    /// blocks shared, the partially filled last block copied at its size.
    pub fn snapshot(&self) -> KvCache {
        let mut c = self.clone();
        if let Some(last) = c.blocks.last_mut() {
            let n = last.k.len();
            if n < KV_BLOCK_TOKENS * self.row {
                *last = Arc::new(KvBlock {
                    id: next_id(),
                    full: last.full,
                    k: last.k.copy(n, n),
                    v: last.v.copy(n, n),
                });
            }
        }
        c
    }

    /// Set to `pos` positions of values written by `fill(block, keys,
    /// values)` for each block (in parallel), replacing what was held.
    /// A narrower type is converted from one f32 scratch block per worker,
    /// reused from block to block: no f32 copy of the cache is made, and no
    /// block-sized temporary is freed between the blocks kept (which would
    /// leave the allocator holding freed f32 blocks beside the cache).
    pub(crate) fn fill(
        &mut self,
        pos: usize,
        fill: impl Fn(usize, &mut [f32], &mut [f32]) + Sync + Send,
    ) {
        use rayon::prelude::*;
        let (row, types) = (self.row, self.types);
        let full = KV_BLOCK_TOKENS * row;
        let blocks: Vec<Arc<KvBlock>> = (0..pos.div_ceil(KV_BLOCK_TOKENS))
            .into_par_iter()
            .map_init(
                || (vec![0f32; full], vec![0f32; full]),
                |(ks, vs), i| {
                    let n = (pos - i * KV_BLOCK_TOKENS).min(KV_BLOCK_TOKENS) * row;
                    let (k, v) = (&mut ks[..n], &mut vs[..n]);
                    k.fill(0.0);
                    v.fill(0.0);
                    fill(i, k, v);
                    let store = |ty: KvType, x: &[f32]| {
                        let mut d = KvData::block(ty, full);
                        d.push(x);
                        d
                    };
                    Arc::new(KvBlock {
                        id: next_id(),
                        full,
                        k: store(types.k, k),
                        v: store(types.v, v),
                    })
                },
            )
            .collect();
        self.blocks = blocks;
        self.len = pos;
    }

    /// The block tables the attention kernel reads, covering every position
    /// held: (keys, values).
    pub(crate) fn tables(&self) -> (Vec<KvRows<'_>>, Vec<KvRows<'_>>) {
        (
            self.blocks.iter().map(|b| b.k.rows()).collect(),
            self.blocks.iter().map(|b| b.v.rows()).collect(),
        )
    }

    /// All keys and values in position order, as f32 (for tests and
    /// statistics).
    pub fn to_vecs(&self) -> (Vec<f32>, Vec<f32>) {
        let widen = |t: Vec<KvRows<'_>>| -> Vec<f32> {
            let mut out = Vec::with_capacity(self.len * self.row);
            for r in t {
                let at = out.len();
                out.resize(at + r.len(), 0.0);
                redlite_backend::kvtype::decode(r, 0, &mut out[at..]);
            }
            out
        };
        let (k, v) = self.tables();
        (widen(k), widen(v))
    }
}

/// The kernel's view of [`KvCache::tables`].
pub(crate) fn view<'a>(k: &'a [KvRows<'a>], v: &'a [KvRows<'a>]) -> KvBlocks<'a> {
    KvBlocks {
        k,
        v,
        block_tokens: KV_BLOCK_TOKENS,
    }
}

#[cfg(test)]
mod tests {

    use super::*;
    use std::collections::HashMap;

    fn rows(seed: u32, n: usize, row: usize) -> Vec<f32> {
        (0..n * row)
            .map(|i| ((i as u32).wrapping_mul(2654435761) ^ seed) as f32 * 1e-6)
            .collect()
    }

    /// Bytes of the blocks of `caches`, each counted once.
    fn unique(caches: &[&KvCache]) -> usize {
        let mut seen = HashMap::new();
        for c in caches {
            for (id, b) in c.blocks() {
                seen.insert(id, b);
            }
        }
        seen.values().sum()
    }

    /// `x` as stored in `ty` and read back (rows of whole q8_0 blocks).
    fn stored(ty: KvType, x: &[f32]) -> Vec<f32> {
        let mut d = KvData::with_capacity(ty, x.len());
        d.push(x);
        let mut o = vec![0f32; x.len()];
        redlite_backend::kvtype::decode(d.rows(), 0, &mut o);
        o
    }

    /// Appends, truncations, forks and snapshots against a plain `Vec`
    /// reference, for every element type (keys and values of different
    /// types too): same contents, writes to one copy never seen by another,
    /// bytes as the types say.
    #[test]
    fn blocks_match_a_plain_vec() {
        let mut kinds: Vec<KvTypes> = KvType::ALL
            .iter()
            .map(|&t| KvTypes { k: t, v: t })
            .collect();
        kinds.push(KvTypes {
            k: KvType::Q8_0,
            v: KvType::F16,
        });
        for types in kinds {
            let row = if types == KvTypes::default() { 6 } else { 64 };
            blocks_match_a_plain_vec_of(types, row);
        }
    }

    fn blocks_match_a_plain_vec_of(types: KvTypes, row: usize) {
        let mut c = KvCache::with_types(row, types);
        let (mut rk, mut rv) = (Vec::new(), Vec::new());
        let mut saved: Vec<(KvCache, Vec<f32>, Vec<f32>)> = Vec::new();
        let steps = [1usize, 7, 255, 1, 300, 2, 513, 40, 1, 1];
        for (i, &n) in steps.iter().enumerate() {
            let (k, v) = (rows(i as u32, n, row), rows(!(i as u32), n, row));
            c.append(&k, &v);
            rk.extend_from_slice(&stored(types.k, &k));
            rv.extend_from_slice(&stored(types.v, &v));
            assert_eq!(c.len(), rk.len() / row);
            assert_eq!(
                c.to_vecs(),
                (rk.clone(), rv.clone()),
                "{types:?} after step {i}"
            );
            assert_eq!(c.bytes(), types.k.bytes(rk.len()) + types.v.bytes(rv.len()));
            if i % 3 == 1 {
                saved.push((c.snapshot(), rk.clone(), rv.clone()));
            }
            if i == 6 {
                // A rollback into a full block that snapshots share.
                let keep = c.len() - 300;
                c.truncate(keep);
                rk.truncate(keep * row);
                rv.truncate(keep * row);
                assert_eq!(c.to_vecs(), (rk.clone(), rv.clone()));
            }
        }
        for (j, (s, k, v)) in saved.iter().enumerate() {
            assert_eq!(&s.to_vecs(), &(k.clone(), v.clone()), "snapshot {j}");
            assert_eq!(s.bytes(), types.k.bytes(k.len()) + types.v.bytes(v.len()));
            // A resumed copy writes without touching the snapshot.
            let mut r = s.clone();
            r.append(&rows(99, 3, row), &rows(98, 3, row));
            r.truncate(1);
            assert_eq!(&s.to_vecs(), &(k.clone(), v.clone()), "snapshot {j}");
        }
    }

    /// Reference counts: a snapshot shares every full block and copies only
    /// the partial last one; a fork shares everything until it writes.
    #[test]
    fn snapshots_share_full_blocks_and_copy_on_write() {
        let row = 4;
        let mut c = KvCache::new(row);
        let n = 3 * KV_BLOCK_TOKENS + 10;
        c.append(&rows(1, n, row), &rows(2, n, row));
        let s = c.snapshot();
        let ids: Vec<u64> = c.blocks().map(|b| b.0).collect();
        let sids: Vec<u64> = s.blocks().map(|b| b.0).collect();
        assert_eq!(ids[..3], sids[..3]);
        assert_ne!(ids[3], sids[3]);
        assert!(c.blocks.iter().take(3).all(|b| Arc::strong_count(b) == 2));
        assert_eq!(Arc::strong_count(&c.blocks[3]), 1);
        // Unique bytes: the partial block twice, the full ones once.
        let block = KV_BLOCK_TOKENS * row * 2 * 4;
        assert_eq!(unique(&[&c, &s]), 3 * block + 2 * (10 * row * 2 * 4));
        // A fork shares even the partial block; its first write copies it.
        let mut f = s.clone();
        assert_eq!(unique(&[&s, &f]), s.bytes());
        f.append(&rows(3, 1, row), &rows(4, 1, row));
        assert_eq!(Arc::strong_count(&s.blocks[3]), 1);
        assert_eq!(unique(&[&s, &f]), s.bytes() + 11 * row * 2 * 4);
        // The sequence writes its last block in place (not shared).
        let before = c.blocks[3].id;
        c.append(&rows(5, 1, row), &rows(6, 1, row));
        assert_eq!(c.blocks[3].id, before);
        // Snapshot at a block boundary: nothing copied.
        let mut d = KvCache::new(row);
        d.append(
            &rows(7, KV_BLOCK_TOKENS, row),
            &rows(8, KV_BLOCK_TOKENS, row),
        );
        let ds = d.snapshot();
        assert_eq!(unique(&[&d, &ds]), d.bytes());
        // Dropping the snapshot leaves the sequence the only holder.
        drop(s);
        drop(f);
        assert!(c.blocks.iter().take(3).all(|b| Arc::strong_count(b) == 1));
    }

    /// The tables the kernel reads: one slice per block, whole blocks of
    /// 256 positions, the last one partial.
    #[test]
    fn tables_cover_the_positions_in_blocks() {
        let row = 3;
        let mut c = KvCache::new(row);
        let n = 2 * KV_BLOCK_TOKENS + 5;
        c.append(&rows(1, n, row), &rows(2, n, row));
        let (k, v) = c.tables();
        let kv = view(&k, &v);
        assert_eq!(kv.positions(row), n);
        assert_eq!(k.len(), 3);
        assert_eq!(k[0].len(), KV_BLOCK_TOKENS * row);
        assert_eq!(v[2].len(), 5 * row);
        for ty in KvType::ALL {
            let row = 32;
            let mut f = KvCache::with_types(row, KvTypes { k: ty, v: ty });
            f.fill(n, |i, k, v| {
                k.fill(i as f32);
                v.fill(-(i as f32));
            });
            assert_eq!(f.len(), n);
            assert_eq!(f.bytes(), 2 * ty.bytes(n * row));
            let (fk, fv) = f.to_vecs();
            assert_eq!(fk.len(), n * row);
            // q8_0 stores 127 steps of f16(amax / 127): within 1e-3.
            assert!((fk[KV_BLOCK_TOKENS * row] - 1.0).abs() < 1e-3, "{ty}");
            assert!((fv[2 * KV_BLOCK_TOKENS * row] + 2.0).abs() < 1e-3, "{ty}");
            assert_eq!(fk[0], 0.0);
        }
    }

    /// Whole blocks of a model-sized row go to huge-page slabs (on Linux),
    /// copies on write too; a snapshot's partial block is an exact heap
    /// copy; the values are the same either way.
    #[test]
    fn whole_blocks_live_in_slabs() {
        let row = 512;
        let types = KvTypes {
            k: KvType::F16,
            v: KvType::Q8_0,
        };
        let mut c = KvCache::with_types(row, types);
        let (k, v) = (rows(1, 300, row), rows(2, 300, row));
        c.append(&k, &v);
        let linux = cfg!(target_os = "linux");
        assert!(c
            .blocks
            .iter()
            .all(|b| b.k.in_slab() == linux && b.v.in_slab() == linux));
        let s = c.snapshot();
        assert!(!s.blocks[1].k.in_slab() && s.blocks[0].k.in_slab() == linux);
        let mut r = s.clone();
        r.append(&k[..row], &v[..row]);
        assert!(r.blocks[1].k.in_slab() == linux);
        let (ck, _) = c.to_vecs();
        let (rk, _) = r.to_vecs();
        assert_eq!(&rk[..300 * row], &ck[..]);
        assert_eq!(stored(KvType::F16, &k), ck);
    }
}
