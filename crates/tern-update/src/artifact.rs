//! Where a version's tarball lives: URL templates with Teleport's variables, and the
//! `.sha256` file beside it. Pure functions.

pub use crate::error::TemplateProblem;
use crate::error::{Error, Result};

/// Used with `--base-url` (or the server URL when neither is given).
pub(crate) const DEFAULT_TEMPLATE: &str =
    "{{.BaseURL}}/tern-agent-v{{.Version}}-{{.OS}}-{{.Arch}}-bin.tar.gz";

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Vars<'a> {
    pub(crate) version: &'a str,
    pub(crate) os: &'a str,
    pub(crate) arch: &'a str,
    pub(crate) edition: &'a str,
    pub(crate) base_url: &'a str,
}

/// Go's names for architectures, as in Teleport's artifact names.
pub fn go_arch(rust_arch: &str) -> &str {
    match rust_arch {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "arm" => "arm",
        other => other,
    }
}

/// Renders `{{.Version}} {{.OS}} {{.Arch}} {{.Edition}} {{.BaseURL}}`; spaces inside the
/// braces are allowed; anything else between braces is an error.
pub(crate) fn render(template: &str, vars: &Vars<'_>) -> Result<String> {
    let mut out = String::with_capacity(template.len() + 32);
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let invalid = |problem| Error::UrlTemplate {
            template: template.to_string(),
            problem,
        };
        let end = after
            .find("}}")
            .ok_or_else(|| invalid(TemplateProblem::Unclosed))?;
        let value = match after[..end].trim() {
            ".Version" => vars.version,
            ".OS" => vars.os,
            ".Arch" => vars.arch,
            ".Edition" => vars.edition,
            ".BaseURL" => vars.base_url.trim_end_matches('/'),
            other => return Err(invalid(TemplateProblem::UnknownVariable(other.into()))),
        };
        out.push_str(value);
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The checksum URL of an artifact.
pub(crate) fn checksum_url(url: &str) -> String {
    format!("{url}.sha256")
}

/// The first 64 hex characters of a `.sha256` file (`sha256sum` output works).
pub(crate) fn parse_checksum(text: &str) -> Option<String> {
    let word = text.split_whitespace().next()?;
    let hex = word.get(..64)?;
    if hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        Some(hex.to_ascii_lowercase())
    } else {
        None
    }
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars() -> Vars<'static> {
        Vars {
            version: "1.2.3",
            os: "linux",
            arch: "amd64",
            edition: "oss",
            base_url: "https://cdn.example/",
        }
    }

    #[test]
    fn templates() {
        let cases = [
            (
                DEFAULT_TEMPLATE,
                Some("https://cdn.example/tern-agent-v1.2.3-linux-amd64-bin.tar.gz"),
            ),
            (
                "https://x/a-{{ .Edition }}-{{.Version}}-{{  .Arch }}.tgz",
                Some("https://x/a-oss-1.2.3-amd64.tgz"),
            ),
            ("https://x/{{.OS}}", Some("https://x/linux")),
            ("no vars", Some("no vars")),
            ("https://x/{{.Nope}}", None),
            ("https://x/{{.Version", None),
        ];
        for (t, want) in cases {
            assert_eq!(render(t, &vars()).ok().as_deref(), want, "{t}");
        }
    }

    #[test]
    fn checksums() {
        let h = "a".repeat(64);
        let cases = [
            (h.clone(), Some(h.clone())),
            (format!("{h}  agent.tar.gz\n"), Some(h.clone())),
            ("A".repeat(64), Some(h.clone())),
            (format!("{h}ffff"), Some(h.clone())),
            ("abc".to_string(), None),
            ("g".repeat(64), None),
            (String::new(), None),
            ("<html>not found</html>".to_string(), None),
        ];
        for (text, want) in cases {
            assert_eq!(parse_checksum(&text), want, "{text}");
        }
    }

    #[test]
    fn arch_names() {
        assert_eq!(go_arch("x86_64"), "amd64");
        assert_eq!(go_arch("aarch64"), "arm64");
        assert_eq!(go_arch("riscv64"), "riscv64");
    }
}
