//! llama.cpp's file types (`llama_ftype`) and llama-quantize's names for them.

use redlite_gguf::GgmlType;

/// A `llama_ftype`: what `general.file_type` records and what decides the
/// default tensor type and the mix.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum FileType {
    ALL_F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q8_0 = 7,
    Q5_0 = 8,
    Q5_1 = 9,
    Q2_K = 10,
    Q3_K_S = 11,
    Q3_K_M = 12,
    Q3_K_L = 13,
    Q4_K_S = 14,
    Q4_K_M = 15,
    Q5_K_S = 16,
    Q5_K_M = 17,
    Q6_K = 18,
    IQ2_XXS = 19,
    IQ2_XS = 20,
    Q2_K_S = 21,
    IQ3_XS = 22,
    IQ3_XXS = 23,
    IQ1_S = 24,
    IQ4_NL = 25,
    IQ3_S = 26,
    IQ3_M = 27,
    IQ2_S = 28,
    IQ2_M = 29,
    IQ4_XS = 30,
    IQ1_M = 31,
    BF16 = 32,
    TQ1_0 = 36,
    TQ2_0 = 37,
    MXFP4_MOE = 38,
    Q1_0 = 40,
    Q2_0 = 41,
}

/// llama-quantize's `QUANT_OPTIONS`, in its order: name, file type, description.
pub const QUANT_OPTIONS: &[(&str, FileType, &str)] = &[
    ("Q1_0", FileType::Q1_0, "1.125 bpw quantization"),
    ("Q2_0", FileType::Q2_0, "2.25 bpw quantization (group 64)"),
    ("Q4_0", FileType::Q4_0, "4.34G, +0.4685 ppl @ Llama-3-8B"),
    ("Q4_1", FileType::Q4_1, "4.78G, +0.4511 ppl @ Llama-3-8B"),
    ("MXFP4_MOE", FileType::MXFP4_MOE, "MXFP4 MoE"),
    ("Q5_0", FileType::Q5_0, "5.21G, +0.1316 ppl @ Llama-3-8B"),
    ("Q5_1", FileType::Q5_1, "5.65G, +0.1062 ppl @ Llama-3-8B"),
    ("IQ2_XXS", FileType::IQ2_XXS, "2.06 bpw quantization"),
    ("IQ2_XS", FileType::IQ2_XS, "2.31 bpw quantization"),
    ("IQ2_S", FileType::IQ2_S, "2.5  bpw quantization"),
    ("IQ2_M", FileType::IQ2_M, "2.7  bpw quantization"),
    ("IQ1_S", FileType::IQ1_S, "1.56 bpw quantization"),
    ("IQ1_M", FileType::IQ1_M, "1.75 bpw quantization"),
    ("TQ1_0", FileType::TQ1_0, "1.69 bpw ternarization"),
    ("TQ2_0", FileType::TQ2_0, "2.06 bpw ternarization"),
    ("Q2_K", FileType::Q2_K, "2.96G, +3.5199 ppl @ Llama-3-8B"),
    (
        "Q2_K_S",
        FileType::Q2_K_S,
        "2.96G, +3.1836 ppl @ Llama-3-8B",
    ),
    ("IQ3_XXS", FileType::IQ3_XXS, "3.06 bpw quantization"),
    ("IQ3_S", FileType::IQ3_S, "3.44 bpw quantization"),
    ("IQ3_M", FileType::IQ3_M, "3.66 bpw quantization mix"),
    ("Q3_K", FileType::Q3_K_M, "alias for Q3_K_M"),
    ("IQ3_XS", FileType::IQ3_XS, "3.3 bpw quantization"),
    (
        "Q3_K_S",
        FileType::Q3_K_S,
        "3.41G, +1.6321 ppl @ Llama-3-8B",
    ),
    (
        "Q3_K_M",
        FileType::Q3_K_M,
        "3.74G, +0.6569 ppl @ Llama-3-8B",
    ),
    (
        "Q3_K_L",
        FileType::Q3_K_L,
        "4.03G, +0.5562 ppl @ Llama-3-8B",
    ),
    (
        "IQ4_NL",
        FileType::IQ4_NL,
        "4.50 bpw non-linear quantization",
    ),
    (
        "IQ4_XS",
        FileType::IQ4_XS,
        "4.25 bpw non-linear quantization",
    ),
    ("Q4_K", FileType::Q4_K_M, "alias for Q4_K_M"),
    (
        "Q4_K_S",
        FileType::Q4_K_S,
        "4.37G, +0.2689 ppl @ Llama-3-8B",
    ),
    (
        "Q4_K_M",
        FileType::Q4_K_M,
        "4.58G, +0.1754 ppl @ Llama-3-8B",
    ),
    ("Q5_K", FileType::Q5_K_M, "alias for Q5_K_M"),
    (
        "Q5_K_S",
        FileType::Q5_K_S,
        "5.21G, +0.1049 ppl @ Llama-3-8B",
    ),
    (
        "Q5_K_M",
        FileType::Q5_K_M,
        "5.33G, +0.0569 ppl @ Llama-3-8B",
    ),
    ("Q6_K", FileType::Q6_K, "6.14G, +0.0217 ppl @ Llama-3-8B"),
    ("Q8_0", FileType::Q8_0, "7.96G, +0.0026 ppl @ Llama-3-8B"),
    ("F16", FileType::F16, "14.00G, +0.0020 ppl @ Mistral-7B"),
    ("BF16", FileType::BF16, "14.00G, -0.0050 ppl @ Mistral-7B"),
    ("F32", FileType::ALL_F32, "26.00G              @ 7B"),
];

