//! Where a version's tarball lives: URL templates with Teleport's variables, and the
//! `.sha256` file beside it. Pure functions.

use crate::error::{Error, Result};

pub(crate) use tern_core::artifact::{DEFAULT_TEMPLATE, Vars};

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

/// Renders a URL template (tern-core's rules), naming the template when it is wrong.
pub(crate) fn render(template: &str, vars: &Vars<'_>) -> Result<String> {
    tern_core::artifact::render(template, vars).map_err(|problem| Error::UrlTemplate {
        template: template.to_string(),
        problem,
    })
}

pub(crate) use tern_core::text::hex;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_template_is_named_in_the_error() {
        let vars = Vars {
            version: "1.2.3",
            os: "linux",
            arch: "amd64",
            edition: "oss",
            base_url: "https://cdn.example/",
        };
        let e = render("https://x/{{.Nope}}", &vars)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("https://x/{{.Nope}}") && e.contains("unknown variable"),
            "{e}"
        );
        assert_eq!(
            render(DEFAULT_TEMPLATE, &vars).unwrap(),
            "https://cdn.example/tern-agent-v1.2.3-linux-amd64-bin.tar.gz"
        );
    }

    #[test]
    fn arch_names() {
        assert_eq!(go_arch("x86_64"), "amd64");
        assert_eq!(go_arch("aarch64"), "arm64");
        assert_eq!(go_arch("riscv64"), "riscv64");
    }
}
