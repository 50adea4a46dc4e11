//! `redlite tokenize`: a model's tokenizer applied to text, ids and pieces.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{Context, Result};
use redlite_gguf::GgufFile;
use redlite_tokenizer::{TokenType, Tokenizer};

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("input").required(true).args(["text", "file"])))]
pub struct Args {
    /// GGUF file whose tokenizer to use (a vocab-only GGUF works too).
    pub model: PathBuf,
    /// Text to tokenize.
    #[arg(long, short = 't')]
    pub text: Option<String>,
    /// File whose contents (UTF-8) to tokenize.
    #[arg(long, short = 'f')]
    pub file: Option<PathBuf>,
    /// Print only the ids, space-separated, on one line.
    #[arg(long)]
    pub ids: bool,
    /// Parse special tokens written in the text (`<|im_start|>` becomes one
    /// id instead of being split as plain text).
    #[arg(long)]
    pub special: bool,
    /// Add BOS/EOS where the model asks for them (`tokenizer.ggml.add_bos_token`).
    #[arg(long)]
    pub add_special: bool,
}

pub fn run(args: Args) -> Result<()> {
    let text = match (&args.text, &args.file) {
        (Some(t), _) => t.clone(),
        (None, Some(path)) => read_utf8(path)?,
        (None, None) => anyhow::bail!("give the text with --text or --file"),
    };
    // The GGUF and tokenizer errors already name the file and key; their
    // message alone reads better than the message plus its source chain.
    let gguf = GgufFile::open(&args.model).map_err(|e| anyhow::anyhow!("{e}"))?;
    let tok = Tokenizer::from_gguf(&gguf).map_err(|e| anyhow::anyhow!("{e}"))?;
    let ids = tok.tokenize(&text, args.add_special, args.special);
    let out = if args.ids {
        render_ids(&ids)
    } else {
        render_table(&tok, &ids, text.len())
    };
    print!("{out}");
    Ok(())
}

fn read_utf8(path: &PathBuf) -> Result<String> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    String::from_utf8(bytes).map_err(|e| {
        anyhow::anyhow!(
            "{}: not valid UTF-8 (first bad byte at offset {})",
            path.display(),
            e.utf8_error().valid_up_to()
        )
    })
}

fn render_ids(ids: &[u32]) -> String {
    let mut s = ids
        .iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(" ");
    s.push('\n');
    s
}

/// A token's bytes for display: quoted, with escapes for control characters
/// and `\xNN` for bytes that are not whole UTF-8 characters.
fn show_piece(bytes: &[u8]) -> String {
    let mut s = String::from("\"");
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '"' => s.push_str("\\\""),
                '\\' => s.push_str("\\\\"),
                '\n' => s.push_str("\\n"),
                '\r' => s.push_str("\\r"),
                '\t' => s.push_str("\\t"),
                c if c.is_control() => {
                    let _ = write!(s, "\\u{{{:x}}}", c as u32);
                }
                c => s.push(c),
            }
        }
        for b in chunk.invalid() {
            let _ = write!(s, "\\x{b:02x}");
        }
    }
    s.push('"');
    s
}

fn render_table(tok: &Tokenizer, ids: &[u32], n_bytes: usize) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{:>6}  {:>8}  piece", "#", "id");
    for (i, &id) in ids.iter().enumerate() {
        let piece = tok.token_bytes(id).unwrap_or(&[]);
        let tag = match tok.token_type(id) {
            Some(TokenType::Control) => "  [control]",
            Some(TokenType::UserDefined) => "  [user-defined]",
            Some(TokenType::Unknown) => "  [unknown]",
            _ => "",
        };
        let _ = writeln!(s, "{i:>6}  {id:>8}  {}{tag}", show_piece(piece));
    }
    let _ = writeln!(
        s,
        "{} tokens for {} bytes ({:.2} bytes/token)",
        ids.len(),
        n_bytes,
        if ids.is_empty() {
            0.0
        } else {
            n_bytes as f64 / ids.len() as f64
        }
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> Tokenizer {
        let gguf = GgufFile::open(redlite_testkit::fixture("tiny-s-bf16.gguf")).unwrap();
        Tokenizer::from_gguf(&gguf).unwrap()
    }

    #[test]
    fn pieces_are_escaped_readably() {
        assert_eq!(show_piece(b"def"), "\"def\"");
        assert_eq!(show_piece(b" \n\t\"\\"), "\" \\n\\t\\\"\\\\\"");
        assert_eq!(show_piece("é".as_bytes()), "\"é\"");
        assert_eq!(show_piece(&[0xe2, 0x82]), "\"\\xe2\\x82\"");
        assert_eq!(show_piece(&[0x1b]), "\"\\u{1b}\"");
    }

    /// The table and the id line list every token of the fixture's
    /// reference encoding, in order, with nothing cut.
    #[test]
    fn outputs_list_every_token() {
        let tok = tiny();
        let raw =
            std::fs::read_to_string(redlite_testkit::fixture("tokenizer/tiny-encodings.json"))
                .unwrap();
        let cases: Vec<serde_json::Value> = serde_json::from_str(&raw).unwrap();
        for c in &cases {
            let text = c["text"].as_str().unwrap();
            let want: Vec<u32> = c["ids_parse_special"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap() as u32)
                .collect();
            let ids = tok.tokenize(text, false, true);
            let line = render_ids(&ids);
            let parsed: Vec<u32> = line
                .split_whitespace()
                .map(|t| t.parse().unwrap())
                .collect();
            assert_eq!(parsed, want, "{text:?}");
            let table = render_table(&tok, &ids, text.len());
            let rows: Vec<&str> = table.lines().collect();
            assert_eq!(rows.len(), want.len() + 2);
            for (row, &id) in rows[1..=want.len()].iter().zip(&want) {
                let cols: Vec<&str> = row.split_whitespace().collect();
                assert_eq!(cols[1], id.to_string(), "{row}");
            }
            assert!(rows[want.len() + 1].starts_with(&format!("{} tokens", want.len())));
        }
    }

    #[test]
    fn bad_input_files_are_clear_errors() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("bad.txt");
        std::fs::write(&p, b"ok\xffno").unwrap();
        let e = read_utf8(&p).unwrap_err().to_string();
        assert!(e.contains("bad.txt") && e.contains("offset 2"), "{e}");
        let e = read_utf8(&dir.path().join("missing.txt"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing.txt"), "{e}");
    }
}
