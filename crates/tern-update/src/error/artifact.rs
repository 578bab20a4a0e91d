//! What is wrong with a URL template (`artifact`).

/// What is wrong with a URL template.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TemplateProblem {
    #[error("unclosed {{{{")]
    Unclosed,
    #[error("unknown variable {0:?} (use .Version .OS .Arch .Edition .BaseURL)")]
    UnknownVariable(String),
}
