//! From generated token ids to what a client sees: whole UTF-8 characters,
//! stop strings cut (and text that might start one held back until decided),
//! then — for chat — the tool-call parser.

use redlite_chat::toolcall::{Delta, ParserOptions, ToolCallParser};
use redlite_tokenizer::detok::Utf8Stream;
use redlite_tokenizer::Tokenizer;
use serde_json::Value;

/// Cuts the text at the first stop string; holds back a tail that could be
/// the start of one.
///
/// Matching is incremental (one Knuth–Morris–Pratt automaton per stop
/// string, fed each new byte once), so a token costs the same however much
/// text came before it and however long the stop strings are: the held
/// tail is at most the longest stop string, and is found from the
/// automata's states rather than by searching.
#[derive(Debug, Default)]
pub struct StopMatcher {
    stops: Vec<Kmp>,
    held: String,
    /// The stop string that matched.
    pub matched: Option<String>,
}

/// One stop string's automaton: `state` is the length of the longest
/// prefix of `pat` that the text seen so far ends with.
#[derive(Debug)]
struct Kmp {
    text: String,
    fail: Vec<usize>,
    state: usize,
}

impl Kmp {
    fn new(text: String) -> Kmp {
        let p = text.as_bytes();
        let mut fail = vec![0; p.len()];
        let mut k = 0;
        for i in 1..p.len() {
            while k > 0 && p[i] != p[k] {
                k = fail[k - 1];
            }
            if p[i] == p[k] {
                k += 1;
            }
            fail[i] = k;
        }
        Kmp {
            text,
            fail,
            state: 0,
        }
    }

    /// Feed one byte; true when the whole string has just matched.
    fn step(&mut self, b: u8) -> bool {
        let p = self.text.as_bytes();
        while self.state > 0 && (self.state == p.len() || p[self.state] != b) {
            self.state = self.fail[self.state - 1];
        }
        if p[self.state] == b {
            self.state += 1;
        }
        self.state == p.len()
    }
}

impl StopMatcher {
    /// `stops` must not contain empty strings (they are dropped).
    pub fn new(stops: Vec<String>) -> StopMatcher {
        StopMatcher {
            stops: stops
                .into_iter()
                .filter(|s| !s.is_empty())
                .map(Kmp::new)
                .collect(),
            held: String::new(),
            matched: None,
        }
    }

    /// Add text; returns what can be released now. After a match, returns
    /// the text before it and nothing more. Of several stop strings that
    /// match within the text held, the one starting first wins (on a tie, the
    /// one listed first).
    pub fn push(&mut self, text: &str) -> String {
        if self.matched.is_some() || text.is_empty() {
            return String::new();
        }
        let base = self.held.len();
        self.held.push_str(text);
        // (start, stop index) of the earliest-starting match.
        let mut hit: Option<(usize, usize)> = None;
        for (j, &b) in text.as_bytes().iter().enumerate() {
            for (si, k) in self.stops.iter_mut().enumerate() {
                if k.step(b) {
                    let start = base + j + 1 - k.text.len();
                    if hit.is_none_or(|h| (start, si) < h) {
                        hit = Some((start, si));
                    }
                }
            }
        }
        if let Some((start, si)) = hit {
            self.matched = Some(self.stops[si].text.clone());
            let out = self.held[..start].to_string();
            self.held.clear();
            return out;
        }
        // Release all but the longest tail that is a prefix of a stop
        // string (it starts at a character boundary: a stop string's
        // first byte is never a UTF-8 continuation byte).
        let keep = self.stops.iter().map(|k| k.state).max().unwrap_or(0);
        let rest = self.held.split_off(self.held.len() - keep);
        std::mem::replace(&mut self.held, rest)
    }

    /// End of generation: release what was held.
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }
}

/// Token ids → text pieces (control tokens such as `<|im_end|>` left out).
pub struct Detok {
    utf8: Utf8Stream,
}

