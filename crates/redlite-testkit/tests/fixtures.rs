use redlite_testkit::*;

#[test]
fn reads_reference_npz() {
    let refs = read_npz(&fixture("refs.npz"));
    let a = &refs["tiny-s.hello"];
    assert_eq!(a.shape, vec![8, 1024]);
    assert!(a.data.iter().all(|x| x.is_finite()));
    // llama.cpp quantized logits are stored as float16.
    let q = read_npz(&fixture("llamacpp-Q8_0.npz"));
    assert_eq!(q["hello"].shape, vec![8, 1024]);
    let std = {
        let r = q["hello"].row(0);
        let m = r.iter().sum::<f32>() / r.len() as f32;
        (r.iter().map(|x| (x - m) * (x - m)).sum::<f32>() / r.len() as f32).sqrt()
    };
    assert!(std > 1.0 && std < 10.0, "logit std {std}");
}
