#[cfg(test)]
mod hidden {
    use super::*;

    #[test]
    fn evaluates() {
        assert_eq!(eval("10-4-3"), Ok(3));
        assert_eq!(eval("(1+2)*3"), Ok(9));
        assert_eq!(eval("100/10/5"), Ok(2));
        assert_eq!(eval("2+3*4"), Ok(14));
        assert_eq!(eval("-(2+3)*-2"), Ok(10));
        assert_eq!(eval("8-(3-1)"), Ok(6));
        assert_eq!(eval("((7))"), Ok(7));
        assert!(eval("(1+2").is_err());
        assert!(eval("1/0").is_err());
        assert!(eval("2*)").is_err());
    }
}
