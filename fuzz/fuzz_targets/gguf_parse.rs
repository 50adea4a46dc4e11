//! Any byte string must parse to a GGUF or to an error, never a panic, a hang
//! or an allocation sized by an untrusted count.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = redlite_gguf::parse_bytes(data, "fuzz.gguf");
});
