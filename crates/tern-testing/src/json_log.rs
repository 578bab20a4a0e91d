//! Checks of the programs' JSON logs (`--log-format json`, docs/cli.md): one object per
//! line, with `tracing`'s fields.

use serde_json::Value;

/// One log line as JSON, checked for tracing's shape: a string `timestamp`, a string
/// `level` and a string `fields.message`. Panics naming the line otherwise.
pub fn json_line(line: &str) -> Value {
    let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
    assert!(v["timestamp"].is_string(), "no timestamp: {v}");
    assert!(v["level"].is_string(), "no level: {v}");
    assert!(v["fields"]["message"].is_string(), "no message: {v}");
    v
}

/// Every line of `text` as [`json_line`] checks it.
pub fn json_lines(text: &str) -> Vec<Value> {
    text.lines().map(json_line).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: &str = r#"{"timestamp":"2026-01-02T03:04:05.123Z","level":"INFO","fields":{"message":"hi","n":1},"target":"t"}"#;

    #[test]
    fn lines_are_parsed_in_order() {
        let lines = json_lines(&format!("{LINE}\n{}\n", LINE.replace("hi", "there")));
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["fields"]["message"], "hi");
        assert_eq!(lines[1]["fields"]["message"], "there");
        assert_eq!(lines[0]["fields"]["n"], 1);
        assert!(json_lines("").is_empty());
    }

    #[test]
    #[should_panic(expected = "not JSON")]
    fn a_line_that_is_not_json_fails() {
        json_lines(&format!("{LINE}\ntern: info: hi\n"));
    }

    #[test]
    #[should_panic(expected = "no message")]
    fn a_line_without_a_message_fails() {
        json_line(r#"{"timestamp":"t","level":"INFO","fields":{}}"#);
    }

    #[test]
    #[should_panic(expected = "no timestamp")]
    fn a_line_without_a_timestamp_fails() {
        json_line(r#"{"level":"INFO","fields":{"message":"m"}}"#);
    }
}
