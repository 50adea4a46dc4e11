//! `redlite serve`: the OpenAI- and Anthropic-compatible server.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use redlite_server::{AppState, Server, ServerConfig};

#[derive(clap::Args)]
#[command(
    after_long_help = "Example:\n  redlite serve Qwen3-Coder-Next-Q4_K_M.gguf --context 65536 --parallel 2\n  \
then point a client at http://127.0.0.1:8080/v1 (see `redlite setup-pi` for pi).\n\n\
Endpoints: POST /v1/chat/completions, /v1/completions, /v1/messages (Anthropic), /tokenize, /detokenize;\n\
GET /v1/models, /health (503 {\"status\":\"loading\"} while the model loads), /metrics.\n\n\
Security: on loopback, requests whose Host is not localhost or a loopback address with this port get 403\n\
(--allowed-host adds names); requests from another site's Origin get 403 and no CORS headers are sent\n\
unless --cors-origin; API POSTs need Content-Type: application/json (415). See the README's Security section.\n\n\
Fixed limits: at most 16 stop strings per request, 4096 bytes together; integer fields at most 4294967295.\n\
SIGINT/SIGTERM: stop accepting, end running streams with a final error event, exit within a few seconds;\n\
a second signal exits at once."
)]
pub struct Args {
    /// GGUF model file (for a split model, any of its shards).
    pub model: PathBuf,
    /// Address to listen on (loopback by default; 0.0.0.0 exposes the server to the network).
    #[arg(long, default_value = "127.0.0.1", env = "REDLITE_HOST")]
    pub host: IpAddr,
    /// Port to listen on (0 picks a free one; the address is printed).
    #[arg(long, default_value_t = 8080, env = "REDLITE_PORT")]
    pub port: u16,
    /// Context window per sequence in tokens (prompt + reply).
    #[arg(
        short = 'c',
        long = "context",
        alias = "ctx-size",
        default_value_t = 65536,
        env = "REDLITE_CONTEXT"
    )]
    pub context: usize,
    /// Sequences decoded together in one forward pass (each keeps its own state).
    #[arg(
        long,
        short = 'n',
        alias = "np",
        default_value_t = 1,
        env = "REDLITE_PARALLEL"
    )]
    pub parallel: usize,
    /// Require `Authorization: Bearer KEY` (or `x-api-key: KEY`) on the API routes. The only
    /// protection against other local users, and against the network when --host is not loopback.
    #[arg(
        long,
        env = "REDLITE_API_KEY",
        hide_env_values = true,
        help_heading = "Security"
    )]
    pub api_key: Option<String>,
    /// Memory for state snapshots reused across an agent's turns (e.g. 4GiB, 512MiB; 0 turns reuse off).
    #[arg(long, default_value = "4GiB", value_parser = parse_size, env = "REDLITE_STATE_CACHE")]
    pub state_cache: usize,
    /// Snapshot long prompts every N tokens, so other requests sharing their start can resume there.
    #[arg(long, default_value_t = 4096)]
    pub checkpoint_every: usize,
    /// Snapshot at most N message boundaries of a prompt (the first: the end of the system prompt and
    /// tools), so new conversations sharing that prefix resume there (0: off).
    #[arg(long, default_value_t = 4)]
    pub boundary_snapshots: usize,
    /// Tokens between two message-boundary snapshots of a prompt, at least.
    #[arg(long, default_value_t = 1024)]
    pub boundary_min_tokens: usize,
    /// Model id to report and accept (clients may send any id).
    #[arg(long, default_value = "qwen3-coder-next", env = "REDLITE_ALIAS")]
    pub alias: String,
    /// Largest request body accepted (coding-agent histories are large); a larger one gets
    /// 413 with the API's JSON error.
    #[arg(long, default_value = "64MiB", value_parser = parse_size, help_heading = "Limits")]
    pub max_body: usize,
    /// Answer browsers from ORIGIN (e.g. https://app.example) with CORS headers; repeatable.
    /// Without it no CORS headers are sent and requests carrying another site's Origin get 403.
    /// `*` (any site) needs --cors-allow-any as well.
    #[arg(long = "cors-origin", value_name = "ORIGIN", help_heading = "Security")]
    pub cors_origins: Vec<String>,
    /// Allow `--cors-origin '*'`: any web page may then drive the server and read its answers
    /// (set --api-key too).
    #[arg(long, help_heading = "Security")]
    pub cors_allow_any: bool,
    /// Also accept requests whose Host is NAME (a reverse proxy's name); repeatable. When
    /// listening on loopback, only `localhost` and loopback addresses with the bound port are
    /// accepted otherwise (403), which stops DNS-rebinding pages.
    #[arg(long = "allowed-host", value_name = "NAME", help_heading = "Security")]
    pub allowed_hosts: Vec<String>,
    /// Worker threads (default: all cores).
    #[arg(short = 't', long)]
    pub threads: Option<usize>,
    /// Prompt tokens fed per forward pass (default: 512 on the CPU; on a GPU the pass size its
    /// buffers were made for, 2,048 on one of 40 GiB or more).
    #[arg(long)]
    pub batch: Option<usize>,
    /// Prompt-lookup speculative decoding (drafts from n-grams of the conversation, verified in
    /// one pass; output unchanged). Pays for file rewrites; pauses itself when drafts keep failing.
    #[arg(long, env = "REDLITE_LOOKUP")]
    pub lookup: bool,
    /// Most tokens drafted at once with --lookup.
    #[arg(long, default_value_t = 8, requires = "lookup")]
    pub draft_max: usize,
    /// Seconds a client has to send a request's headers, from the connection opening or the end
    /// of its previous response (so also how long an idle kept-alive connection stays open).
    #[arg(long, value_name = "SECONDS", default_value = "10", value_parser = parse_seconds, help_heading = "Limits")]
    pub header_timeout: Duration,
    /// Seconds a client has to send a request's whole body (408 and the connection closed after).
    #[arg(long, value_name = "SECONDS", default_value = "60", value_parser = parse_seconds, help_heading = "Limits")]
    pub body_timeout: Duration,
    /// Connections served at once; a connection beyond it is closed as soon as it is accepted
    /// (those being served are unaffected).
    #[arg(long, value_name = "N", default_value_t = 512, help_heading = "Limits")]
    pub max_connections: usize,
    /// Memory all request bodies being read or parsed may hold together (at least --max-body);
    /// a body that does not fit waits for room (half --body-timeout, at most 5 s), then gets 503.
    #[arg(long, default_value = "1GiB", value_parser = parse_size, help_heading = "Limits")]
    pub max_body_memory: usize,
    /// Requests that may wait for a free slot (--parallel) at once; one more gets 503 with
    /// Retry-After.
    #[arg(long, value_name = "N", default_value_t = 64, help_heading = "Limits")]
    pub max_queue: usize,
    #[command(flatten)]
    pub load: crate::load::LoadArgs,
}

