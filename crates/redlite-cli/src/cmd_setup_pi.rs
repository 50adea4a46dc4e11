//! `redlite setup-pi`: point the pi coding agent at `redlite serve`.

use std::path::PathBuf;

use anyhow::{anyhow, Result};
use redlite_server::pi::{setup, PiSetup};

#[derive(clap::Args)]
#[command(
    after_long_help = "Example:\n  redlite serve model.gguf --context 65536 &\n  redlite setup-pi --context 65536\n  pi   # or: pi --model redlite/qwen3-coder-next -p \"explain src/main.rs\""
)]
pub struct Args {
    /// Host the server listens on.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port the server listens on.
    #[arg(long, default_value_t = 8080, env = "REDLITE_PORT")]
    pub port: u16,
    /// The server's --context (pi compacts its history to fit it).
    #[arg(short = 'c', long, default_value_t = 65536)]
    pub context: usize,
    /// The server's --alias (the model id).
    #[arg(long, default_value = "qwen3-coder-next")]
    pub model: String,
    /// pi's agent directory (default: $PI_CODING_AGENT_DIR, else ~/.pi/agent).
    #[arg(long, env = "PI_CODING_AGENT_DIR")]
    pub dir: Option<PathBuf>,
    /// Make Red Lite pi's default model even if another default is set.
    #[arg(long)]
    pub make_default: bool,
}

pub fn run(args: Args) -> Result<()> {
    let dir = args
        .dir
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".pi/agent")))
        .ok_or_else(|| anyhow!("no --dir given and neither PI_CODING_AGENT_DIR nor HOME is set"))?;
    let r = setup(&PiSetup {
        dir,
        host: args.host,
        port: args.port,
        context: args.context,
        model: args.model.clone(),
        force_default: args.make_default,
    })
    .map_err(|e| anyhow!(e))?;
    match &r.models_backup {
        Some(b) => println!(
            "updated {} (backup: {})",
            r.models_json.display(),
            b.display()
        ),
        None => println!("wrote {}", r.models_json.display()),
    }
    if r.made_default {
        println!(
            "set pi's default model to redlite/{} in {}{}",
            args.model,
            r.settings_json.display(),
            r.settings_backup
                .as_ref()
                .map(|b| format!(" (backup: {})", b.display()))
                .unwrap_or_default()
        );
    } else {
        println!(
            "pi keeps its default model; use `pi --model redlite/{}` (or --make-default)",
            args.model
        );
    }
    Ok(())
}
