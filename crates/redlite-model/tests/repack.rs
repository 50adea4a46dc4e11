//! The lanes layout (Q4_K / Q5_K repacked at load for the one-token
//! products): the default integer path on repacked weights against the
//! exact-math references, against the file's layout, and batched decode
//! against decoding alone.

mod common;
use common::*;
use redlite_backend::Activations;
use redlite_testkit::{fixture, read_npz};

fn check(ty: &str) {
    let file = format!("tiny-s-{ty}.gguf");
    let plain = load_with(&file, Activations::Int16);
    let mut lanes = load_with(&file, Activations::Int16);
    let bytes = lanes.repack_for_decode();
    if bytes == 0 {
        // Only the AVX2 level has lanes kernels; elsewhere nothing changes.
        assert!(redlite_quant::q16::lanes::kernels(redlite_gguf::GgmlType::Q4_K).is_none());
        return;
    }
    let exact = read_npz(&fixture(&format!("exact-{ty}.npz")));
    let p = prompts();
    let vocab = lanes.config().vocab_size;
    for batch in [1usize, 512] {
        let (mut kl_exact, mut kl_plain, mut n) = (0f64, 0f64, 0usize);
        for name in PROMPTS {
            let tokens = prompt_ids(&p, name);
            let ours = run(&lanes, &tokens, batch);
            let base = run(&plain, &tokens, batch);
            for (_, k) in per_position(&exact[name], &ours) {
                kl_exact += k;
                n += 1;
            }
            for (a, b) in base.chunks(vocab).zip(ours.chunks(vocab)) {
                kl_plain += kl(a, b);
            }
        }
        let (kl_exact, kl_plain) = (kl_exact / n as f64, kl_plain / n as f64);
        println!("{ty} lanes, batch {batch}: mean KL vs exact {kl_exact:.2e}, vs the file's layout {kl_plain:.2e}");
        assert!(
            kl_exact <= 1e-5,
            "{ty} batch {batch}: mean KL {kl_exact} from exact"
        );
        assert!(
            kl_plain <= 1e-6,
            "{ty} batch {batch}: mean KL {kl_plain} from the file's layout"
        );
    }
    // Batched decode: each sequence's logits equal decoding it alone.
    let tokens = prompt_ids(&p, "code");
    let (a, b) = (&tokens[..8], &tokens[8..16]);
    let mut sa = lanes.new_state();
    let mut sb = lanes.new_state();
    let (mut la, mut lb) = (Vec::new(), Vec::new());
    for (&ta, &tb) in a.iter().zip(b) {
        la = lanes.forward(&mut sa, &[ta], false).expect("forward");
        lb = lanes.forward(&mut sb, &[tb], false).expect("forward");
    }
    let mut s1 = lanes.new_state();
    let mut s2 = lanes.new_state();
    let mut both = Vec::new();
    for (&ta, &tb) in a.iter().zip(b) {
        both = lanes
            .forward_batch(&mut [&mut s1, &mut s2], &[ta, tb])
            .expect("batch");
    }
    assert_eq!(
        both[..vocab]
            .iter()
            .map(|v| v.to_bits())
            .collect::<Vec<_>>(),
        la.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
    );
    assert_eq!(
        both[vocab..]
            .iter()
            .map(|v| v.to_bits())
            .collect::<Vec<_>>(),
        lb.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
    );
}

#[test]
fn q4_k_m_lanes() {
    check("Q4_K_M");
}

#[test]
fn cf2mix_lanes() {
    check("CF2mix");
}
