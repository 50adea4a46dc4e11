#[cfg(test)]
mod hidden {
    use super::*;

    #[test]
    fn parses() {
        assert_eq!(parse_duration("1h30m"), Ok(5400));
        assert_eq!(parse_duration("45s"), Ok(45));
        assert_eq!(parse_duration("2h5m10s"), Ok(7510));
        assert_eq!(parse_duration("90m"), Ok(5400));
        assert!(parse_duration("10").is_err());
        assert!(parse_duration("5x").is_err());
    }
}