impl FileType {
    /// The `general.file_type` value.
    pub fn id(self) -> u32 {
        self as u32
    }

    /// llama-quantize's `try_parse_ftype`: a name (any case) or its number.
    pub fn parse(s: &str) -> Option<(FileType, &'static str)> {
        if let Some(&(name, ft, _)) = QUANT_OPTIONS
            .iter()
            .find(|(name, _, _)| name.eq_ignore_ascii_case(s))
        {
            return Some((ft, name));
        }
        let n: u32 = s.trim().parse().ok()?;
        QUANT_OPTIONS
            .iter()
            .find(|(_, ft, _)| ft.id() == n)
            .map(|&(name, ft, _)| (ft, name))
    }

    /// `llama_ftype_get_default_type`.
    pub fn default_type(self) -> GgmlType {
        use FileType as F;
        use GgmlType as G;
        match self {
            F::Q4_0 => G::Q4_0,
            F::Q4_1 => G::Q4_1,
            F::Q5_0 => G::Q5_0,
            F::Q5_1 => G::Q5_1,
            F::Q8_0 => G::Q8_0,
            F::F16 => G::F16,
            F::BF16 => G::BF16,
            F::ALL_F32 => G::F32,
            F::Q1_0 => G::Q1_0,
            F::Q2_0 => G::Q2_0,
            F::MXFP4_MOE => G::MXFP4,
            F::Q2_K_S | F::Q2_K => G::Q2_K,
            F::IQ3_XS => G::IQ3_S,
            F::Q3_K_S | F::Q3_K_M | F::Q3_K_L => G::Q3_K,
            F::Q4_K_S | F::Q4_K_M => G::Q4_K,
            F::Q5_K_S | F::Q5_K_M => G::Q5_K,
            F::Q6_K => G::Q6_K,
            F::TQ1_0 => G::TQ1_0,
            F::TQ2_0 => G::TQ2_0,
            F::IQ2_XXS => G::IQ2_XXS,
            F::IQ2_XS => G::IQ2_XS,
            F::IQ2_S => G::IQ2_XS,
            F::IQ2_M => G::IQ2_S,
            F::IQ3_XXS => G::IQ3_XXS,
            F::IQ1_S => G::IQ1_S,
            F::IQ1_M => G::IQ1_M,
            F::IQ4_NL => G::IQ4_NL,
            F::IQ4_XS => G::IQ4_XS,
            F::IQ3_S | F::IQ3_M => G::IQ3_S,
        }
    }
}

/// ggml's type name for `--tensor-type`, `--output-tensor-type` and
/// `--token-embedding-type` (`parse_ggml_type`: any case).
pub fn parse_ggml_type(s: &str) -> Option<GgmlType> {
    GgmlType::ALL
        .iter()
        .copied()
        .find(|t| t.to_string().eq_ignore_ascii_case(s))
}
