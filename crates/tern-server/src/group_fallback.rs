//! Saying when a host's group name falls back to the catch-all group: a find or a
//! Teleport channel request naming a group the rollout lacks (a typo, Teleport's Helm
//! chart default channel `stable/cloud`) is answered as the last group's hosts are, and
//! says so in a header (`tern-group-fallback: <the catch-all group>`) and a log line,
//! at most once an hour per name (find is the hot path). An empty group is not a
//! fallback: "no group" is the catch-all's by design. Hosts placed by labels are
//! placed by their labels, not by the name alone: nothing is said for them here.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::HeaderValue;
use axum::http::header::HeaderName;

use crate::snapshot::Snapshot;

/// The header a fallback answer carries: the group that answered.
pub(crate) const HEADER: HeaderName = HeaderName::from_static("tern-group-fallback");
/// How often one name is logged at most.
const LOG_EVERY: Duration = Duration::from_secs(3600);
/// Names remembered at most (a flood of invented names cannot grow this).
const MAX_NAMES: usize = 256;

/// When each fallback name was last logged.
#[derive(Debug, Default)]
pub(crate) struct Fallbacks {
    logged: Mutex<HashMap<String, Instant>>,
}

impl Fallbacks {
    /// The header to answer a request for `product` naming `presented` with, when its
    /// rollout lacks that group and its catch-all answers; logs the fallback (once an
    /// hour per name).
    pub(crate) fn check(
        &self,
        snapshot: &Snapshot,
        product: &str,
        presented: &str,
    ) -> Option<HeaderValue> {
        let serving = tern_core::rollout::falls_back(snapshot.rollout_of(product)?, presented)?;
        self.log(presented, serving, Instant::now());
        HeaderValue::from_str(serving).ok()
    }

    fn log(&self, presented: &str, serving: &str, now: Instant) {
        let mut logged = self.logged.lock().unwrap_or_else(|p| p.into_inner());
        if logged
            .get(presented)
            .is_some_and(|at| now.duration_since(*at) < LOG_EVERY)
        {
            return;
        }
        if logged.len() >= MAX_NAMES && !logged.contains_key(presented) {
            logged.retain(|_, at| now.duration_since(*at) < LOG_EVERY);
            if logged.len() >= MAX_NAMES {
                return;
            }
        }
        logged.insert(presented.to_string(), now);
        let name = tern_core::text::excerpt(presented, 64);
        tracing::warn!(
            group = %name,
            served_by = serving,
            "a host asked for group {name:?}, which the rollout lacks: the catch-all group {serving} answers it (said once an hour per name; `ternctl agents report` lists unknown groups)"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_logged_once_an_hour_and_the_names_kept_are_bounded() {
        let f = Fallbacks::default();
        let t0 = Instant::now();
        f.log("stable/cloud", "prod", t0);
        f.log("stable/cloud", "prod", t0 + Duration::from_secs(10));
        assert_eq!(f.logged.lock().unwrap()["stable/cloud"], t0);
        f.log("stable/cloud", "prod", t0 + LOG_EVERY);
        assert_eq!(f.logged.lock().unwrap()["stable/cloud"], t0 + LOG_EVERY);
        for i in 0..(2 * MAX_NAMES) {
            f.log(&format!("g{i}"), "prod", t0 + LOG_EVERY);
        }
        assert_eq!(f.logged.lock().unwrap().len(), MAX_NAMES);
    }
}
