//! Expert streaming: a model whose routed experts are read from the file
//! through a small `ExpertCache` computes the same logits, bit for bit, as the
//! all-resident model; the cache's counters add up; a budget below one
//! expert is a clear error; O_DIRECT reads give the same bytes.

mod common;
use common::*;
use redlite_model::{CachePolicy, ExpertCacheOptions, ExpertReaders, LoadOptions, Model};
use redlite_testkit::fixture;

const MODELS: [&str; 3] = [
    "tiny-s-CF2mix.gguf",
    "tiny-s-Q4_K_M.gguf",
    "tiny-a-bf16.gguf",
];

fn streamed(name: &str, budget: u64, direct_io: bool) -> Result<Model, redlite_model::ModelError> {
    streamed_with(name, budget, direct_io, false)
}

fn streamed_with(
    name: &str,
    budget: u64,
    direct_io: bool,
    prefetch: bool,
) -> Result<Model, redlite_model::ModelError> {
    streamed_opts(name, options(budget, direct_io, prefetch))
}

/// Cache options with the baseline policy (LRU, no per-layer quotas).
fn options(budget: u64, direct_io: bool, prefetch: bool) -> ExpertCacheOptions {
    ExpertCacheOptions {
        budget,
        direct_io,
        prefetch,
        prefetch_top: None,
        policy: CachePolicy::Lru,
        per_layer: false,
        readers: ExpertReaders::default(),
    }
}

fn streamed_opts(name: &str, opts: ExpertCacheOptions) -> Result<Model, redlite_model::ModelError> {
    let be = redlite_backend::CpuBackend::new(None).expect("thread pool");
    Model::load_streaming(
        &fixture(name),
        std::sync::Arc::new(be),
        &LoadOptions {
            prefetch: true,
            ..LoadOptions::default()
        },
        Some(&opts),
        &mut |_, _| {},
    )
}

