use redlite_gguf::{GgmlType, GgufFile};
use redlite_synth::*;

#[test]
fn tiny_model_has_every_tensor_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("tiny.gguf");
    let cfg = SynthConfig::tiny();
    write(&cfg, &p).unwrap();
    let f = GgufFile::open(&p).unwrap();
    assert_eq!(f.architecture().unwrap(), "qwen3next");
    assert_eq!(f.get_u64("qwen3next.block_count").unwrap(), Some(4));
    let tokens = f.get_str_array("tokenizer.ggml.tokens").unwrap().unwrap();
    let merges = f.get_str_array("tokenizer.ggml.merges").unwrap().unwrap();
    assert!(merges.len() > 200, "{} merges", merges.len());
    // Every merge produces a token of the vocabulary.
    for m in merges {
        let (a, b) = m.split_once(' ').unwrap();
        assert!(tokens.iter().any(|t| *t == format!("{a}{b}")), "merge {m}");
    }
    let eos = f.get_u64("tokenizer.ggml.eos_token_id").unwrap().unwrap();
    assert_eq!(tokens[eos as usize], "<|im_end|>");
    // The same tensor names and shapes as the tiny-s fixture layout.
    let (t, _) = f.tensor("blk.0.attn_qkv.weight").unwrap();
    assert_eq!(t.dims, vec![256, 512]);
    assert_eq!(t.ggml_type, GgmlType::BF16);
    let (t, _) = f.tensor("blk.3.attn_q.weight").unwrap();
    assert_eq!(t.dims, vec![256, 512]);
    let (t, _) = f.tensor("blk.1.ffn_down_exps.weight").unwrap();
    assert_eq!(t.dims, vec![256, 256, 8]);
    let (t, d) = f.tensor("blk.2.ssm_a").unwrap();
    assert_eq!(t.ggml_type, GgmlType::F32);
    let a: Vec<f32> = d
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    assert!(a.iter().all(|&x| (-4.0..=-0.05).contains(&x)), "{a:?}");
    assert!(f.tensor("blk.3.ssm_a").is_none());
    // Deterministic for a seed.
    let p2 = dir.path().join("tiny2.gguf");
    write(&cfg, &p2).unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), std::fs::read(&p2).unwrap());
}
