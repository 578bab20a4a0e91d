//! A bound on how deeply a YAML or JSON text nests, found in one linear pass before
//! the parser sees it. The YAML parser takes time quadratic in the depth of flow
//! collections (`[[[[…`: 40k levels in 600 KB cost seconds of CPU), so a hostile body
//! must be refused before parsing, not by the parser.
//!
//! The scan is an upper bound, not a YAML parser: block nesting is counted from the
//! indentation (one level per deeper indent) plus the compact `- `/`? ` indicators
//! that open a level on the same line, and flow nesting from the brackets outside
//! quoted scalars, comments and block scalars. A resource is at most about eight levels
//! deep, so an over-count on odd but valid YAML stays far below the limit.

/// Where the text first goes deeper than the limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TooDeep {
    /// 1-based line of the first construct past the limit.
    pub(crate) line: usize,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Quote {
    None,
    Single,
    Double,
}

/// The state carried from one line to the next.
struct Scan {
    limit: usize,
    /// Indents of the open block collections, innermost last.
    indents: Vec<usize>,
    flow: usize,
    quote: Quote,
    /// Inside a `|` or `>` block scalar opened by a line at this indent: more
    /// indented lines are text.
    block_scalar_parent: Option<usize>,
}

/// `Err` when some construct of `text` nests deeper than `limit` levels.
pub(crate) fn check(text: &str, limit: usize) -> Result<(), TooDeep> {
    let mut scan = Scan {
        limit,
        indents: Vec::new(),
        flow: 0,
        quote: Quote::None,
        block_scalar_parent: None,
    };
    for (i, line) in text.lines().enumerate() {
        scan.line(line).map_err(|()| TooDeep { line: i + 1 })?;
    }
    Ok(())
}

impl Scan {
    fn line(&mut self, line: &str) -> Result<(), ()> {
        let bytes = line.as_bytes();
        let indent = bytes.iter().take_while(|&&b| b == b' ').count();
        let rest = &bytes[indent..];
        if let Some(parent) = self.block_scalar_parent {
            if rest.is_empty() || indent > parent {
                return Ok(());
            }
            self.block_scalar_parent = None;
        }
        if self.quote != Quote::None || self.flow > 0 {
            // A quoted scalar or flow collection continued from an earlier line:
            // indentation means nothing here.
            return self.flow_text(rest, 0);
        }
        if rest.is_empty() || rest[0] == b'#' || rest.starts_with(b"---") {
            return Ok(());
        }
        while self.indents.last().is_some_and(|&top| top > indent) {
            self.indents.pop();
        }
        if self.indents.last().is_none_or(|&top| top < indent) {
            self.indents.push(indent);
        }
        // The root collection is not counted, so that a JSON text's depth is its
        // bracket depth.
        let mut depth = self.indents.len().saturating_sub(1);
        let mut pos = 0;
        // `- - - x` and `? - x`: each indicator opens a level on this line.
        while pos < rest.len()
            && matches!(rest[pos], b'-' | b'?')
            && rest.get(pos + 1).is_none_or(|&b| b == b' ')
        {
            depth += 1;
            pos += 1;
            while rest.get(pos) == Some(&b' ') {
                pos += 1;
            }
        }
        if depth > self.limit {
            return Err(());
        }
        self.block_text(&rest[pos..], depth)
    }

    /// The content of a block-context line after its indicators: a key, a value, or a
    /// flow collection starting where a value may start.
    fn block_text(&mut self, text: &[u8], depth: usize) -> Result<(), ()> {
        let mut pos = 0;
        let mut value_start = true;
        while pos < text.len() {
            let b = text[pos];
            match b {
                b'\'' | b'"' if value_start => {
                    self.quote = if b == b'\'' {
                        Quote::Single
                    } else {
                        Quote::Double
                    };
                    pos = self.skip_quoted(text, pos + 1);
                    value_start = false;
                    continue;
                }
                b'[' | b'{' if value_start => return self.flow_text(&text[pos..], depth),
                b'#' if pos == 0 || text[pos - 1] == b' ' => return Ok(()),
                b'|' | b'>' if value_start && is_block_scalar_header(&text[pos + 1..]) => {
                    self.block_scalar_parent = Some(self.indents.last().copied().unwrap_or(0));
                    return Ok(());
                }
                b':' if text.get(pos + 1).is_none_or(|&c| c == b' ') => {
                    value_start = true;
                }
                b' ' => {}
                _ => value_start = false,
            }
            pos += 1;
        }
        Ok(())
    }

