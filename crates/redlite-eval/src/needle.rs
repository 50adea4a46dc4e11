//! The needle check: a prompt made of real source code, exactly `length`
//! tokens long by the server's own tokenizer, with one passphrase hidden in a
//! code comment at each requested depth; the model is asked for all of them
//! through `/v1/chat/completions` (streaming, temperature 0) and each one is
//! scored found or not.
//!
//! Building a haystack: the source files are concatenated (each under a
//! comment naming it) and tokenized once; the body is cut at a token
//! boundary, each needle line is inserted at the line start nearest to its
//! depth (by token position), and the whole user message (haystack plus
//! question) is tokenized again and the cut moved by the difference until the
//! message is exactly the requested length less the chat template's own
//! tokens (measured by a one-token probe request). Positions are reported as
//! token indices of the final text.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use serde_json::{json, Value};

use crate::http::Http;

/// Counts tokens the way the server does.
pub trait Tokens {
    /// The byte length of each token of `text`, in order; they sum to
    /// `text.len()`.
    fn token_lengths(&self, text: &str) -> Result<Vec<usize>>;
}

/// The server's `/tokenize` (with pieces, so token boundaries are known).
pub struct ServerTokens<'a>(pub &'a Http);

impl Tokens for ServerTokens<'_> {
    fn token_lengths(&self, text: &str) -> Result<Vec<usize>> {
        let v = self
            .0
            .post_json("/tokenize", &json!({"content": text, "with_pieces": true}))?;
        let toks = v["tokens"]
            .as_array()
            .ok_or_else(|| anyhow!("/tokenize: the answer has no 'tokens' array"))?;
        let mut out = Vec::with_capacity(toks.len());
        for (i, t) in toks.iter().enumerate() {
            let n = match &t["piece"] {
                Value::String(s) => s.len(),
                Value::Array(b) => b.len(),
                _ => bail!("/tokenize: tokens[{i}] has no 'piece' (string or byte array)"),
            };
            out.push(n);
        }
        let sum: usize = out.iter().sum();
        if sum != text.len() {
            bail!(
                "/tokenize: the pieces hold {sum} bytes but the text has {}; cannot place needles by token",
                text.len()
            );
        }
        Ok(out)
    }
}

/// One source file of the haystack.
#[derive(Clone, Debug)]
pub struct SourceFile {
    /// Path relative to the directory it was found under.
    pub path: String,
    pub text: String,
    /// Line-comment marker of its language (`//` or `#`).
    pub comment: &'static str,
}

fn comment_for(ext: &str) -> Option<&'static str> {
    match ext {
        "rs" | "c" | "h" | "cc" | "cpp" | "hpp" | "cu" | "go" | "js" | "ts" | "java" => Some("//"),
        "py" | "sh" => Some("#"),
        _ => None,
    }
}

