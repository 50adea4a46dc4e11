//! `redlite eval`: judge a model file through a running `redlite serve`
//! (the needle check and the agent suite; see the redlite-eval crate).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use redlite_eval::{agent, needle};

#[derive(clap::Args)]
#[command(
    after_long_help = "Examples:\n  redlite serve model.gguf --context 262144 &\n  redlite eval needle --url http://127.0.0.1:8080 --lengths 8k,32k,128k,256k --json needle.json --plot needle.svg\n  redlite eval agent --url http://127.0.0.1:8080 --suite repo --runs 3 --context 65536 --json repo.json\n  redlite eval agent --validate --suite hard"
)]
pub struct Args {
    #[command(subcommand)]
    pub command: EvalCommand,
}

#[derive(clap::Subcommand)]
pub enum EvalCommand {
    /// Hide passphrases in code comments at chosen depths of a long prompt of real source code and ask for them.
    Needle(NeedleArgs),
    /// Run the pi coding agent on a suite of tasks against the server and check its work.
    Agent(AgentArgs),
}

#[derive(clap::Args)]
pub struct NeedleArgs {
    /// The server's address.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// Model id to send (default: the first one the server lists).
    #[arg(long)]
    pub model: Option<String>,
    /// Bearer key, if the server was started with --api-key.
    #[arg(long, env = "REDLITE_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Prompt lengths in tokens, chat template included (k = 1024).
    #[arg(long, value_delimiter = ',', default_value = "8k,32k,128k,256k")]
    pub lengths: Vec<String>,
    /// Depths of the passphrases, percent of the prompt (one passphrase each).
    #[arg(long, value_delimiter = ',', default_value = "10,50,90")]
    pub depths: Vec<f64>,
    /// Directory of source files (.rs, .py, .c, .h, .sh, ...) for the haystack; repeatable (default: this repository).
    #[arg(long)]
    pub source: Vec<PathBuf>,
    /// Seed for the passphrases.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Most tokens the answer may take.
    #[arg(long, default_value_t = 96)]
    pub max_tokens: usize,
    /// Write the results as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write an SVG heatmap (length x depth, found or not) here.
    #[arg(long)]
    pub plot: Option<PathBuf>,
}

#[derive(clap::Args)]
pub struct AgentArgs {
    /// The server's address.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// Suite to run: a directory name under --tasks (repo, hard).
    #[arg(long)]
    pub suite: String,
    /// Directory holding the suites (default: this repository's eval/tasks).
    #[arg(long)]
    pub tasks: Option<PathBuf>,
    /// Only these tasks of the suite (repeatable; default: all).
    #[arg(long = "task")]
    pub tasks_only: Vec<String>,
    /// Only check the suite: each task's check must fail on the planted project and pass with its reference patch.
    #[arg(long)]
    pub validate: bool,
    /// Runs of each task.
    #[arg(long, default_value_t = 1)]
    pub runs: usize,
    /// The server's context window (written into pi's configuration).
    #[arg(short = 'c', long, default_value_t = 65536)]
    pub context: usize,
    /// Time limit per run in seconds (a task's own limit wins).
    #[arg(long, default_value_t = 900.0)]
    pub timeout: f64,
    /// Request cap per run: the agent is stopped once it has sent this many chat requests, as a looping agent would (a task's own cap wins).
    #[arg(long, default_value_t = 100)]
    pub max_requests: u64,
    /// Sampling temperature for the agent's requests (set by the harness's relay; default: the server's).
    #[arg(long)]
    pub temperature: Option<f64>,
    /// Model id pi is told to use (default: the first one the server lists).
    #[arg(long)]
    pub model: Option<String>,
    /// Bearer key, if the server was started with --api-key.
    #[arg(long, env = "REDLITE_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// The pi executable (default: `pi` on PATH, else .ci/node's copy in this repository).
    #[arg(long)]
    pub pi: Option<PathBuf>,
    /// Keep each run's directory (the project as the agent left it, pi's log) under this directory.
    #[arg(long)]
    pub keep: Option<PathBuf>,
    /// Write the results as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// The repository this binary was built from, if it is still there.
fn repo_root() -> Option<PathBuf> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    p.join("Cargo.toml")
        .is_file()
        .then(|| std::fs::canonicalize(&p).unwrap_or(p))
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

pub fn run(args: Args) -> Result<()> {
    match args.command {
        EvalCommand::Needle(a) => run_needle(a),
        EvalCommand::Agent(a) => run_agent(a),
    }
}

fn run_needle(a: NeedleArgs) -> Result<()> {
    let lengths = a
        .lengths
        .iter()
        .map(|s| needle::parse_length(s))
        .collect::<Result<Vec<_>>>()?;
    let sources = if a.source.is_empty() {
        vec![repo_root().ok_or_else(|| {
            anyhow!("the repository this binary was built from is gone; pass --source DIR")
        })?]
    } else {
        a.source
    };
    let opts = needle::NeedleOptions {
        url: a.url,
        model: a.model,
        api_key: a.api_key,
        lengths,
        depths: a.depths,
        sources,
        seed: a.seed,
        max_tokens: a.max_tokens,
    };
    let report = needle::run_needle(&opts, &mut |l| eprintln!("{l}"))?;
    print!("{}", needle::table(&report));
    if let Some(p) = &a.json {
        write(p, &(serde_json::to_string_pretty(&report)? + "\n"))?;
        eprintln!("wrote {}", p.display());
    }
    if let Some(p) = &a.plot {
        write(p, &needle::svg(&report))?;
        eprintln!("wrote {}", p.display());
    }
    Ok(())
}

/// `pi` on PATH, else the copy `.ci/run` installs.
fn find_pi() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("PATH") {
        for d in std::env::split_paths(&path) {
            let p = d.join("pi");
            if p.is_file() {
                return Some(p);
            }
        }
    }
    let p = repo_root()?.join(".ci/node/node_modules/.bin/pi");
    p.exists().then_some(p)
}

