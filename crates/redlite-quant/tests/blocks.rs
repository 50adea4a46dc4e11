//! Hand-built blocks of each format, checked against values computed here from
//! the block layouts of ggml-common.h (independently of the crate's code).

use redlite_quant::{dequantize_to_vec, dot_scalar, GgmlType};

fn f16b(v: f32) -> [u8; 2] {
    half::f16::from_f32(v).to_bits().to_le_bytes()
}

fn check(ty: GgmlType, block: &[u8], want: &[f32]) {
    assert_eq!(block.len(), ty.type_size(), "{ty}: test block size");
    let got = dequantize_to_vec(ty, block).expect("dequantize");
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(
            g.to_bits(),
            w.to_bits(),
            "{ty}: element {i}: got {g}, want {w}"
        );
    }
    // The scalar dot with a one-hot / ramp x picks the same values.
    let x: Vec<f32> = (0..want.len())
        .map(|i| ((i % 7) as f32 - 3.0) * 0.25)
        .collect();
    let exact: f64 = want
        .iter()
        .zip(&x)
        .map(|(a, b)| *a as f64 * *b as f64)
        .sum();
    let abs: f64 = want
        .iter()
        .zip(&x)
        .map(|(a, b)| (*a as f64 * *b as f64).abs())
        .sum();
    let d = dot_scalar(ty, block, &x).expect("dot");
    assert!(
        (d as f64 - exact).abs() <= 1e-5 * abs + 1e-30,
        "{ty}: dot {d} vs {exact}"
    );
}

/// 16 bytes whose low nibbles count up and high nibbles count down.
fn ramp_nibbles() -> Vec<u8> {
    (0..16u8).map(|j| j | ((15 - j) << 4)).collect()
}

#[test]
fn q4_0_block() {
    let mut b = f16b(0.5).to_vec();
    b.extend(ramp_nibbles());
    let mut want = vec![0f32; 32];
    for j in 0..16 {
        want[j] = 0.5 * (j as f32 - 8.0);
        want[j + 16] = 0.5 * (7.0 - j as f32);
    }
    check(GgmlType::Q4_0, &b, &want);
}

#[test]
fn q4_1_block() {
    let mut b = f16b(0.25).to_vec();
    b.extend(f16b(-1.0));
    b.extend(ramp_nibbles());
    let mut want = vec![0f32; 32];
    for j in 0..16 {
        want[j] = 0.25 * j as f32 - 1.0;
        want[j + 16] = 0.25 * (15 - j) as f32 - 1.0;
    }
    check(GgmlType::Q4_1, &b, &want);
}

#[test]
fn q5_0_block() {
    // Fifth bit set for elements 16..32 and for element 3.
    let qh: u32 = 0xFFFF_0000 | (1 << 3);
    let mut b = f16b(1.0).to_vec();
    b.extend(qh.to_le_bytes());
    b.extend(ramp_nibbles());
    let mut want = vec![0f32; 32];
    for j in 0..16 {
        want[j] = j as f32 - 16.0 + if j == 3 { 16.0 } else { 0.0 };
        want[j + 16] = (15 - j) as f32;
    }
    check(GgmlType::Q5_0, &b, &want);
}

#[test]
fn q5_1_block() {
    let qh: u32 = 0x0000_FFFF;
    let mut b = f16b(0.5).to_vec();
    b.extend(f16b(2.0));
    b.extend(qh.to_le_bytes());
    b.extend(ramp_nibbles());
    let mut want = vec![0f32; 32];
    for j in 0..16 {
        want[j] = 0.5 * (j + 16) as f32 + 2.0;
        want[j + 16] = 0.5 * (15 - j) as f32 + 2.0;
    }
    check(GgmlType::Q5_1, &b, &want);
}

#[test]
fn q8_0_block() {
    let mut b = f16b(0.125).to_vec();
    b.extend((0..32).map(|j| (j as i8 - 16) as u8));
    let want: Vec<f32> = (0..32).map(|j| 0.125 * (j as f32 - 16.0)).collect();
    check(GgmlType::Q8_0, &b, &want);
}