impl Detok {
    pub fn new() -> Detok {
        Detok {
            utf8: Utf8Stream::new(),
        }
    }

    pub fn push(&mut self, tok: &Tokenizer, id: u32) -> String {
        match tok.decode_bytes_opts(&[id], false) {
            Ok(b) => self.utf8.push(&b),
            Err(_) => String::new(),
        }
    }

    pub fn finish(&mut self) -> String {
        self.utf8.finish()
    }
}

impl Default for Detok {
    fn default() -> Self {
        Detok::new()
    }
}

/// The plain-text pipeline of `/v1/completions`: detokenize → stop strings.
pub struct TextOutput {
    detok: Detok,
    stop: StopMatcher,
}

impl TextOutput {
    pub fn new(stops: Vec<String>) -> TextOutput {
        TextOutput {
            detok: Detok::new(),
            stop: StopMatcher::new(stops),
        }
    }

    pub fn push(&mut self, tok: &Tokenizer, id: u32) -> String {
        let text = self.detok.push(tok, id);
        if text.is_empty() {
            return text;
        }
        self.stop.push(&text)
    }

    /// The stop string that matched (generation should stop).
    pub fn matched(&self) -> Option<&str> {
        self.stop.matched.as_deref()
    }

    pub fn finish(&mut self) -> String {
        let rest = self.detok.finish();
        let mut out = self.stop.push(&rest);
        out.push_str(&self.stop.finish());
        out
    }
}

/// The chat output pipeline: the text pipeline, then the tool-call parser.
pub struct ChatOutput {
    text: TextOutput,
    parser: ToolCallParser,
    /// Deltas the forced prefix produced, sent with the first token's.
    early: Vec<Delta>,
}

impl ChatOutput {
    /// `forced`: text the prompt already wrote for the reply (a forced tool
    /// call opening for `tool_choice: required` or a named tool); it is fed
    /// to the parser first so the call it opens is parsed as usual.
    pub fn new(
        tools: &[Value],
        opts: ParserOptions,
        stops: Vec<String>,
        forced: &str,
    ) -> ChatOutput {
        let mut parser = ToolCallParser::new(tools, opts);
        let early = if forced.is_empty() {
            Vec::new()
        } else {
            parser.push(forced)
        };
        ChatOutput {
            text: TextOutput::new(stops),
            parser,
            early,
        }
    }

    /// One generated token; returns the deltas it completes.
    pub fn push(&mut self, tok: &Tokenizer, id: u32) -> Vec<Delta> {
        let mut deltas = std::mem::take(&mut self.early);
        let out = self.text.push(tok, id);
        if !out.is_empty() {
            deltas.extend(self.parser.push(&out));
        }
        deltas
    }

    /// The stop string that matched (generation should stop).
    pub fn matched(&self) -> Option<&str> {
        self.text.matched()
    }

    /// End of generation: flush everything; returns the last deltas.
    pub fn finish(&mut self) -> Vec<Delta> {
        let mut deltas = std::mem::take(&mut self.early);
        let rest = self.text.finish();
        if !rest.is_empty() {
            deltas.extend(self.parser.push(&rest));
        }
        deltas.extend(self.parser.finish());
        deltas
    }

