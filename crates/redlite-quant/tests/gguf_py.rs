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
}

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

        /// Every type with kernels has a random-block test here (or is
        /// Q8_K, which gguf-py cannot dequantize: see the hand-checked unit
        /// test).
        #[test]
        fn random_tests_cover_every_kernel_type() {
            let listed = [$(GgmlType::$ty),*];
            for ty in kernel_types() {
                assert!(
                    listed.contains(&ty) || ty == GgmlType::Q8_K,
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