#[test]
fn q8_k_block() {
    let mut b = 0.5f32.to_le_bytes().to_vec();
    b.extend((0..256i32).map(|j| (j - 128) as i8 as u8));
    b.extend([0u8; 32]); // bsums (not used by dequantization)
    let want: Vec<f32> = (0..256).map(|j| 0.5 * (j as f32 - 128.0)).collect();
    check(GgmlType::Q8_K, &b, &want);
}

#[test]
fn q2_k_block() {
    // scales[g]: scale g % 16 in the low nibble, min (g + 1) % 16 in the high.
    let scales: Vec<u8> = (0..16u8).map(|g| g | (((g + 1) % 16) << 4)).collect();
    // Every qs byte holds 0, 1, 2, 3 at shifts 0, 2, 4, 6: element e of a
    // 128-element half uses shift 2 * ((e / 32) % 4).
    let mut b = scales.clone();
    b.extend([0b1110_0100u8; 64]);
    b.extend(f16b(1.0));
    b.extend(f16b(0.5));
    let want: Vec<f32> = (0..256)
        .map(|e| {
            let g = e / 16;
            let q = ((e / 32) % 4) as f32;
            (g as f32) * q - 0.5 * ((g + 1) % 16) as f32
        })
        .collect();
    check(GgmlType::Q2_K, &b, &want);
}

#[test]
fn q3_k_block() {
    // 6-bit scales s_i = (i * 4 + 1), stored biased by 32: low nibble of
    // byte i % 8 (nibble i / 8), high 2 bits in byte 8 + i % 4 at 2 * (i / 4).
    let mut sc = [0u8; 12];
    let sv: Vec<i32> = (0..16).map(|i| i * 4 + 1 - 32).collect();
    for i in 0..16 {
        let u = (sv[i] + 32) as u8;
        sc[i % 8] |= (u & 0x0F) << (4 * (i / 8));
        sc[8 + i % 4] |= (u >> 4) << (2 * (i / 4));
    }
    // hmask bit b of byte l is the high bit of element 32 * b + l: set it
    // for even b. qs as in Q2_K: low 2 bits = (e / 32) % 4.
    let mut b = vec![0x55u8; 32];
    b.extend([0b1110_0100u8; 64]);
    b.extend(sc);
    b.extend(f16b(0.5));
    let want: Vec<f32> = (0..256)
        .map(|e| {
            let ql = ((e / 32) % 4) as f32;
            let q = if (e / 32) % 2 == 0 { ql } else { ql - 4.0 };
            0.5 * sv[e / 16] as f32 * q
        })
        .collect();
    check(GgmlType::Q3_K, &b, &want);
}

/// The 12 scale bytes of Q4_K / Q5_K for 8 scales and 8 mins (6 bits each).
fn pack_k4(sc: [u8; 8], m: [u8; 8]) -> [u8; 12] {
    let mut o = [0u8; 12];
    for k in 0..4 {
        o[k] = sc[k] | ((sc[k + 4] >> 4) << 6);
        o[k + 4] = m[k] | ((m[k + 4] >> 4) << 6);
        o[k + 8] = (sc[k + 4] & 0x0F) | ((m[k + 4] & 0x0F) << 4);
    }
    o
}

const K_SC: [u8; 8] = [1, 5, 17, 33, 40, 50, 63, 2];
const K_M: [u8; 8] = [0, 3, 9, 60, 45, 20, 7, 63];

#[test]
fn q4_k_block() {
    let mut b = f16b(0.5).to_vec();
    b.extend(f16b(0.25));
    b.extend(pack_k4(K_SC, K_M));
    // Byte 32 j + l: low nibble l % 16 (sub-block 2j), high 15 - l % 16 (2j+1).
    b.extend((0..128).map(|i| ((i % 32) % 16) as u8 | ((15 - (i % 32) % 16) << 4) as u8));
    let want: Vec<f32> = (0..256)
        .map(|e| {
            let (k, l) = (e / 32, e % 32);
            let q = if k % 2 == 0 { l % 16 } else { 15 - l % 16 } as f32;
            (0.5 * K_SC[k] as f32) * q - 0.25 * K_M[k] as f32
        })
        .collect();
    check(GgmlType::Q4_K, &b, &want);
}