/// Every source file under `dirs` (recursively; hidden directories, `target`,
/// `node_modules` and `__pycache__` skipped), in path order. Special-token
/// lookalikes (`<|`) are broken up so that the haystack is plain text.
pub fn collect_sources(dirs: &[PathBuf]) -> Result<Vec<SourceFile>> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<SourceFile>) -> Result<()> {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .with_context(|| format!("reading directory {}", dir.display()))?
            .filter_map(|e| e.ok())
            .collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let name = e.file_name().to_string_lossy().into_owned();
            let p = e.path();
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_dir() {
                if name.starts_with('.')
                    || matches!(name.as_str(), "target" | "node_modules" | "__pycache__")
                {
                    continue;
                }
                walk(root, &p, out)?;
            } else if ft.is_file() {
                let ext = p.extension().and_then(|x| x.to_str()).unwrap_or("");
                let Some(comment) = comment_for(ext) else {
                    continue;
                };
                // Files that are not UTF-8 are left out (not source text).
                let Ok(text) = std::fs::read_to_string(&p) else {
                    continue;
                };
                if text.trim().is_empty() {
                    continue;
                }
                let rel = p.strip_prefix(root).unwrap_or(&p).display().to_string();
                out.push(SourceFile {
                    path: rel,
                    text: text.replace("<|", "< |"),
                    comment,
                });
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    for d in dirs {
        if !d.is_dir() {
            bail!("--source {}: not a directory", d.display());
        }
        walk(d, d, &mut out)?;
    }
    if out.is_empty() {
        bail!(
            "no source files (.rs, .py, .c, .h, .sh, ...) under {}",
            dirs.iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok(out)
}

/// One hidden passphrase.
#[derive(Clone, Debug, Serialize)]
pub struct Needle {
    /// Requested depth, percent of the haystack.
    pub depth: f64,
    pub passphrase: String,
    /// Token index the depth asks for.
    pub target_token: usize,
    /// Token index where the needle's line starts in the final text.
    pub token: usize,
    /// Byte offset of the needle's line in the final text.
    #[serde(skip)]
    pub byte: usize,
    /// The source file it was hidden in.
    pub file: String,
}

/// A built haystack.
#[derive(Clone, Debug)]
pub struct Haystack {
    /// The haystack (without the suffix).
    pub text: String,
    /// Tokens of `text + suffix`.
    pub tokens: usize,
    pub needles: Vec<Needle>,
}

/// A needle: a whole comment line, at column 0 (valid anywhere a line
/// starts in both comment styles, and of a known token length).
fn needle_line(comment: &str, phrase: &str) -> String {
    format!("{comment} Note: the passphrase is {phrase}. Remember it.\n")
}

/// Byte offsets where each token starts, plus the end.
fn starts(lengths: &[usize]) -> Vec<usize> {
    let mut s = Vec::with_capacity(lengths.len() + 1);
    let mut at = 0;
    s.push(0);
    for &n in lengths {
        at += n;
        s.push(at);
    }
    s
}

/// Index of the token that holds byte `b`.
fn token_at(starts: &[usize], b: usize) -> usize {
    match starts.binary_search(&b) {
        Ok(i) => i,
        Err(i) => i.saturating_sub(1),
    }
}

/// Builds a haystack whose text plus `suffix` is exactly `target` tokens,
/// with `phrases[i]` hidden at `depths[i]` percent.
pub fn build_haystack(
    tok: &dyn Tokens,
    files: &[SourceFile],
    target: usize,
    depths: &[f64],
    phrases: &[String],
    suffix: &str,
) -> Result<Haystack> {
    if depths.len() != phrases.len() {
        bail!("one passphrase per depth is needed");
    }
    // Each needle line's tokens, for either comment marker.
    let mut needle_lens: Vec<[usize; 2]> = Vec::new();
    for p in phrases {
        needle_lens.push([
            tok.token_lengths(&needle_line("//", p))?.len(),
            tok.token_lengths(&needle_line("#", p))?.len(),
        ]);
    }
    let fixed: usize = tok.token_lengths(suffix)?.len()
        + needle_lens.iter().map(|l| l[0].max(l[1])).sum::<usize>();
    let mut order: Vec<usize> = (0..depths.len()).collect();
    order.sort_by(|&a, &b| depths[a].total_cmp(&depths[b]));
    if target < fixed + 64 {
        bail!("a length of {target} tokens is too short for the question and the needles ({fixed} tokens)");
    }
    // The corpus: files with headers until it holds enough tokens.
    let mut base = String::new();
    let mut spans: Vec<(usize, usize)> = Vec::new(); // (start byte, file index)
    let mut next = 0;
    let mut want_bytes = target * 5 + 4096;
    let base_starts = loop {
        while base.len() < want_bytes && next < files.len() {
            let f = &files[next];
            spans.push((base.len(), next));
            base.push_str(&format!("{} ---- {} ----\n", f.comment, f.path));
            base.push_str(&f.text);
            if !base.ends_with('\n') {
                base.push('\n');
            }
            base.push('\n');
            next += 1;
        }
        let st = starts(&tok.token_lengths(&base)?);
        if st.len() > target + 256 {
            break st;
        }
        if next >= files.len() {
            bail!(
                "the source files hold only {} tokens, fewer than the {target} asked for; add --source directories",
                st.len() - 1
            );
        }
        want_bytes = want_bytes * 3 / 2;
    };
    let file_at = |b: usize| {
        let i = match spans.binary_search_by_key(&b, |s| s.0) {
            Ok(i) => i,
            Err(i) => i.saturating_sub(1),
        };
        &files[spans[i].1]
    };

    let mut body = target - fixed;
    let mut best: Option<(usize, Haystack)> = None;
    let mut best_body = body;
    let mut tried: Vec<usize> = Vec::new();
    // Move the cut by the difference; where tokens merging across the cut
    // make that oscillate, try the cuts around the best one in turn.
    for _ in 0..40 {
        let body_t = body.clamp(1, base_starts.len() - 1);
        tried.push(body_t);
        let cut = base_starts[body_t];
        let region = &base[..cut];
        // Insertion points: the line start nearest each depth's token (its
        // depth of the whole, less the needle lines before it).
        let mut points: Vec<(usize, usize)> = Vec::new(); // (byte, needle index)
        let mut before = 0;
        for &i in &order {
            let p = (((depths[i] / 100.0) * target as f64).round() as usize).saturating_sub(before);
            let b = base_starts[p.min(body_t.saturating_sub(1))];
            let prev = region[..b].rfind('\n').map_or(0, |i| i + 1);
            let nextl = region[b..]
                .find('\n')
                .map(|i| b + i + 1)
                .filter(|&n| n < cut);
            let at = match nextl {
                Some(n) if n - b < b - prev => n,
                _ => prev,
            };
            before += needle_lens[i][usize::from(file_at(at).comment == "#")];
            points.push((at, i));
        }
        points.sort();
        let mut text = String::with_capacity(cut + 512);
        let mut last = 0;
        let mut placed: Vec<(usize, usize, String)> = Vec::new(); // (byte, needle, file)
        for &(at, i) in &points {
            text.push_str(&region[last..at]);
            let f = file_at(at);
            placed.push((text.len(), i, f.path.clone()));
            text.push_str(&needle_line(f.comment, &phrases[i]));
            last = at;
        }
        text.push_str(&region[last..]);
        // Where the cut's last token merges with the question's first, no
        // cut gives the exact length; a short filler after it then does.
        let mut lens = tok.token_lengths(&format!("{text}{suffix}"))?;
        if lens.len() < target && lens.len() + 3 >= target && tried.len() > 1 {
            for filler in [
                "\n", ".", " ", ";", "\n\n", "..", ".\n", " .", "\n.", "...", ". .",
            ] {
                let l = tok.token_lengths(&format!("{text}{filler}{suffix}"))?;
                if l.len() == target {
                    text.push_str(filler);
                    lens = l;
                    break;
                }
            }
        }
        let st = starts(&lens);
        let n = lens.len();
        let mut needles: Vec<Needle> = placed
            .into_iter()
            .map(|(byte, i, file)| Needle {
                depth: depths[i],
                passphrase: phrases[i].clone(),
                target_token: ((depths[i] / 100.0) * target as f64).round() as usize,
                token: token_at(&st, byte),
                byte,
                file,
            })
            .collect();
        needles.sort_by_key(|n| n.byte);
        let h = Haystack {
            text,
            tokens: n,
            needles,
        };
        let diff = n.abs_diff(target);
        let better = match &best {
            None => true,
            Some((d, b)) => diff < *d || (diff == *d && n <= target && b.tokens > target),
        };
        if better {
            best = Some((diff, h));
            best_body = body_t;
        }
        if n == target {
            break;
        }
        let step = (body_t as i64 + target as i64 - n as i64).max(1) as usize;
        body = if !tried.contains(&step) {
            step
        } else {
            match (1..=64)
                .flat_map(|k| [best_body + k, best_body.saturating_sub(k)])
                .find(|b| !tried.contains(b))
            {
                Some(b) => b,
                None => break,
            }
        };
    }
    let (_, h) = best.ok_or_else(|| anyhow!("no haystack was built"))?;
    Ok(h)
}

const ADJECTIVES: &[&str] = &[
    "amber", "brisk", "cobalt", "dusty", "eager", "fabled", "gentle", "hollow", "ivory", "jolly",
    "keen", "lunar", "mellow", "nimble", "ochre", "placid", "quiet", "rustic", "silver", "tidal",
    "umber", "velvet", "woolly", "young", "zesty", "crimson", "frosty", "golden", "humble",
    "misty",
];
const NOUNS: &[&str] = &[
    "anchor", "badger", "canyon", "dolphin", "ember", "falcon", "glacier", "harbor", "island",
    "juniper", "kettle", "lantern", "meadow", "nebula", "orchard", "pebble", "quarry", "raven",
    "saddle", "thistle", "urchin", "violin", "walnut", "yarrow", "zephyr", "beacon", "cactus",
    "dune", "fjord", "garnet",
];

/// `n` distinct passphrases (`word-word-NNNN`) from `seed`.
pub fn passphrases(seed: u64, n: usize) -> Vec<String> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut out: Vec<String> = Vec::with_capacity(n);
    while out.len() < n {
        let p = format!(
            "{}-{}-{}",
            ADJECTIVES[rng.gen_range(0..ADJECTIVES.len())],
            NOUNS[rng.gen_range(0..NOUNS.len())],
            rng.gen_range(1000..10000)
        );
        if !out.contains(&p) {
            out.push(p);
        }
    }
    out
}

fn normalize(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push(' ');
    for c in s.chars() {
        if c.is_alphanumeric() {
            out.extend(c.to_lowercase());
        } else if !out.ends_with(' ') {
            out.push(' ');
        }
    }
    if !out.ends_with(' ') {
        out.push(' ');
    }
    out
}

/// Whether `answer` states `phrase`: the exact words and number in order,
/// whatever surrounds them (case, punctuation, quotes, list markers).
pub fn found(answer: &str, phrase: &str) -> bool {
    normalize(answer).contains(&normalize(phrase))
}

/// The question after the haystack.
pub fn question(n: usize) -> String {
    format!(
        "\n\nThe text above is source code from a software project. {n} of its comments each state a passphrase \
(two words and a number joined by hyphens, like gentle-walnut-1234). List every passphrase stated in \
those comments, one per line, and nothing else."
    )
}

/// Parses `8k`, `32K`, `256k`, `2048` (k = 1024 tokens).
pub fn parse_length(s: &str) -> Result<usize> {
    let t = s.trim();
    let (num, mul) = match t.strip_suffix(['k', 'K']) {
        Some(n) => (n, 1024),
        None => (t, 1),
    };
    let n: usize = num
        .parse()
        .map_err(|_| anyhow!("bad length {s:?} (expected e.g. 8k, 32k or 2048)"))?;
    if n == 0 {
        bail!("bad length {s:?}: must be positive");
    }
    Ok(n * mul)
}

/// `8k` for 8192, else the number.
pub fn length_label(n: usize) -> String {
    if n.is_multiple_of(1024) {
        format!("{}k", n / 1024)
    } else {
        n.to_string()
    }
}

/// What to run.
#[derive(Clone, Debug)]
pub struct NeedleOptions {
    pub url: String,
    /// Model id to send (default: the first of `/v1/models`).
    pub model: Option<String>,
    pub api_key: Option<String>,
    /// Prompt lengths in tokens (the whole prompt, template included).
    pub lengths: Vec<usize>,
    /// Needle depths, percent.
    pub depths: Vec<f64>,
    /// Directories of source files for the haystack.
    pub sources: Vec<PathBuf>,
    pub seed: u64,
    /// Cap on the answer's tokens.
    pub max_tokens: usize,
}

/// One needle's result.
#[derive(Clone, Debug, Serialize)]
pub struct NeedleResult {
    #[serde(flatten)]
    pub needle: Needle,
    pub found: bool,
}

/// One prompt length's result.
#[derive(Clone, Debug, Serialize)]
pub struct NeedleCase {
    pub length: usize,
    /// `usage.prompt_tokens` reported by the server.
    pub prompt_tokens: Option<u64>,
    /// Tokens of the user message (haystack and question) by `/tokenize`.
    pub message_tokens: usize,
    pub needles: Vec<NeedleResult>,
    pub answer: String,
    pub ttft_s: Option<f64>,
    pub prefill_tok_s: Option<f64>,
    pub decode_tok_s: Option<f64>,
    pub completion_tokens: Option<u64>,
    pub cached_tokens: Option<u64>,
    pub total_s: f64,
    /// Set when the request failed (the needles then count as not found).
    pub error: Option<String>,
}

/// The whole run.
#[derive(Clone, Debug, Serialize)]
pub struct NeedleReport {
    pub url: String,
    pub model: String,
    pub seed: u64,
    pub sources: Vec<String>,
    pub source_files: usize,
    pub depths: Vec<f64>,
    pub cases: Vec<NeedleCase>,
    pub found: usize,
    pub total: usize,
}

/// What one streamed chat answer gave.
#[derive(Default, Debug)]
pub struct Streamed {
    pub text: String,
    pub ttft_s: Option<f64>,
    pub usage: Option<Value>,
    pub timings: Option<Value>,
    pub error: Option<String>,
}

/// Sends a streaming chat request and gathers the answer.
pub fn stream_chat(http: &Http, body: &Value) -> Result<Streamed> {
    let t0 = Instant::now();
    let mut r = http.request(
        "POST",
        "/v1/chat/completions",
        Some(body.to_string().as_bytes()),
    )?;
    if r.status != 200 {
        let status = r.status;
        let t = r.text().unwrap_or_default();
        return Ok(Streamed {
            error: Some(format!("HTTP {status}: {}", t.trim())),
            ..Default::default()
        });
    }
    let mut out = Streamed::default();
    let mut line = String::new();
    loop {
        line.clear();
        let n = r
            .reader()
            .read_line(&mut line)
            .context("reading the event stream")?;
        if n == 0 {
            break;
        }
        let Some(data) = line.trim_end().strip_prefix("data:") else {
            continue;
        };
        let data = data.trim();
        if data == "[DONE]" {
            break;
        }
        let v: Value = serde_json::from_str(data)
            .with_context(|| format!("an event that is not JSON: {data:?}"))?;
        if let Some(e) = v.get("error") {
            out.error = Some(e["message"].as_str().unwrap_or("error").to_string());
            break;
        }
        if let Some(c) = v["choices"][0]["delta"]["content"].as_str() {
            if !c.is_empty() && out.ttft_s.is_none() {
                out.ttft_s = Some(t0.elapsed().as_secs_f64());
            }
            out.text.push_str(c);
        }
        if v["usage"].is_object() {
            out.usage = Some(v["usage"].clone());
        }
        if v["timings"].is_object() {
            out.timings = Some(v["timings"].clone());
        }
    }
    Ok(out)
}

/// The first model id of `/v1/models`.
pub fn served_model(http: &Http) -> Result<String> {
    let t = http.get_text("/v1/models")?;
    let v: Value = serde_json::from_str(&t).context("/v1/models: not JSON")?;
    v["data"][0]["id"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| anyhow!("/v1/models lists no model"))
}

fn chat_body(model: &str, content: &str, max_tokens: usize) -> Value {
    json!({
        "model": model,
        "messages": [{"role": "user", "content": content}],
        "stream": true,
        "stream_options": {"include_usage": true},
        "temperature": 0,
        "max_tokens": max_tokens,
    })
}

/// Runs the needle check; `progress` gets one line per step.
pub fn run_needle(opts: &NeedleOptions, progress: &mut dyn FnMut(&str)) -> Result<NeedleReport> {
    if opts.depths.is_empty() || opts.lengths.is_empty() {
        bail!("at least one length and one depth are needed");
    }
    for &d in &opts.depths {
        if !(0.0..=100.0).contains(&d) {
            bail!("depth {d} is not a percentage between 0 and 100");
        }
    }
    let mut http = Http::new(&opts.url)?;
    http.api_key = opts.api_key.clone();
    http.wait_ready(std::time::Duration::from_secs(600))?;
    let model = match &opts.model {
        Some(m) => m.clone(),
        None => served_model(&http)?,
    };
    let files = collect_sources(&opts.sources)?;
    progress(&format!(
        "{} source files; model {model} at {}",
        files.len(),
        opts.url
    ));
    let q = question(opts.depths.len());
    // The chat template's own tokens: a probe with the question alone
    // (without its leading blank line, which would merge with the
    // template's newline before it).
    let probe_text = q.trim_start();
    let probe = stream_chat(&http, &chat_body(&model, probe_text, 1))?;
    if let Some(e) = probe.error {
        bail!("the probe request failed: {e}");
    }
    let probe_prompt = probe
        .usage
        .as_ref()
        .and_then(|u| u["prompt_tokens"].as_u64())
        .ok_or_else(|| anyhow!("the server reported no usage.prompt_tokens"))?
        as usize;
    let tok = ServerTokens(&http);
    let overhead = probe_prompt.saturating_sub(tok.token_lengths(probe_text)?.len());
    let mut cases = Vec::new();
    for (li, &length) in opts.lengths.iter().enumerate() {
        let phrases = passphrases(opts.seed.wrapping_add(li as u64 * 7919), opts.depths.len());
        progress(&format!("{}: building the haystack", length_label(length)));
        let message_target = length
            .checked_sub(overhead)
            .ok_or_else(|| anyhow!("length {length} is below the template's {overhead} tokens"))?;
        let h = build_haystack(&tok, &files, message_target, &opts.depths, &phrases, &q)?;
        if h.tokens != message_target {
            progress(&format!(
                "{}: warning: the message is {} tokens, not {message_target} (no cut of the sources gives exactly that)",
                length_label(length),
                h.tokens
            ));
        }
        progress(&format!(
            "{}: asking ({} message tokens, needles at tokens {})",
            length_label(length),
            h.tokens,
            h.needles
                .iter()
                .map(|n| n.token.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ));
        let t0 = Instant::now();
        let content = format!("{}{q}", h.text);
        let s = match stream_chat(&http, &chat_body(&model, &content, opts.max_tokens)) {
            Ok(s) => s,
            Err(e) => Streamed {
                error: Some(format!("{e:#}")),
                ..Default::default()
            },
        };
        let u = s.usage.clone().unwrap_or(Value::Null);
        let t = s.timings.clone().unwrap_or(Value::Null);
        let needles: Vec<NeedleResult> = h
            .needles
            .iter()
            .map(|n| NeedleResult {
                found: s.error.is_none() && found(&s.text, &n.passphrase),
                needle: n.clone(),
            })
            .collect();
        let case = NeedleCase {
            length,
            prompt_tokens: u["prompt_tokens"].as_u64(),
            message_tokens: h.tokens,
            needles,
            answer: s.text,
            ttft_s: s.ttft_s,
            prefill_tok_s: t["prompt_per_second"].as_f64(),
            decode_tok_s: t["predicted_per_second"].as_f64(),
            completion_tokens: u["completion_tokens"].as_u64(),
            cached_tokens: u["prompt_tokens_details"]["cached_tokens"].as_u64(),
            total_s: t0.elapsed().as_secs_f64(),
            error: s.error,
        };
        progress(&format!(
            "{}: {}/{} found{}",
            length_label(length),
            case.needles.iter().filter(|n| n.found).count(),
            case.needles.len(),
            case.error
                .as_deref()
                .map(|e| format!(" (error: {e})"))
                .unwrap_or_default()
        ));
        cases.push(case);
    }
    let total = cases.iter().map(|c| c.needles.len()).sum();
    let found_n = cases
        .iter()
        .flat_map(|c| &c.needles)
        .filter(|n| n.found)
        .count();
    Ok(NeedleReport {
        url: opts.url.clone(),
        model,
        seed: opts.seed,
        sources: opts
            .sources
            .iter()
            .map(|p| p.display().to_string())
            .collect(),
        source_files: files.len(),
        depths: opts.depths.clone(),
        cases,
        found: found_n,
        total,
    })
}

fn opt(v: Option<f64>, prec: usize) -> String {
    v.map_or("-".into(), |x| format!("{x:.prec$}"))
}

/// The terminal table: one row per length and depth.
pub fn table(r: &NeedleReport) -> String {
    let mut o = format!(
        "{:>7} {:>8} {:>6} {:>8} {:>6} {:>8} {:>10} {:>9} {:>8}  passphrase\n",
        "length", "prompt", "depth", "token", "found", "ttft_s", "prefill/s", "decode/s", "cached"
    );
    for c in &r.cases {
        for n in &c.needles {
            o.push_str(&format!(
                "{:>7} {:>8} {:>5}% {:>8} {:>6} {:>8} {:>10} {:>9} {:>8}  {}\n",
                length_label(c.length),
                c.prompt_tokens.map_or("-".into(), |p| p.to_string()),
                n.needle.depth,
                n.needle.token,
                if n.found { "yes" } else { "no" },
                opt(c.ttft_s, 2),
                opt(c.prefill_tok_s, 1),
                opt(c.decode_tok_s, 1),
                c.cached_tokens.map_or("-".into(), |p| p.to_string()),
                n.needle.passphrase,
            ));
        }
        if let Some(e) = &c.error {
            o.push_str(&format!("{:>7} error: {e}\n", length_label(c.length)));
        }
    }
    o.push_str(&format!(
        "found {}/{} ({}; seed {})\n",
        r.found, r.total, r.model, r.seed
    ));
    o
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The heatmap: lengths across, depths down; green found, red missed, grey
/// where the request failed.
pub fn svg(r: &NeedleReport) -> String {
    let (cw, ch, left, top) = (90usize, 44usize, 70usize, 56usize);
    let w = left + cw * r.cases.len() + 20;
    let h = top + ch * r.depths.len() + 50;
    let mut o = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" font-family=\"sans-serif\" font-size=\"13\">\n<rect width=\"{w}\" height=\"{h}\" fill=\"white\"/>\n<text x=\"{}\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">Needle check: {} ({}/{} found)</text>\n",
        w / 2,
        esc(&r.model),
        r.found,
        r.total
    );
    for (j, d) in r.depths.iter().enumerate() {
        let y = top + j * ch + ch / 2 + 4;
        o.push_str(&format!(
            "<text x=\"{}\" y=\"{y}\" text-anchor=\"end\">{d}%</text>\n",
            left - 8
        ));
    }
    for (i, c) in r.cases.iter().enumerate() {
        let x = left + i * cw;
        for (j, d) in r.depths.iter().enumerate() {
            let y = top + j * ch;
            let n = c.needles.iter().find(|n| n.needle.depth == *d);
            let (fill, label) = match (&c.error, n) {
                (Some(_), _) | (_, None) => ("#bbbbbb", "error"),
                (None, Some(n)) if n.found => ("#2e9e4f", "found"),
                _ => ("#d64541", "missed"),
            };
            let title = n.map_or(String::new(), |n| {
                format!(
                    "{} at token {} ({}): {label}",
                    n.needle.passphrase, n.needle.token, n.needle.file
                )
            });
            o.push_str(&format!(
                "<rect x=\"{x}\" y=\"{y}\" width=\"{}\" height=\"{}\" fill=\"{fill}\" stroke=\"white\" stroke-width=\"2\"><title>{}</title></rect>\n<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" fill=\"white\">{label}</text>\n",
                cw,
                ch,
                esc(&title),
                x + cw / 2,
                y + ch / 2 + 4
            ));
        }
        o.push_str(&format!(
            "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
            x + cw / 2,
            top + ch * r.depths.len() + 18,
            length_label(c.length)
        ));
    }
    o.push_str(&format!(
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">prompt length (tokens)</text>\n<text x=\"14\" y=\"{}\" transform=\"rotate(-90 14 {})\" text-anchor=\"middle\">depth</text>\n</svg>\n",
        left + cw * r.cases.len() / 2,
        top + ch * r.depths.len() + 40,
        top + ch * r.depths.len() / 2,
        top + ch * r.depths.len() / 2
    ));
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scoring_finds_a_passphrase_and_misses_a_wrong_one() {
        let p = "gentle-walnut-4821";
        assert!(found("gentle-walnut-4821", p));
        assert!(found(
            "Sure! The passphrases are:\n1. `Gentle-Walnut-4821`\n2. amber-dune-1000",
            p
        ));
        assert!(found("I found: gentle walnut 4821.", p));
        assert!(!found("gentle-walnut-4822", p));
        assert!(!found("gentle-walnut-48210", p));
        assert!(!found("walnut-gentle-4821", p));
        assert!(!found("", p));
    }

    #[test]
    fn passphrases_are_distinct_and_seeded() {
        let a = passphrases(7, 3);
        assert_eq!(a.len(), 3);
        assert!(a[0] != a[1] && a[1] != a[2] && a[0] != a[2]);
        assert_eq!(a, passphrases(7, 3));
        assert_ne!(a, passphrases(8, 3));
    }

    #[test]
    fn lengths_parse() {
        assert_eq!(parse_length("8k").unwrap(), 8192);
        assert_eq!(parse_length("256K").unwrap(), 262144);
        assert_eq!(parse_length("2000").unwrap(), 2000);
        assert!(parse_length("8x").is_err());
        assert!(parse_length("0").is_err());
        assert_eq!(length_label(32768), "32k");
        assert_eq!(length_label(1000), "1000");
    }
}
