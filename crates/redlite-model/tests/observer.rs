//! The observer hook (`Trace::matmul_input`, what `redlite imatrix`
//! collects): every product's input, checked against the named
//! intermediates the same pass traces (a second path through the code), and
//! the rows each routed expert gets against a routing recomputed from the
//! traced router logits; in the prefill path (expert by expert) and the
//! decode path (one multi-product region).

use std::collections::HashMap;

mod common;
use common::*;

/// One observed input: (expert, rows, data).
type Input = (Option<usize>, usize, Vec<f32>);

#[derive(Default)]
struct Both {
    named: HashMap<String, Vec<f32>>,
    /// weight → its inputs, in call order.
    inputs: HashMap<String, Vec<Input>>,
}

impl redlite_model::Trace for Both {
    fn tensor(&mut self, name: &str, _: usize, _: usize, data: &[f32]) {
        self.named.insert(name.to_string(), data.to_vec());
    }
    fn matmul_input(&mut self, weight: &str, expert: Option<usize>, rows: usize, x: &[f32]) {
        self.inputs
            .entry(weight.to_string())
            .or_default()
            .push((expert, rows, x.to_vec()));
    }
}

fn check(model: &redlite_model::Model, b: &Both, t: usize) {
    let c = model.config();
    let d = c.n_embd;
    let dense = |w: &str, named: &str| {
        let v = b
            .inputs
            .get(w)
            .unwrap_or_else(|| panic!("{w} not observed"));
        assert_eq!(v.len(), 1, "{w}: observed {} times", v.len());
        let (e, rows, x) = &v[0];
        assert_eq!((*e, *rows), (None, t), "{w}");
        assert_eq!(x, &b.named[named], "{w}: input is not {named}");
    };
    for il in 0..c.n_layer {
        let mixer: &[&str] = if il == 3 {
            &["attn_q", "attn_k", "attn_v"]
        } else {
            &["attn_qkv", "attn_gate", "ssm_ba"]
        };
        for m in mixer {
            dense(&format!("blk.{il}.{m}.weight"), &format!("attn_norm-{il}"));
        }
        if il == 3 {
            dense("blk.3.attn_output.weight", "attn_gated-3");
        } else {
            dense(
                &format!("blk.{il}.ssm_out.weight"),
                &format!("final_output-{il}"),
            );
        }
        let post = format!("attn_post_norm-{il}");
        for m in [
            "ffn_gate_inp",
            "ffn_gate_inp_shexp",
            "ffn_gate_shexp",
            "ffn_up_shexp",
        ] {
            dense(&format!("blk.{il}.{m}.weight"), &post);
        }
        assert!(b
            .inputs
            .contains_key(&format!("blk.{il}.ffn_down_shexp.weight")));
        // Routing recomputed from the traced router logits: top-k by logit.
        let logits = &b.named[&format!("ffn_moe_logits-{il}")];
        let ne = c.n_expert;
        let mut want: Vec<Vec<usize>> = vec![Vec::new(); ne];
        for tt in 0..t {
            let row = &logits[tt * ne..(tt + 1) * ne];
            let mut order: Vec<usize> = (0..ne).collect();
            order.sort_by(|&a, &bb| row[bb].total_cmp(&row[a]).then(a.cmp(&bb)));
            for &e in &order[..c.n_expert_used] {
                want[e].push(tt);
            }
        }
        let h = &b.named[&post];
        for w in ["ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"] {
            let name = format!("blk.{il}.{w}.weight");
            let v = &b.inputs[&name];
            let mut seen = vec![false; ne];
            for (e, rows, x) in v {
                let e = e.unwrap_or_else(|| panic!("{name}: no expert given"));
                assert!(!seen[e], "{name}: expert {e} reported twice");
                seen[e] = true;
                assert_eq!(*rows, want[e].len(), "{name}: expert {e} rows");
                if w != "ffn_down_exps" {
                    let rows_h: Vec<f32> = want[e]
                        .iter()
                        .flat_map(|&tt| h[tt * d..(tt + 1) * d].iter().copied())
                        .collect();
                    assert_eq!(x, &rows_h, "{name}: expert {e}'s rows");
                } else {
                    assert_eq!(x.len(), rows * c.expert_ff, "{name}: expert {e} width");
                }
            }
            for (e, s) in seen.iter().enumerate() {
                assert_eq!(*s, !want[e].is_empty(), "{name}: expert {e}");
            }
        }
    }
    let out = &b.inputs["output.weight"];
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].2, b.named["result_norm"]);
    assert!(!b.inputs.contains_key("token_embd.weight"));
}

#[test]
fn observer_sees_every_product_input() {
    let model = load_with("tiny-s-bf16.gguf", redlite_backend::Activations::F32);
    let ids = prompt_ids(&prompts(), "code");
    let mut st = model.new_state();
    let mut b = Both::default();
    let logits = model
        .forward_traced(&mut st, &ids, true, Some(&mut b))
        .expect("prefill");
    check(&model, &b, ids.len());
    // The observer changes nothing.
    let mut st2 = model.new_state();
    assert_eq!(logits, model.forward(&mut st2, &ids, true).expect("plain"));
    // A decode step (the small-batch expert path).
    let mut b = Both::default();
    model
        .forward_traced(&mut st, &[ids[3]], true, Some(&mut b))
        .expect("decode");
    check(&model, &b, 1);
}