#[test]
fn q5_k_block() {
    let mut b = f16b(0.5).to_vec();
    b.extend(f16b(0.25));
    b.extend(pack_k4(K_SC, K_M));
    // qh[l] bit k is the fifth bit of element 32 k + l.
    b.extend((0..32).map(|l| {
        (0..8)
            .filter(|k| (l + k) % 3 == 0)
            .map(|k| 1u8 << k)
            .sum::<u8>()
    }));
    b.extend((0..128).map(|i| ((i % 32) % 16) as u8 | ((15 - (i % 32) % 16) << 4) as u8));
    let want: Vec<f32> = (0..256)
        .map(|e| {
            let (k, l) = (e / 32, e % 32);
            let lo = if k % 2 == 0 { l % 16 } else { 15 - l % 16 };
            let q = (lo + if (l + k) % 3 == 0 { 16 } else { 0 }) as f32;
            (0.5 * K_SC[k] as f32) * q - 0.25 * K_M[k] as f32
        })
        .collect();
    check(GgmlType::Q5_K, &b, &want);
}

#[test]
fn q6_k_block() {
    // 6-bit value of element e: (7 e) % 64. In each 128-element half j,
    // element r: low 4 bits in ql[64 j + r % 64] (nibble r / 64), high 2 bits
    // in qh[32 j + r % 32] at shift 2 * (r / 32).
    let v = |e: usize| (7 * e % 64) as u8;
    let mut ql = [0u8; 128];
    let mut qh = [0u8; 64];
    for e in 0..256 {
        let (j, r) = (e / 128, e % 128);
        ql[64 * j + r % 64] |= (v(e) & 0x0F) << (4 * (r / 64));
        qh[32 * j + r % 32] |= (v(e) >> 4) << (2 * (r / 32));
    }
    let sc: Vec<i8> = (0..16).map(|g| g as i8 * 3 - 20).collect();
    let mut b = ql.to_vec();
    b.extend(qh);
    b.extend(sc.iter().map(|s| *s as u8));
    b.extend(f16b(0.5));
    let want: Vec<f32> = (0..256)
        .map(|e| (0.5 * sc[e / 16] as f32) * (v(e) as f32 - 32.0))
        .collect();
    check(GgmlType::Q6_K, &b, &want);
}

const IQ4NL: [f32; 16] = [
    -127.0, -104.0, -83.0, -65.0, -49.0, -35.0, -22.0, -10.0, 1.0, 13.0, 25.0, 38.0, 53.0, 69.0,
    89.0, 113.0,
];

#[test]
fn iq4_nl_block() {
    let mut b = f16b(2.0).to_vec();
    b.extend(ramp_nibbles());
    let mut want = vec![0f32; 32];
    for j in 0..16 {
        want[j] = 2.0 * IQ4NL[j];
        want[j + 16] = 2.0 * IQ4NL[15 - j];
    }
    check(GgmlType::IQ4_NL, &b, &want);
}

#[test]
fn iq4_xs_block() {
    // Sub-block ib scale (biased by 32): low nibble in scales_l[ib / 2]
    // (nibble ib % 2), high 2 bits at 2 ib in scales_h.
    let ls: Vec<i32> = (0..8).map(|ib| ib * 8 - 29).collect();
    let mut sh = 0u16;
    let mut sl = [0u8; 4];
    for ib in 0..8 {
        let u = (ls[ib] + 32) as u16;
        sl[ib / 2] |= ((u & 0x0F) as u8) << (4 * (ib % 2));
        sh |= (u >> 4) << (2 * ib);
    }
    let mut b = f16b(0.5).to_vec();
    b.extend(sh.to_le_bytes());
    b.extend(sl);
    for _ in 0..8 {
        b.extend(ramp_nibbles());
    }
    let want: Vec<f32> = (0..256)
        .map(|e| {
            let (ib, j) = (e / 32, e % 32);
            let k = if j < 16 {
                IQ4NL[j]
            } else {
                IQ4NL[15 - (j - 16)]
            };
            (0.5 * ls[ib] as f32) * k
        })
        .collect();
    check(GgmlType::IQ4_XS, &b, &want);
}

