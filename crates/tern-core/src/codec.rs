//! Reading resources from YAML or JSON text and writing them back. Errors carry the
//! path of the offending field (`spec.agents.schedules.regular[1].days[0]`).

use serde::Serialize;
use serde::de::DeserializeOwned;

mod nesting;

/// How deeply a resource text may nest (a config is about eight levels deep). Deeper
/// texts are refused before parsing: the YAML parser's time grows with the square of
/// the depth.
pub const MAX_DEPTH: usize = 64;

/// The text could not be read as the expected resource.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}{message}", if path.is_empty() || path == "." { String::new() } else { format!("{path}: ") })]
pub struct ParseError {
    /// Dotted path to the field, empty for the document itself.
    pub path: String,
    pub message: String,
}

/// Reads one document. JSON is read by the same parser, YAML being a superset of it.
pub fn from_text<T: DeserializeOwned>(text: &str) -> Result<T, ParseError> {
    if text.trim().is_empty() {
        return Err(ParseError {
            path: String::new(),
            message: "the document is empty".to_string(),
        });
    }
    check_depth(text)?;
    let de = serde_yaml_ng::Deserializer::from_str(text);
    serde_path_to_error::deserialize(de).map_err(|e| parse_error(String::new(), &e))
}

fn check_depth(text: &str) -> Result<(), ParseError> {
    nesting::check(text, MAX_DEPTH).map_err(|e| ParseError {
        path: String::new(),
        message: format!(
            "line {}: nested deeper than {MAX_DEPTH} levels (a resource is a few levels deep); refused before parsing",
            e.line
        ),
    })
}

fn parse_error(prefix: String, e: &serde_path_to_error::Error<serde_yaml_ng::Error>) -> ParseError {
    let path = e.path().to_string();
    let mut message = e.inner().to_string();
    // The YAML parser may start its message with a path of its own: keep one.
    if let Some((head, rest)) = message.split_once(": ")
        && !head.contains(' ')
        && path.starts_with(head)
    {
        message = rest.to_string();
    }
    ParseError {
        path: join_path(&prefix, &path),
        message,
    }
}

/// `document 2: spec.agents`, or just `document 2` for the document itself.
fn join_path(prefix: &str, path: &str) -> String {
    let prefix = prefix.trim_end_matches([':', ' ']);
    match (prefix.is_empty(), path == "." || path.is_empty()) {
        (true, _) => path.to_string(),
        (false, true) => prefix.to_string(),
        (false, false) => format!("{prefix}: {path}"),
    }
}

/// Reads a list of items: one document holding a sequence (or a single item), or
/// several `---` separated documents each holding one item.
pub fn list_from_text<T: DeserializeOwned>(text: &str) -> Result<Vec<T>, ParseError> {
    if text.trim().is_empty() {
        return Ok(Vec::new());
    }
    check_depth(text)?;
    let mut documents = Vec::new();
    for (i, doc) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
        // Stop at the first broken document: the parser does not resume after one.
        let value = serde_path_to_error::deserialize::<_, serde_yaml_ng::Value>(doc)
            .map_err(|e| parse_error(format!("document {}: ", i + 1), &e))?;
        documents.push(value);
    }
    match documents.as_slice() {
        [] => Ok(Vec::new()),
        [serde_yaml_ng::Value::Mapping(_)] => from_text::<T>(text).map(|item| vec![item]),
        [_] => from_text::<Vec<T>>(text),
        _ => documents
            .into_iter()
            .enumerate()
            .map(|(i, doc)| {
                serde_path_to_error::deserialize(doc).map_err(|e| ParseError {
                    path: join_path(&format!("document {}", i + 1), &e.path().to_string()),
                    message: e.inner().to_string(),
                })
            })
            .collect(),
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Format {
    #[default]
    Yaml,
    Json,
}

#[derive(Debug, thiserror::Error)]
#[error("cannot encode: {0}")]
pub struct EncodeError(String);

pub fn to_text<T: Serialize>(value: &T, format: Format) -> Result<String, EncodeError> {
    match format {
        Format::Yaml => serde_yaml_ng::to_string(value).map_err(|e| EncodeError(e.to_string())),
        Format::Json => serde_json::to_string_pretty(value)
            .map(|s| s + "\n")
            .map_err(|e| EncodeError(e.to_string())),
    }
}
