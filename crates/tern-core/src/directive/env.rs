//! What a local script's environment may hold, the one rule both sides apply: the
//! server when it validates an installer (`validate`), the host before it runs the
//! script (`instruct`). Below both, so neither imports the other.

/// The characters a value that reaches a script's environment may hold (RFD 90).
pub(crate) fn is_safe_env_value(v: &str) -> bool {
    v.bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
}

/// The placeholders an installer's `env` may use.
pub(crate) const TARGET_PLACEHOLDERS: [&str; 5] = [
    "{target.version}",
    "{target.arch}",
    "{target.fips}",
    "{target.size}",
    "{target.sha256}",
];

/// Environment variable names a server may not set: they change how the shell or the
/// dynamic loader runs, before the script's first line. The one list: the errors
/// name it through [`reserved_env_names`], and docs/directives.md is held to it.
const RESERVED_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "IFS",
    "ENV",
    "BASH_ENV",
    "SHELLOPTS",
    "BASHOPTS",
    "PS4",
    "CDPATH",
    "GLOBIGNORE",
];

/// Prefixes of names a server may not set: the dynamic loader's (`LD_PRELOAD`…) and
/// tern-update's own.
const RESERVED_ENV_PREFIXES: &[&str] = &["LD_", "TERN_"];

/// The reserved names in words, for the errors that refuse one: `PATH, HOME, …, LD_*
/// and TERN_*`.
pub(crate) fn reserved_env_names() -> String {
    let mut names: Vec<String> = RESERVED_ENV.iter().map(|n| (*n).to_string()).collect();
    names.extend(RESERVED_ENV_PREFIXES.iter().map(|p| format!("{p}*")));
    match names.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// Whether a server may set `name` in a script's environment.
pub(crate) fn is_allowed_env_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
        && !name.as_bytes()[0].is_ascii_digit()
        && !RESERVED_ENV.contains(&name)
        && !RESERVED_ENV_PREFIXES.iter().any(|p| name.starts_with(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What operators read (docs/directives.md, the local-script installer's
    /// environment) names every reserved name and prefix.
    #[test]
    fn the_directives_doc_names_every_reserved_name() {
        let doc = include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../docs/directives.md"
        ));
        let doc = doc.split_whitespace().collect::<Vec<_>>().join(" ");
        let names = RESERVED_ENV
            .iter()
            .map(|n| format!("`{n}`"))
            .chain(RESERVED_ENV_PREFIXES.iter().map(|p| format!("`{p}*`")));
        for name in names {
            assert!(
                doc.contains(&name),
                "docs/directives.md does not name {name}"
            );
        }
    }

    #[test]
    fn the_words_name_every_reserved_name_and_prefix() {
        assert_eq!(
            reserved_env_names(),
            "PATH, HOME, IFS, ENV, BASH_ENV, SHELLOPTS, BASHOPTS, PS4, CDPATH, GLOBIGNORE, LD_* and TERN_*"
        );
        for name in RESERVED_ENV {
            assert!(!is_allowed_env_name(name), "{name}");
        }
        for prefix in RESERVED_ENV_PREFIXES {
            assert!(!is_allowed_env_name(&format!("{prefix}X")), "{prefix}");
        }
        assert!(is_allowed_env_name("RELEASE_CHANNEL"));
    }
}
