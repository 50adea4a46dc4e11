//! The typed settings of the CUDA forward pass: [`CudaOptions`] (expert
//! placement, activations, NVRTC, the kernel cache, profiling) and the
//! [`CudaTuning`] numbers, filled by the caller; and the device budget of
//! the routed experts when they are placed to fit ([`fit_budget`]).

use super::*;

/// Where the routed experts live when they do not all fit in device memory:
/// the first `vram` experts of every layer in device memory, the others in
/// pinned host memory that the kernels read over the bus. Each expert's
/// matrices (gate, up, down) lie together in one record.
#[derive(Clone, Copy, Debug, Default)]
pub struct ExpertPlacement {
    /// Experts per layer in device memory.
    pub vram: usize,
    /// Device bytes of routed experts, over all layers.
    pub vram_bytes: usize,
    /// Pinned host bytes of routed experts, over all layers.
    pub host_bytes: usize,
}

/// Options of [`CudaModel::with_options`], filled by the caller (the
/// command line reads its flags and documented environment variables into
/// them; this crate reads no environment).
#[derive(Clone, Debug, Default)]
pub struct CudaOptions {
    /// Device memory for the routed experts (`None`: all of them, or as `fit`
    /// decides). Those that do not fit are kept in pinned host memory.
    pub expert_vram_bytes: Option<u64>,
    /// Without a budget: keep every expert in device memory when the model
    /// fits in the free memory with room to run ([`FIT_RESERVE`]), else place
    /// as many as fit there and the rest in pinned host memory.
    pub fit: bool,
    /// f32 activations in every product (the reference path) instead of
    /// the 16-bit integer activations the one-token and verify products
    /// take by default (also `REDLITE_F32_ACT=1`).
    pub f32_activations: bool,
    /// With experts placed apart: no decode prefetch of the predicted
    /// experts held in host memory (they are then read over the bus by the
    /// products that use them).
    pub no_expert_prefetch: bool,
    /// How many of each layer's predicted experts the prefetch copies, the
    /// most likely first (`None`: four fifths of the experts per token).
    pub expert_prefetch_top: Option<usize>,
    /// For tests: each copy of a predicted expert first waits for its
    /// layer's router, so that the copies of every expert it did not choose
    /// stop (outputs must not change).
    pub expert_prefetch_wait_router: bool,
    /// Where NVRTC is, where the compiled kernels are cached, and per-kernel
    /// profiling.
    pub gpu: GpuOptions,
    /// Stands in for the device's free memory when `fit` places the experts
    /// (to try the placement of a smaller GPU on a large one).
    pub free_bytes: Option<u64>,
    /// The tuning numbers of the kernels' launches.
    pub tuning: CudaTuning,
}

/// Tuning numbers of the forward pass: each default is the value measured
/// best on an H200 (`bench/RESULTS.md`); none changes the outputs' math
/// beyond the rounding of the products the kernels choose.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaTuning {
    /// Most tokens of one pass (`None`: 4,096 on a device of 40 GiB or
    /// more, else 512); longer inputs go in passes of this many. At least
    /// the most tokens of one verify pass (smaller values are raised to it).
    pub pass_tokens: Option<usize>,
    /// Shortest prefill pass that takes the chunked delta rule (32; at
    /// least 2).
    pub delta_chunk_min: usize,
    /// Shortest rows the grouped `mmgx_T` takes (1,024: the experts' down
    /// products, 512 inputs, stay on `mmgw_T`, faster there).
    pub tcx_min_in: usize,
    /// Fewest waves of blocks (times the multiprocessors) a dense prefill
    /// product takes `mmx_T` with (2; smaller grids stay on `mmt_T`).
    pub tcx_waves: usize,
    /// Slots per expert on average (of a prefill pass) from which the
    /// grouped products take 64-slot tiles (24).
    pub wide_slots: usize,
    /// Blocks per multiprocessor the streaming integer kernels' grids are
    /// sized for (8; at least 1).
    pub mq_fill: usize,
    /// Columns per block of `attn_combine_w` (`None`: 64 where the head
    /// size is a multiple of 64, else the head size; else a divisor of the
    /// head size from 32 up).
    pub combine_cols: Option<usize>,
    /// Blocks per expert of the decode prefetch's copies (2; 1 to 1,024).
    pub xp_blocks: u32,
    /// Blocks per expert of the copies after the router (8; 1 to 1,024).
    pub xp_late_blocks: u32,
}

impl Default for CudaTuning {
    fn default() -> Self {
        CudaTuning {
            pass_tokens: None,
            delta_chunk_min: DC_MIN_TOKENS,
            tcx_min_in: 1024,
            tcx_waves: 2,
            wide_slots: 24,
            mq_fill: MQ_BLOCKS_PER_SM,
            combine_cols: None,
            // Two blocks per expert (H200: 1 85.9, 2 92.7, 4 91.0, 8 83.8
            // tok/s): more blocks take the bus from the reads of the experts
            // that were not predicted.
            xp_blocks: 2,
            // H200: 2 102.3, 4 104.2, 8 104.4, 16 101.9 tok/s.
            xp_late_blocks: 8,
        }
    }
}

