//! The template source rewritten before it is compiled, so that minijinja
//! reads it as Jinja2 does: line endings normalised, transformers'
//! `{% generation %}` block, tuple literals as calls building Python tuples,
//! and operators as calls with Python's semantics (the `ops` module).

use super::{ops, TUPLE_FN};

/// Split the body of one tag (what lies between `{{`/`}}` or `{%`/`%}`)
/// into its leading whitespace-control marker (`-` or `+`; empty if none),
/// the expression or statement, and its trailing marker.
pub(crate) fn split_markers(inner: &str) -> (&str, &str, &str) {
    let marker = |c: &&str| *c == "-" || *c == "+";
    let lead = inner.get(..1).filter(marker).unwrap_or_default();
    let body = &inner[lead.len()..];
    let trail = body
        .get(body.len().saturating_sub(1)..)
        .filter(marker)
        .unwrap_or_default();
    (lead, &body[..body.len() - trail.len()], trail)
}

/// The template source as Jinja2 sees it after its lexer's normalisation:
/// every `\r\n` and lone `\r` becomes `\n` (`newline_sequence`), and
/// transformers' `{% generation %}…{% endgeneration %}` block, which renders
/// its body unchanged, becomes a scope block minijinja knows (`with`), keeping
/// the tag's whitespace-control markers. With `tuples`, tuple literals
/// (`(a, b)`, `(a,)`, `()`) become calls of [`TUPLE_FN`], so they are Python
/// tuples (minijinja reads them as lists). With `operators`, `%`, `**`,
/// `/`, `//`, `~` and unary `-`/`+` become calls of functions with Python's
/// semantics (see the `ops` module).
pub(crate) fn prepare_source(source: &str, tuples: bool, operators: bool) -> String {
    let src = source.replace("\r\n", "\n").replace('\r', "\n");
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    let mut copied = 0;
    // Skip a string literal starting at `j` (quote char at b[j]).
    let skip_string = |mut j: usize| -> usize {
        let q = b[j];
        j += 1;
        while j < b.len() && b[j] != q {
            if b[j] == b'\\' {
                j += 1;
            }
            j += 1;
        }
        j + 1
    };
    // Skip to just past `close`, stepping over string literals.
    let skip_tag = |mut j: usize, close: &[u8]| -> usize {
        while j < b.len() {
            if b[j] == b'\'' || b[j] == b'"' {
                j = skip_string(j);
            } else if b[j..].starts_with(close) {
                return j + close.len();
            } else {
                j += 1;
            }
        }
        b.len()
    };
    while i + 1 < b.len() {
        if b[i] != b'{' {
            i += 1;
            continue;
        }
        match b[i + 1] {
            b'#' => i = src[i + 2..].find("#}").map_or(b.len(), |p| i + 2 + p + 2),
            b'{' => {
                let end = skip_tag(i + 2, b"}}");
                let inner = src
                    .get(i + 2..end)
                    .and_then(|t| t.strip_suffix("}}"))
                    .unwrap_or_default();
                if let Some(rewritten) = rewrite_tag(inner, false, tuples, operators) {
                    out.push_str(&src[copied..i]);
                    out.push_str("{{");
                    out.push_str(&rewritten);
                    out.push_str("}}");
                    copied = end;
                }
                i = end;
            }
            b'%' => {
                let end = skip_tag(i + 2, b"%}");
                let inner = src
                    .get(i..end)
                    .and_then(|t| t.strip_prefix("{%"))
                    .and_then(|t| t.strip_suffix("%}"))
                    .unwrap_or_default();
                // Whitespace-control markers (`-`, `+`) after `{%` and before `%}`.
                let (lead, body, trail) = split_markers(inner);
                let name = body.trim();
                if name == "raw" {
                    // Copy everything up to and including the endraw tag.
                    let mut j = end;
                    loop {
                        match src[j.min(src.len())..].find("{%") {
                            None => {
                                j = b.len();
                                break;
                            }
                            Some(p) => {
                                let t_end = skip_tag(j + p + 2, b"%}");
                                let t = src
                                    .get(j + p + 2..t_end)
                                    .and_then(|t| t.strip_suffix("%}"))
                                    .unwrap_or_default()
                                    .trim_matches(|c: char| {
                                        c == '-' || c == '+' || c.is_whitespace()
                                    });
                                j = t_end;
                                if t == "endraw" {
                                    break;
                                }
                            }
                        }
                    }
                    i = j;
                    continue;
                }
                if name == "generation" || name == "endgeneration" {
                    out.push_str(&src[copied..i]);
                    out.push_str("{%");
                    out.push_str(lead);
                    out.push_str(if name == "generation" {
                        " with "
                    } else {
                        " endwith "
                    });
                    out.push_str(trail);
                    out.push_str("%}");
                    copied = end;
                } else if let Some(rewritten) = rewrite_tag(inner, true, tuples, operators) {
                    out.push_str(&src[copied..i]);
                    out.push_str("{%");
                    out.push_str(&rewritten);
                    out.push_str("%}");
                    copied = end;
                }
                i = end;
            }
            _ => i += 1,
        }
    }
    out.push_str(&src[copied.min(src.len())..]);
    out
}