/// Seconds, whole or not (`10`, `0.5`), above zero.
pub fn parse_seconds(s: &str) -> Result<Duration, String> {
    let v: f64 = s
        .trim()
        .trim_end_matches('s')
        .parse()
        .map_err(|_| format!("'{s}' is not a number of seconds"))?;
    if !(v.is_finite() && v > 0.0 && v <= 86400.0) {
        return Err(format!("'{s}': give seconds above 0, at most 86400"));
    }
    Ok(Duration::from_secs_f64(v))
}

/// `4GiB`, `512MiB`, `100MB`, `1024`, `0`.
pub fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("'{s}' is not a size (e.g. 4GiB, 512MiB, 0)"))?;
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "kib" => 1024.0,
        "m" | "mb" => 1e6,
        "mib" => 1048576.0,
        "g" | "gb" => 1e9,
        "gib" => 1073741824.0,
        "t" | "tb" => 1e12,
        "tib" => 1099511627776.0,
        u => {
            return Err(format!(
                "'{s}': unknown unit '{u}' (use B, KiB, MiB, GiB, KB, MB, GB)"
            ))
        }
    };
    let v = n * mult;
    if !v.is_finite() || v < 0.0 || v > usize::MAX as f64 {
        return Err(format!("'{s}' is out of range"));
    }
    Ok(v as usize)
}

