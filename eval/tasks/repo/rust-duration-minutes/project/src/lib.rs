//! Parses durations such as `1h30m`, `45s` or `2h5m10s` into seconds.

pub fn parse_duration(s: &str) -> Result<u64, String> {
    let mut total = 0u64;
    let mut num = String::new();
    for c in s.chars() {
        if c.is_ascii_digit() {
            num.push(c);
            continue;
        }
        let n: u64 = num.parse().map_err(|_| format!("missing number before '{c}' in {s:?}"))?;
        num.clear();
        total += match c {
            'h' => n * 3600,
            'm' => n * 3600,
            's' => n,
            _ => return Err(format!("unknown unit '{c}' in {s:?}")),
        };
    }
    if !num.is_empty() {
        return Err(format!("number without a unit at the end of {s:?}"));
    }
    Ok(total)
}
