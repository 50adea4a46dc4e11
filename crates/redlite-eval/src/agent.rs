//! The agent suite: small projects in a planted state, each solved by the pi
//! coding agent against the server, then judged by a check the agent never
//! sees.
//!
//! A task is a directory `eval/tasks/<suite>/<task>/` holding
//! - `task.json`: `{"title", "language", "kind", "timeout_s"?, "max_requests"?}`
//!   (the limits override the command line's defaults for that task);
//! - `prompt.md`: what the agent is asked;
//! - `project/`: the project as the agent finds it;
//! - `check.sh`: run by `bash` in the (solved) copy of the project, with
//!   `TASK_DIR` set to the task's directory (hidden tests live beside it);
//!   exit 0 means solved;
//! - `solution.patch`: a reference solution, applied with `patch -p1`.
//!
//! Each run copies `project/` into a fresh temporary directory, writes pi's
//! configuration only through `redlite setup-pi` into a private home
//! (pointing pi at a [`Proxy`] of its own in front of the server), runs
//! `pi -p PROMPT --no-session` there, and watches it: past the time limit,
//! or once the agent has sent its cap of chat requests while still running
//! (a looping agent), pi and every process it started are killed. Then the
//! check runs. Requests are counted by the relay (exact for the run); the
//! server's `/metrics` give a second count and the token counts, as the
//! differences of its counters over the run, so those assume that one
//! harness drives the server at a time.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::http::{metric_sum, Http};
use crate::proxy::Proxy;

/// `task.json`.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct TaskSpec {
    pub title: String,
    pub language: String,
    pub kind: String,
    /// Time limit for the agent, seconds (overrides `--timeout`).
    pub timeout_s: Option<f64>,
    /// Request cap for the agent (overrides `--max-requests`).
    pub max_requests: Option<u64>,
}

/// A task on disk.
#[derive(Clone, Debug)]
pub struct Task {
    pub name: String,
    pub dir: PathBuf,
    pub spec: TaskSpec,
    pub prompt: String,
}

impl Task {
    pub fn load(dir: &Path) -> Result<Task> {
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .ok_or_else(|| anyhow!("{}: not a task directory", dir.display()))?;
        let spec_path = dir.join("task.json");
        let text = std::fs::read_to_string(&spec_path)
            .with_context(|| format!("reading {}", spec_path.display()))?;
        let spec: TaskSpec = serde_json::from_str(&text)
            .with_context(|| format!("{}: not a valid task description", spec_path.display()))?;
        let prompt_path = dir.join("prompt.md");
        let prompt = std::fs::read_to_string(&prompt_path)
            .with_context(|| format!("reading {}", prompt_path.display()))?;
        if prompt.trim().is_empty() {
            bail!("{}: empty prompt", prompt_path.display());
        }
        for f in ["project", "check.sh", "solution.patch"] {
            if !dir.join(f).exists() {
                bail!("{}: task has no {f}", dir.display());
            }
        }
        Ok(Task {
            name,
            dir: dir.to_path_buf(),
            spec,
            prompt,
        })
    }
}

/// Every task of a suite directory, by name.
pub fn load_suite(dir: &Path) -> Result<Vec<Task>> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading suite directory {}", dir.display()))?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    let tasks = dirs
        .iter()
        .map(|d| Task::load(d))
        .collect::<Result<Vec<_>>>()?;
    if tasks.is_empty() {
        bail!("{}: no tasks", dir.display());
    }
    Ok(tasks)
}

/// Copies a directory tree (files and directories; links are copied as the
/// files they point to).
pub fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to).with_context(|| format!("creating {}", to.display()))?;
    for e in std::fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
        let e = e.with_context(|| format!("reading {}", from.display()))?;
        let (src, dst) = (e.path(), to.join(e.file_name()));
        if src.is_dir() {
            copy_tree(&src, &dst)?;
        } else {
            std::fs::copy(&src, &dst)
                .with_context(|| format!("copying {} to {}", src.display(), dst.display()))?;
        }
    }
    Ok(())
}