/// The smallest budget of a fixture (one expert's entry).
fn min_budget(name: &str) -> u64 {
    let m = streamed(name, u64::MAX, false).unwrap_or_else(|e| panic!("{name}: {e}"));
    m.expert_cache().expect("cache").min_budget()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Prefill logits of the whole prompt, token-by-token decode logits of the
/// prompt, and 8 greedy tokens with their logits after the prefill.
fn outputs(m: &Model, prompt: &[u32]) -> (Vec<u32>, Vec<u32>, Vec<u32>, Vec<u32>) {
    let mut st = m.new_state();
    let pre = m.forward(&mut st, prompt, true).expect("prefill");
    let mut logits = pre[pre.len() - m.config().vocab_size..].to_vec();
    let (mut toks, mut gen_logits) = (Vec::new(), Vec::new());
    for _ in 0..8 {
        let t = argmax(&logits);
        toks.push(t);
        logits = m.forward(&mut st, &[t], false).expect("decode");
        gen_logits.extend_from_slice(&logits);
    }
    let mut st = m.new_state();
    let mut dec = Vec::new();
    for &t in prompt {
        dec.extend(m.forward(&mut st, &[t], true).expect("decode step"));
    }
    (bits(&pre), bits(&dec), toks, bits(&gen_logits))
}

#[test]
fn two_expert_cache_is_bit_identical_to_resident() {
    let p = prompts();
    let prompt = prompt_ids(&p, "prose");
    for name in MODELS {
        let resident = load(name);
        let min = min_budget(name);
        let m = streamed(name, 2 * min, false).unwrap_or_else(|e| panic!("{name}: {e}"));
        let want = outputs(&resident, &prompt);
        let got = outputs(&m, &prompt);
        assert!(want.0 == got.0, "{name}: prefill logits differ");
        assert!(want.1 == got.1, "{name}: token-by-token logits differ");
        assert_eq!(want.2, got.2, "{name}: greedy tokens differ");
        assert!(want.3 == got.3, "{name}: greedy logits differ");
        let s = m.expert_cache_stats().expect("stats");
        assert!(s.resident_bytes <= 2 * min, "{name}: over budget");
        for (il, l) in s.layers.iter().enumerate() {
            assert!(l.evictions > 0, "{name}: layer {il} never evicted");
        }
        println!(
            "{name}: {} experts per layer resident, greedy {:?}; hit rate {:.3}",
            s.budget / s.entry_bytes,
            got.2,
            s.total().hit_rate()
        );
    }
}

/// Every eviction policy, with and without per-layer quotas, keeps the
/// outputs bit-identical and the cache within its budget.
#[test]
fn every_policy_is_bit_identical_to_resident() {
    let p = prompts();
    let prompt = prompt_ids(&p, "prose");
    let name = "tiny-s-CF2mix.gguf";
    let resident = load(name);
    let want = outputs(&resident, &prompt);
    let min = min_budget(name);
    for policy in [CachePolicy::Lru, CachePolicy::Frequency] {
        for per_layer in [false, true] {
            let budget = 3 * min;
            let m = streamed_opts(
                name,
                ExpertCacheOptions {
                    policy,
                    per_layer,
                    ..options(budget, false, true)
                },
            )
            .unwrap_or_else(|e| panic!("{name}: {e}"));
            let got = outputs(&m, &prompt);
            let what = format!("{policy:?}, per layer {per_layer}");
            assert!(
                want == got,
                "{what}: outputs differ from the resident model"
            );
            let s = m.expert_cache_stats().expect("stats");
            assert!(s.resident_bytes <= budget, "{what}: over budget");
            assert!(s.total().evictions > 0, "{what}: never evicted");
            println!("{what}: hit rate {:.3}", s.total().hit_rate());
        }
    }
}

/// Other reader thread counts (one of each; a few) read the same bytes: the
/// outputs stay bit-identical; counts outside 1..=256 are refused by name.
#[test]
fn reader_counts_are_bit_identical() {
    let p = prompts();
    let prompt = prompt_ids(&p, "hello");
    let name = "tiny-s-Q4_K_M.gguf";
    let want = outputs(&load(name), &prompt);
    let min = min_budget(name);
    for (demand, prefetch) in [(1, 1), (3, 2)] {
        let readers = ExpertReaders { demand, prefetch };
        let m = streamed_opts(
            name,
            ExpertCacheOptions {
                readers,
                ..options(2 * min, false, true)
            },
        )
        .unwrap_or_else(|e| panic!("{name} {readers:?}: {e}"));
        assert!(want == outputs(&m, &prompt), "{readers:?}: outputs differ");
        let s = m.expert_cache_stats().expect("stats");
        assert!(s.total().misses > 0, "{readers:?}: nothing was read");
    }
    for (demand, prefetch) in [(0, 6), (32, 257)] {
        let err = streamed_opts(
            name,
            ExpertCacheOptions {
                readers: ExpertReaders { demand, prefetch },
                ..options(2 * min, false, true)
            },
        )
        .err()
        .unwrap_or_else(|| panic!("readers {demand},{prefetch} were accepted"))
        .to_string();
        assert!(
            err.contains("must be from 1 to 256") && err.contains(name),
            "{err}"
        );
    }
    assert_eq!(
        "4, 2".parse(),
        Ok(ExpertReaders {
            demand: 4,
            prefetch: 2
        })
    );
    assert!("4".parse::<ExpertReaders>().is_err());
    assert!("0,1".parse::<ExpertReaders>().is_err());
}

/// A cache of exactly one expert also works (prefill reads one at a time).
#[test]
fn one_expert_cache_is_bit_identical() {
    let p = prompts();
    let prompt = prompt_ids(&p, "hello");
    let name = "tiny-s-Q4_K_M.gguf";
    let resident = load(name);
    let m = streamed(name, min_budget(name), false).expect("load");
    assert_eq!(m.expert_cache().expect("cache").group_size(), 1);
    assert!(outputs(&resident, &prompt) == outputs(&m, &prompt));
}

/// hits + misses = expert uses; bytes read = misses × expert bytes.
#[test]
fn stats_add_up() {
    let name = "tiny-s-CF2mix.gguf";
    let min = min_budget(name);
    let m = streamed(name, 3 * min, false).expect("load");
    let c = m.config().clone();
    let cache = m.expert_cache().expect("cache");
    let p = prompts();
    let prompt = prompt_ids(&p, "unicode");
    let mut st = m.new_state();
    m.forward(&mut st, &prompt, false).expect("prefill");
    cache.reset_stats();
    let n = 20;
    let mut tok = 1u32;
    for _ in 0..n {
        tok = argmax(&m.forward(&mut st, &[tok], false).expect("decode"));
    }
    let s = m.expert_cache_stats().expect("stats");
    assert_eq!(s.layers.len(), c.n_layer);
    for (il, l) in s.layers.iter().enumerate() {
        // One token per step: every step uses n_expert_used distinct experts.
        assert_eq!(
            l.hits + l.misses,
            (n * c.n_expert_used) as u64,
            "layer {il}"
        );
        assert_eq!(
            l.bytes_read,
            l.misses * cache.expert_bytes(il),
            "layer {il}"
        );
        assert!(l.misses > 0);
    }
    let t = s.total();
    assert_eq!(t.hits + t.misses, (n * c.n_expert_used * c.n_layer) as u64);
    assert!(s.entries <= 3 && s.resident_bytes <= 3 * min);
    println!(
        "{name}: {} uses, hit rate {:.3}, {} bytes read, stall {:?}",
        t.hits + t.misses,
        t.hit_rate(),
        t.bytes_read,
        t.stall
    );
    // A budget that holds every expert: after one pass over the prompt every
    // later use is a hit.
    let all = streamed(name, u64::MAX / 2, false).expect("load");
    let mut st = all.new_state();
    all.forward(&mut st, &prompt, false).expect("prefill");
    let mut st = all.new_state();
    all.expert_cache().expect("cache").reset_stats();
    all.forward(&mut st, &prompt, false).expect("prefill again");
    let t = all.expert_cache_stats().expect("stats").total();
    assert_eq!(t.misses, 0);
    assert!(t.hits > 0);
}

#[test]
fn a_budget_below_one_expert_is_a_clear_error() {
    let name = "tiny-s-Q4_K_M.gguf";
    let min = min_budget(name);
    let err = match streamed(name, min - 1, false) {
        Ok(_) => panic!("a budget of {} bytes was accepted", min - 1),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains(&format!("the minimum is {min} bytes")),
        "{err}"
    );
    assert!(err.contains(name), "{err}");
    // --no-mmap cannot be combined with streaming.
    let be = redlite_backend::CpuBackend::new(Some(1)).expect("pool");
    let err = Model::load_streaming(
        &fixture(name),
        std::sync::Arc::new(be),
        &LoadOptions {
            no_mmap: true,
            ..LoadOptions::default()
        },
        Some(&options(min, false, true)),
        &mut |_, _| {},
    )
    .err()
    .expect("no_mmap with a cache is refused")
    .to_string();
    assert!(err.contains("no-mmap"), "{err}");
}

#[test]
fn direct_io_reads_the_same_bytes() {
    let name = "tiny-s-CF2mix.gguf";
    let min = min_budget(name);
    let m = streamed(name, 2 * min, true).expect("load");
    let cache = m.expert_cache().expect("cache");
    if !cache.direct_io() {
        println!(
            "note: the filesystem refused O_DIRECT ({:?}); checked the buffered fallback",
            cache.warnings()
        );
    } else {
        println!("O_DIRECT reads in use");
    }
    let p = prompts();
    let prompt = prompt_ids(&p, "hello");
    assert!(outputs(&load(name), &prompt) == outputs(&m, &prompt));
    assert!(m.expert_cache_stats().expect("stats").total().misses > 0);
}

/// With prefetch on (the next layer's predicted experts read in the
/// background during decode) the outputs are still bit-identical, and the
/// counters add up: uses = hits + misses, demand bytes = misses × expert
/// bytes, prefetch bytes = prefetches × expert bytes, every one-token step
/// scores one prediction of n_expert_used experts per layer but the first.
#[test]
fn prefetch_is_bit_identical_and_counted() {
    let p = prompts();
    let prompt = prompt_ids(&p, "prose");
    for name in MODELS {
        let resident = load(name);
        let min = min_budget(name);
        for mult in [2, 8] {
            let m = streamed_with(name, mult * min, false, true)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            let cache = m.expert_cache().expect("cache");
            assert!(cache.prefetch_enabled());
            let want = outputs(&resident, &prompt);
            let got = outputs(&m, &prompt);
            assert!(want.0 == got.0, "{name} ×{mult}: prefill logits differ");
            assert!(
                want.1 == got.1,
                "{name} ×{mult}: token-by-token logits differ"
            );
            assert_eq!(want.2, got.2, "{name} ×{mult}: greedy tokens differ");
            assert!(want.3 == got.3, "{name} ×{mult}: greedy logits differ");

            // Counters over pure decode steps.
            let c = m.config().clone();
            let mut st = m.new_state();
            m.forward(&mut st, &prompt, false).expect("prefill");
            cache.reset_stats();
            let n = 12;
            let mut tok = 1u32;
            for _ in 0..n {
                tok = argmax(&m.forward(&mut st, &[tok], false).expect("decode"));
            }
            // Let background reads finish before reading the counters.
            std::thread::sleep(std::time::Duration::from_millis(200));
            let s = m.expert_cache_stats().expect("stats");
            assert!(s.prefetch);
            for (il, l) in s.layers.iter().enumerate() {
                let uses = (n * c.n_expert_used) as u64;
                assert_eq!(l.hits + l.misses, uses, "{name} layer {il}");
                assert_eq!(l.bytes_read, l.misses * cache.expert_bytes(il));
                assert_eq!(l.prefetch_bytes, l.prefetches * cache.expert_bytes(il));
                assert!(l.waits <= l.hits);
                assert!(l.prediction_hits <= l.predictions);
                if il == 0 {
                    assert_eq!(l.predictions, 0, "{name}: layer 0 has no predecessor");
                    assert_eq!(l.prefetches, 0);
                } else {
                    // The most likely `default_prefetch_count` of each step's predictions.
                    let predicted =
                        (n * redlite_model::default_prefetch_count(c.n_expert_used)) as u64;
                    assert_eq!(l.predictions, predicted, "{name} layer {il}");
                }
            }
            let t = s.total();
            assert!(t.prefetches > 0, "{name} ×{mult}: nothing prefetched");
            assert!(t.prediction_hits > 0, "{name} ×{mult}: no prediction used");
            println!(
                "{name} ×{mult}: hit rate {:.3}, prediction accuracy {:.3}, {} prefetched, {} \
                 waited, {} demand misses",
                t.hit_rate(),
                t.prediction_accuracy(),
                t.prefetches,
                t.waits,
                t.misses
            );
        }
    }
}

/// A prefetch of experts already held or being read reads nothing again;
/// `get` waits for an expert in flight instead of reading it.
#[test]
fn prefetch_in_flight_is_not_read_twice() {
    let name = "tiny-s-CF2mix.gguf";
    let m = streamed_with(name, u64::MAX / 2, false, true).expect("load");
    let cache = m.expert_cache().expect("cache");
    let n = m.config().n_expert.min(4);
    let ids: Vec<usize> = (0..n).collect();
    // Access the Arc through a clone of the model's cache handle.
    let arc = m.expert_cache_arc().expect("cache");
    arc.prefetch(1, &ids);
    arc.prefetch(1, &ids);
    let got = cache.get(1, &ids).expect("get");
    assert_eq!(got.len(), n);
    let l = cache.stats().layers[1];
    assert_eq!(l.prefetches + l.misses, n as u64, "{l:?}");
    assert_eq!(l.hits + l.misses, n as u64);
    assert_eq!(l.predictions, n as u64);
    assert_eq!(l.prediction_hits, n as u64);
    // Identical bytes to a demand read.
    let plain = streamed_with(name, u64::MAX / 2, false, false).expect("load");
    let want = plain
        .expert_cache()
        .expect("cache")
        .get(1, &ids)
        .expect("get");
    for (a, b) in got.iter().zip(&want) {
        assert!(a.gate() == b.gate() && a.up() == b.up() && a.down() == b.down());
    }
    // Off: prefetch does nothing.
    plain.expert_cache_arc().expect("cache").prefetch(2, &ids);
    let l = plain.expert_cache_stats().expect("stats").layers[2];
    assert_eq!((l.prefetches, l.predictions), (0, 0));
}

/// With the Q4_K / Q5_K matrices repacked into the lanes layout
/// (`Model::repack_for_decode`), streamed experts (repacked as the cache
/// reads them) compute exactly as resident repacked ones, prefetch on.
#[test]
fn repacked_expert_cache_is_bit_identical_to_resident_repacked() {
    let p = prompts();
    let prompt = prompt_ids(&p, "prose");
    for name in ["tiny-s-Q4_K_M.gguf", "tiny-s-CF2mix.gguf"] {
        let mut resident = load(name);
        if resident.repack_for_decode() == 0 {
            return; // no lanes kernels on this CPU
        }
        let min = min_budget(name);
        let mut m = streamed_with(name, 2 * min, false, true).unwrap_or_else(|e| panic!("{e}"));
        m.repack_for_decode();
        assert!(m.expert_cache().expect("cache").lanes(), "{name}");
        let want = outputs(&resident, &prompt);
        let got = outputs(&m, &prompt);
        assert!(want.0 == got.0, "{name}: prefill logits differ");
        assert!(want.1 == got.1, "{name}: token-by-token logits differ");
        assert_eq!(want.2, got.2, "{name}: greedy tokens differ");
        assert!(want.3 == got.3, "{name}: greedy logits differ");
    }
}
