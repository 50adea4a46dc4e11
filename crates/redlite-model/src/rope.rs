//! Rotary position embedding: the per-position cos/sin of each rotated pair,
//! with llama.cpp's rope scaling (`rope.scaling.type` none, linear, yarn).
//!
//! YaRN as ggml computes it (`rope_yarn` in ggml-cpu's rope): for pair `i`
//! (`i < n_rot/2`) at position `p`, `θ_extrap = p · base^(−2i/n_rot)`,
//! `θ_interp = θ_extrap / factor`; a ramp over the pairs between the
//! correction dims `[low, high]` (from `beta_fast`, `beta_slow` and the
//! original context length) mixes them:
//! `ramp = (1 − clamp((i − low) / max(0.001, high − low), 0, 1)) · ext_factor`,
//! `θ = θ_interp·(1 − ramp) + θ_extrap·ramp`; cos and sin are multiplied by
//! `mscale = attn_factor · (1 + 0.1·ln(factor))` (the log term only when
//! `ext_factor ≠ 0`). Linear scaling is `θ = θ_extrap / factor`.

use std::path::Path;

use redlite_gguf::GgufFile;

use crate::ModelError;
use crate::ARCH;

/// Which rope scaling the file asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeScalingType {
    None,
    Linear,
    Yarn,
}

/// Rope scaling parameters (llama.cpp's names and defaults).
#[derive(Clone, Debug, PartialEq)]
pub struct RopeScaling {
    pub kind: RopeScalingType,
    /// `rope.scaling.factor` (context extension factor; 1 = none).
    pub factor: f32,
    /// `rope.scaling.original_context_length` (default: `context_length`).
    pub n_ctx_orig: usize,
    /// `rope.scaling.yarn_ext_factor` (default 1 for YaRN, 0 otherwise).
    pub ext_factor: f32,
    /// `rope.scaling.attn_factor` times `rope.scaling.yarn_attn_factor`
    /// (both default 1).
    pub attn_factor: f32,
    /// `rope.scaling.yarn_beta_fast` (default 32).
    pub beta_fast: f32,
    /// `rope.scaling.yarn_beta_slow` (default 1).
    pub beta_slow: f32,
}

impl RopeScaling {
    /// No scaling.
    pub fn none(n_ctx_orig: usize) -> RopeScaling {
        RopeScaling {
            kind: RopeScalingType::None,
            factor: 1.0,
            n_ctx_orig,
            ext_factor: 0.0,
            attn_factor: 1.0,
            beta_fast: 32.0,
            beta_slow: 1.0,
        }
    }

    /// Read `qwen3next.rope.scaling.*` as llama.cpp's loader does: the type
    /// defaults to linear (a no-op without a factor); `yarn`, `linear` and
    /// `none` are supported, anything else is an error naming the key.
    pub(crate) fn from_gguf(
        f: &GgufFile,
        path: &Path,
        context_length: usize,
    ) -> Result<RopeScaling, ModelError> {
        let key = |k: &str| format!("{ARCH}.rope.scaling.{k}");
        let bad = |k: &str, msg: String| ModelError::Key {
            path: path.to_path_buf(),
            key: key(k),
            msg,
        };
        let kind = match f.get_str(&key("type"))? {
            None | Some("linear") => RopeScalingType::Linear,
            Some("none") => RopeScalingType::None,
            Some("yarn") => RopeScalingType::Yarn,
            Some(other) => {
                return Err(bad(
                    "type",
                    format!(
                        "rope scaling {other:?} is not supported (supported: none, linear, yarn)"
                    ),
                ))
            }
        };
        let num = |k: &str| -> Result<Option<f32>, ModelError> {
            match f.get_f64(&key(k))? {
                Some(v) if !v.is_finite() => Err(bad(k, format!("{v} is not a finite number"))),
                v => Ok(v.map(|v| v as f32)),
            }
        };
        // `rope.scaling.factor`, else the older `rope.scale_linear`; 0 = unset.
        let factor = match num("factor")? {
            Some(v) => v,
            None => f
                .get_f64(&format!("{ARCH}.rope.scale_linear"))?
                .map(|v| v as f32)
                .unwrap_or(0.0),
        };
        let factor = if factor == 0.0 { 1.0 } else { factor };
        if factor <= 0.0 {
            return Err(bad("factor", format!("{factor} must be positive")));
        }
        let n_ctx_orig = match f.get_u64(&key("original_context_length"))? {
            Some(0) | None => context_length,
            Some(v) => v as usize,
        };
        let mut s = RopeScaling {
            kind,
            factor,
            n_ctx_orig,
            ext_factor: 0.0,
            attn_factor: num("attn_factor")?.unwrap_or(1.0)
                * num("yarn_attn_factor")?.unwrap_or(1.0),
            beta_fast: num("yarn_beta_fast")?.unwrap_or(32.0),
            beta_slow: num("yarn_beta_slow")?.unwrap_or(1.0),
        };
        match kind {
            RopeScalingType::None => s.factor = 1.0,
            RopeScalingType::Linear => {}
            RopeScalingType::Yarn => {
                // A negative value means "not set" in llama.cpp.
                s.ext_factor = match num("yarn_ext_factor")? {
                    Some(v) if v >= 0.0 => v,
                    _ => 1.0,
                };
                if s.n_ctx_orig == 0 {
                    return Err(bad(
                        "original_context_length",
                        "YaRN needs the original context length (missing, and no \
                         context_length either)"
                            .into(),
                    ));
                }
            }
        }
        Ok(s)
    }
}

