/// Why a child could not be run or waited for. How it ended otherwise is an
/// [`End`](crate::End), not an error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot start {program}: {source}")]
    Spawn {
        program: String,
        #[source]
        source: std::io::Error,
    },
    #[error("waiting for {program}: {source}")]
    Wait {
        program: String,
        #[source]
        source: std::io::Error,
    },
}
