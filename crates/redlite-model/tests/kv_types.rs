//! KV cache element types (f32, f16, bf16, q8_0, q4_0): quality against the
//! exact-math reference of a fixture, snapshots and rollback with every
//! type, and the bytes each type holds.

mod common;
use common::*;
use redlite_backend::Activations;
use redlite_model::{KvType, KvTypes, Model};
use redlite_testkit::{fixture, read_npz};

const FILE: &str = "tiny-s-Q8_0.gguf";

fn both(t: KvType) -> KvTypes {
    KvTypes { k: t, v: t }
}

/// Mean KL from the exact reference over every prompt's positions, fed
/// `batch` tokens at a time (`None`: the whole prompt).
fn mean_kl(model: &Model, batch: Option<usize>) -> f64 {
    mean_kl_vs(model, "exact-Q8_0.npz", batch)
}

/// [`mean_kl`] against the reference in `npz`.
fn mean_kl_vs(model: &Model, npz: &str, batch: Option<usize>) -> f64 {
    let exact = read_npz(&fixture(npz));
    let p = prompts();
    let mut kls = Vec::new();
    for name in PROMPTS {
        let tokens = prompt_ids(&p, name);
        let ours = run(model, &tokens, batch.unwrap_or(tokens.len()));
        kls.extend(per_position(&exact[name], &ours).into_iter().map(|x| x.1));
    }
    kls.iter().sum::<f64>() / kls.len() as f64
}

/// On the f32 activation path (exact math on the stored weights, so the
/// cache's rounding is what is measured): f32 at f32 rounding, bf16 and f16
/// within 1e-4 mean KL, q8_0 within llama.cpp's own figure on this file
/// (its default f16 cache), whole-prompt prefill and token by token (the
/// decode kernel). Each narrower type also moves the logits (the test
/// sees the type).
#[test]
fn kv_types_quality_vs_exact() {
    let s = std::fs::read_to_string(fixture("llamacpp-vs-exact.json")).expect("json");
    let figs: serde_json::Value = serde_json::from_str(&s).expect("json parses");
    let lc = figs["Q8_0: llama.cpp vs exact"]["mean_kl"]
        .as_f64()
        .expect("mean_kl");
    let mut model = load_with(FILE, Activations::F32);
    for (types, bound) in [
        (both(KvType::F32), 1e-6),
        (both(KvType::F16), 1e-4),
        (both(KvType::Bf16), 1e-4),
        (both(KvType::Q8_0), lc),
        (both(KvType::Q4_0), 1e-3),
        (
            KvTypes {
                k: KvType::Q8_0,
                v: KvType::F16,
            },
            lc,
        ),
    ] {
        model.set_kv_types(types).expect("types fit the fixture");
        for (how, batch) in [("prefill", None), ("token-by-token", Some(1))] {
            let kl = mean_kl(&model, batch);
            println!(
                "{FILE} K {} V {} {how:15}: mean KL from exact {kl:.3e} (bound {bound:.1e}; \
                 llama.cpp f16 cache {lc:.3e})",
                types.k, types.v
            );
            assert!(kl <= bound, "{types:?} {how}: mean KL {kl} above {bound}");
        }
    }
    // The narrow types are really used: the logits differ from f32's.
    let p = prompts();
    let tokens = prompt_ids(&p, "code");
    model.set_kv_types(both(KvType::F32)).expect("f32");
    let exact = run(&model, &tokens, tokens.len());
    for t in [KvType::F16, KvType::Bf16, KvType::Q8_0, KvType::Q4_0] {
        model.set_kv_types(both(t)).expect("type");
        assert_ne!(run(&model, &tokens, tokens.len()), exact, "{t}");
    }
}

/// Every type: a snapshot resumed later equals the sequence that went on
/// uninterrupted, bit for bit (a snapshot in a block's middle, the
/// original writing on after it); a verify pass rolled back to every length
/// then decoding equals plain decoding; bytes are those of the type.
#[test]
fn kv_types_snapshot_and_rollback_are_exact() {
    let p = prompts();
    let prompt = prompt_ids(&p, "code");
    let draft: Vec<u32> = prompt_ids(&p, "prose")[..5].to_vec();
    let mut model = load(FILE);
    let c = model.config().clone();
    let n_attn = c.recurrent.iter().filter(|&&r| !r).count();
    let row = c.n_head_kv * c.head_dim;
    for t in KvType::ALL {
        let types = both(t);
        model.set_kv_types(types).expect("types fit the fixture");
        // Uninterrupted.
        let mut a = model.new_state();
        model.forward(&mut a, &prompt[..100], false).expect("first");
        let want = model.forward(&mut a, &prompt[100..], true).expect("rest");
        // Snapshot at 100, the original goes on elsewhere, then resume.
        let mut b = model.new_state();
        model.forward(&mut b, &prompt[..100], false).expect("first");
        let snap = b.snapshot();
        model.forward(&mut b, &draft, false).expect("elsewhere");
        let mut r = snap.snapshot();
        let got = model
            .forward(&mut r, &prompt[100..], true)
            .expect("resumed");
        assert!(
            got.iter()
                .zip(&want)
                .all(|(x, y)| x.to_bits() == y.to_bits()),
            "{t}: resumed snapshot differs"
        );
        assert_eq!(r.bytes(), a.bytes(), "{t}");
        let (own, _) = a.parts();
        assert_eq!(
            a.bytes() - own,
            n_attn * 2 * t.bytes(prompt.len() * row),
            "{t}: KV bytes"
        );
        // Verify and roll back.
        let mut plain = a.snapshot();
        let mut plain_states = Vec::new();
        for &d in &draft {
            model.forward(&mut plain, &[d], false).expect("decode");
            plain_states.push(plain.snapshot());
        }
        let mut v = a.snapshot();
        let (_, trail) = model.forward_verify(&mut v, &draft).expect("verify");
        for keep in 1..=draft.len() {
            let mut s = v.snapshot();
            s.rollback(&trail, keep).expect("rollback");
            assert_eq!(s.bytes(), plain_states[keep - 1].bytes(), "{t}");
            let next = model.forward(&mut s, &[5], false).expect("after rollback");
            let mut reference = plain_states[keep - 1].snapshot();
            let want = model.forward(&mut reference, &[5], false).expect("ref");
            assert!(
                next.iter()
                    .zip(&want)
                    .all(|(x, y)| x.to_bits() == y.to_bits()),
                "{t}: rolled back to {keep} differs"
            );
        }
        // A random state at depth holds the type's bytes and decodes.
        let mut st = model.random_state(300, 1).expect("random state");
        let (own, _) = st.parts();
        assert_eq!(st.bytes() - own, n_attn * 2 * t.bytes(300 * row), "{t}");
        let logits = model.forward(&mut st, &[5], false).expect("decode");
        assert!(logits.iter().all(|x| x.is_finite()), "{t}");
    }
}

