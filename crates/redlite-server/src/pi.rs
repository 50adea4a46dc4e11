//! `redlite setup-pi`: point the pi coding agent at this server by merging a
//! provider into its `models.json` (other providers untouched, a backup
//! first), and making it pi's default model where none is chosen yet.

use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};

/// What to write.
#[derive(Clone, Debug)]
pub struct PiSetup {
    /// pi's agent directory (the caller resolves it: the command line takes
    /// `--dir`, else `$PI_CODING_AGENT_DIR`, else `~/.pi/agent`).
    pub dir: PathBuf,
    pub host: String,
    pub port: u16,
    /// The server's `--context`: pi compacts its history based on it.
    pub context: usize,
    /// The model id the server reports (`--alias`).
    pub model: String,
    /// Make this pi's default model even when another is set.
    pub force_default: bool,
}

/// What was done, for the user.
#[derive(Clone, Debug, Default)]
pub struct PiReport {
    pub models_json: PathBuf,
    pub models_backup: Option<PathBuf>,
    pub settings_json: PathBuf,
    pub settings_backup: Option<PathBuf>,
    pub made_default: bool,
}

/// The provider entry for this server.
pub fn provider(s: &PiSetup) -> Value {
    let host = if s.host == "0.0.0.0" || s.host == "::" {
        "127.0.0.1"
    } else {
        s.host.as_str()
    };
    let host = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_string()
    };
    json!({
        "baseUrl": format!("http://{host}:{}/v1", s.port),
        "api": "openai-completions",
        "apiKey": "REDLITE_API_KEY",
        "compat": {
            "supportsDeveloperRole": false,
            "supportsStore": false,
            "maxTokensField": "max_tokens",
        },
        "models": [{
            "id": s.model,
            "name": "Qwen3-Coder-Next (Red Lite)",
            "reasoning": false,
            "input": ["text"],
            "contextWindow": s.context,
            "maxTokens": (s.context / 4).clamp(256, 32768),
            "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
        }],
    })
}

fn read_object(path: &Path) -> Result<Map<String, Value>, String> {
    match std::fs::read_to_string(path) {
        Ok(s) if s.trim().is_empty() => Ok(Map::new()),
        Ok(s) => match serde_json::from_str::<Value>(&s) {
            Ok(Value::Object(m)) => Ok(m),
            Ok(_) => Err(format!("{}: expected a JSON object", path.display())),
            Err(e) => Err(format!(
                "{}: not valid JSON ({e}); fix or move it, nothing was changed",
                path.display()
            )),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Map::new()),
        Err(e) => Err(format!("reading {}: {e}", path.display())),
    }
}

/// Copy `path` to `path.bak` (or `.bak.N` if that exists).
fn backup(path: &Path) -> Result<Option<PathBuf>, String> {
    if !path.exists() {
        return Ok(None);
    }
    let mut n = 0;
    loop {
        let name = if n == 0 {
            format!("{}.bak", path.display())
        } else {
            format!("{}.bak.{n}", path.display())
        };
        let b = PathBuf::from(name);
        if !b.exists() {
            std::fs::copy(path, &b)
                .map_err(|e| format!("backing up {} to {}: {e}", path.display(), b.display()))?;
            return Ok(Some(b));
        }
        n += 1;
    }
}

