//! Detokenization: ids back to text, at once or streaming.
//!
//! A byte-level token can end in the middle of a UTF-8 character (one emoji
//! is often three or four tokens). [`decode`](Tokenizer::decode) converts the
//! joined bytes once; [`StreamDecoder`] holds back an incomplete trailing
//! character until the token that completes it arrives, so every chunk it
//! emits is whole characters, and the chunks concatenate to exactly what
//! `decode` returns for the same ids. Bytes that can never form a character
//! become U+FFFD, one per maximal invalid sequence, as in
//! `String::from_utf8_lossy`.

use crate::tokenizer::Tokenizer;
use crate::vocab::{Result, TokenType};

impl Tokenizer {
    /// The bytes of a token sequence. Special tokens are rendered as their
    /// text.
    pub fn decode_bytes(&self, ids: &[u32]) -> Result<Vec<u8>> {
        self.decode_bytes_opts(ids, true)
    }

    /// The bytes of a token sequence; CONTROL tokens (`<|im_end|>`) are left
    /// out unless `render_control` (USER_DEFINED tokens such as `<tool_call>`
    /// are always rendered).
    pub fn decode_bytes_opts(&self, ids: &[u32], render_control: bool) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(ids.len() * 4);
        for &id in ids {
            out.extend_from_slice(self.piece_for(id, render_control)?);
        }
        Ok(out)
    }

    /// Decode ids to text (special tokens rendered). Invalid UTF-8, which only
    /// arises from sequences a model should not produce, becomes U+FFFD.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.decode_opts(ids, true)
    }

    /// [`decode`](Self::decode), optionally leaving CONTROL tokens out.
    pub fn decode_opts(&self, ids: &[u32], render_control: bool) -> Result<String> {
        let bytes = self.decode_bytes_opts(ids, render_control)?;
        Ok(match String::from_utf8(bytes) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        })
    }

    /// A streaming detokenizer rendering special tokens.
    pub fn stream_decoder(&self) -> StreamDecoder<'_> {
        StreamDecoder::new(self, true)
    }

    fn piece_for(&self, id: u32, render_control: bool) -> Result<&[u8]> {
        self.check_id(id)?;
        if !render_control
            && matches!(
                self.vocab.token_type(id),
                Some(TokenType::Control | TokenType::Unknown)
            )
        {
            return Ok(&[]);
        }
        Ok(self.vocab.piece(id).unwrap_or(&[]))
    }
}

/// Turns a stream of byte chunks into a stream of whole-character text.
#[derive(Default, Debug, Clone)]
pub struct Utf8Stream {
    pending: Vec<u8>,
}

impl Utf8Stream {
    pub fn new() -> Utf8Stream {
        Utf8Stream::default()
    }

    /// Add bytes; return the text that is now complete (possibly empty).
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut out = String::new();
        let mut start = 0usize;
        loop {
            match std::str::from_utf8(&self.pending[start..]) {
                Ok(s) => {
                    out.push_str(s);
                    start = self.pending.len();
                    break;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    // The first `valid` bytes were just checked: this cannot fail.
                    out.push_str(
                        std::str::from_utf8(&self.pending[start..start + valid]).unwrap_or(""),
                    );
                    match e.error_len() {
                        // An incomplete character at the end: wait for more.
                        None => {
                            start += valid;
                            break;
                        }
                        // Bytes that can never be valid.
                        Some(n) => {
                            out.push('\u{FFFD}');
                            start += valid + n;
                        }
                    }
                }
            }
        }
        self.pending.drain(..start);
        out
    }

    /// Bytes held back (the start of an incomplete character).
    pub fn pending(&self) -> &[u8] {
        &self.pending
    }

    /// End of stream: an incomplete character left over becomes U+FFFD.
    pub fn finish(&mut self) -> String {
        let s = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        s
    }
}

/// Streaming detokenizer: feed ids as they are generated, get text chunks
/// that never split a character.
pub struct StreamDecoder<'t> {
    tok: &'t Tokenizer,
    render_control: bool,
    utf8: Utf8Stream,
}

impl<'t> StreamDecoder<'t> {
    /// `render_control`: whether CONTROL tokens are written out as text.
    pub fn new(tok: &'t Tokenizer, render_control: bool) -> StreamDecoder<'t> {
        StreamDecoder {
            tok,
            render_control,
            utf8: Utf8Stream::new(),
        }
    }

    /// Add one token; return the text completed by it (possibly empty).
    pub fn push(&mut self, id: u32) -> Result<String> {
        let piece = self.tok.piece_for(id, self.render_control)?;
        Ok(self.utf8.push(piece))
    }

    /// End of stream: flush what is held back.
    pub fn finish(&mut self) -> String {
        self.utf8.finish()
    }

    /// Whether bytes of an incomplete character are held back.
    pub fn has_pending(&self) -> bool {
        !self.utf8.pending().is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    #[test]
    fn utf8_stream_matches_lossy_conversion() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let alphabet: Vec<u8> = "aé€😀"
            .bytes()
            .chain([0xff, 0xc0, 0x80, 0xe2, 0xf0])
            .collect();
        for _ in 0..2000 {
            let n = rng.gen_range(0..24);
            let bytes: Vec<u8> = (0..n)
                .map(|_| alphabet[rng.gen_range(0..alphabet.len())])
                .collect();
            let mut s = Utf8Stream::new();
            let mut got = String::new();
            let mut i = 0;
            while i < bytes.len() {
                let k = rng.gen_range(1..=3).min(bytes.len() - i);
                got.push_str(&s.push(&bytes[i..i + k]));
                i += k;
            }
            got.push_str(&s.finish());
            assert_eq!(got, String::from_utf8_lossy(&bytes), "{bytes:x?}");
        }
    }
}
