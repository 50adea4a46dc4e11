//! From generated token ids to what a client sees: whole UTF-8 characters,
//! stop strings cut (and text that might start one held back until decided),
//! then — for chat — the tool-call parser.

use redlite_chat::toolcall::{Delta, ParserOptions, ToolCallParser};
use redlite_tokenizer::detok::Utf8Stream;
use redlite_tokenizer::Tokenizer;
use serde_json::Value;

/// Cuts the text at the first stop string; holds back a tail that could be
/// the start of one.
#[derive(Debug, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    held: String,
    /// The stop string that matched.
    pub matched: Option<String>,
}

impl StopMatcher {
    pub fn new(stops: Vec<String>) -> StopMatcher {
        StopMatcher {
            stops,
            held: String::new(),
            matched: None,
        }
    }

    /// Add text; returns what can be released now. After a match, returns
    /// the text before it and nothing more.
    pub fn push(&mut self, text: &str) -> String {
        if self.matched.is_some() {
            return String::new();
        }
        self.held.push_str(text);
        // Earliest match of any stop string.
        let hit = self
            .stops
            .iter()
            .filter_map(|s| self.held.find(s.as_str()).map(|i| (i, s)))
            .min_by_key(|(i, _)| *i);
        if let Some((i, s)) = hit {
            self.matched = Some(s.clone());
            let out = self.held[..i].to_string();
            self.held.clear();
            return out;
        }
        // Release all but the longest suffix that is a prefix of a stop string.
        let keep_from = self
            .held
            .char_indices()
            .map(|(i, _)| i)
            .find(|&i| {
                let tail = &self.held[i..];
                self.stops.iter().any(|s| s.starts_with(tail))
            })
            .unwrap_or(self.held.len());
        let rest = self.held.split_off(keep_from);
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
