//! Arrives with its issue.
