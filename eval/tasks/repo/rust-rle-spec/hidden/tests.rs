#[cfg(test)]
mod hidden {
    use super::*;

    #[test]
    fn encodes() {
        assert_eq!(encode("aaabcc"), "3ab2c");
        assert_eq!(encode(""), "");
        assert_eq!(encode("xyz"), "xyz");
        assert_eq!(encode("ééé"), "3é");
        assert_eq!(encode(&"q".repeat(12)), "12q");
    }

    #[test]
    fn decodes() {
        assert_eq!(decode("3ab2c"), Ok("aaabcc".to_string()));
        assert_eq!(decode("12x"), Ok("x".repeat(12)));
        assert!(decode("3").is_err());
        assert!(decode("0a").is_err());
        for s in ["", "abc", "aaaaaaaaaaaaaab", "zzé"] {
            assert_eq!(decode(&encode(s)), Ok(s.to_string()));
        }
    }
}
