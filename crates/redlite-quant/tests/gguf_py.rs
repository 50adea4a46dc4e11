//! Bit-exactness of the scalar dequantizers against gguf-py
//! (`gguf.quants.dequantize`), on every tensor of every fixture GGUF and on
//! random blocks of every type with kernels.

mod common;

use std::collections::HashMap;
use std::sync::OnceLock;

use common::*;
use redlite_gguf::{GgmlType, GgufWriter};

fn check_fixture(name: &str) {
    let path = redlite_testkit::fixture(name);
    assert!(path.exists(), "fixture {} missing", path.display());
    let (checked, fails) = compare_gguf(&path);
    assert!(
        fails.is_empty(),
        "{name}: {} tensor(s) differ from gguf-py ({checked} identical):\n{}",
        fails.len(),
        fails.join("\n")
    );
    assert!(checked > 0, "{name}: no tensor compared");
}

macro_rules! fixture_tests {
    ($($f:ident => $name:expr;)*) => {
        $(#[test]
        fn $f() {
            check_fixture($name);
        })*
    };
}

fixture_tests! {
    fixture_tiny_a_bf16 => "tiny-a-bf16.gguf";
    fixture_tiny_s_bf16 => "tiny-s-bf16.gguf";
    fixture_tiny_s_q8_0 => "tiny-s-Q8_0.gguf";
    fixture_tiny_s_q8_0_legacy => "tiny-s-Q8_0-legacy.gguf";
    fixture_tiny_s_q4_k_m => "tiny-s-Q4_K_M.gguf";
    fixture_tiny_s_q2_k => "tiny-s-Q2_K.gguf";
    fixture_tiny_s_iq4_xs => "tiny-s-IQ4_XS.gguf";
    fixture_tiny_s_iq3_xxs => "tiny-s-IQ3_XXS.gguf";
    fixture_tiny_s_iq2_xs => "tiny-s-IQ2_XS.gguf";
    fixture_tiny_s_iq1_m => "tiny-s-IQ1_M.gguf";
    fixture_tiny_s_cf2mix => "tiny-s-CF2mix.gguf";
    fixture_tiny_s_tq1_0 => "newtypes/tiny-s-TQ1_0.gguf";
    fixture_tiny_s_tq2_0 => "newtypes/tiny-s-TQ2_0.gguf";
    fixture_tiny_s_nvfp4 => "newtypes/tiny-s-NVFP4.gguf";
    fixture_tiny_s_mxfp4_moe => "newtypes/tiny-s-MXFP4_MOE.gguf";
    // gguf-py reads this file but cannot dequantize Q1_0: only its Q6_K
    // output is compared here; its Q1_0 tensors are checked against ggml's
    // C dequantizer in tests/ggml_dequant.rs. (gguf-py 0.19 cannot open a
    // Q2_0 file at all, so tiny-s-Q2_0.gguf is checked only there.)
    fixture_tiny_s_q1_0 => "newtypes/tiny-s-Q1_0.gguf";
}

/// Types gguf-py 0.19 cannot dequantize (no oracle here; see
/// tests/ggml_dequant.rs and tests/blocks.rs for theirs).
const NO_PY_ORACLE: [GgmlType; 3] = [GgmlType::Q8_K, GgmlType::Q1_0, GgmlType::Q2_0];

/// Types gguf-py 0.19 cannot even read a file of (its type enum lacks them).
const PY_CANNOT_OPEN: [GgmlType; 1] = [GgmlType::Q2_0];

/// Per type: the random bytes written and gguf-py's values (None when gguf-py
/// has no dequantizer for the type).
struct RandomRef {
    data: HashMap<GgmlType, Vec<u8>>,
    py: HashMap<String, Option<Vec<f32>>>,
}

/// Rows of each random tensor and blocks per row.
const ROWS: usize = 6;
const BLOCKS_PER_ROW: usize = 3;