/// The cos/sin of every rotated pair at any position.
#[derive(Clone, Debug)]
pub(crate) struct Rope {
    /// Per pair: the extrapolated frequency `base^(−2i/n_rot)`, the
    /// interpolated one (`/ factor`) and the YaRN ramp mix.
    pairs: Vec<(f64, f64, f64)>,
    mscale: f64,
}

impl Rope {
    pub(crate) fn new(n_rot: usize, base: f32, s: &RopeScaling) -> Rope {
        let half = n_rot / 2;
        let freq_scale = 1.0 / s.factor as f64;
        let (low, high) = yarn_corr_dims(n_rot, s.n_ctx_orig, base, s.beta_fast, s.beta_slow);
        let pairs = (0..half)
            .map(|i| {
                let extrap = (base as f64).powf(-2.0 * i as f64 / n_rot as f64);
                let interp = extrap * freq_scale;
                let mix = match s.kind {
                    RopeScalingType::Yarn => {
                        let y = (i as f64 - low) / (high - low).max(0.001);
                        (1.0 - y.clamp(0.0, 1.0)) * s.ext_factor as f64
                    }
                    // Linear: all interpolation; none: factor is 1.
                    _ => 0.0,
                };
                (extrap, interp, mix)
            })
            .collect();
        let mut mscale = s.attn_factor as f64;
        if s.kind == RopeScalingType::Yarn && s.ext_factor != 0.0 {
            mscale *= 1.0 + 0.1 * (1.0 / freq_scale).ln();
        }
        Rope { pairs, mscale }
    }

    /// The pair table and magnitude scale (see [`crate::Model::rope_table`]).
    pub(crate) fn table(&self) -> (Vec<(f64, f64, f64)>, f64) {
        (self.pairs.clone(), self.mscale)
    }

    /// `(cos θ_i · mscale, sin θ_i · mscale)` for each pair at `pos`.
    pub(crate) fn cos_sin(&self, pos: usize, out: &mut Vec<(f32, f32)>) {
        out.clear();
        let p = pos as f64;
        out.extend(self.pairs.iter().map(|&(extrap, interp, mix)| {
            let theta = p * interp * (1.0 - mix) + p * extrap * mix;
            let (s, c) = theta.sin_cos();
            ((c * self.mscale) as f32, (s * self.mscale) as f32)
        }));
    }
}

