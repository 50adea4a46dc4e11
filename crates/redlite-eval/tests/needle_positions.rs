//! Haystacks built with a real tokenizer (the Qwen2 vocabulary from the
//! fixtures, read by redlite-tokenizer, standing in for the server's
//! `/tokenize`): exact length and needles at their token positions, checked
//! by tokenizing the result again independently.

use redlite_eval::needle::{build_haystack, collect_sources, passphrases, question, Tokens};
use redlite_testkit::{fixture, workspace_root};
use redlite_tokenizer::Tokenizer;

struct Local(Tokenizer);

impl Tokens for Local {
    fn token_lengths(&self, text: &str) -> anyhow::Result<Vec<usize>> {
        let ids = self.0.tokenize(text, false, true);
        let lens: Vec<usize> = ids
            .iter()
            .map(|&id| self.0.token_bytes(id).map_or(0, <[u8]>::len))
            .collect();
        assert_eq!(
            lens.iter().sum::<usize>(),
            text.len(),
            "pieces do not cover the text"
        );
        Ok(lens)
    }
}

fn tokenizer(name: &str) -> Local {
    let path = fixture(name);
    let g = redlite_gguf::GgufFile::open(&path)
        .unwrap_or_else(|e| panic!("opening {}: {e}", path.display()));
    Local(Tokenizer::from_gguf(&g).expect("tokenizer"))
}

/// Line number of byte `b` in `text`.
fn line_of(text: &str, b: usize) -> usize {
    text[..b].matches('\n').count()
}

#[test]
fn needles_sit_at_their_token_positions_and_length_is_exact() {
    let files = collect_sources(&[workspace_root().join("crates")]).expect("sources");
    assert!(files.len() > 20, "only {} source files", files.len());
    for (vocab, target) in [
        ("tokenizer/ggml-vocab-qwen2.gguf", 2048),
        ("tokenizer/ggml-vocab-qwen2.gguf", 6000),
        ("tiny-s-bf16.gguf", 4096),
        ("tiny-s-bf16.gguf", 8181),
        ("tiny-s-bf16.gguf", 8180),
        ("tiny-s-bf16.gguf", 3001),
    ] {
        let tok = tokenizer(vocab);
        let depths = [10.0, 50.0, 90.0];
        let phrases = passphrases(3, 3);
        let q = question(3);
        let h = build_haystack(&tok, &files, target, &depths, &phrases, &q).expect("haystack");
        // An independent count of the whole message.
        let full = format!("{}{q}", h.text);
        let ids = tok.0.tokenize(&full, false, true);
        assert_eq!(ids.len(), target, "{vocab}: message length");
        assert_eq!(h.tokens, target);
        // Byte offset of every token, from the ids again.
        let mut starts = vec![0usize];
        for &id in &ids {
            let n = tok.0.token_bytes(id).expect("piece").len();
            starts.push(starts.last().copied().unwrap_or(0) + n);
        }
        assert_eq!(*starts.last().unwrap(), full.len());
        assert_eq!(h.needles.len(), 3);
        for (n, (&d, p)) in h.needles.iter().zip(depths.iter().zip(&phrases)) {
            assert_eq!(n.passphrase, *p);
            assert_eq!(n.depth, d);
            // The needle's line is in the text, in a comment, at its byte.
            let line = h.text[n.byte..].lines().next().expect("line");
            assert!(line.contains(p.as_str()), "{line}");
            let t = line.trim_start();
            assert!(t.starts_with("//") || t.starts_with('#'), "{line}");
            // Its reported token position holds its first byte.
            assert!(
                starts[n.token] <= n.byte && n.byte < starts[n.token + 1],
                "{vocab}: token {} spans {}..{}, needle at byte {}",
                n.token,
                starts[n.token],
                starts[n.token + 1],
                n.byte
            );
            // The requested position, within one line of it.
            let want = (d / 100.0 * target as f64).round() as usize;
            assert_eq!(n.target_token, want);
            // (A token of several newlines spans lines: take its first and last.)
            let a = line_of(&full, n.byte);
            let (lo, hi) = (
                line_of(&full, starts[want]),
                line_of(&full, starts[want + 1] - 1),
            );
            assert!(
                lo.saturating_sub(1) <= a && a <= hi + 1,
                "{vocab}: needle at {d}% on line {a} (token {}), token {want} on lines {lo}..={hi}",
                n.token
            );
        }
        // The three needles are distinct and in depth order.
        assert!(h.needles[0].token < h.needles[1].token && h.needles[1].token < h.needles[2].token);
    }
}

#[test]
fn too_few_sources_is_an_error_not_a_short_haystack() {
    let tok = tokenizer("tiny-s-bf16.gguf");
    let dir = workspace_root().join("crates/redlite-eval/src");
    let files = collect_sources(&[dir]).expect("sources");
    let e = build_haystack(
        &tok,
        &files,
        2_000_000,
        &[50.0],
        &passphrases(1, 1),
        &question(1),
    )
    .expect_err("a 2M-token haystack from one crate must be refused");
    assert!(e.to_string().contains("fewer than"), "{e}");
}