    /// Text inside (or opening) flow collections: every bracket outside quotes counts.
    fn flow_text(&mut self, text: &[u8], base: usize) -> Result<(), ()> {
        let mut pos = 0;
        if self.quote != Quote::None {
            pos = self.skip_quoted(text, 0);
        }
        while pos < text.len() {
            match text[pos] {
                b'[' | b'{' => {
                    self.flow += 1;
                    if base + self.flow > self.limit {
                        return Err(());
                    }
                }
                b']' | b'}' => self.flow = self.flow.saturating_sub(1),
                b'"' => {
                    self.quote = Quote::Double;
                    pos = self.skip_quoted(text, pos + 1);
                    continue;
                }
                // In a flow collection a `'` starts a quoted scalar only where a
                // scalar starts; inside a plain scalar (`it's`) it is text.
                b'\'' if pos == 0 || matches!(text[pos - 1], b' ' | b'[' | b'{' | b',' | b':') => {
                    self.quote = Quote::Single;
                    pos = self.skip_quoted(text, pos + 1);
                    continue;
                }
                b'#' if pos == 0 || text[pos - 1] == b' ' => return Ok(()),
                _ => {}
            }
            pos += 1;
        }
        Ok(())
    }

    /// Skips to just past the closing quote, or to the end of the line when the
    /// scalar goes on (the quote state then carries over).
    fn skip_quoted(&mut self, text: &[u8], mut pos: usize) -> usize {
        while pos < text.len() {
            match (self.quote, text[pos]) {
                (Quote::Double, b'\\') => pos += 2,
                (Quote::Double, b'"') => {
                    self.quote = Quote::None;
                    return pos + 1;
                }
                (Quote::Single, b'\'') if text.get(pos + 1) == Some(&b'\'') => pos += 2,
                (Quote::Single, b'\'') => {
                    self.quote = Quote::None;
                    return pos + 1;
                }
                _ => pos += 1,
            }
        }
        text.len()
    }
}

/// `|`, `>-`, `|+2`, `> # note`: the rest of a block scalar's header line.
fn is_block_scalar_header(rest: &[u8]) -> bool {
    let mut i = 0;
    while i < rest.len() && matches!(rest[i], b'-' | b'+' | b'0'..=b'9') {
        i += 1;
    }
    let tail = &rest[i..];
    let tail = &tail[tail.iter().take_while(|&&b| b == b' ').count()..];
    tail.is_empty() || tail[0] == b'#'
}

#[cfg(test)]
mod tests {
    use super::*;

    fn depth_ok(text: &str, limit: usize) -> bool {
        check(text, limit).is_ok()
    }

    #[test]
    fn flow_nesting_is_counted_outside_quotes() {
        assert!(depth_ok("[[[1]]]", 3));
        assert!(!depth_ok("[[[[1]]]]", 3));
        assert!(depth_ok(r#"{"a": "[[[[[[", "b": '{{{{'}"#, 2));
        assert!(depth_ok(r#"{"a": "esc \" [[[[["}"#, 2));
        assert!(depth_ok("{a: it's [1]}", 2));
        assert_eq!(check("a: 1\nb: [[[[\n]]]]", 3), Err(TooDeep { line: 2 }));
    }

    #[test]
    fn block_nesting_follows_indentation_and_compact_indicators() {
        let config = "kind: c\nspec:\n  agents:\n    schedules:\n      regular:\n      - name: dev\n        days: [Mon, Tue]\n";
        assert!(depth_ok(config, 8));
        assert!(!depth_ok(config, 4));
        assert!(depth_ok("- - - x\n", 3));
        assert!(!depth_ok("- - - - x\n", 3));
        let deep: String = (0..100)
            .map(|i| format!("{}k{i}:\n", " ".repeat(i)))
            .collect();
        assert!(!depth_ok(&deep, 64));
    }

    #[test]
    fn brackets_in_plain_scalars_comments_and_block_scalars_are_text() {
        assert!(depth_ok("note: a[b]{c}[[[[\n# [[[[[[\nx: 1 # [[[[\n", 1));
        let literal = "a: |\n  [[[[[[\n  {{{{{{\nb: >-\n  [[[[\n";
        assert!(depth_ok(literal, 1));
        let quoted = "a: \"line one [[[[\n  line two [[[[\"\nb: [1]\n";
        assert!(depth_ok(quoted, 2));
    }

    #[test]
    fn a_hostile_body_is_refused_in_linear_time() {
        let n = 200_000;
        let json = format!("{{\"spec\":{}{}}}", "[".repeat(n), "]".repeat(n));
        assert_eq!(check(&json, 64), Err(TooDeep { line: 1 }));
        let yaml = format!("spec:\n{}x\n", "- ".repeat(n));
        assert_eq!(check(&yaml, 64), Err(TooDeep { line: 2 }));
    }
}