/// ggml's `ggml_rope_yarn_corr_dims` (in f32, as ggml computes it): the
/// first and last pair index of the ramp.
fn yarn_corr_dims(n_rot: usize, n_ctx_orig: usize, base: f32, fast: f32, slow: f32) -> (f64, f64) {
    let dim = |n_rotations: f32| -> f32 {
        n_rot as f32 * (n_ctx_orig as f32 / (n_rotations * 2.0 * std::f32::consts::PI)).ln()
            / (2.0 * base.ln())
    };
    let start = dim(fast).floor();
    let end = dim(slow).ceil();
    (start.max(0.0) as f64, end.min(n_rot as f32 - 1.0) as f64)
}

/// Partial NeoX RoPE in place on `[heads, head_dim]` with the pair table
/// `cs` (`n_rot/2` entries): pairs `(i, i + n_rot/2)`; dims from `n_rot`
/// pass through.
pub(crate) fn apply(x: &mut [f32], head_dim: usize, cs: &[(f32, f32)]) {
    let half = cs.len();
    for head in x.chunks_mut(head_dim) {
        for (i, &(cos, sin)) in cs.iter().enumerate() {
            let (x0, x1) = (head[i], head[i + half]);
            head[i] = x0 * cos - x1 * sin;
            head[i + half] = x1 * cos + x0 * sin;
        }
    }
}

#[cfg(test)]
mod tests {
    //! YaRN against an independent NumPy implementation (written from the
    //! transformers / YaRN-paper formulation: inverse frequencies blended by
    //! a linear ramp between the correction dims, attention factor
    //! `0.1·ln(factor) + 1`): the cos/sin tables directly, and full-model
    //! logits on prompts longer than the original context.

    use std::path::{Path, PathBuf};
    use std::process::Command;

    use redlite_gguf::{GgufFile, GgufWriter, MetaValue};
    use redlite_testkit::{fixture, read_npy, read_npz};

    use super::*;
    use crate::Model;

    const NUMPY_YARN: &str = r#"
import json, sys
import numpy as np
p = json.loads(sys.argv[1])
d, base, factor, orig = p["n_rot"], p["base"], p["factor"], p["n_ctx_orig"]
ext, attn, beta_fast, beta_slow, n_pos = p["ext"], p["attn"], p["beta_fast"], p["beta_slow"], p["n_pos"]
inv_freq_extrapolation = 1.0 / base ** (np.arange(0, d, 2, dtype=np.float64) / d)
inv_freq_interpolation = inv_freq_extrapolation / factor
def correction_dim(num_rotations):
    return d * np.log(orig / (num_rotations * 2 * np.pi)) / (2 * np.log(base))
low = max(np.floor(correction_dim(beta_fast)), 0.0)
high = min(np.ceil(correction_dim(beta_slow)), d - 1.0)
if high == low:
    high += 0.001
linear = np.clip((np.arange(d // 2, dtype=np.float64) - low) / (high - low), 0.0, 1.0)
extrapolation_weight = (1.0 - linear) * ext
inv_freq = inv_freq_interpolation * (1 - extrapolation_weight) + inv_freq_extrapolation * extrapolation_weight
attention_factor = attn * ((0.1 * np.log(factor) + 1.0) if ext != 0 else 1.0)
angle = np.arange(n_pos, dtype=np.float64)[:, None] * inv_freq[None, :]
table = np.stack([np.cos(angle), np.sin(angle)], axis=-1) * attention_factor
np.save(sys.argv[2], table.astype(np.float32))
"#;

    /// The NumPy table `[n_pos][n_rot/2]` of (cos, sin)·attention factor.
    #[allow(clippy::too_many_arguments)]
    fn numpy_table(
        n_rot: usize,
        base: f32,
        factor: f32,
        n_ctx_orig: usize,
        ext: f32,
        attn: f32,
        beta_fast: f32,
        beta_slow: f32,
        n_pos: usize,
    ) -> Vec<Vec<(f32, f32)>> {
        let dir = tempfile::tempdir().expect("tempdir");
        let script = dir.path().join("yarn.py");
        std::fs::write(&script, NUMPY_YARN).expect("write script");
        let out = dir.path().join("table.npy");
        let params = format!(
            "{{\"n_rot\": {n_rot}, \"base\": {base}, \"factor\": {factor}, \"n_ctx_orig\": \
             {n_ctx_orig}, \"ext\": {ext}, \"attn\": {attn}, \"beta_fast\": {beta_fast}, \
             \"beta_slow\": {beta_slow}, \"n_pos\": {n_pos}}}"
        );
        let py = redlite_testkit::python();
        let res = Command::new(&py)
            .arg(&script)
            .arg(&params)
            .arg(&out)
            .output()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run Python {} ({e}): set REDLITE_PYTHON",
                    py.display()
                )
            });
        assert!(
            res.status.success(),
            "NumPy YaRN reference failed ({}): {}",
            py.display(),
            String::from_utf8_lossy(&res.stderr)
        );
        let a = read_npy(&out);
        assert_eq!(a.shape, vec![n_pos, n_rot / 2, 2]);
        a.data
            .chunks(n_rot)
            .map(|row| row.chunks(2).map(|p| (p[0], p[1])).collect())
            .collect()
    }

