//! Where a version's tarball lives: URL templates with Teleport's variables
//! (`{{.Version}} {{.OS}} {{.Arch}} {{.Edition}} {{.BaseURL}}`), and the `.sha256`
//! file beside it. tern-update renders them to download; ternd to check, at
//! `new-rollout`, that what the hosts will ask for is there.

/// The template a host uses with `--base-url` (or the server URL when neither is given).
pub const DEFAULT_TEMPLATE: &str =
    "{{.BaseURL}}/tern-agent-v{{.Version}}-{{.OS}}-{{.Arch}}-bin.tar.gz";

/// The values of a template's variables.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Vars<'a> {
    pub version: &'a str,
    pub os: &'a str,
    pub arch: &'a str,
    pub edition: &'a str,
    pub base_url: &'a str,
}

/// What is wrong with a URL template.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TemplateProblem {
    #[error("unclosed {{{{")]
    Unclosed,
    #[error("unknown variable {0:?} (use .Version .OS .Arch .Edition .BaseURL)")]
    UnknownVariable(String),
}

/// Renders the template; spaces inside the braces are allowed, anything else between
/// braces is an error.
pub fn render(template: &str, vars: &Vars<'_>) -> Result<String, TemplateProblem> {
    let mut out = String::with_capacity(template.len() + 32);
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find("}}").ok_or(TemplateProblem::Unclosed)?;
        let value = match after[..end].trim() {
            ".Version" => vars.version,
            ".OS" => vars.os,
            ".Arch" => vars.arch,
            ".Edition" => vars.edition,
            ".BaseURL" => vars.base_url.trim_end_matches('/'),
            other => return Err(TemplateProblem::UnknownVariable(other.into())),
        };
        out.push_str(value);
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The checksum URL of an artifact.
pub fn checksum_url(url: &str) -> String {
    format!("{url}.sha256")
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
        assert_eq!(
            checksum_url("https://x/a.tgz"),
            "https://x/a.tgz.sha256".to_string()
        );
    }
}