#[test]
fn mxfp4_block() {
    // E2M1 code values; the block scale is 2^(e - 127).
    let fp4 = [
        0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0,
    ];
    for e in [128u8, 1, 127, 200] {
        let mut b = vec![e];
        b.extend(ramp_nibbles());
        let s = 2f64.powi(e as i32 - 127);
        let mut want = vec![0f32; 32];
        for j in 0..16 {
            want[j] = (fp4[j] * s) as f32;
            want[j + 16] = (fp4[15 - j] * s) as f32;
        }
        // -0.0 * s is -0.0 in ggml (kvalue 0 times d) only for code 8's
        // sign; ggml's table has +0 for code 8, so compare code 8 as +0.
        for j in 0..16 {
            if j == 8 {
                want[j] = 0.0;
            }
            if 15 - j == 8 {
                want[j + 16] = 0.0;
            }
        }
        check(GgmlType::MXFP4, &b, &want);
    }
}

#[test]
fn float_blocks() {
    let h = [0x3C00u16, 0xC000, 0x0001, 0x7BFF, 0x8000];
    let b: Vec<u8> = h.iter().flat_map(|v| v.to_le_bytes()).collect();
    let got = dequantize_to_vec(GgmlType::F16, &b).expect("f16");
    assert_eq!(got, vec![1.0, -2.0, 2f32.powi(-24), 65504.0, -0.0]);
    let bf = [0x3F80u16, 0xC040, 0x0080, 0x7F7F];
    let b: Vec<u8> = bf.iter().flat_map(|v| v.to_le_bytes()).collect();
    let got = dequantize_to_vec(GgmlType::BF16, &b).expect("bf16");
    assert_eq!(
        got,
        vec![1.0, -3.0, f32::MIN_POSITIVE, f32::from_bits(0x7F7F_0000)]
    );
    let f = [1.5f32, -0.0, 3.25e-40];
    let b: Vec<u8> = f.iter().flat_map(|v| v.to_le_bytes()).collect();
    let got = dequantize_to_vec(GgmlType::F32, &b).expect("f32");
    assert_eq!(
        got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        f.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
    );
}

#[test]
fn q1_0_block() {
    // Sign bits LSB-first: byte k = k * 17 (mod 256).
    let mut b = f16b(0.375).to_vec();
    let qs: Vec<u8> = (0..16u32).map(|k| (k * 17) as u8).collect();
    b.extend(&qs);
    let want: Vec<f32> = (0..128)
        .map(|j| {
            if qs[j / 8] & (1 << (j % 8)) != 0 {
                0.375
            } else {
                -0.375
            }
        })
        .collect();
    check(GgmlType::Q1_0, &b, &want);
}

#[test]
fn q2_0_block() {
    // Byte k holds codes (k, k+1, k+2, k+3) mod 4 in its four 2-bit fields.
    let mut b = f16b(-1.5).to_vec();
    let mut want = vec![0f32; 64];
    for k in 0..16 {
        let mut byte = 0u8;
        for s in 0..4 {
            let c = ((k + s) % 4) as u8;
            byte |= c << (2 * s);
            want[4 * k + s] = (c as f32 - 1.0) * -1.5;
        }
        b.push(byte);
    }
    check(GgmlType::Q2_0, &b, &want);
}

#[test]
fn nvfp4_block() {
    // UE4M3 scales: 0x38 = 1.0, 0x01 = 2^-9, 0x7F = NaN code (reads as 0),
    // 0x4A = 1.25·2^2 = 5.0; halved, as the codes are doubled E2M1 values.
    let scales = [0x38u8, 0x01, 0x7F, 0x4A];
    let d = [0.5f32, 2f32.powi(-10), 0.0, 2.5];
    let e2m1x2 = [0i8, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];
    let mut b = scales.to_vec();
    let mut want = vec![0f32; 64];
    for s in 0..4 {
        for j in 0..8 {
            let (lo, hi) = ((j + 3 * s) % 16, (15 - j + s) % 16);
            b.push((lo | (hi << 4)) as u8);
            want[16 * s + j] = e2m1x2[lo] as f32 * d[s];
            want[16 * s + 8 + j] = e2m1x2[hi] as f32 * d[s];
        }
    }
    check(GgmlType::NVFP4, &b, &want);
}