fn run_agent(a: AgentArgs) -> Result<()> {
    let tasks_dir = match a.tasks {
        Some(t) => t,
        None => repo_root().map(|r| r.join("eval/tasks")).ok_or_else(|| {
            anyhow!("no --tasks DIR given and this repository's eval/tasks is gone")
        })?,
    };
    let suite_dir = tasks_dir.join(&a.suite);
    if !suite_dir.is_dir() {
        bail!(
            "no suite {:?}: {} is not a directory",
            a.suite,
            suite_dir.display()
        );
    }
    agent::stop_on_interrupt();
    let mut tasks = agent::load_suite(&suite_dir)?;
    if !a.tasks_only.is_empty() {
        for t in &a.tasks_only {
            if !tasks.iter().any(|x| &x.name == t) {
                bail!("suite {} has no task {t:?}", a.suite);
            }
        }
        tasks.retain(|x| a.tasks_only.contains(&x.name));
    }
    if a.validate {
        let v = agent::validate_suite(&tasks, &mut |l| println!("{l}"))?;
        let ok = v.iter().filter(|v| v.ok()).count();
        if let Some(p) = &a.json {
            write(p, &(serde_json::to_string_pretty(&v)? + "\n"))?;
        }
        if ok != v.len() {
            bail!(
                "suite {}: {} of {} tasks do not validate",
                a.suite,
                v.len() - ok,
                v.len()
            );
        }
        println!("suite {}: all {} tasks validate", a.suite, v.len());
        return Ok(());
    }
    if a.runs == 0 {
        bail!("--runs must be at least 1");
    }
    if !(a.timeout > 0.0 && a.timeout.is_finite()) {
        bail!("--timeout must be a positive number of seconds");
    }
    if let Some(t) = a.temperature {
        if !(0.0..=2.0).contains(&t) {
            bail!("--temperature must be between 0 and 2");
        }
    }
    let pi = match a.pi {
        Some(p) => p,
        None => find_pi().ok_or_else(|| {
            anyhow!("pi not found on PATH or in .ci/node; install @mariozechner/pi-coding-agent or pass --pi")
        })?,
    };
    let opts = agent::AgentOptions {
        url: a.url,
        api_key: a.api_key,
        model: a.model,
        runs: a.runs,
        context: a.context,
        timeout: Duration::from_secs_f64(a.timeout),
        max_requests: a.max_requests,
        pi,
        redlite: std::env::current_exe().context("locating the redlite executable")?,
        temperature: a.temperature,
        keep: a.keep,
    };
    let report = agent::run_suite(&a.suite, &tasks, &opts, &mut |l| eprintln!("{l}"))?;
    print!("{}", agent::table(&report));
    if let Some(p) = &a.json {
        write(p, &(serde_json::to_string_pretty(&report)? + "\n"))?;
        eprintln!("wrote {}", p.display());
    }
    Ok(())
}
