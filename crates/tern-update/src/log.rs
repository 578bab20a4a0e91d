//! Logging to stderr as text or JSON lines (journald keeps either).
//!
//! tern-update keeps its own few lines of logging rather than `tracing`: it logs whole
//! sentences from one thread, and has no spans. Its JSON lines have the shape of
//! tracing-subscriber's JSON, which ternd and tern-lockstep write, so that one log
//! pipeline reads all three (docs/cli.md).

use std::io::Write;
use std::sync::OnceLock;

use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Format {
    /// `tern-update: LEVEL: MESSAGE`.
    #[default]
    Text,
    /// `{"timestamp":…,"level":"INFO","fields":{"message":…},"target":"tern_update"}`.
    Json,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Level {
    Info,
    Warn,
    Error,
}

impl Level {
    /// As the text lines have always said it.
    fn text(self) -> &'static str {
        match self {
            Level::Info => "info",
            Level::Warn => "warn",
            Level::Error => "error",
        }
    }

    /// As tracing names it.
    fn json(self) -> &'static str {
        match self {
            Level::Info => "INFO",
            Level::Warn => "WARN",
            Level::Error => "ERROR",
        }
    }
}

/// One JSON line; the fields in tracing-subscriber's order, so lines read alike.
#[derive(Serialize)]
struct JsonLine<'a> {
    timestamp: String,
    level: &'static str,
    fields: Fields<'a>,
    target: &'static str,
}

#[derive(Serialize)]
struct Fields<'a> {
    message: &'a str,
}

static FORMAT: OnceLock<Format> = OnceLock::new();

/// Sets the format once; later calls are ignored.
pub fn init(format: Format) {
    let _ = FORMAT.set(format);
}

/// The line logged for `msg` at `level`, without its newline.
fn line(format: Format, level: Level, msg: &str, now: jiff::Timestamp) -> String {
    match format {
        Format::Text => format!("tern-update: {}: {msg}", level.text()),
        Format::Json => {
            let line = JsonLine {
                timestamp: now.to_string(),
                level: level.json(),
                fields: Fields { message: msg },
                target: "tern_update",
            };
            // Strings into a string: serialising this struct cannot fail; should it
            // ever, the message still reaches the log as text.
            serde_json::to_string(&line)
                .unwrap_or_else(|_| format!("tern-update: {}: {msg}", level.text()))
        }
    }
}

fn emit(level: Level, msg: &str) {
    let format = FORMAT.get().copied().unwrap_or_default();
    let line = line(format, level, msg, jiff::Timestamp::now());
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

pub fn info(msg: impl AsRef<str>) {
    emit(Level::Info, msg.as_ref());
}

pub fn warn(msg: impl AsRef<str>) {
    emit(Level::Warn, msg.as_ref());
}

pub fn error(msg: impl AsRef<str>) {
    emit(Level::Error, msg.as_ref());
}

/// At most 80 printable characters of a string from the network, for log lines.
pub(crate) fn printable(s: &str) -> String {
    s.chars().filter(|c| !c.is_control()).take(80).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: &str = "2026-11-23T09:00:00.5Z";

    #[test]
    fn text_lines_are_as_they_were() {
        let now = NOW.parse().unwrap();
        assert_eq!(
            line(Format::Text, Level::Warn, "pinned: \"x\"", now),
            "tern-update: warn: pinned: \"x\""
        );
        assert_eq!(
            line(Format::Text, Level::Error, "a\nb", now),
            "tern-update: error: a\nb"
        );
    }

    #[test]
    fn json_lines_have_tracings_shape_on_one_line() {
        let now = NOW.parse().unwrap();
        let text = line(
            Format::Json,
            Level::Info,
            "now running 1.2\n\"quoted\"",
            now,
        );
        assert!(!text.contains('\n'), "{text}");
        assert_eq!(
            text,
            r#"{"timestamp":"2026-11-23T09:00:00.5Z","level":"INFO","fields":{"message":"now running 1.2\n\"quoted\""},"target":"tern_update"}"#
        );
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["fields"]["message"], "now running 1.2\n\"quoted\"");
        assert_eq!(
            line(Format::Json, Level::Warn, "w", now)
                .parse::<serde_json::Value>()
                .unwrap()["level"],
            "WARN"
        );
    }
}
