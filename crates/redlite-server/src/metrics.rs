//! `GET /metrics` in the Prometheus text format, and per-request counters.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::run::{StreamOutcome, STATUS_CANCELLED};
use crate::App;

/// Counters the handlers update (the engine's own totals come from its
/// status).
#[derive(Default)]
pub struct Metrics {
    /// (endpoint, status) → finished HTTP requests.
    requests: Mutex<BTreeMap<(String, u16), u64>>,
    /// Largest context (prompt + reply) seen.
    pub context_max: AtomicU64,
    /// Requests whose generation finished, by finish reason.
    finished: Mutex<BTreeMap<String, u64>>,
}

impl Metrics {
    pub fn finished(&self, reason: &str) {
        if let Ok(mut m) = self.finished.lock() {
            *m.entry(reason.to_string()).or_default() += 1;
        }
    }

    pub fn request(&self, endpoint: String, status: u16) {
        if let Ok(mut m) = self.requests.lock() {
            *m.entry((endpoint, status)).or_default() += 1;
        }
    }

    pub fn context_seen(&self, n: usize) {
        self.context_max.fetch_max(n as u64, Ordering::Relaxed);
    }
}

/// Middleware counting finished requests by route and status. A streamed
/// response is counted when its stream ends (200, or 499 when cancelled);
/// a request whose client left before the answer is counted as 499.
pub async fn count(State(app): State<App>, req: Request, next: Next) -> Response {
    let endpoint = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "other".into());
    let mut guard = Pending {
        app: app.clone(),
        endpoint: Some(endpoint),
    };
    let r = next.run(req).await;
    let Some(endpoint) = guard.endpoint.take() else {
        return r;
    };
    let later = r
        .extensions()
        .get::<Arc<StreamOutcome>>()
        .and_then(|o| o.0.lock().ok().and_then(|mut g| g.take()));
    match later {
        Some(rx) => {
            tokio::spawn(async move {
                let status = rx.await.unwrap_or(STATUS_CANCELLED);
                app.metrics.request(endpoint, status);
            });
        }
        None => app.metrics.request(endpoint, r.status().as_u16()),
    }
    r
}

/// Counts a request dropped before it was answered (its client left).
struct Pending {
    app: App,
    endpoint: Option<String>,
}

impl Drop for Pending {
    fn drop(&mut self) {
        if let Some(e) = self.endpoint.take() {
            self.app.metrics.request(e, STATUS_CANCELLED);
        }
    }
}