fn write_json(path: &Path, v: &Value) -> Result<(), String> {
    let text = serde_json::to_string_pretty(v).map_err(|e| e.to_string())? + "\n";
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, text).map_err(|e| format!("writing {}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| format!("writing {}: {e}", path.display()))
}

/// Merge the provider into `models.json` and, where pi has no default model
/// (or `force_default`), set it in `settings.json`.
pub fn setup(s: &PiSetup) -> Result<PiReport, String> {
    std::fs::create_dir_all(&s.dir).map_err(|e| format!("creating {}: {e}", s.dir.display()))?;
    let models_json = s.dir.join("models.json");
    let settings_json = s.dir.join("settings.json");
    // Read both first, so a malformed file changes nothing.
    let mut models = read_object(&models_json)?;
    let mut settings = read_object(&settings_json)?;

    let providers = models
        .entry("providers")
        .or_insert_with(|| Value::Object(Map::new()));
    let Value::Object(providers) = providers else {
        return Err(format!(
            "{}: 'providers' is not an object; nothing was changed",
            models_json.display()
        ));
    };
    providers.insert("redlite".into(), provider(s));
    let models_backup = backup(&models_json)?;
    write_json(&models_json, &Value::Object(models))?;

    let has_default = settings
        .get("defaultProvider")
        .and_then(Value::as_str)
        .is_some_and(|p| !p.is_empty());
    let make_default = s.force_default || !has_default;
    let mut settings_backup = None;
    if make_default {
        settings.insert("defaultProvider".into(), json!("redlite"));
        settings.insert("defaultModel".into(), json!(s.model));
        settings_backup = backup(&settings_json)?;
        write_json(&settings_json, &Value::Object(settings))?;
    }
    Ok(PiReport {
        models_json,
        models_backup,
        settings_json,
        settings_backup,
        made_default: make_default,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup_in(dir: &Path, force: bool) -> Result<PiReport, String> {
        setup(&PiSetup {
            dir: dir.to_path_buf(),
            host: "127.0.0.1".into(),
            port: 8123,
            context: 65536,
            model: "qwen3-coder-next".into(),
            force_default: force,
        })
    }

    fn read(p: &Path) -> Value {
        serde_json::from_str(&std::fs::read_to_string(p).expect("read")).expect("json")
    }

    #[test]
    fn merges_keeping_other_providers_with_backup() {
        let d = tempfile::tempdir().expect("tmp");
        let models = d.path().join("models.json");
        std::fs::write(
            &models,
            r#"{"providers":{"other":{"baseUrl":"http://x/v1","models":[{"id":"m"}]}},"extra":1}"#,
        )
        .expect("write");
        std::fs::write(
            d.path().join("settings.json"),
            r#"{"defaultProvider":"other","defaultModel":"m","theme":"dark"}"#,
        )
        .expect("write");
        let r = setup_in(d.path(), false).expect("setup");
        let m = read(&models);
        assert_eq!(m["extra"], 1);
        assert_eq!(m["providers"]["other"]["baseUrl"], "http://x/v1");
        let p = &m["providers"]["redlite"];
        assert_eq!(p["baseUrl"], "http://127.0.0.1:8123/v1");
        assert_eq!(p["api"], "openai-completions");
        assert_eq!(p["models"][0]["contextWindow"], 65536);
        assert_eq!(p["models"][0]["id"], "qwen3-coder-next");
        // The backup holds the old file; the user's default is kept.
        let b = r.models_backup.expect("backup");
        assert!(read(&b)["providers"].get("redlite").is_none());
        assert!(!r.made_default);
        assert_eq!(
            read(&d.path().join("settings.json"))["defaultProvider"],
            "other"
        );
        // Forcing the default keeps other settings.
        let r = setup_in(d.path(), true).expect("setup");
        assert!(r.made_default);
        let s = read(&d.path().join("settings.json"));
        assert_eq!(s["defaultProvider"], "redlite");
        assert_eq!(s["theme"], "dark");
        // A second backup does not overwrite the first.
        assert!(r
            .models_backup
            .expect("backup")
            .to_string_lossy()
            .ends_with(".bak.1"));
    }

    #[test]
    fn fresh_dir_and_malformed_files() {
        let d = tempfile::tempdir().expect("tmp");
        let sub = d.path().join("agent");
        let r = setup_in(&sub, false).expect("setup");
        assert!(r.models_backup.is_none());
        assert!(r.made_default);
        assert_eq!(
            read(&sub.join("settings.json"))["defaultModel"],
            "qwen3-coder-next"
        );
        std::fs::write(sub.join("models.json"), "{not json").expect("write");
        let e = setup_in(&sub, false).expect_err("malformed");
        assert!(e.contains("not valid JSON"), "{e}");
        assert_eq!(
            std::fs::read_to_string(sub.join("models.json")).expect("read"),
            "{not json"
        );
    }
}
