//! Snapshots that share KV blocks: ten snapshots along one 8K-token
//! conversation hold its KV cache about once, and each resumes exactly.

use redlite_engine::{SnapshotKind, StateCache};
use redlite_model::{Model, KV_BLOCK_TOKENS};
use redlite_testkit::fixture;

/// 8,192 real token ids (CPython source) from the fixtures.
fn long_ids(n: usize) -> Vec<u32> {
    let path = fixture("long32k.json");
    let text = std::fs::read_to_string(&path).expect("long32k.json (fixtures)");
    let v: serde_json::Value = serde_json::from_str(&text).expect("long32k.json is JSON");
    let ids: Vec<u32> = v["ids"]
        .as_array()
        .expect("long32k.json has ids")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect();
    assert!(ids.len() >= n);
    ids[..n].to_vec()
}

#[test]
fn ten_snapshots_of_one_conversation_share_their_kv_and_resume_exactly() {
    let m = model();
    let c = m.config();
    let ids = long_ids(8192);
    // Ten points along the conversation, most inside a block (each then has
    // a partial last block of its own).
    let points: Vec<usize> = (1..=10).map(|j| 800 * j + 37 * (j % 4)).collect();
    assert!(points.iter().all(|&p| p < ids.len()));
    let mut cache = StateCache::new(usize::MAX);
    let mut st = m.new_state();
    let mut at = 0;
    // The uninterrupted run, snapshotted at each point; `want[j]`: the
    // logits after the 64 tokens that follow point `j`.
    const NEXT: usize = 64;
    let mut want: Vec<Vec<f32>> = Vec::new();
    let mut logits = Vec::new();
    for &p in &points {
        // Fed in chunks of 512, as a server prefills.
        while at < p {
            let end = (at + 512).min(p);
            logits = m.forward(&mut st, &ids[at..end], false).expect("prefill");
            at = end;
        }
        assert!(cache.insert(&ids[..p], &st, &logits, SnapshotKind::Periodic));
        logits = m.forward(&mut st, &ids[p..p + NEXT], false).expect("next");
        want.push(logits.clone());
        at = p + NEXT;
    }
    assert_eq!(cache.len(), 10);

    // Memory: the longest snapshot's KV once, plus ten recurrent states,
    // plus each snapshot's partial last block, logits and tokens.
    let n_attn = c.recurrent.iter().filter(|&&r| !r).count();
    let kv_per_token = n_attn * 2 * c.n_head_kv * c.head_dim * 4;
    let longest_kv = points[9] * kv_per_token;
    let recurrent = m.new_state().bytes();
    let bound = longest_kv + 10 * recurrent;
    let unique = cache.bytes();
    let logical = cache.logical_bytes();
    eprintln!(
        "unique {unique} B, logical {logical} B, longest KV {longest_kv} B, recurrent {recurrent} B \
         each, ratio {:.3}",
        unique as f64 / bound as f64
    );
    assert!(
        (unique as f64) < 1.3 * bound as f64,
        "unique {unique} vs bound {bound}"
    );
    // Without sharing they would hold every prefix's KV (~5.5x the longest).
    assert!(logical > 4 * longest_kv, "logical {logical}");
    // Exactly: the sum of the parts counted once, recomputed by hand.
    let mut blocks = std::collections::HashMap::new();
    let mut own = 0;
    for (j, &p) in points.iter().enumerate() {
        let r = cache.restore(&ids[..p]).expect("hit");
        assert_eq!(r.tokens, p, "snapshot {j}");
        let (o, b) = r.state.parts();
        own += o + 4 * c.vocab_size + 4 * p;
        blocks.extend(b);
    }
    assert_eq!(unique, own + blocks.values().sum::<usize>());

    // Each resumes exactly: continuing from snapshot j gives the
    // uninterrupted run's logits bit for bit (and leaves the others intact:
    // the restores run in an order that writes into shared blocks first).
    for j in (0..10).rev().chain(0..10) {
        let p = points[j];
        let r = cache.restore(&ids[..p + NEXT]).expect("hit");
        assert_eq!(r.tokens, p, "snapshot {j}");
        assert_eq!(r.kind, SnapshotKind::Periodic);
        let mut s = r.state;
        let l = m.forward(&mut s, &ids[p..p + NEXT], false).expect("resume");
        assert_eq!(l, want[j], "snapshot {j} at {p}");
    }
    // The block size the accounting assumed.
    assert_eq!(KV_BLOCK_TOKENS, 256);
}

/// The budget counts shared blocks once: a second snapshot of the same
/// conversation costs its recurrent state and its partial block, not its
/// whole KV; evicting a snapshot frees only the blocks nobody else holds.
#[test]
fn budget_counts_unique_bytes_and_eviction_frees_unshared_blocks() {
    let m = model();
    let ids = long_ids(1200);
    let mut st = m.new_state();
    let l1 = m.forward(&mut st, &ids[..600], false).expect("a");
    let a = st.snapshot();
    let l2 = m.forward(&mut st, &ids[600..1200], false).expect("b");
    let one = {
        let mut c = StateCache::new(usize::MAX);
        c.insert(&ids[..1200], &st, &l2, SnapshotKind::ReplyEnd);
        c.bytes()
    };
    let (own_a, _) = a.parts();
    let c = m.config();
    let n_attn = c.recurrent.iter().filter(|&&r| !r).count();
    let kv_per_token = n_attn * 2 * c.n_head_kv * c.head_dim * 4;
    // Room for the long one and what the short one holds alone: its
    // recurrent state, logits, tokens and partial last block (600 = 2 full
    // blocks + 88 positions).
    let partial = (600 % KV_BLOCK_TOKENS) * kv_per_token;
    let mut cache = StateCache::new(one + own_a + 4 * l1.len() + 4 * 600 + partial);
    assert!(cache.insert(&ids[..1200], &st, &l2, SnapshotKind::ReplyEnd));
    assert!(cache.insert(&ids[..600], &a, &l1, SnapshotKind::PromptEnd));
    assert_eq!(
        cache.len(),
        2,
        "the shorter one shares the longer one's blocks"
    );
    assert!(cache.bytes() <= cache.budget());
    assert!(cache.logical_bytes() > cache.bytes());
    // Touch the short one; a fresh conversation then evicts the long one,
    // whose own blocks go, while the shared ones stay with the short one.
    assert_eq!(
        cache.restore(&ids[..700]).expect("hit").kind,
        SnapshotKind::PromptEnd
    );
    let mut other = m.new_state();
    let l3 = m.forward(&mut other, &ids[100..400], false).expect("c");
    assert!(cache.insert(&ids[100..400], &other, &l3, SnapshotKind::PromptEnd));
    assert!(cache.restore(&ids[..1200]).map(|r| r.tokens) == Some(600));
    assert!(cache.bytes() <= cache.budget());
    let mut held = std::collections::HashMap::new();
    let mut own = 0;
    for p in [&ids[..600], &ids[100..400]] {
        let r = cache.restore(p).expect("held");
        let (o, b) = r.state.parts();
        own += o + 4 * l1.len() + 4 * r.tokens;
        held.extend(b);
    }
    assert_eq!(cache.bytes(), own + held.values().sum::<usize>());
}

fn model() -> Model {
    Model::load(&fixture("tiny-s-Q8_0.gguf")).expect("fixture loads")
}
