//! Why an input was refused. Everything the decision reads came from the API server or
//! ternd, so each refusal names the field and the (shortened) value: the controller
//! logs it, writes nothing to the workload, and tries again on the next pass.

/// An input the decision cannot use.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InputError {
    #[error("{what}: {image:?} is not a usable image reference: {why}")]
    Image {
        what: &'static str,
        image: String,
        why: &'static str,
    },
    #[error("{0:?} is not a digest (sha256:<64 lowercase hex> or sha512:<128>)")]
    Digest(String),
    #[error("annotation {key}: {value:?} {why}")]
    Annotation {
        key: &'static str,
        value: String,
        why: String,
    },
    #[error("{field}: {value} is not a Kubernetes count (0 to 2147483647)")]
    Count { field: &'static str, value: i64 },
    #[error("pod {pod:?}: {why}")]
    Pod { pod: String, why: String },
    #[error("{field}: {value:?} {why}")]
    Field {
        field: &'static str,
        value: String,
        why: &'static str,
    },
    #[error("{field}: {why}")]
    Policy {
        field: &'static str,
        why: &'static str,
    },
}
