//! `limit_isa`: the SIMD level is one for the whole process, lowered before
//! its first use and fixed after it. (Its own test binary: the level is
//! process-wide, so no other test may choose a kernel first.)

use redlite_quant::{detected_isa, dot_fn, isa, kernels, limit_isa, q16, GgmlType, Isa};

#[test]
fn a_limit_before_first_use_holds_for_the_process() {
    assert_eq!(limit_isa(Isa::Scalar), Ok(Isa::Scalar));
    assert_eq!(isa(), Isa::Scalar);
    assert_eq!(q16::level(), q16::Q16Level::Scalar);
    // The kernels chosen from now on are the scalar references.
    for ty in [
        GgmlType::Q8_0,
        GgmlType::Q4_K,
        GgmlType::IQ2_XS,
        GgmlType::IQ1_M,
    ] {
        let k = kernels(ty).expect("kernels");
        let f = dot_fn(ty).expect("dot");
        assert!(
            std::ptr::fn_addr_eq(f, k.dot_scalar),
            "{ty}: not the scalar dot"
        );
    }
    // The same limit again is fine; another one is refused by name.
    assert_eq!(limit_isa(Isa::Scalar), Ok(Isa::Scalar));
    let wanted = detected_isa().min(Isa::Avx2);
    match limit_isa(Isa::Avx2) {
        Ok(l) => assert_eq!((l, wanted), (Isa::Scalar, Isa::Scalar)),
        Err(e) => {
            assert_eq!((e.fixed, e.wanted), (Isa::Scalar, wanted));
            let msg = e.to_string();
            assert!(
                msg.contains("already fixed at scalar") && msg.contains("avx2"),
                "{msg}"
            );
        }
    }
    assert_eq!(isa(), Isa::Scalar);

    assert_eq!("AVX2".parse::<Isa>(), Ok(Isa::Avx2));
    assert_eq!(" scalar".parse::<Isa>(), Ok(Isa::Scalar));
    assert_eq!("avx512".parse::<Isa>(), Ok(Isa::Avx512));
    let err = "sse4".parse::<Isa>().expect_err("sse4 is not a level");
    assert!(
        err.contains("sse4") && err.contains("scalar, avx2 or avx512"),
        "{err}"
    );
}
