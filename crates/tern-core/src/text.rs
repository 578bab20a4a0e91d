//! Strings people wrote or the network sent, made safe to keep and to show: a reason
//! checked before it is stored, a name cut down before it is logged or recorded.

/// Lowercase hex of `bytes` (digests, ids, keys), as sha256sum and TUF write them.
pub fn hex(bytes: &[u8]) -> String {
    // Every authenticated request hashes its token and compares hex digests: a table
    // instead of `format!` per byte (a tenth of a heartbeat's instructions, profiled).
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    s
}

/// Checks a free-text `field` (a freeze's or a pin's reason): trimmed, one line of at
/// most `max_bytes` without control characters, so it cannot forge log lines or
/// table rows. `required` is the hint shown when it is empty and must not be; `None`
/// accepts an empty one.
pub fn one_line<'a>(
    field: &str,
    s: &'a str,
    max_bytes: usize,
    required: Option<&str>,
) -> Result<&'a str, String> {
    let s = s.trim();
    if let (true, Some(hint)) = (s.is_empty(), required) {
        return Err(format!("{field}: {hint}"));
    }
    if s.len() > max_bytes || s.chars().any(char::is_control) {
        return Err(format!(
            "{field}: one line of at most {max_bytes} bytes, without control characters"
        ));
    }
    Ok(s)
}

/// A string from elsewhere (a host's report, a server's answer), for a log line or a
/// record: control characters dropped, at most `max_chars` kept, `…` when cut.
pub fn excerpt(s: &str, max_chars: usize) -> String {
    let mut kept: String = s
        .chars()
        .filter(|c| !c.is_control())
        .take(max_chars)
        .collect();
    if s.chars()
        .filter(|c| !c.is_control())
        .nth(max_chars)
        .is_some()
    {
        kept.push('…');
    }
    kept
}

/// A longer text from elsewhere (an error a host reports, an agent's output), kept
/// whole where it fits: every control character replaced by a space (a newline must
/// not forge a line), at most `max_bytes`, cut at its end with `…` when longer.
pub fn clean(s: &str, max_bytes: usize) -> String {
    let cleaned = controls_to_spaces(s);
    if cleaned.len() <= max_bytes {
        return cleaned;
    }
    let mut cut = max_bytes.saturating_sub('…'.len_utf8());
    while !cleaned.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}…", &cleaned[..cut])
}

fn controls_to_spaces(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// [`clean`], cut at its front instead (`…` first): for output whose last words say
/// what happened.
pub fn clean_tail(s: &str, max_bytes: usize) -> String {
    let cleaned = controls_to_spaces(s);
    if cleaned.len() <= max_bytes {
        return cleaned;
    }
    let mut cut = cleaned.len() - max_bytes.saturating_sub('…'.len_utf8());
    while !cleaned.is_char_boundary(cut) {
        cut += 1;
    }
    format!("…{}", &cleaned[cut..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_is_lowercase_two_digits_a_byte() {
        assert_eq!(hex(&[0x00, 0x0f, 0xab, 0xff]), "000fabff");
        assert_eq!(hex(&[]), "");
    }

    #[test]
    fn one_line_trims_bounds_and_refuses_control_characters() {
        assert_eq!(
            one_line("reason", "  disk full ", 16, None),
            Ok("disk full")
        );
        assert_eq!(one_line("reason", "", 16, None), Ok(""));
        assert_eq!(
            one_line("reason", "  ", 16, Some("say why")),
            Err("reason: say why".to_string())
        );
        let long = one_line("reason", &"x".repeat(17), 16, None).unwrap_err();
        assert!(
            long.starts_with("reason: one line of at most 16 bytes"),
            "{long}"
        );
        assert!(one_line("reason", "a\nforged line", 64, None).is_err());
        assert!(one_line("reason", "a\u{1b}[31m", 64, None).is_err());
        // Bytes, not characters, are bounded: 6 three-byte characters are 18 bytes.
        assert!(one_line("reason", "€€€€€€", 16, None).is_err());
    }

    #[test]
    fn clean_replaces_control_characters_and_keeps_within_the_bound() {
        assert_eq!(clean("a\nb\u{1b}[31m", 64), "a b [31m");
        assert_eq!(clean("abcdef", 6), "abcdef");
        let cut = clean("abcdefgh", 6);
        assert_eq!(cut, "abc…");
        assert!(cut.len() <= 6);
        // A cut never splits a character.
        let euros = clean(&"€".repeat(10), 8);
        assert_eq!(euros, "€…");
        assert_eq!(clean_tail("abcdefgh", 6), "…fgh");
        assert!(clean_tail(&"€".repeat(10), 8).len() <= 8);
        assert_eq!(clean_tail("panic\n", 64), "panic ");
    }

    #[test]
    fn excerpt_drops_control_characters_and_marks_a_cut() {
        assert_eq!(excerpt("dev", 64), "dev");
        assert_eq!(excerpt("a\nb\u{7}c", 64), "abc");
        assert_eq!(excerpt("abcdef", 3), "abc…");
        assert_eq!(excerpt("abc", 3), "abc");
        // Control characters do not count toward the length, nor trigger the mark.
        assert_eq!(excerpt("ab\n\nc", 3), "abc");
        assert_eq!(excerpt("", 3), "");
    }
}
