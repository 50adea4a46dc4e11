//! llama.cpp's GBNF grammars, translated into llguidance's Lark syntax.
//!
//! GBNF: `name ::= alternatives` rules (a rule ends at a newline that is
//! not inside parentheses or after `|`), `"literals"` with `\n \r \t \\ \"
//! \xHH \uHHHH \UHHHHHHHH` escapes, `[character classes]` (`^` negates,
//! `a-z` ranges), `.` (any character), rule references, `( … )` groups,
//! `* + ?` and `{m}`, `{m,}`, `{m,n}` repetitions, `#` comments. `root` is
//! the start. Rule names become `g_<name>` (lower case, `-` kept; names
//! that differ only in case are told apart by a number), literals JSON
//! strings, classes regular expressions with every character written as
//! `\x{…}`.

use std::collections::HashMap;

struct P<'a> {
    s: &'a [char],
    i: usize,
    names: HashMap<String, String>,
    used: HashMap<String, usize>,
}

fn err(p: &P, m: &str) -> String {
    let line = p.s[..p.i.min(p.s.len())]
        .iter()
        .filter(|&&c| c == '\n')
        .count()
        + 1;
    format!("GBNF grammar, line {line}: {m}")
}

impl<'a> P<'a> {
    fn peek(&self) -> Option<char> {
        self.s.get(self.i).copied()
    }

    /// Skip blanks and comments; newlines too when `nl`.
    fn space(&mut self, nl: bool) {
        while let Some(c) = self.peek() {
            if c == '#' {
                while let Some(c) = self.peek() {
                    if c == '\n' {
                        break;
                    }
                    self.i += 1;
                }
            } else if c == ' ' || c == '\t' || (nl && (c == '\n' || c == '\r')) {
                self.i += 1;
            } else {
                break;
            }
        }
    }

    fn name(&mut self) -> Option<String> {
        let st = self.i;
        while let Some(c) = self.peek() {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                self.i += 1;
            } else {
                break;
            }
        }
        (self.i > st).then(|| self.s[st..self.i].iter().collect())
    }

    fn rule_name(&mut self, n: &str) -> String {
        if let Some(m) = self.names.get(n) {
            return m.clone();
        }
        let base: String = format!("g_{}", n.to_ascii_lowercase().replace('_', "-"));
        let k = self.used.entry(base.clone()).or_insert(0);
        *k += 1;
        let m = if *k == 1 { base } else { format!("{base}-{k}") };
        self.names.insert(n.to_string(), m.clone());
        m
    }

    fn hex(&mut self, n: usize) -> Result<char, String> {
        let st = self.i;
        let end = st + n;
        if end > self.s.len() {
            return Err(err(self, "incomplete escape"));
        }
        let h: String = self.s[st..end].iter().collect();
        self.i = end;
        u32::from_str_radix(&h, 16)
            .ok()
            .and_then(char::from_u32)
            .ok_or_else(|| err(self, &format!("bad escape \\{h}")))
    }

    /// One character of a literal or class (after an opening quote or `[`).
    fn char_(&mut self) -> Result<char, String> {
        let c = self.peek().ok_or_else(|| err(self, "unexpected end"))?;
        self.i += 1;
        if c != '\\' {
            return Ok(c);
        }
        let e = self
            .peek()
            .ok_or_else(|| err(self, "unexpected end after '\\'"))?;
        self.i += 1;
        Ok(match e {
            'n' => '\n',
            'r' => '\r',
            't' => '\t',
            '0' => '\0',
            'x' => self.hex(2)?,
            'u' => self.hex(4)?,
            'U' => self.hex(8)?,
            '\\' | '"' | '[' | ']' | '-' | '^' | '/' => e,
            other => return Err(err(self, &format!("unknown escape '\\{other}'"))),
        })
    }

    fn alternatives(&mut self, nested: bool) -> Result<String, String> {
        let mut alts = vec![self.sequence(nested)?];
        while self.peek() == Some('|') {
            self.i += 1;
            self.space(true);
            alts.push(self.sequence(nested)?);
        }
        Ok(alts.join(" | "))
    }

    fn sequence(&mut self, nested: bool) -> Result<String, String> {
        let mut items: Vec<String> = Vec::new();
        loop {
            self.space(nested);
            let Some(c) = self.peek() else { break };
            let item = match c {
                '"' => {
                    self.i += 1;
                    let mut s = String::new();
                    while self.peek() != Some('"') {
                        if self.peek().is_none() {
                            return Err(err(self, "unterminated string"));
                        }
                        s.push(self.char_()?);
                    }
                    self.i += 1;
                    if s.is_empty() {
                        "\"\"".to_string()
                    } else {
                        serde_json::Value::String(s).to_string()
                    }
                }
                '[' => {
                    self.i += 1;
                    let mut rx = String::from("[");
                    if self.peek() == Some('^') {
                        self.i += 1;
                        rx.push('^');
                    }
                    let mut n = 0;
                    while self.peek() != Some(']') {
                        if self.peek().is_none() {
                            return Err(err(self, "unterminated character class"));
                        }
                        let a = self.char_()?;
                        rx.push_str(&format!("\\x{{{:x}}}", a as u32));
                        if self.peek() == Some('-') && self.s.get(self.i + 1) != Some(&']') {
                            self.i += 1;
                            let b = self.char_()?;
                            if b < a {
                                return Err(err(self, "character range out of order"));
                            }
                            rx.push_str(&format!("-\\x{{{:x}}}", b as u32));
                        }
                        n += 1;
                    }
                    self.i += 1;
                    if n == 0 {
                        return Err(err(self, "empty character class"));
                    }
                    rx.push(']');
                    format!("/{rx}/")
                }
                '.' => {
                    self.i += 1;
                    "/(?s:.)/".to_string()
                }
                '(' => {
                    self.i += 1;
                    self.space(true);
                    let inner = self.alternatives(true)?;
                    self.space(true);
                    if self.peek() != Some(')') {
                        return Err(err(self, "expected ')'"));
                    }
                    self.i += 1;
                    format!("({inner})")
                }
                c if c.is_ascii_alphanumeric() || c == '-' || c == '_' => {
                    let st = self.i;
                    let n = self.name().unwrap_or_default();
                    // A name followed by `::=` starts the next rule.
                    let save = self.i;
                    self.space(false);
                    if self.s[self.i..].starts_with(&[':', ':', '=']) {
                        self.i = st;
                        break;
                    }
                    self.i = save;
                    self.rule_name(&n)
                }
                _ => break,
            };
            // Repetitions.
            let mut item = item;
            loop {
                match self.peek() {
                    Some(op @ ('*' | '+' | '?')) => {
                        self.i += 1;
                        item = format!("({item}){op}");
                    }
                    Some('{') => {
                        self.i += 1;
                        let st = self.i;
                        while self.peek().is_some_and(|c| c != '}') {
                            self.i += 1;
                        }
                        if self.peek() != Some('}') {
                            return Err(err(self, "unterminated repetition"));
                        }
                        let body: String = self.s[st..self.i]
                            .iter()
                            .filter(|c| !c.is_whitespace())
                            .collect();
                        self.i += 1;
                        let ok = body.split(',').count() <= 2
                            && body
                                .split(',')
                                .next()
                                .is_some_and(|a| a.parse::<u32>().is_ok())
                            && body
                                .split(',')
                                .skip(1)
                                .all(|b| b.is_empty() || b.parse::<u32>().is_ok());
                        if !ok {
                            return Err(err(self, &format!("bad repetition {{{body}}}")));
                        }
                        item = format!("({item}){{{body}}}");
                    }
                    _ => break,
                }
            }
            items.push(item);
        }
        if items.is_empty() {
            Ok("\"\"".into())
        } else {
            Ok(items.join(" "))
        }
    }
}

