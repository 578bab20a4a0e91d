//! Logging to stderr as text or JSON lines (journald keeps either).

use std::io::Write;
use std::sync::OnceLock;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Format {
    #[default]
    Text,
    Json,
}

static FORMAT: OnceLock<Format> = OnceLock::new();

/// Sets the format once; later calls are ignored.
pub fn init(format: Format) {
    let _ = FORMAT.set(format);
}

fn emit(level: &str, msg: &str) {
    let format = FORMAT.get().copied().unwrap_or_default();
    let line = match format {
        Format::Text => format!("tern-update: {level}: {msg}"),
        Format::Json => serde_json::json!({
            "time": jiff::Timestamp::now().to_string(),
            "level": level,
            "msg": msg,
        })
        .to_string(),
    };
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

pub fn info(msg: impl AsRef<str>) {
    emit("info", msg.as_ref());
}

pub fn warn(msg: impl AsRef<str>) {
    emit("warn", msg.as_ref());
}

pub fn error(msg: impl AsRef<str>) {
    emit("error", msg.as_ref());
}