/// `(pid, start time)` of every live process below `pid` (from `/proc`;
/// empty elsewhere). The start time tells a process from a later one that
/// reuses its id.
pub fn descendants(pid: u32) -> Vec<(i32, u64)> {
    let mut procs: Vec<(i32, i32, u64)> = Vec::new(); // (pid, ppid, start)
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            let Ok(p) = e.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            if let Some((pp, st)) = stat_of(p) {
                procs.push((p, pp, st));
            }
        }
    }
    let mut out: Vec<(i32, u64)> = Vec::new();
    let mut frontier = vec![pid as i32];
    while let Some(p) = frontier.pop() {
        for &(c, pp, st) in &procs {
            if pp == p && !out.iter().any(|o| o.0 == c) {
                out.push((c, st));
                frontier.push(c);
            }
        }
    }
    out
}

/// `(ppid, start time)` of a live process.
fn stat_of(pid: i32) -> Option<(i32, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // pid (comm) state ppid ... starttime (field 22): comm may hold spaces.
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let state = *f.first()?;
    if state == "Z" || state == "X" {
        return None;
    }
    Some((f.get(1)?.parse().ok()?, f.get(19)?.parse().ok()?))
}

/// Processes started under a child, remembered while it runs, so that
/// those it leaves behind (pi's shell tools start their own sessions, and
/// are orphaned when pi exits) can still be found and stopped.
#[derive(Default)]
pub struct Tree {
    seen: Vec<(i32, u64)>,
}

impl Tree {
    /// Notes every process now below `pid`.
    pub fn watch(&mut self, pid: u32) {
        for d in descendants(pid) {
            if !self.seen.contains(&d) {
                self.seen.push(d);
            }
        }
    }