    fn yarn(
        factor: f32,
        n_ctx_orig: usize,
        ext: f32,
        attn: f32,
        fast: f32,
        slow: f32,
    ) -> RopeScaling {
        RopeScaling {
            kind: RopeScalingType::Yarn,
            factor,
            n_ctx_orig,
            ext_factor: ext,
            attn_factor: attn,
            beta_fast: fast,
            beta_slow: slow,
        }
    }

    #[test]
    fn yarn_tables_match_numpy() {
        // (n_rot, base, scaling): the tiny models' rope with llama.cpp's
        // defaults; other betas, ext and attention factors; a Coder-Next-like
        // rope whose ramp spans pairs 6..14.
        let cases = [
            (16, 1e7f32, yarn(4.0, 64, 1.0, 1.0, 32.0, 1.0)),
            (16, 1e4, yarn(3.0, 64, 0.5, 0.9, 16.0, 0.5)),
            (64, 5e6, yarn(4.0, 4096, 1.0, 1.0, 32.0, 1.0)),
        ];
        let n_pos = 300;
        for (n_rot, base, s) in cases {
            let want = numpy_table(
                n_rot,
                base,
                s.factor,
                s.n_ctx_orig,
                s.ext_factor,
                s.attn_factor,
                s.beta_fast,
                s.beta_slow,
                n_pos,
            );
            let rope = Rope::new(n_rot, base, &s);
            let mut got = Vec::new();
            let mut worst = 0f32;
            for (pos, w) in want.iter().enumerate() {
                rope.cos_sin(pos, &mut got);
                assert_eq!(got.len(), n_rot / 2);
                for (g, w) in got.iter().zip(w) {
                    worst = worst.max((g.0 - w.0).abs()).max((g.1 - w.1).abs());
                }
            }
            println!("n_rot {n_rot} base {base} {s:?}: max |Δ| {worst:.2e}");
            assert!(worst <= 2e-6, "{s:?}: cos/sin differ from NumPy by {worst}");
            // The attention factor is in the table: |(cos, sin)| = mscale.
            rope.cos_sin(7, &mut got);
            let m = (got[0].0 as f64).hypot(got[0].1 as f64);
            let want_m = s.attn_factor as f64 * (1.0 + 0.1 * (s.factor as f64).ln());
            assert!((m - want_m).abs() < 1e-6, "mscale {m} vs {want_m}");
        }
    }

    /// tiny-s-bf16 with extra metadata, written to `dir`.
    fn derive(dir: &Path, extra: &[(&str, MetaValue)]) -> PathBuf {
        let src = GgufFile::open(fixture("tiny-s-bf16.gguf")).expect("fixture opens");
        let mut w = GgufWriter::new();
        for (k, v) in &src.metadata {
            w.add_kv(k.clone(), v.clone());
        }
        for (k, v) in extra {
            w.add_kv(*k, v.clone());
        }
        for t in &src.tensors {
            w.add_tensor(
                t.name.clone(),
                &t.dims,
                t.ggml_type,
                src.tensor_data(t).to_vec(),
            )
            .expect("add tensor");
        }
        let path = dir.join("yarn.gguf");
        w.write_to_path(&path).expect("write");
        path
    }

