//! Greedy continuations (with the cache, one token per step) against refs.json.

mod common;
use common::*;
use redlite_testkit::fixture;

#[test]
fn greedy_continuations_match() {
    let s = std::fs::read_to_string(fixture("refs.json")).expect("refs.json");
    let refs: serde_json::Value = serde_json::from_str(&s).expect("refs.json parses");
    for model_name in ["tiny-a", "tiny-s"] {
        let model = load(&format!("{model_name}-bf16.gguf"));
        for name in PROMPTS {
            let r = &refs[format!("greedy_{model_name}_{name}")];
            let prompt = ids(&r["prompt_ids"]);
            let expected = ids(&r["ids"]);
            let margins: Vec<f64> = r["margins"]
                .as_array()
                .expect("margins")
                .iter()
                .map(|m| m.as_f64().expect("margin"))
                .collect();
            let mut st = model.new_state();
            let mut logits = model.forward(&mut st, &prompt, false).expect("prefill");
            let mut checked = 0;
            for (step, &want) in expected.iter().enumerate() {
                if margins[step] < 1e-2 {
                    println!(
                        "{model_name} {name}: stopping at step {step}, reference margin {:.2e}",
                        margins[step]
                    );
                    break;
                }
                let got = argmax(&logits);
                assert_eq!(got, want, "{model_name} {name} step {step}");
                checked += 1;
                logits = model.forward(&mut st, &[got], false).expect("decode");
            }
            println!("{model_name} {name}: {checked} greedy tokens match");
            assert!(checked > 0);
        }
    }
}