    pub fn message(&self) -> &redlite_chat::toolcall::ParsedMessage {
        self.parser.message()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], pieces: &[&str]) -> (String, Option<String>) {
        let mut m = StopMatcher::new(stops.iter().map(|s| s.to_string()).collect());
        let mut out = String::new();
        for p in pieces {
            out.push_str(&m.push(p));
        }
        out.push_str(&m.finish());
        (out, m.matched.clone())
    }

    /// The matcher as first written (search the held text for every stop
    /// string, then scan its tails): quadratic, but obviously right.
    fn naive(stops: &[&str], pieces: &[&str]) -> (String, Option<String>) {
        let mut held = String::new();
        let mut out = String::new();
        for p in pieces {
            held.push_str(p);
            let hit = stops
                .iter()
                .filter_map(|s| held.find(s).map(|i| (i, s)))
                .min_by_key(|(i, _)| *i);
            if let Some((i, s)) = hit {
                out.push_str(&held[..i]);
                return (out, Some(s.to_string()));
            }
            let keep_from = held
                .char_indices()
                .map(|(i, _)| i)
                .find(|&i| stops.iter().any(|s| s.starts_with(&held[i..])))
                .unwrap_or(held.len());
            let rest = held.split_off(keep_from);
            out.push_str(&held);
            held = rest;
        }
        out.push_str(&held);
        (out, None)
    }

    /// Random texts over a small alphabet (so stop strings and their
    /// overlaps occur often), cut into random pieces: the incremental
    /// matcher agrees with the naive one every time.
    #[test]
    fn incremental_matching_agrees_with_naive_search() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let alphabet = ['a', 'b', 'é', '\n'];
        let word = |rng: &mut rand::rngs::StdRng, n: usize| -> String {
            (0..n)
                .map(|_| alphabet[rng.gen_range(0..alphabet.len())])
                .collect()
        };
        for _ in 0..3000 {
            let stops: Vec<String> = (0..rng.gen_range(1..4))
                .map(|_| {
                    let n = rng.gen_range(1..6);
                    word(&mut rng, n)
                })
                .collect();
            let n = rng.gen_range(0..40);
            let text = word(&mut rng, n);
            let chars: Vec<char> = text.chars().collect();
            let mut pieces = Vec::new();
            let mut i = 0;
            while i < chars.len() {
                let n = rng.gen_range(1..5).min(chars.len() - i);
                pieces.push(chars[i..i + n].iter().collect::<String>());
                i += n;
            }
            let stops_ref: Vec<&str> = stops.iter().map(String::as_str).collect();
            let pieces_ref: Vec<&str> = pieces.iter().map(String::as_str).collect();
            assert_eq!(
                run(&stops_ref, &pieces_ref),
                naive(&stops_ref, &pieces_ref),
                "stops {stops:?} pieces {pieces:?}"
            );
        }
    }

    /// The held tail never exceeds the longest stop string, whatever the
    /// length of the output.
    #[test]
    fn held_text_stays_bounded() {
        let mut m = StopMatcher::new(vec!["abcabd".into()]);
        let mut released = 0;
        for _ in 0..10_000 {
            released += m.push("abcab").len();
            assert!(m.held.len() < 6, "{}", m.held.len());
        }
        assert_eq!(released + m.finish().len(), 50_000);
        assert!(m.matched.is_none());
    }

    #[test]
    fn stop_strings_are_cut_and_held_back() {
        // A stop string split over pieces.
        assert_eq!(
            run(&["END"], &["abc E", "N", "D more"]),
            ("abc ".into(), Some("END".into()))
        );
        // A false start is released once decided.
        assert_eq!(run(&["END"], &["abc EN", "x"]), ("abc ENx".into(), None));
        // Held text comes out at the end when no stop matches.
        assert_eq!(run(&["END"], &["abc EN"]), ("abc EN".into(), None));
        // The earliest of several stops wins; multi-byte characters.
        assert_eq!(
            run(&["β\n", "xyz"], &["αβ", "\nxyz"]),
            ("α".into(), Some("β\n".into()))
        );
        // Nothing is released before the held part is decided.
        let mut m = StopMatcher::new(vec!["</s>".into()]);
        assert_eq!(m.push("hi <"), "hi ");
        assert_eq!(m.push("/"), "");
        assert_eq!(m.push("x"), "</x");
        // Every split point of a text gives the same result.
        let text = "one two <stop> three";
        for i in 0..=text.len() {
            if !text.is_char_boundary(i) {
                continue;
            }
            let (a, b) = text.split_at(i);
            assert_eq!(
                run(&["<stop>"], &[a, b]),
                ("one two ".into(), Some("<stop>".into()))
            );
        }
    }
}