    fn logits(model: &Model, tokens: &[u32], batch: usize) -> Vec<f32> {
        let mut st = model.new_state();
        let mut out = Vec::new();
        for chunk in tokens.chunks(batch) {
            out.extend(model.forward(&mut st, chunk, true).expect("forward"));
        }
        out
    }

    /// (max |Δ|, max KL(a‖b)) over the rows of two `[T, vocab]` logit sets.
    fn distance(a: &[f32], b: &[f32], vocab: usize) -> (f32, f64) {
        let lse = |l: &[f32]| {
            let m = l.iter().fold(f64::NEG_INFINITY, |x, &y| x.max(y as f64));
            m + l.iter().map(|&x| (x as f64 - m).exp()).sum::<f64>().ln()
        };
        let (mut abs, mut kl) = (0f32, 0f64);
        for (ra, rb) in a.chunks(vocab).zip(b.chunks(vocab)) {
            for (x, y) in ra.iter().zip(rb) {
                abs = abs.max((x - y).abs());
            }
            let (la, lb) = (lse(ra), lse(rb));
            let k: f64 = ra
                .iter()
                .zip(rb)
                .map(|(&x, &y)| {
                    let lx = x as f64 - la;
                    lx.exp() * (lx - (y as f64 - lb))
                })
                .sum();
            kl = kl.max(k);
        }
        (abs, kl)
    }

    fn prompt(name: &str) -> Vec<u32> {
        let s = std::fs::read_to_string(fixture("prompts.json")).expect("prompts.json");
        let v: serde_json::Value = serde_json::from_str(&s).expect("prompts.json parses");
        v[name]["ids"]
            .as_array()
            .expect("ids")
            .iter()
            .map(|x| x.as_u64().expect("id") as u32)
            .collect()
    }

    #[test]
    fn yarn_logits_match_numpy_rope_beyond_original_context() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = derive(
            dir.path(),
            &[
                (
                    "qwen3next.rope.scaling.type",
                    MetaValue::String("yarn".into()),
                ),
                ("qwen3next.rope.scaling.factor", MetaValue::F32(4.0)),
                (
                    "qwen3next.rope.scaling.original_context_length",
                    MetaValue::U32(64),
                ),
            ],
        );
        let yarn_model = Model::load(&path).expect("YaRN file loads");
        assert_eq!(
            yarn_model.config().rope_scaling,
            yarn(4.0, 64, 1.0, 1.0, 32.0, 1.0)
        );
        let mut reference = Model::load(&fixture("tiny-s-bf16.gguf")).expect("fixture loads");
        let c = reference.config().clone();
        let vocab = c.vocab_size;
        let refs = read_npz(&fixture("refs.npz"));

        // 1. The override path itself, with NumPy's unscaled table, matches
        //    transformers (refs.npz) on the unscaled model.
        reference.rope_override = Some(numpy_table(
            c.n_rot,
            c.rope_theta,
            1.0,
            64,
            0.0,
            1.0,
            32.0,
            1.0,
            200,
        ));
        for name in ["code", "rep120"] {
            let tokens = prompt(name);
            let (abs, kl) = distance(
                &refs[&format!("tiny-s.{name}")].data,
                &logits(&reference, &tokens, tokens.len()),
                vocab,
            );
            println!(
                "unscaled NumPy rope vs transformers, {name}: max|Δ| {abs:.2e}, max KL {kl:.2e}"
            );
            assert!(abs <= 5e-3 && kl <= 1e-6, "{name}: {abs} / {kl}");
        }

