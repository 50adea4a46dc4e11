//! Decode attention at depth over one contiguous KV array against the same
//! keys and values as a table of 256-position blocks (the KV cache's
//! layout), on Qwen3-Coder-Next's attention shape (16 query heads, 2 KV
//! heads of 256). Alternates the two layouts (in turn first); prints the
//! best time of each, and checks that both give the same bits.
//!
//! `cargo run --release -p redlite-backend --example attn_blocks_bench [DEPTH] [THREADS]`

use redlite_backend::{AttnShape, Backend, CpuBackend, KvBlocks, KvRows};
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let depth: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(8192);
    let threads: Option<usize> = args.next().and_then(|s| s.parse().ok());
    let (nh, nkv, hd) = (16, 2, 256);
    let row = nkv * hd;
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    let mut vec = |n: usize| -> Vec<f32> {
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    };
    let q = vec(nh * hd);
    let k = vec((depth + 1) * row);
    let v = vec((depth + 1) * row);
    // The blocked layout holds its own copies, as the cache does.
    let kb: Vec<Vec<f32>> = k.chunks(256 * row).map(|c| c.to_vec()).collect();
    let vb: Vec<Vec<f32>> = v.chunks(256 * row).map(|c| c.to_vec()).collect();
    let kt: Vec<KvRows> = kb.iter().map(|b| KvRows::F32(b)).collect();
    let vt: Vec<KvRows> = vb.iter().map(|b| KvRows::F32(b)).collect();
    let (ks, vs) = ([KvRows::F32(&k)], [KvRows::F32(&v)]);
    let contiguous = KvBlocks {
        k: &ks,
        v: &vs,
        block_tokens: usize::MAX,
    };
    let blocks = KvBlocks {
        k: &kt,
        v: &vt,
        block_tokens: 256,
    };
    let be = CpuBackend::new(threads).expect("thread pool");
    let shape = AttnShape {
        n_tok: 1,
        pos0: depth,
        n_head: nh,
        n_head_kv: nkv,
        head_dim: hd,
        scale: 1.0 / (hd as f32).sqrt(),
    };
    let mut outs = [vec![0f32; nh * hd], vec![0f32; nh * hd]];
    let reps = 50;
    let mut best = [f64::MAX; 2];
    for round in 0..10 {
        let order: [(usize, &KvBlocks); 2] = if round % 2 == 0 {
            [(0, &contiguous), (1, &blocks)]
        } else {
            [(1, &blocks), (0, &contiguous)]
        };
        for (i, kv) in order {
            let t = Instant::now();
            for _ in 0..reps {
                be.attention(&shape, &q, kv, &mut outs[i]);
            }
            let us = t.elapsed().as_secs_f64() * 1e6 / reps as f64;
            if round > 0 {
                best[i] = best[i].min(us);
            }
        }
        assert_eq!(outs[0], outs[1], "blocks change the result");
    }
    println!(
        "depth {depth}, {} threads: contiguous {:.1} us, 256-position blocks {:.1} us per decode \
         attention (best of 9 rounds x {reps})",
        be.threads(),
        best[0],
        best[1]
    );
}
