//! A calculator for integer expressions: `+ - * /`, parentheses, unary minus.
//! Usual precedence; operators of one level group from the left.

pub fn eval(s: &str) -> Result<i64, String> {
    let toks: Vec<char> = s.chars().filter(|c| !c.is_whitespace()).collect();
    let mut p = Parser { toks, pos: 0 };
    let v = p.expr()?;
    if p.pos != p.toks.len() {
        return Err(format!("unexpected '{}' at {}", p.toks[p.pos], p.pos));
    }
    Ok(v)
}

struct Parser {
    toks: Vec<char>,
    pos: usize,
}

impl Parser {
    fn peek(&self) -> Option<char> {
        self.toks.get(self.pos).copied()
    }

    fn expr(&mut self) -> Result<i64, String> {
        let v = self.term()?;
        match self.peek() {
            Some('+') => {
                self.pos += 1;
                Ok(v + self.expr()?)
            }
            Some('-') => {
                self.pos += 1;
                Ok(v - self.expr()?)
            }
            _ => Ok(v),
        }
    }

    fn term(&mut self) -> Result<i64, String> {
        let mut v = self.factor()?;
        while let Some(op @ ('*' | '/')) = self.peek() {
            self.pos += 1;
            let r = self.factor()?;
            v = if op == '*' {
                v * r
            } else if r == 0 {
                return Err("division by zero".into());
            } else {
                v / r
            };
        }
        Ok(v)
    }

    fn factor(&mut self) -> Result<i64, String> {
        match self.peek() {
            Some('-') => {
                self.pos += 1;
                Ok(-self.factor()?)
            }
            Some('(') => {
                self.pos += 1;
                let v = self.expr()?;
                if self.peek() == Some(')') {
                    return Err("missing ')'".into());
                }
                self.pos += 1;
                Ok(v)
            }
            Some(c) if c.is_ascii_digit() => {
                let mut v = 0i64;
                while let Some(d) = self.peek().and_then(|c| c.to_digit(10)) {
                    v = v * 10 + d as i64;
                    self.pos += 1;
                }
                Ok(v)
            }
            Some(c) => Err(format!("unexpected '{c}' at {}", self.pos)),
            None => Err("unexpected end".into()),
        }
    }
}