        // 2. The YaRN file against the same forward with NumPy's YaRN table,
        //    on prompts longer than the original context (64).
        reference.rope_override = Some(numpy_table(
            c.n_rot,
            c.rope_theta,
            4.0,
            64,
            1.0,
            1.0,
            32.0,
            1.0,
            200,
        ));
        let plain = Model::load(&fixture("tiny-s-bf16.gguf")).expect("fixture loads");
        for name in ["prose", "code", "rep120"] {
            let tokens = prompt(name);
            assert!(
                tokens.len() > 64,
                "{name} is not longer than the original context"
            );
            let want = logits(&reference, &tokens, tokens.len());
            for batch in [tokens.len(), 1] {
                let got = logits(&yarn_model, &tokens, batch);
                let (abs, kl) = distance(&want, &got, vocab);
                println!(
                    "YaRN vs NumPy YaRN rope, {name} ({} tokens, batch {batch}): max|Δ| {abs:.2e}, max KL {kl:.2e}",
                    tokens.len()
                );
                assert!(
                    abs <= 5e-3 && kl <= 1e-6,
                    "{name} batch {batch}: {abs} / {kl}"
                );
            }
            // The scaling is not a no-op: unscaled logits are far away.
            let (abs, _) = distance(&want, &logits(&plain, &tokens, tokens.len()), vocab);
            println!("YaRN vs unscaled, {name}: max|Δ| {abs:.2e}");
            assert!(abs > 0.1, "{name}: YaRN changes the logits by only {abs}");
        }
    }

    fn scaling_of(extra: &[(&str, MetaValue)]) -> Result<RopeScaling, ModelError> {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut w = GgufWriter::new();
        w.add_str("general.architecture", "qwen3next");
        for (k, v) in extra {
            w.add_kv(*k, v.clone());
        }
        let path = dir.path().join("k.gguf");
        w.write_to_path(&path).expect("write");
        let f = GgufFile::open(&path).expect("opens");
        RopeScaling::from_gguf(&f, &path, 1000)
    }

    #[test]
    fn scaling_keys() {
        let t = |v: &str| ("qwen3next.rope.scaling.type", MetaValue::String(v.into()));
        // No keys: linear with factor 1 (no-op), as llama.cpp.
        let s = scaling_of(&[]).expect("ok");
        assert_eq!(
            (s.kind, s.factor, s.n_ctx_orig),
            (RopeScalingType::Linear, 1.0, 1000)
        );
        // YaRN with every key.
        let s = scaling_of(&[
            t("yarn"),
            ("qwen3next.rope.scaling.factor", MetaValue::F32(8.0)),
            (
                "qwen3next.rope.scaling.original_context_length",
                MetaValue::U32(32),
            ),
            (
                "qwen3next.rope.scaling.yarn_ext_factor",
                MetaValue::F32(0.25),
            ),
            (
                "qwen3next.rope.scaling.yarn_attn_factor",
                MetaValue::F32(0.5),
            ),
            ("qwen3next.rope.scaling.yarn_beta_fast", MetaValue::F32(8.0)),
            ("qwen3next.rope.scaling.yarn_beta_slow", MetaValue::F32(2.0)),
        ])
        .expect("ok");
        assert_eq!(s, yarn(8.0, 32, 0.25, 0.5, 8.0, 2.0));
        // A negative ext factor means "unset": 1 for YaRN.
        let s = scaling_of(&[
            t("yarn"),
            ("qwen3next.rope.scaling.factor", MetaValue::F32(2.0)),
            (
                "qwen3next.rope.scaling.yarn_ext_factor",
                MetaValue::F32(-1.0),
            ),
        ])
        .expect("ok");
        assert_eq!(s, yarn(2.0, 1000, 1.0, 1.0, 32.0, 1.0));
        // none ignores the factor.
        let s = scaling_of(&[
            t("none"),
            ("qwen3next.rope.scaling.factor", MetaValue::F32(2.0)),
        ])
        .expect("ok");
        assert_eq!((s.kind, s.factor), (RopeScalingType::None, 1.0));
        // Linear divides every angle by the factor.
        let s = scaling_of(&[
            t("linear"),
            ("qwen3next.rope.scaling.factor", MetaValue::F32(2.0)),
        ])
        .expect("ok");
        let (mut a, mut b) = (Vec::new(), Vec::new());
        Rope::new(16, 1e4, &s).cos_sin(10, &mut a);
        Rope::new(16, 1e4, &RopeScaling::none(0)).cos_sin(5, &mut b);
        assert_eq!(a, b);
        // Anything else is refused, naming the key.
        let e = scaling_of(&[t("longrope")])
            .expect_err("longrope refused")
            .to_string();
        assert!(
            e.contains("qwen3next.rope.scaling.type") && e.contains("longrope"),
            "{e}"
        );
    }
}
