//! Reading resources from YAML or JSON text and writing them back. Errors carry the
//! path of the offending field (`spec.agents.schedules.regular[1].days[0]`).

use serde::Serialize;
use serde::de::DeserializeOwned;

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
    let de = serde_yaml_ng::Deserializer::from_str(text);
    serde_path_to_error::deserialize(de).map_err(|e| ParseError {
        path: e.path().to_string(),
        message: e.inner().to_string(),
    })
}

/// Reads a list of items: one document holding a sequence, or several `---`
/// separated documents each holding one item.
pub fn list_from_text<T: DeserializeOwned>(text: &str) -> Result<Vec<T>, ParseError> {
    if text.trim().is_empty() {
        return Ok(Vec::new());
    }
    if let Ok(items) = from_text::<Vec<T>>(text) {
        return Ok(items);
    }
    let mut items = Vec::new();
    for (i, doc) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
        let item = serde_path_to_error::deserialize(doc).map_err(|e| ParseError {
            path: format!("[{i}].{}", e.path()),
            message: e.inner().to_string(),
        })?;
        items.push(item);
    }
    Ok(items)
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
