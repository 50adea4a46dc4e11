//! KV cache element types (f32, f16, bf16, q8_0): quality against the
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
    let exact = read_npz(&fixture("exact-Q8_0.npz"));
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
    for t in [KvType::F16, KvType::Bf16, KvType::Q8_0] {
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