pub fn run(args: Args) -> Result<()> {
    if args.context < 2 {
        bail!("--context must be at least 2 tokens");
    }
    if args.parallel == 0 {
        bail!("--parallel must be at least 1");
    }
    if args.batch == Some(0) {
        bail!("--batch must be at least 1");
    }
    for o in &args.cors_origins {
        if o == "*" {
            if !args.cors_allow_any {
                bail!(
                    "--cors-origin '*' lets every web page drive the server and read its answers; \
                     add --cors-allow-any to mean it (and set --api-key)"
                );
            }
        } else if !(o.starts_with("http://") || o.starts_with("https://"))
            || o.contains(char::is_whitespace)
        {
            bail!("--cors-origin '{o}' is not an origin (scheme://host[:port], e.g. https://app.example)");
        }
    }
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,tower_http=warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();

    if args.max_connections == 0 {
        bail!("--max-connections must be at least 1");
    }
    let mut cfg = ServerConfig {
        context: args.context,
        parallel: args.parallel,
        api_key: args.api_key.clone().filter(|k| !k.is_empty()),
        state_cache_bytes: args.state_cache,
        checkpoint_interval: args.checkpoint_every,
        boundary_snapshots: args.boundary_snapshots,
        boundary_min_tokens: args.boundary_min_tokens,
        alias: args.alias.clone(),
        max_body_bytes: args.max_body,
        prefill_chunk: 512,
        lookup: args.lookup.then(|| redlite_engine::LookupParams {
            max_draft: args.draft_max,
            ..Default::default()
        }),
        cors_origins: args
            .cors_origins
            .iter()
            .map(|o| o.trim_end_matches('/').to_string())
            .collect(),
        allowed_hosts: args.allowed_hosts.clone(),
        header_timeout: args.header_timeout,
        body_timeout: args.body_timeout,
        max_connections: args.max_connections,
        max_queue: args.max_queue,
        body_memory_bytes: args.max_body_memory,
    };

    // The port first: a taken one fails now, not after a long load.
    let addr = SocketAddr::new(args.host, args.port);
    let server = Server::bind(addr, cfg.clone()).with_context(|| format!("listening on {addr}"))?;
    eprintln!("listening on http://{}", server.addr());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let _guard = rt.enter();
    rt.spawn(signals(server.clone()));
    let serving = rt.spawn(server.clone().run(Duration::from_secs(3)));
    eprintln!(
        "loading {} (/health answers 503 until it is ready)",
        args.model.display()
    );

    let t0 = Instant::now();
    let s = server.clone();
    let loaded = crate::load::load_model_observed(
        &args.model,
        args.threads,
        &args.load,
        &mut |done, total| s.set_progress(done as f64 / total.max(1) as f64),
    );
    let loaded = match loaded {
        Ok(l) => l,
        Err(e) => {
            server.shutdown().begin();
            return Err(e);
        }
    };
    let (model, threads) = (loaded.model, loaded.threads);
    cfg.prefill_chunk = args.batch.unwrap_or_else(|| model.prefill_batch());
    if args.context > model.config().context_length {
        eprintln!(
            "warning: --context {} is beyond the model's training context of {} tokens",
            args.context,
            model.config().context_length
        );
    }
    let state_per_slot = model.new_state().bytes();
    let app = AppState::new(model, cfg.clone())
        .map_err(|e| anyhow::anyhow!("{}: {e}", args.model.display()))?;
    server.set_app(Arc::new(app));
    eprintln!(
        "ready: loaded {} in {:.2}s ({} threads); context {} tokens, {} slot(s), recurrent state {:.1} MiB per slot, \
         state cache {:.1} MiB{}",
        args.model.display(),
        t0.elapsed().as_secs_f64(),
        threads,
        cfg.context,
        cfg.parallel,
        state_per_slot as f64 / 1048576.0,
        cfg.state_cache_bytes as f64 / 1048576.0,
        if cfg.api_key.is_some() { ", API key required" } else { "" }
    );
    let result = rt.block_on(serving);
    rt.shutdown_timeout(Duration::from_secs(1));
    result
        .context("the server task failed")?
        .with_context(|| format!("serving on {addr}"))?;
    eprintln!("stopped");
    Ok(())
}

/// SIGINT / SIGTERM: the first stops the server (new connections refused,
/// running generations ended, a bounded wait for them); a second, or the
/// first while the model is still loading, exits at once.
async fn signals(server: Arc<Server>) {
    use tokio::signal::unix::{signal, Signal, SignalKind};
    async fn recv(s: &mut Option<Signal>) {
        match s {
            Some(s) => {
                s.recv().await;
            }
            None => std::future::pending().await,
        }
    }
    let mut int = signal(SignalKind::interrupt()).ok();
    let mut term = signal(SignalKind::terminate()).ok();
    loop {
        let name = tokio::select! {
            _ = recv(&mut int) => "SIGINT",
            _ = recv(&mut term) => "SIGTERM",
        };
        if !server.loaded() {
            eprintln!("{name} while loading: exiting");
            std::process::exit(130);
        }
        if server.shutdown().begin() {
            eprintln!(
                "{name}: shutting down: no new connections, running requests are ended \
                 (again to exit at once)"
            );
        } else {
            eprintln!("{name} again: exiting now");
            std::process::exit(130);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("4GiB"), Ok(4 << 30));
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("1.5 GB"), Ok(1_500_000_000));
        assert_eq!(parse_size("10kib"), Ok(10240));
        assert!(parse_size("4 parsecs").is_err());
        assert!(parse_size("GiB").is_err());
        assert!(parse_size("-1").is_err());
    }
}
