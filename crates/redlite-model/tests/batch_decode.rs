//! Batched decode across sequences and state snapshots.
//!
//! Several sequences decoded in one forward pass must each get exactly the
//! logits (bit for bit) they get alone, whatever their batch-mates; a state
//! restored from a snapshot must continue exactly like the original.

mod common;
use common::*;

/// Greedy decode of `steps` tokens alone: the logits of every step.
fn alone(model: &redlite_model::Model, prompt: &[u32], steps: usize) -> Vec<Vec<f32>> {
    let mut st = model.new_state();
    let mut logits = model.forward(&mut st, prompt, false).expect("prefill");
    let mut out = vec![logits.clone()];
    for _ in 0..steps {
        let next = argmax(&logits);
        logits = model.forward(&mut st, &[next], false).expect("decode");
        out.push(logits.clone());
    }
    out
}

#[test]
fn batched_decode_is_bit_identical_to_alone() {
    let p = prompts();
    let steps = 12;
    for file in ["tiny-s-bf16.gguf", "tiny-s-CF2mix.gguf", "tiny-a-bf16.gguf"] {
        let model = load(file);
        let vocab = model.config().vocab_size;
        let names = ["hello", "prose", "code", "unicode"];
        let refs: Vec<Vec<Vec<f32>>> = names
            .iter()
            .map(|n| alone(&model, &prompt_ids(&p, n), steps))
            .collect();
        // Sequences of different lengths, one joining late, in one batch.
        let mut states: Vec<_> = names.iter().map(|_| model.new_state()).collect();
        let mut last: Vec<Vec<f32>> = Vec::new();
        for (st, n) in states.iter_mut().zip(names) {
            last.push(
                model
                    .forward(st, &prompt_ids(&p, n), false)
                    .expect("prefill"),
            );
        }
        for step in 0..steps {
            // Sequence 3 sits out the first two steps: batch sizes 3 then 4.
            let active: Vec<usize> = (0..names.len()).filter(|&i| i != 3 || step >= 2).collect();
            let toks: Vec<u32> = active.iter().map(|&i| argmax(&last[i])).collect();
            let mut refs_mut: Vec<&mut redlite_model::State> = Vec::new();
            for (i, st) in states.iter_mut().enumerate() {
                if active.contains(&i) {
                    refs_mut.push(st);
                }
            }
            let out = model.forward_batch(&mut refs_mut, &toks).expect("batch");
            assert_eq!(out.len(), active.len() * vocab);
            for (row, &i) in active.iter().enumerate() {
                last[i] = out[row * vocab..(row + 1) * vocab].to_vec();
            }
            for &i in &active {
                let k = if i == 3 { step - 1 } else { step + 1 };
                let want = &refs[i][k];
                let same = last[i]
                    .iter()
                    .zip(want)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(
                    same,
                    "{file} {} step {step}: batched logits differ",
                    names[i]
                );
            }
        }
    }
}

#[test]
fn snapshot_resumes_exactly() {
    let p = prompts();
    let model = load("tiny-s-Q4_K_M.gguf");
    let prompt = prompt_ids(&p, "prose");
    let (a, b) = prompt.split_at(prompt.len() / 2);
    let mut st = model.new_state();
    model.forward(&mut st, a, false).expect("first half");
    let snap = st.snapshot();
    assert_eq!(snap.pos(), a.len());
    assert!(snap.bytes() > 0);
    // The original goes on with other tokens: the snapshot is unaffected.
    model.forward(&mut st, &[1, 2, 3], false).expect("diverge");
    let mut resumed = snap.snapshot();
    let got = model.forward(&mut resumed, b, true).expect("resume");
    let mut fresh = model.new_state();
    model.forward(&mut fresh, a, false).expect("fresh a");
    let want = model.forward(&mut fresh, b, true).expect("fresh b");
    assert_eq!(got.len(), want.len());
    assert!(got
        .iter()
        .zip(&want)
        .all(|(x, y)| x.to_bits() == y.to_bits()));
    // And a bad batch is an error, not a panic.
    let mut s1 = model.new_state();
    assert!(model.forward_batch(&mut [&mut s1], &[]).is_err());
}

#[test]
fn verify_matches_decoding_and_rolls_back_exactly() {
    let p = prompts();
    for file in ["tiny-s-CF2mix.gguf", "tiny-a-bf16.gguf"] {
        let model = load(file);
        let vocab = model.config().vocab_size;
        let prompt = prompt_ids(&p, "code");
        let draft: Vec<u32> = prompt_ids(&p, "prose")[..7].to_vec();
        // Plain decoding of the same tokens, one at a time.
        let mut plain = model.new_state();
        model.forward(&mut plain, &prompt, false).expect("prefill");
        let mut plain_logits = Vec::new();
        let mut plain_states = Vec::new();
        for &t in &draft {
            plain_logits.push(model.forward(&mut plain, &[t], false).expect("decode"));
            plain_states.push(plain.snapshot());
        }
        let mut base = model.new_state();
        model.forward(&mut base, &prompt, false).expect("prefill");
        let mut st = base.snapshot();
        let (logits, trail) = model.forward_verify(&mut st, &draft).expect("verify");
        assert_eq!(trail.start(), prompt.len());
        assert_eq!(trail.len(), draft.len());
        for (i, want) in plain_logits.iter().enumerate() {
            let got = &logits[i * vocab..(i + 1) * vocab];
            assert!(
                got.iter()
                    .zip(want)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "{file}: verify row {i} differs from decoding"
            );
        }
        // Roll back to every length: the next step equals plain decoding's.
        for keep in 1..=draft.len() {
            let mut s = st.snapshot();
            s.rollback(&trail, keep).expect("rollback");
            assert_eq!(s.pos(), prompt.len() + keep);
            assert_eq!(s.bytes(), plain_states[keep - 1].bytes());
            let next = model.forward(&mut s, &[5], false).expect("after rollback");
            let mut reference = plain_states[keep - 1].snapshot();
            let want = model
                .forward(&mut reference, &[5], false)
                .expect("reference");
            assert!(
                next.iter()
                    .zip(&want)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "{file}: state rolled back to {keep} differs"
            );
        }
        let mut s = st.snapshot();
        assert!(s.rollback(&trail, 0).is_err());
        assert!(s.rollback(&trail, draft.len() + 1).is_err());
        assert!(base.rollback(&trail, 1).is_err());
    }
}
