//! The tokens a module graph needs: identifiers, string literals (whose contents some
//! attributes hold paths in), `::` and single punctuation. Comments, whitespace,
//! numbers, lifetimes and character literals are dropped.

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Tok {
    Ident(String),
    Str(String),
    /// `::`
    Path,
    Punct(char),
}

/// Splits `text` into tokens with their line numbers, dropping comments, whitespace,
/// numbers, lifetimes and character literals.
pub(super) fn tokenize(text: &str) -> Vec<(Tok, usize)> {
    let c: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let mut line = 1;
    let is_ident_start = |ch: char| ch == '_' || ch.is_alphabetic();
    let is_ident = |ch: char| ch == '_' || ch.is_alphanumeric();
    while i < c.len() {
        let ch = c[i];
        let next = c.get(i + 1).copied();
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if ch == '/' && next == Some('/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && next == Some('*') {
            // Block comments nest in Rust.
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if c[i] == '\n' {
                        line += 1;
                    }
                    i += 1;
                }
            }
        } else if let Some((len, hashes)) = raw_string_start(&c, i) {
            // r"…", r#"…"#, br"…", cr"…": no escapes, ends at a quote and the hashes.
            let start_line = line;
            let mut j = i + len;
            let body_start = j;
            loop {
                if j >= c.len() {
                    break;
                }
                if c[j] == '"' && (0..hashes).all(|k| c.get(j + 1 + k) == Some(&'#')) {
                    break;
                }
                if c[j] == '\n' {
                    line += 1;
                }
                j += 1;
            }
            let body: String = c[body_start..j.min(c.len())].iter().collect();
            out.push((Tok::Str(body), start_line));
            i = j + 1 + hashes;
        } else if ch == '"' || ((ch == 'b' || ch == 'c') && next == Some('"')) {
            let start_line = line;
            let mut j = if ch == '"' { i + 1 } else { i + 2 };
            let body_start = j;
            while j < c.len() && c[j] != '"' {
                if c[j] == '\\' {
                    if c.get(j + 1) == Some(&'\n') {
                        line += 1;
                    }
                    j += 1;
                } else if c[j] == '\n' {
                    line += 1;
                }
                j += 1;
            }
            let body: String = c[body_start..j.min(c.len())].iter().collect();
            out.push((Tok::Str(body), start_line));
            i = j + 1;
        } else if ch == 'b' && next == Some('\'') {
            i = skip_char_literal(&c, i + 1);
        } else if ch == '\'' {
            // A character literal ('a', '\n', '\u{1F600}') or a lifetime ('a, 'static).
            if next == Some('\\') || c.get(i + 2) == Some(&'\'') {
                i = skip_char_literal(&c, i);
            } else {
                i += 1;
                while i < c.len() && is_ident(c[i]) {
                    i += 1;
                }
            }
        } else if ch == 'r' && next == Some('#') && c.get(i + 2).is_some_and(|&x| is_ident_start(x))
        {
            // A raw identifier (r#type).
            let mut j = i + 2;
            while j < c.len() && is_ident(c[j]) {
                j += 1;
            }
            out.push((Tok::Ident(c[i + 2..j].iter().collect()), line));
            i = j;
        } else if is_ident_start(ch) {
            let mut j = i;
            while j < c.len() && is_ident(c[j]) {
                j += 1;
            }
            out.push((Tok::Ident(c[i..j].iter().collect()), line));
            i = j;
        } else if ch.is_ascii_digit() {
            while i < c.len()
                && (is_ident(c[i])
                    || c[i] == '.' && c.get(i + 1).is_some_and(|d| d.is_ascii_digit()))
            {
                i += 1;
            }
        } else if ch == ':' && next == Some(':') {
            out.push((Tok::Path, line));
            i += 2;
        } else {
            out.push((Tok::Punct(ch), line));
            i += 1;
        }
    }
    out
}

/// If a raw string starts at `i`: the length of its opening (prefix, hashes, quote) and
/// the number of hashes.
fn raw_string_start(c: &[char], i: usize) -> Option<(usize, usize)> {
    let mut j = i;
    if matches!(c.get(j), Some('b') | Some('c')) {
        j += 1;
    }
    if c.get(j) != Some(&'r') {
        return None;
    }
    // An identifier that merely ends in r (`bar"` cannot happen; `for"` cannot either).
    if i > 0 && (c[i - 1] == '_' || c[i - 1].is_alphanumeric()) {
        return None;
    }
    j += 1;
    let mut hashes = 0;
    while c.get(j) == Some(&'#') {
        hashes += 1;
        j += 1;
    }
    (c.get(j) == Some(&'"')).then_some((j + 1 - i, hashes))
}

/// Skips a character literal starting at the quote at `i`; returns the index after it.
fn skip_char_literal(c: &[char], i: usize) -> usize {
    let mut j = i + 1;
    if c.get(j) == Some(&'\\') {
        j += 2;
    } else {
        j += 1;
    }
    while j < c.len() && c[j] != '\'' && c[j] != '\n' {
        j += 1;
    }
    j + 1
}

/// The index of the bracket that closes the one at `open` (the last token if none does).
pub(super) fn matching(toks: &[(Tok, usize)], open: usize, o: char, c: char) -> usize {
    let mut depth = 0;
    for (k, (t, _)) in toks.iter().enumerate().skip(open) {
        if *t == Tok::Punct(o) {
            depth += 1;
        } else if *t == Tok::Punct(c) {
            depth -= 1;
            if depth == 0 {
                return k;
            }
        }
    }
    toks.len().saturating_sub(1)
}