fn esc(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

pub async fn metrics(State(app): State<App>) -> impl IntoResponse {
    let st = app.engine.status();
    let s = &st.stats;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "# HELP redlite_build_info What is running.\n# TYPE redlite_build_info gauge\nredlite_build_info{{version=\"{}\",backend=\"{}\",model=\"{}\"}} 1",
        env!("CARGO_PKG_VERSION"),
        esc(&app.backend),
        esc(&app.cfg.alias)
    );
    let rate = |n: u64, t: f64| if t > 0.0 { n as f64 / t } else { 0.0 };
    const C: &str = "counter";
    const G: &str = "gauge";
    // (name, type, help, value), one per series.
    let mut rows: Vec<(&str, &str, &str, String)> = vec![
        (
            "redlite_prompt_tokens_total",
            C,
            "Prompt tokens evaluated (prefill work done).",
            s.prompt_tokens_evaluated.to_string(),
        ),
        (
            "redlite_prompt_tokens_cached_total",
            C,
            "Prompt tokens skipped thanks to state reuse.",
            s.prompt_tokens_cached.to_string(),
        ),
        (
            "redlite_generation_tokens_total",
            C,
            "Tokens generated.",
            s.generated_tokens.to_string(),
        ),
        (
            "redlite_prefill_seconds_total",
            C,
            "Compute time spent in prefill.",
            format!("{:.6}", s.prefill_seconds),
        ),
        (
            "redlite_decode_seconds_total",
            C,
            "Compute time spent in decode steps.",
            format!("{:.6}", s.decode_seconds),
        ),
        (
            "redlite_decode_steps_total",
            C,
            "Batched decode steps run.",
            s.decode_steps.to_string(),
        ),
        (
            "redlite_prompt_tokens_per_second",
            G,
            "Average prefill speed since start.",
            format!("{:.3}", rate(s.prompt_tokens_evaluated, s.prefill_seconds)),
        ),
        (
            "redlite_generation_tokens_per_second",
            G,
            "Average decode speed since start (all sequences together).",
            format!("{:.3}", rate(s.generated_tokens, s.decode_seconds)),
        ),
        (
            "redlite_spec_drafts_total",
            C,
            "Speculative verify passes (prompt lookup).",
            s.spec_rounds.to_string(),
        ),
        (
            "redlite_spec_draft_tokens_total",
            C,
            "Tokens drafted by prompt lookup.",
            s.spec_drafted.to_string(),
        ),
        (
            "redlite_spec_accepted_tokens_total",
            C,
            "Drafted tokens accepted.",
            s.spec_accepted.to_string(),
        ),
        (
            "redlite_constraint_mask_seconds_total",
            C,
            "Time spent computing constrained sequences' token masks (beside the forward pass).",
            format!("{:.6}", s.mask_seconds),
        ),
        (
            "redlite_constraint_wait_seconds_total",
            C,
            "Time decode steps waited for a mask after their forward pass had ended.",
            format!("{:.6}", s.mask_wait_seconds),
        ),
        (
            "redlite_requests_running",
            G,
            "Requests in a slot.",
            st.running.to_string(),
        ),
        (
            "redlite_requests_waiting",
            G,
            "Requests queued for a slot.",
            st.waiting.to_string(),
        ),
        (
            "redlite_queue_limit",
            G,
            "Requests that may wait for a slot (--max-queue).",
            app.cfg.max_queue.to_string(),
        ),
        (
            "redlite_slots_total",
            G,
            "Sequences decoded together (--parallel).",
            app.cfg.parallel.to_string(),
        ),
        (
            "redlite_state_snapshots",
            G,
            "State snapshots held for reuse.",
            st.snapshots.to_string(),
        ),
        (
            "redlite_state_snapshot_bytes",
            G,
            "Bytes held by state snapshots, each KV block they share counted once.",
            st.snapshot_bytes.to_string(),
        ),
        (
            "redlite_state_snapshot_logical_bytes",
            G,
            "Bytes the state snapshots would hold if none shared KV blocks.",
            st.snapshot_logical_bytes.to_string(),
        ),
        (
            "redlite_state_cache_budget_bytes",
            G,
            "Byte budget of the state-snapshot store (--state-cache).",
            app.cfg.state_cache_bytes.to_string(),
        ),
        (
            "redlite_context_tokens_max",
            G,
            "Largest context (prompt + reply) seen.",
            app.metrics.context_max.load(Ordering::Relaxed).to_string(),
        ),
    ];
    let ec = app.model.expert_cache_stats();
    if let Some(ec) = &ec {
        let t = ec.total();
        rows.extend([
            (
                "redlite_expert_cache_budget_bytes",
                G,
                "Byte budget of the routed-expert cache.",
                ec.budget.to_string(),
            ),
            (
                "redlite_expert_cache_resident_bytes",
                G,
                "Bytes of the experts held in the cache now.",
                ec.resident_bytes.to_string(),
            ),
            (
                "redlite_expert_cache_hit_rate",
                G,
                "Expert uses served from the cache, as a fraction of all uses so far.",
                format!("{}", t.hit_rate()),
            ),
            (
                "redlite_expert_cache_stall_seconds_total",
                C,
                "Time the forward pass waited on expert reads.",
                format!("{}", t.stall.as_secs_f64()),
            ),
        ]);
    }
    for (name, kind, help, v) in &rows {
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}");
    }
    if let Some(ec) = &ec {
        let per_layer = [
            (
                "redlite_expert_cache_hits_total",
                "Expert uses served from the cache, per layer.",
            ),
            (
                "redlite_expert_cache_misses_total",
                "Expert uses read from the file, per layer.",
            ),
            (
                "redlite_expert_cache_read_bytes_total",
                "Expert bytes read from the file, per layer.",
            ),
            (
                "redlite_expert_cache_evictions_total",
                "Experts dropped to stay within the budget, per layer.",
            ),
        ];
        for (k, (name, help)) in per_layer.iter().enumerate() {
            let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} counter");
            for (il, c) in ec.layers.iter().enumerate() {
                let v = [c.hits, c.misses, c.bytes_read, c.evictions][k];
                let _ = writeln!(o, "{name}{{layer=\"{il}\"}} {v}");
            }
        }
    }
    let _ = writeln!(
        o,
        "# HELP redlite_state_restores_total Requests that resumed from a snapshot (hit) or started fresh (miss).\n# TYPE redlite_state_restores_total counter\nredlite_state_restores_total{{result=\"hit\"}} {}\nredlite_state_restores_total{{result=\"miss\"}} {}",
        s.snapshot_restores_hit, s.snapshot_restores_miss
    );
    let _ = writeln!(
        o,
        "# HELP redlite_state_restore_hits_total Requests that resumed from a snapshot, by where the snapshot was taken.\n# TYPE redlite_state_restore_hits_total counter"
    );
    for kind in redlite_engine::SnapshotKind::ALL {
        let _ = writeln!(
            o,
            "redlite_state_restore_hits_total{{kind=\"{}\"}} {}",
            kind.name(),
            s.snapshot_hits_by_kind[kind.index()]
        );
    }
    let _ = writeln!(
        o,
        "# HELP redlite_requests_total Finished HTTP requests.\n# TYPE redlite_requests_total counter"
    );
    if let Ok(m) = app.metrics.requests.lock() {
        for ((ep, status), n) in m.iter() {
            let _ = writeln!(
                o,
                "redlite_requests_total{{endpoint=\"{}\",status=\"{status}\"}} {n}",
                esc(ep)
            );
        }
    }
    let _ = writeln!(
        o,
        "# HELP redlite_generations_total Finished generations by finish reason.\n# TYPE redlite_generations_total counter"
    );
    if let Ok(m) = app.metrics.finished.lock() {
        for (reason, n) in m.iter() {
            let _ = writeln!(
                o,
                "redlite_generations_total{{reason=\"{}\"}} {n}",
                esc(reason)
            );
        }
    }
    (
        [("content-type", "text/plain; version=0.0.4; charset=utf-8")],
        o,
    )
}