/// Translate a GBNF grammar; errors name the line.
pub fn gbnf_to_lark(src: &str) -> Result<String, String> {
    let chars: Vec<char> = src.chars().collect();
    let mut p = P {
        s: &chars,
        i: 0,
        names: HashMap::new(),
        used: HashMap::new(),
    };
    let mut rules: Vec<(String, String)> = Vec::new();
    loop {
        p.space(true);
        if p.peek().is_none() {
            break;
        }
        let name = p.name().ok_or_else(|| err(&p, "expected a rule name"))?;
        p.space(false);
        if !p.s[p.i..].starts_with(&[':', ':', '=']) {
            return Err(err(&p, &format!("expected '::=' after '{name}'")));
        }
        p.i += 3;
        p.space(true);
        let body = p.alternatives(false)?;
        p.space(false);
        match p.peek() {
            None | Some('\n') | Some('\r') => {}
            Some(c) => return Err(err(&p, &format!("unexpected '{c}'"))),
        }
        let ln = p.rule_name(&name);
        if rules.iter().any(|(n, _)| *n == ln) {
            return Err(err(&p, &format!("rule '{name}' is defined twice")));
        }
        rules.push((ln, body));
    }
    let Some(root) = p.names.get("root").cloned() else {
        return Err("GBNF grammar: no 'root' rule".into());
    };
    for (n, orig) in p.names.iter().map(|(o, n)| (n.clone(), o.clone())) {
        if !rules.iter().any(|(r, _)| *r == n) {
            return Err(format!(
                "GBNF grammar: rule '{orig}' is used but not defined"
            ));
        }
    }
    let mut out = format!("start: {root}\n");
    for (n, b) in rules {
        out.push_str(&format!("{n}: {b}\n"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn translates_rules_classes_and_repetitions() {
        let g = gbnf_to_lark(
            "root ::= \"yes\" | \"no\" num # a comment\nnum ::= [0-9]{1,3} (\",\"\n  [^\"\\\\])* \n",
        )
        .expect("gbnf");
        assert_eq!(
            g,
            "start: g_root\ng_root: \"yes\" | \"no\" g_num\ng_num: (/[\\x{30}-\\x{39}]/){1,3} ((\",\" /[^\\x{22}\\x{5c}]/))*\n"
        );
    }

    #[test]
    fn errors_name_the_line() {
        let e = gbnf_to_lark("root ::= a\n\na ::= \"x").expect_err("unterminated");
        assert!(e.contains("line 3"), "{e}");
        let e = gbnf_to_lark("root ::= b\n").expect_err("undefined");
        assert!(e.contains("'b'"), "{e}");
        assert!(gbnf_to_lark("x ::= \"a\"")
            .expect_err("no root")
            .contains("root"));
    }
}