    /// Kills `child`'s process group (unless `reaped`: `child` has exited
    /// and been waited for, and its id may be reused), every process ever
    /// seen below it that still runs (and the groups they lead), then reaps
    /// `child`.
    pub fn kill(mut self, child: &mut Child, reaped: bool) {
        let pid = child.id();
        self.watch(pid);
        if !reaped {
            // SAFETY: kill(2) takes two integers and shares no memory. The
            // group (-pid) was created for this child alone
            // (`process_group(0)`), which is not yet reaped, so its id names
            // no unrelated process.
            unsafe {
                libc::kill(-(pid as i32), libc::SIGKILL);
            }
        }
        for _ in 0..3 {
            for &(p, st) in &self.seen {
                // Only a process that is still the one seen (same start time).
                if stat_of(p).is_some_and(|(_, s)| s == st) {
                    // SAFETY: as above; `p` is a live process started under
                    // our child (checked by its start time just now).
                    unsafe {
                        libc::kill(p, libc::SIGKILL);
                        libc::kill(-p, libc::SIGKILL);
                    }
                }
            }
            self.watch(pid);
        }
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Processes seen that still run (for tests).
    pub fn alive(&self) -> Vec<i32> {
        self.seen
            .iter()
            .filter(|&&(p, st)| stat_of(p).is_some_and(|(_, s)| s == st))
            .map(|p| p.0)
            .collect()
    }
}

static INTERRUPTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn on_interrupt(_: libc::c_int) {
    INTERRUPTED.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// Makes Ctrl-C and SIGTERM stop the run in progress cleanly: the agent and
/// the check run in process groups of their own, which a terminal's Ctrl-C
/// does not reach, so the harness stops them itself and then fails with
/// "interrupted". For programs that run suites (the CLI calls it once).
pub fn stop_on_interrupt() {
    let handler = on_interrupt as extern "C" fn(libc::c_int);
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: signal(2) with a valid signal number and a handler that
        // only stores to an atomic, which is async-signal-safe.
        unsafe {
            libc::signal(sig, handler as libc::sighandler_t);
        }
    }
}

fn interrupted() -> bool {
    INTERRUPTED.load(std::sync::atomic::Ordering::SeqCst)
}

/// Result of running a command with a time limit.
pub struct Limited {
    pub status: Option<ExitStatus>,
    pub timed_out: bool,
    pub output: String,
    pub seconds: f64,
}

/// Runs `cmd` in its own process group with stdout and stderr to a file,
/// killing the whole tree after `limit`.
pub fn run_limited(mut cmd: Command, limit: Duration, log: &Path) -> Result<Limited> {
    use std::os::unix::process::CommandExt;
    let f = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let f2 = f.try_clone()?;
    cmd.stdin(Stdio::null())
        .stdout(Stdio::from(f))
        .stderr(Stdio::from(f2))
        .process_group(0);
    let t0 = Instant::now();
    let mut child = cmd.spawn().with_context(|| format!("starting {cmd:?}"))?;
    let mut tree = Tree::default();
    let mut timed_out = false;
    let status = loop {
        tree.watch(child.id());
        if let Some(s) = child.try_wait()? {
            break Some(s);
        }
        if t0.elapsed() >= limit || interrupted() {
            timed_out = true;
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    tree.kill(&mut child, status.is_some());
    if interrupted() {
        bail!("interrupted");
    }
    Ok(Limited {
        status,
        timed_out,
        output: read_tail(log, 4000),
        seconds: t0.elapsed().as_secs_f64(),
    })
}

fn read_tail(p: &Path, n: usize) -> String {
    let mut b = Vec::new();
    if let Ok(mut f) = std::fs::File::open(p) {
        let _ = f.read_to_end(&mut b);
    }
    let s = String::from_utf8_lossy(&b);
    let start = s.len().saturating_sub(n);
    let start = (start..s.len())
        .find(|&i| s.is_char_boundary(i))
        .unwrap_or(s.len());
    s[start..].to_string()
}

/// Time limit for a task's check.
pub const CHECK_LIMIT: Duration = Duration::from_secs(120);

/// Runs the task's check in `work`.
pub fn run_check(task: &Task, work: &Path, log: &Path) -> Result<Limited> {
    let mut cmd = Command::new("bash");
    cmd.arg(task.dir.join("check.sh"))
        .current_dir(work)
        .env("TASK_DIR", &task.dir);
    run_limited(cmd, CHECK_LIMIT, log)
}

/// Applies the task's reference patch to `work`.
pub fn apply_solution(task: &Task, work: &Path) -> Result<()> {
    let out = Command::new("patch")
        .args([
            "-p1",
            "-s",
            "--batch",
            "--forward",
            "--no-backup-if-mismatch",
            "-d",
        ])
        .arg(work)
        .arg("-i")
        .arg(task.dir.join("solution.patch"))
        .stdin(Stdio::null())
        .output()
        .context("running patch (is it installed?)")?;
    if !out.status.success() {
        bail!(
            "{}: solution.patch does not apply: {}{}",
            task.dir.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// One task's validation.
#[derive(Clone, Debug, Serialize)]
pub struct Validation {
    pub task: String,
    pub planted_fails: bool,
    pub reference_passes: bool,
    pub planted_s: f64,
    pub reference_s: f64,
    /// Why it does not validate, if it does not.
    pub problem: Option<String>,
}

impl Validation {
    pub fn ok(&self) -> bool {
        self.planted_fails && self.reference_passes
    }
}

/// Checks that `task`'s check fails on the planted project and passes with
/// the reference patch applied.
pub fn validate_task(task: &Task) -> Result<Validation> {
    let tmp = tempfile::Builder::new()
        .prefix("redlite-eval-validate-")
        .tempdir()
        .context("creating a temporary directory")?;
    let planted = tmp.path().join("planted");
    copy_tree(&task.dir.join("project"), &planted)?;
    let p = run_check(task, &planted, &tmp.path().join("planted.log"))?;
    let reference = tmp.path().join("reference");
    copy_tree(&task.dir.join("project"), &reference)?;
    let mut problem = None;
    let r = match apply_solution(task, &reference) {
        Ok(()) => Some(run_check(
            task,
            &reference,
            &tmp.path().join("reference.log"),
        )?),
        Err(e) => {
            problem = Some(format!("{e:#}"));
            None
        }
    };
    let planted_fails = !p.timed_out && p.status.is_some_and(|s| !s.success());
    let reference_passes = r
        .as_ref()
        .is_some_and(|r| r.status.is_some_and(|s| s.success()));
    if problem.is_none() {
        if !planted_fails {
            problem = Some(if p.timed_out {
                "the check timed out on the planted project".into()
            } else {
                format!("the check passes on the planted project:\n{}", p.output)
            });
        } else if let Some(r) = &r {
            if !reference_passes {
                problem = Some(format!(
                    "the check fails with the reference patch{}:\n{}",
                    if r.timed_out { " (timed out)" } else { "" },
                    r.output
                ));
            }
        }
    }
    Ok(Validation {
        task: task.name.clone(),
        planted_fails,
        reference_passes,
        planted_s: p.seconds,
        reference_s: r.as_ref().map_or(0.0, |r| r.seconds),
        problem,
    })
}

/// Validates every task of a suite.
pub fn validate_suite(tasks: &[Task], progress: &mut dyn FnMut(&str)) -> Result<Vec<Validation>> {
    let mut out = Vec::new();
    for t in tasks {
        let v = validate_task(t)?;
        progress(&format!(
            "{:<28} planted {} ({:.1} s), reference {} ({:.1} s){}",
            t.name,
            if v.planted_fails { "fails" } else { "PASSES" },
            v.planted_s,
            if v.reference_passes {
                "passes"
            } else {
                "FAILS"
            },
            v.reference_s,
            v.problem
                .as_deref()
                .map(|p| format!("\n    {}", p.replace('\n', "\n    ")))
                .unwrap_or_default()
        ));
        out.push(v);
    }
    Ok(out)
}

/// How to run a suite.
#[derive(Clone, Debug)]
pub struct AgentOptions {
    pub url: String,
    pub api_key: Option<String>,
    /// The model id pi is told to use (default: the first of `/v1/models`).
    pub model: Option<String>,
    /// Runs per task.
    pub runs: usize,
    /// The server's context window, for pi's configuration.
    pub context: usize,
    /// Default time limit per run (a task's `timeout_s` overrides it).
    pub timeout: Duration,
    /// Default request cap per run (a task's `max_requests` overrides it).
    pub max_requests: u64,
    /// The pi executable.
    pub pi: PathBuf,
    /// The `redlite` executable, for `redlite setup-pi`.
    pub redlite: PathBuf,
    /// Sampling temperature set in every chat request of the agent (None:
    /// as the agent sends it, i.e. the server's default).
    pub temperature: Option<f64>,
    /// Keep each run's directory (project, pi's log) here instead of deleting it.
    pub keep: Option<PathBuf>,
}

/// One run of one task.
#[derive(Clone, Debug, Serialize)]
pub struct RunResult {
    pub task: String,
    pub run: usize,
    pub passed: bool,
    pub wall_s: f64,
    /// Chat requests the agent sent during the run (counted by the relay).
    pub requests: u64,
    /// Chat requests the server's `/metrics` counted during the run.
    pub server_requests: u64,
    pub prompt_tokens: u64,
    pub cached_tokens: u64,
    pub generated_tokens: u64,
    pub timed_out: bool,
    pub hit_request_cap: bool,
    pub timeout_s: f64,
    pub max_requests: u64,
    /// pi's exit code (None when it was stopped).
    pub agent_exit: Option<i32>,
    /// The end of pi's output.
    pub agent_log_tail: String,
    /// The end of the check's output.
    pub check_log_tail: String,
}

/// The server counters a run is measured by.
#[derive(Clone, Copy, Debug, Default)]
pub struct Counters {
    pub requests: f64,
    pub prompt_evaluated: f64,
    pub prompt_cached: f64,
    pub generated: f64,
    /// Requests generating now.
    pub running: f64,
}

/// Reads the counters from `/metrics`.
pub fn counters(http: &Http) -> Result<Counters> {
    let m = http.get_text("/metrics")?;
    let need =
        |name: &str| metric_sum(&m, name, &[]).ok_or_else(|| anyhow!("/metrics has no {name}"));
    Ok(Counters {
        requests: metric_sum(&m, "redlite_requests_total", &["chat/completions\""]).unwrap_or(0.0),
        prompt_evaluated: need("redlite_prompt_tokens_total")?,
        prompt_cached: need("redlite_prompt_tokens_cached_total")?,
        generated: need("redlite_generation_tokens_total")?,
        running: metric_sum(&m, "redlite_requests_running", &[]).unwrap_or(0.0),
    })
}

/// Runs one task once.
pub fn run_task(
    http: &Http,
    model: &str,
    task: &Task,
    run: usize,
    opts: &AgentOptions,
) -> Result<RunResult> {
    use std::os::unix::process::CommandExt;
    let timeout = task
        .spec
        .timeout_s
        .map(Duration::from_secs_f64)
        .unwrap_or(opts.timeout);
    let cap = task.spec.max_requests.unwrap_or(opts.max_requests);
    let tmp = tempfile::Builder::new()
        .prefix("redlite-eval-run-")
        .tempdir()
        .context("creating a temporary directory")?;
    let home = tmp.path().join("home");
    let agent_dir = home.join(".pi/agent");
    let work = tmp.path().join("work");
    copy_tree(&task.dir.join("project"), &work)?;
    let proxy = Proxy::start(http.authority(), opts.temperature)?;
    let setup = Command::new(&opts.redlite)
        .args(["setup-pi", "--make-default", "--host", "127.0.0.1"])
        .args(["--port", &proxy.port().to_string()])
        .args(["--context", &opts.context.to_string()])
        .args(["--model", model])
        .arg("--dir")
        .arg(&agent_dir)
        .env("HOME", &home)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {} setup-pi", opts.redlite.display()))?;
    if !setup.status.success() {
        bail!(
            "redlite setup-pi failed: {}",
            String::from_utf8_lossy(&setup.stderr)
        );
    }
    let before = counters(http)?;
    let log = tmp.path().join("pi.log");
    let f = std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
    let f2 = f.try_clone()?;
    let mut cmd = Command::new(&opts.pi);
    cmd.args(["-p", &task.prompt, "--no-session"])
        .current_dir(&work)
        .env("HOME", &home)
        .env("PI_CODING_AGENT_DIR", &agent_dir)
        .env("PI_OFFLINE", "1")
        .env(
            "REDLITE_API_KEY",
            opts.api_key.clone().unwrap_or_else(|| "none".into()),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::from(f))
        .stderr(Stdio::from(f2))
        .process_group(0);
    let t0 = Instant::now();
    let mut child = cmd
        .spawn()
        .with_context(|| format!("starting pi ({})", opts.pi.display()))?;
    let mut tree = Tree::default();
    let mut timed_out = false;
    let mut hit_cap = false;
    let mut watch_error = None;
    let status = loop {
        tree.watch(child.id());
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) => {}
            Err(e) => {
                watch_error = Some(anyhow!("waiting for pi: {e}"));
                break None;
            }
        }
        if t0.elapsed() >= timeout {
            timed_out = true;
            break None;
        }
        if proxy.chat_requests() >= cap {
            hit_cap = true;
            break None;
        }
        if interrupted() {
            watch_error = Some(anyhow!("interrupted"));
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    // Always: whatever pi left running goes with it.
    tree.kill(&mut child, status.is_some());
    let wall_s = t0.elapsed().as_secs_f64();
    if let Some(e) = watch_error {
        return Err(e);
    }
    // A stopped request ends at the server's next token: wait (up to a
    // minute) until nothing runs, so the counts hold the whole run.
    let settle = Instant::now();
    let mut after = counters(http)?;
    while after.running > 0.0 && settle.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(200));
        after = counters(http)?;
    }
    let check = run_check(task, &work, &tmp.path().join("check.log"))?;
    let passed = !check.timed_out && check.status.is_some_and(|s| s.success());
    if let Some(k) = &opts.keep {
        let dst = k.join(format!("{}-{run}", task.name));
        copy_tree(tmp.path(), &dst)?;
    }
    let d = |a: f64, b: f64| (a - b).max(0.0).round() as u64;
    Ok(RunResult {
        task: task.name.clone(),
        run,
        passed,
        wall_s,
        requests: proxy.chat_requests(),
        server_requests: d(after.requests, before.requests),
        prompt_tokens: d(
            after.prompt_evaluated + after.prompt_cached,
            before.prompt_evaluated + before.prompt_cached,
        ),
        cached_tokens: d(after.prompt_cached, before.prompt_cached),
        generated_tokens: d(after.generated, before.generated),
        timed_out,
        hit_request_cap: hit_cap,
        timeout_s: timeout.as_secs_f64(),
        max_requests: cap,
        agent_exit: status.and_then(|s| s.code()),
        agent_log_tail: read_tail(&log, 2000),
        check_log_tail: check.output,
    })
}

/// Per-task summary.
#[derive(Clone, Debug, Serialize)]
pub struct TaskSummary {
    pub task: String,
    pub passes: usize,
    pub runs: usize,
    pub median_s: f64,
    pub median_requests: f64,
    pub timeouts: usize,
    /// Runs stopped by the request cap.
    pub loops: usize,
}

/// The whole run.
#[derive(Clone, Debug, Serialize)]
pub struct AgentReport {
    pub suite: String,
    pub url: String,
    pub model: String,
    pub runs: usize,
    pub context: usize,
    pub timeout_s: f64,
    pub max_requests: u64,
    pub temperature: Option<f64>,
    pub validation: Vec<Validation>,
    pub results: Vec<RunResult>,
    pub summary: Vec<TaskSummary>,
    pub passed: usize,
    pub total: usize,
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Per-task summaries of `results`, in task order.
pub fn summarize(tasks: &[Task], results: &[RunResult]) -> Vec<TaskSummary> {
    tasks
        .iter()
        .map(|t| {
            let r: Vec<&RunResult> = results.iter().filter(|r| r.task == t.name).collect();
            TaskSummary {
                task: t.name.clone(),
                passes: r.iter().filter(|r| r.passed).count(),
                runs: r.len(),
                median_s: median(r.iter().map(|r| r.wall_s).collect()),
                median_requests: median(r.iter().map(|r| r.requests as f64).collect()),
                timeouts: r.iter().filter(|r| r.timed_out).count(),
                loops: r.iter().filter(|r| r.hit_request_cap).count(),
            }
        })
        .collect()
}

/// Validates the suite (refusing one that does not validate), then runs
/// every task `opts.runs` times.
pub fn run_suite(
    suite: &str,
    tasks: &[Task],
    opts: &AgentOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<AgentReport> {
    let validation = validate_suite(tasks, progress)?;
    let bad: Vec<&str> = validation
        .iter()
        .filter(|v| !v.ok())
        .map(|v| v.task.as_str())
        .collect();
    if !bad.is_empty() {
        bail!(
            "suite {suite} does not validate (tasks {}); refusing to run it",
            bad.join(", ")
        );
    }
    let mut http = Http::new(&opts.url)?;
    http.api_key = opts.api_key.clone();
    http.wait_ready(Duration::from_secs(600))?;
    http.io_timeout = Duration::from_secs(30);
    let model = match &opts.model {
        Some(m) => m.clone(),
        None => crate::needle::served_model(&http)?,
    };
    if !opts.pi.exists() {
        bail!("pi not found at {}", opts.pi.display());
    }
    let mut results = Vec::new();
    for run in 1..=opts.runs {
        for t in tasks {
            let r = run_task(&http, &model, t, run, opts)?;
            progress(&format!(
                "{:<28} run {run}: {} in {:.1} s, {} requests{}{}",
                t.name,
                if r.passed { "pass" } else { "fail" },
                r.wall_s,
                r.requests,
                if r.timed_out { ", timed out" } else { "" },
                if r.hit_request_cap {
                    ", hit the request cap"
                } else {
                    ""
                },
            ));
            results.push(r);
        }
    }
    let summary = summarize(tasks, &results);
    Ok(AgentReport {
        suite: suite.to_string(),
        url: opts.url.clone(),
        model,
        runs: opts.runs,
        context: opts.context,
        timeout_s: opts.timeout.as_secs_f64(),
        max_requests: opts.max_requests,
        temperature: opts.temperature,
        validation,
        passed: results.iter().filter(|r| r.passed).count(),
        total: results.len(),
        results,
        summary,
    })
}

/// The summary table.
pub fn table(r: &AgentReport) -> String {
    let mut o = format!(
        "{:<28} {:>7} {:>9} {:>9} {:>8} {:>6}\n",
        "task", "passes", "median_s", "median_rq", "timeouts", "loops"
    );
    for s in &r.summary {
        o.push_str(&format!(
            "{:<28} {:>7} {:>9.1} {:>9.1} {:>8} {:>6}\n",
            s.task,
            format!("{}/{}", s.passes, s.runs),
            s.median_s,
            s.median_requests,
            s.timeouts,
            s.loops
        ));
    }
    o.push_str(&format!(
        "suite {}: {}/{} runs passed ({}, context {}, timeout {} s, cap {} requests, temperature {})\n",
        r.suite,
        r.passed,
        r.total,
        r.model,
        r.context,
        r.timeout_s,
        r.max_requests,
        r.temperature
            .map_or("as sent".to_string(), |t| t.to_string())
    ));
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        assert_eq!(median(vec![]), 0.0);
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
    }
}
