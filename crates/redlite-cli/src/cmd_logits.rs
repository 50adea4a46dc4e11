//! `redlite logits`: logits of a token sequence, saved as float32 .npy.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use redlite_model::Trace;

#[derive(clap::Args)]
pub struct Args {
    /// GGUF model file.
    model: PathBuf,
    /// File of whitespace-separated token ids.
    #[arg(long)]
    tokens_file: PathBuf,
    /// Output .npy: float32 [n_positions, vocab] for positions >= --dump-from.
    #[arg(long)]
    out: PathBuf,
    /// Tokens per forward call (1 = token by token; default: the whole prompt).
    #[arg(long)]
    batch: Option<usize>,
    /// First position whose logits are written.
    #[arg(long, default_value_t = 0)]
    dump_from: usize,
    /// Worker threads (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Write named intermediates (attn_norm-3, linear_attn_out-0, ...) as .npy into DIR.
    #[arg(long)]
    dump: Option<PathBuf>,
    #[command(flatten)]
    load: crate::load::LoadArgs,
}

/// Collects intermediates across forward calls, rows appended in order.
#[derive(Default)]
struct Collector {
    order: Vec<String>,
    tensors: HashMap<String, (usize, usize, Vec<f32>)>,
}

impl Trace for Collector {
    fn tensor(&mut self, name: &str, rows: usize, cols: usize, data: &[f32]) {
        let e = self.tensors.entry(name.to_string()).or_insert_with(|| {
            self.order.push(name.to_string());
            (0, cols, Vec::new())
        });
        if e.1 == cols {
            e.0 += rows;
            e.2.extend_from_slice(data);
        }
    }
}

/// Write a float32 C-order .npy file.
pub fn write_npy(path: &Path, shape: &[usize], data: &[f32]) -> anyhow::Result<()> {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let shape_s = if dims.len() == 1 {
        format!("({},)", dims[0])
    } else {
        format!("({})", dims.join(", "))
    };
    let mut header = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {shape_s}, }}");
    // Magic (6) + version (2) + header length (2) + header + '\n', padded to 64.
    let total = 10 + header.len() + 1;
    header.push_str(&" ".repeat((64 - total % 64) % 64));
    header.push('\n');
    let mut bytes = Vec::with_capacity(10 + header.len() + data.len() * 4);
    bytes.extend_from_slice(b"\x93NUMPY\x01\x00");
    bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    for v in data {
        bytes.extend_from_slice(&v.to_le_bytes());
    }
    let mut f =
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    f.write_all(&bytes)
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

fn read_tokens(path: &Path) -> anyhow::Result<Vec<u32>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    text.split_whitespace()
        .enumerate()
        .map(|(i, w)| {
            w.parse::<u32>()
                .with_context(|| format!("{}: token {i} ({w:?}) is not a token id", path.display()))
        })
        .collect()
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let tokens = read_tokens(&args.tokens_file)?;
    if tokens.is_empty() {
        bail!("{}: no token ids", args.tokens_file.display());
    }
    if args.dump_from >= tokens.len() {
        bail!(
            "--dump-from {} is not below the number of tokens ({})",
            args.dump_from,
            tokens.len()
        );
    }
    // Intermediates are only traced on the CPU: --dump runs there unless a
    // device was asked for explicitly (which then fails with a clear error).
    let mut load = args.load.clone();
    if args.dump.is_some() && load.device == crate::load::Device::Auto {
        load.device = crate::load::Device::Cpu;
    }
    let model = crate::load::load_model(&args.model, args.threads, &load)?.model;
    let vocab = model.config().vocab_size;
    let batch = args.batch.unwrap_or(tokens.len()).max(1);
    let mut state = model.new_state();
    let mut collector = args.dump.as_ref().map(|_| Collector::default());
    let n_out = tokens.len() - args.dump_from;
    let mut out = Vec::with_capacity(n_out * vocab);
    let mut pos = 0;
    for chunk in tokens.chunks(batch) {
        let end = pos + chunk.len();
        // Batches wholly before --dump-from need no logits (unless dumping).
        let want_all = end > args.dump_from || collector.is_some();
        let trace = collector.as_mut().map(|c| c as &mut dyn Trace);
        let logits = model.forward_traced(&mut state, chunk, want_all, trace)?;
        if end > args.dump_from {
            let skip = args.dump_from.saturating_sub(pos);
            out.extend_from_slice(&logits[skip * vocab..]);
        }
        pos = end;
    }
    write_npy(&args.out, &[n_out, vocab], &out)?;
    if let (Some(dir), Some(c)) = (&args.dump, &collector) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        for name in &c.order {
            let (rows, cols, data) = &c.tensors[name];
            write_npy(&dir.join(format!("{name}.npy")), &[*rows, *cols], data)?;
        }
    }
    Ok(())
}
