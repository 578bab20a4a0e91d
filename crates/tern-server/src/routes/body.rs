//! Reading request bodies: JSON with a clear 400, resources as UTF-8 text.

use serde::de::DeserializeOwned;

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