fn random_ref() -> &'static RandomRef {
    static R: OnceLock<RandomRef> = OnceLock::new();
    R.get_or_init(|| {
        let mut r = rng(0x5eed_0001);
        let mut w = GgufWriter::new();
        w.add_str("general.architecture", "test");
        let mut data = HashMap::new();
        for ty in kernel_types() {
            if PY_CANNOT_OPEN.contains(&ty) {
                continue;
            }
            let bytes = random_blocks(ty, ROWS * BLOCKS_PER_ROW, &mut r, false);
            let ne0 = (BLOCKS_PER_ROW * ty.block_size()) as u64;
            w.add_tensor(
                format!("t.{}", ty.name()),
                &[ne0, ROWS as u64],
                ty,
                bytes.clone(),
            )
            .unwrap_or_else(|e| panic!("{ty}: {e}"));
            data.insert(ty, bytes);
        }
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("random.gguf");
        w.write_to_path(&path).expect("write random GGUF");
        let py = py_dequant(&path)
            .into_iter()
            .map(|t| (t.name, t.values))
            .collect();
        RandomRef { data, py }
    })
}

fn check_random(ty: GgmlType) {
    let rr = random_ref();
    let data = &rr.data[&ty];
    let name = format!("t.{}", ty.name());
    let want = rr
        .py
        .get(&name)
        .unwrap_or_else(|| panic!("{name} missing from gguf-py output"));
    let Some(want) = want else {
        panic!("gguf-py cannot dequantize {ty}; this type has no Python oracle");
    };
    let got = rust_dequant(ty, data).unwrap_or_else(|e| panic!("{ty}: {e}"));
    assert_eq!(got.len(), want.len(), "{ty}: value count");
    if let Some(i) = first_mismatch(&got, want) {
        let bs = ty.block_size();
        panic!(
            "{ty}: random blocks differ from gguf-py at index {i} (block {}, element {}): got \
             {:e} ({:#010x}), gguf-py {:e} ({:#010x}); block bytes {:02x?}",
            i / bs,
            i % bs,
            got[i],
            got[i].to_bits(),
            want[i],
            want[i].to_bits(),
            &data[i / bs * ty.type_size()..(i / bs + 1) * ty.type_size()]
        );
    }
}

macro_rules! random_tests {
    ($($f:ident => $ty:ident;)*) => {
        $(#[test]
        fn $f() {
            check_random(GgmlType::$ty);
        })*

        /// Every type with kernels has a random-block test here (or is one
        /// gguf-py cannot dequantize: see `NO_PY_ORACLE`).
        #[test]
        fn random_tests_cover_every_kernel_type() {
            let listed = [$(GgmlType::$ty),*];
            for ty in kernel_types() {
                assert!(
                    listed.contains(&ty) || NO_PY_ORACLE.contains(&ty),
                    "{ty} has kernels but no random-block gguf-py test"
                );
            }
        }
    };
}

random_tests! {
    random_f32 => F32;
    random_f16 => F16;
    random_bf16 => BF16;
    random_q4_0 => Q4_0;
    random_q4_1 => Q4_1;
    random_q5_0 => Q5_0;
    random_q5_1 => Q5_1;
    random_q8_0 => Q8_0;
    random_q2_k => Q2_K;
    random_q3_k => Q3_K;
    random_q4_k => Q4_K;
    random_q5_k => Q5_K;
    random_q6_k => Q6_K;
    random_iq4_nl => IQ4_NL;
    random_iq4_xs => IQ4_XS;
    random_mxfp4 => MXFP4;
    random_nvfp4 => NVFP4;
    random_tq1_0 => TQ1_0;
    random_tq2_0 => TQ2_0;
    random_iq2_xxs => IQ2_XXS;
    random_iq2_xs => IQ2_XS;
    random_iq2_s => IQ2_S;
    random_iq3_xxs => IQ3_XXS;
    random_iq3_s => IQ3_S;
    random_iq1_s => IQ1_S;
    random_iq1_m => IQ1_M;
}

/// gguf-py has no Q8_K dequantizer; make sure that is still so (if it gains
/// one, add Q8_K to the random tests above).
#[test]
fn q8_k_has_no_python_oracle() {
    let rr = random_ref();
    assert!(
        matches!(rr.py.get("t.Q8_K"), Some(None)),
        "gguf-py now dequantizes Q8_K: add it to random_tests!"
    );
}

/// gguf-py has no Q1_0 dequantizer; if it gains one, add Q1_0 to the random
/// tests above.
#[test]
fn q1_0_has_no_python_oracle() {
    let rr = random_ref();
    assert!(
        matches!(rr.py.get("t.Q1_0"), Some(None)),
        "gguf-py now dequantizes Q1_0: add it to random_tests!"
    );
}
