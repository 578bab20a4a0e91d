//! Reading request bodies: JSON with a clear 400, resources as UTF-8 text, versions.

use serde::de::DeserializeOwned;
use tern_core::version::Version;

use crate::error::{ApiError, ApiResult};

/// A JSON body, or `T::default()` for an empty one.
pub(crate) fn json<T: DeserializeOwned + Default>(body: &[u8]) -> ApiResult<T> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("the request body is not valid: {e}")))
}

/// A resource body (YAML or JSON) as text.
pub(crate) fn text(body: &[u8]) -> ApiResult<&str> {
    std::str::from_utf8(body)
        .map_err(|_| ApiError::invalid_resource("the resource is not UTF-8 text (YAML or JSON)"))
}

/// A version given in a body's `field`, or a 400 naming the field.
pub(crate) fn version(field: &str, s: &str) -> ApiResult<Version> {
    Version::parse(s).map_err(|e| ApiError::bad_request(format!("{field}: {e}")))
}