/// The other quantized fixtures, prefill over every prompt (cheap: the
/// decode kernel is covered above): f16 within 1e-4 mean KL from exact,
/// q8_0 within llama.cpp's own figure on that file (its default f16
/// cache), q4_0 within 2e-3.
#[test]
fn kv_types_quality_on_every_quantized_fixture() {
    let s = std::fs::read_to_string(fixture("llamacpp-vs-exact.json")).expect("json");
    let figs: serde_json::Value = serde_json::from_str(&s).expect("json parses");
    for ty in [
        "Q4_K_M", "Q2_K", "IQ4_XS", "IQ3_XXS", "IQ2_XS", "IQ1_M", "CF2mix",
    ] {
        let lc = figs[format!("{ty}: llama.cpp vs exact")]["mean_kl"]
            .as_f64()
            .expect("mean_kl");
        let mut model = load_with(&format!("tiny-s-{ty}.gguf"), Activations::F32);
        for (t, bound) in [
            (KvType::F16, 1e-4),
            (KvType::Q8_0, lc),
            (KvType::Q4_0, 2e-3),
        ] {
            model.set_kv_types(both(t)).expect("types fit the fixture");
            let kl = mean_kl_vs(&model, &format!("exact-{ty}.npz"), None);
            println!(
                "tiny-s-{ty} K {t} V {t}: mean KL from exact {kl:.3e} (bound {bound:.1e}; \
                 llama.cpp f16 cache {lc:.3e})"
            );
            assert!(kl <= bound, "{ty} {t}: mean KL {kl} above {bound}");
        }
    }
}

/// The 32,768-token prompt (`long32k`) with every type on tiny-s-bf16, f32
/// activations: prefill in batches of 4096 up to the last 64 positions,
/// then those 64 token by token (the decode kernel over 16 chunks of
/// positions); mean and max KL over the 96 compared positions against
/// transformers. Minutes: run with `--ignored`; the figures are in
/// bench/RESULTS.md.
#[test]
#[ignore]
fn kv_types_long32k() {
    let s = std::fs::read_to_string(fixture("long32k.json")).expect("long32k.json");
    let j: serde_json::Value = serde_json::from_str(&s).expect("long32k.json parses");
    let tokens = ids(&j["ids"]);
    let npz = read_npz(&fixture("long32k.npz"));
    let positions: Vec<usize> = npz["positions"].data.iter().map(|&p| p as usize).collect();
    let reference = &npz["logits"];
    let mut model = load_with("tiny-s-bf16.gguf", Activations::F32);
    let vocab = model.config().vocab_size;
    let tail = tokens.len() - 64;
    for t in KvType::ALL {
        model.set_kv_types(both(t)).expect("types fit the fixture");
        let start = std::time::Instant::now();
        let mut st = model.new_state();
        let mut ours = vec![Vec::new(); positions.len()];
        let mut p0 = 0;
        let mut keep = |p0: usize, n: usize, logits: &[f32]| {
            for (i, &p) in positions.iter().enumerate() {
                if (p0..p0 + n).contains(&p) {
                    ours[i] = logits[(p - p0) * vocab..(p - p0 + 1) * vocab].to_vec();
                }
            }
        };
        while p0 < tail {
            let n = 4096.min(tail - p0);
            let logits = model
                .forward(&mut st, &tokens[p0..p0 + n], true)
                .expect("prefill");
            keep(p0, n, &logits);
            p0 += n;
        }
        for (p, &tok) in tokens.iter().enumerate().skip(tail) {
            let logits = model.forward(&mut st, &[tok], true).expect("decode");
            keep(p, 1, &logits);
        }
        let kls: Vec<f64> = positions
            .iter()
            .enumerate()
            .map(|(i, _)| kl(reference.row(i), &ours[i]))
            .collect();
        let mean = kls.iter().sum::<f64>() / kls.len() as f64;
        let max = kls.iter().cloned().fold(0f64, f64::max);
        let dec = kls[kls.len() - 64..].iter().sum::<f64>() / 64.0;
        println!(
            "long32k K {t} V {t}: mean KL {mean:.3e} (decoded 64: {dec:.3e}), max {max:.3e} over \
             {} positions, {:.0} s",
            kls.len(),
            start.elapsed().as_secs_f64()
        );
        let bound = match t {
            KvType::F32 => 1e-6,
            KvType::F16 | KvType::Bf16 => 1e-4,
            _ => 1e-2,
        };
        assert!(mean <= bound, "{t}: mean KL {mean} above {bound}");
    }
}