impl CudaTuning {
    /// An error naming the first field out of its range for heads of
    /// `head_dim` values.
    pub fn check(&self, head_dim: usize) -> Result<(), String> {
        let field = |name: &str, v: &dyn std::fmt::Display, want: &str| {
            Err(format!("CUDA tuning: {name} = {v}: {want}"))
        };
        if self.mq_fill == 0 {
            return field("mq_fill", &self.mq_fill, "must be at least 1");
        }
        if self.wide_slots == 0 {
            return field("wide_slots", &self.wide_slots, "must be at least 1");
        }
        if self.pass_tokens == Some(0) {
            return field("pass_tokens", &0, "must be at least 1");
        }
        for (name, v) in [
            ("xp_blocks", self.xp_blocks),
            ("xp_late_blocks", self.xp_late_blocks),
        ] {
            if !(1..=1024).contains(&v) {
                return field(name, &v, "must be 1 to 1024");
            }
        }
        if let Some(n) = self.combine_cols {
            if n < 32 || n > head_dim || !head_dim.is_multiple_of(n) {
                return field(
                    "combine_cols",
                    &n,
                    &format!("must divide the head size {head_dim} and be at least 32"),
                );
            }
        }
        Ok(())
    }
}

/// Device memory kept free for the scratch buffers, a verify trail and the
/// KV cache when the experts are placed to fit.
pub const FIT_RESERVE: u64 = 3 << 30;

/// The device budget for the routed experts with `free` bytes free: `None`
/// (all of them) when every weight fits with [`FIT_RESERVE`] to spare, else
/// what is left after the other weights and the reserve; an error when
/// nothing is left.
pub(super) fn fit_budget(free: u64, experts: u64, other: u64) -> Result<Option<u64>, ModelError> {
    if experts + other + FIT_RESERVE <= free {
        return Ok(None);
    }
    match free.saturating_sub(other + FIT_RESERVE) {
        0 => Err(ModelError::Backend(format!(
            "the GPU has {} MiB free: not enough for the {} MiB of weights other than the routed \
             experts and {} MiB to run (use --device cpu)",
            free >> 20,
            other >> 20,
            FIT_RESERVE >> 20
        ))),
        left => Ok(Some(left)),
    }
}

#[cfg(test)]
mod fit_tests {
    use super::*;

    #[test]
    fn tuning_numbers_out_of_range_are_named() {
        assert_eq!(CudaTuning::default().check(256), Ok(()));
        let bad = |t: CudaTuning, field: &str| {
            let e = t.check(256).expect_err(field);
            assert!(e.contains(field), "{field}: {e}");
        };
        let d = CudaTuning::default;
        bad(CudaTuning { mq_fill: 0, ..d() }, "mq_fill");
        bad(
            CudaTuning {
                wide_slots: 0,
                ..d()
            },
            "wide_slots",
        );
        bad(
            CudaTuning {
                pass_tokens: Some(0),
                ..d()
            },
            "pass_tokens",
        );
        bad(
            CudaTuning {
                xp_blocks: 0,
                ..d()
            },
            "xp_blocks",
        );
        bad(
            CudaTuning {
                xp_late_blocks: 1025,
                ..d()
            },
            "xp_late_blocks",
        );
        bad(
            CudaTuning {
                combine_cols: Some(48),
                ..d()
            },
            "combine_cols",
        );
        bad(
            CudaTuning {
                combine_cols: Some(16),
                ..d()
            },
            "combine_cols",
        );
        assert_eq!(
            CudaTuning {
                combine_cols: Some(128),
                ..d()
            }
            .check(256),
            Ok(())
        );
    }

    #[test]
    fn fit_budget_places_what_does_not_fit() {
        const G: u64 = 1 << 30;
        // Everything fits with the reserve: all experts on the device.
        assert_eq!(fit_budget(40 * G, 17 * G, 2 * G).expect("fits"), None);
        // A 24 GiB card: the experts get what the rest and the reserve leave.
        assert_eq!(
            fit_budget(24 * G, 45 * G, 3 * G).expect("placed"),
            Some(24 * G - 3 * G - FIT_RESERVE)
        );
        // Exactly at the edge: still all resident.
        assert_eq!(
            fit_budget(10 * G + FIT_RESERVE, 8 * G, 2 * G).expect("edge"),
            None
        );
        // Too small for the other weights: an error that says so.
        let e = fit_budget(4 * G, 45 * G, 3 * G).expect_err("too small");
        assert!(e.to_string().contains("--device cpu"), "{e}");
    }
}