/// The body of one `{{ … }}` or `{% … %}` tag with its tuple literals
/// and/or its operators rewritten; `None` when nothing changes.
fn rewrite_tag(inner: &str, statement: bool, tuples: bool, operators: bool) -> Option<String> {
    let t = if tuples {
        rewrite_tuple_literals(inner, statement)
    } else {
        None
    };
    let o = if operators {
        ops::rewrite_operators(t.as_deref().unwrap_or(inner), statement)
    } else {
        None
    };
    o.or(t)
}

// ---------------------------------------------------------------------------
// Tuple literals

/// A token of a Jinja expression, as far as finding tuple literals needs.
#[derive(Clone, Copy, PartialEq)]
enum Tok<'a> {
    Ident(&'a str),
    Other,
    Punct(&'a str),
}

fn tokens(src: &str) -> Vec<(usize, Tok<'_>)> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c == b'\'' || c == b'"' {
            let start = i;
            i += 1;
            while i < b.len() && b[i] != c {
                if b[i] == b'\\' {
                    i += 1;
                }
                i += 1;
            }
            i = (i + 1).min(b.len());
            out.push((start, Tok::Other));
        } else if c == b'_' || c.is_ascii_alphabetic() || c >= 0x80 {
            let start = i;
            while i < b.len() && (b[i] == b'_' || b[i].is_ascii_alphanumeric() || b[i] >= 0x80) {
                i += 1;
            }
            out.push((start, Tok::Ident(&src[start..i])));
        } else if c.is_ascii_digit() {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'.' || b[i] == b'_') {
                i += 1;
            }
            out.push((start, Tok::Other));
        } else {
            let two = src.get(i..i + 2).unwrap_or_default();
            let len = if matches!(two, "==" | "!=" | "<=" | ">=" | "**" | "//") {
                2
            } else {
                1
            };
            out.push((i, Tok::Punct(&src[i..i + len])));
            i += len;
        }
    }
    out
}

/// Rewrite the tuple literals of one `{{ … }}` or `{% … %}` tag body into
/// calls of the tuple function; `None` when there are none. A `(` opens a
/// tuple when it does not call something (it follows an operator, a keyword
/// or nothing) and holds a top-level comma or nothing. Assignment targets
/// (`for (a, b) in`, `set (a, b) =`) are left alone.
pub fn rewrite_tuple_literals(src: &str, statement: bool) -> Option<String> {
    const KEYWORDS: &[&str] = &[
        "in", "not", "and", "or", "if", "else", "elif", "is", "for", "set", "with", "return",
        "print",
    ];
    let toks = tokens(src);
    // First token that may be part of an expression.
    let mut first = 0;
    if statement {
        let keyword = toks.iter().find_map(|(_, t)| match t {
            Tok::Ident(w) => Some(*w),
            _ => None,
        });
        let target_end = |stop: &dyn Fn(&Tok) -> bool| -> usize {
            let mut depth = 0i32;
            for (k, (_, t)) in toks.iter().enumerate() {
                match t {
                    Tok::Punct("(" | "[" | "{") => depth += 1,
                    Tok::Punct(")" | "]" | "}") => depth -= 1,
                    t if depth == 0 && stop(t) => return k + 1,
                    _ => {}
                }
            }
            toks.len()
        };
        first = match keyword {
            Some("for") => target_end(&|t| *t == Tok::Ident("in")),
            Some("set" | "with") => target_end(&|t| *t == Tok::Punct("=")),
            _ => 0,
        };
    }
    let mut inserts: Vec<usize> = Vec::new();
    for k in first..toks.len() {
        if toks[k].1 != Tok::Punct("(") {
            continue;
        }
        let calls = match k.checked_sub(1).map(|p| toks[p].1) {
            Some(Tok::Ident(w)) => !KEYWORDS.contains(&w),
            Some(Tok::Punct(")" | "]")) | Some(Tok::Other) => true,
            _ => false,
        };
        if calls {
            continue;
        }
        // Find the matching `)` and a comma directly inside.
        let mut depth = 0i32;
        let mut comma = false;
        let mut empty = true;
        let mut closed = false;
        for (_, t) in &toks[k + 1..] {
            match t {
                Tok::Punct("(" | "[" | "{") => depth += 1,
                Tok::Punct(")") if depth == 0 => {
                    closed = true;
                    break;
                }
                Tok::Punct(")" | "]" | "}") => depth -= 1,
                Tok::Punct(",") if depth == 0 => comma = true,
                _ => {}
            }
            empty = false;
        }
        if closed && (comma || empty) {
            inserts.push(toks[k].0);
        }
    }
    if inserts.is_empty() {
        return None;
    }
    let mut out = String::with_capacity(src.len() + inserts.len() * 24);
    let mut last = 0;
    for at in inserts {
        out.push_str(&src[last..at]);
        out.push(' ');
        out.push_str(TUPLE_FN);
        last = at;
    }
    out.push_str(&src[last..]);
    Some(out)
}
