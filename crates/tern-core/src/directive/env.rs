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
/// dynamic loader runs, before the script's first line.
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

/// Whether a server may set `name` in a script's environment.
pub(crate) fn is_allowed_env_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
        && !name.as_bytes()[0].is_ascii_digit()
        && !RESERVED_ENV.contains(&name)
        && !name.starts_with("LD_")
        && !name.starts_with("TERN_")
}
