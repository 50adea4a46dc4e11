//! Run-length encoding of text (see SPEC.md).

pub fn encode(s: &str) -> String {
    todo!("encode {s}")
}

pub fn decode(s: &str) -> Result<String, String> {
    todo!("decode {s}")
}
