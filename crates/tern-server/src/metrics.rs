//! Prometheus metrics: the counters here, and gauges computed from the state at scrape
//! time (see `metrics_page`); all written with `metrics_text`.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::metrics_text::{self, Kind, counter};

#[derive(Debug, Default)]
pub(crate) struct Metrics {
    pub(crate) find_requests: AtomicU64,
    pub(crate) find_rate_limited: AtomicU64,
    pub(crate) channel_requests: AtomicU64,
    pub(crate) schedule_requests: AtomicU64,
    pub(crate) heartbeats: AtomicU64,
    pub(crate) heartbeats_rejected: AtomicU64,
    pub(crate) heartbeats_rate_limited: AtomicU64,
    pub(crate) reconciles: AtomicU64,
    pub(crate) reconcile_errors: AtomicU64,
    pub(crate) reconcile_conflicts: AtomicU64,
    /// Admin writes retried after a revision conflict.
    pub(crate) write_conflicts: AtomicU64,
    pub(crate) report_errors: AtomicU64,
    /// Times this replica took the leader lease.
    pub(crate) leader_acquired: AtomicU64,
    /// Rollout writes not made because the lease was lost just before (fencing).
    pub(crate) fenced_writes: AtomicU64,
    /// Sum of reconcile durations in microseconds.
    pub(crate) reconcile_micros_sum: AtomicU64,
    pub(crate) reconcile_micros_last: AtomicU64,
    /// Reconcile events by kind.
    pub(crate) events: Mutex<BTreeMap<String, u64>>,
    /// The listener's table of open connections, once it serves.
    pub(crate) connections: std::sync::OnceLock<std::sync::Arc<crate::conns::Conns>>,
    pub(crate) connections_shed_per_address: AtomicU64,
    pub(crate) connections_shed_full: AtomicU64,
    pub(crate) connections_evicted: AtomicU64,
    pub(crate) connections_timed_out: AtomicU64,
    pub(crate) accept_errors: AtomicU64,
    /// Heartbeats of new agents refused because the inventory is full (`--max-agents`).
    pub(crate) heartbeats_inventory_full: AtomicU64,
    /// Heartbeats sent with the shared agent token of earlier releases (no host
    /// credential): 0 once every host has joined.
    pub(crate) heartbeats_shared_token: AtomicU64,
    /// Admin requests refused with 429 (`--admin-rate`, per token).
    pub(crate) admin_rate_limited: AtomicU64,
    /// Requests refused for their token (401): none, malformed, unknown, revoked,
    /// a wrong secret, expired.
    pub(crate) auth_refused: AtomicU64,
    /// Admin requests refused with 429 before their token was looked up: their address
    /// had too many refused authentications (`--auth-failure-rate`).
    pub(crate) auth_address_limited: AtomicU64,
    /// Report entries counted under `(other)` (too many groups or versions).
    pub(crate) report_entries_folded: AtomicU64,
    /// Reports not written for being over `MAX_REPORT_BYTES` even shrunk.
    pub(crate) reports_too_large: AtomicU64,
    /// Reports shrunk to fit `MAX_REPORT_BYTES` (`tern_core::inventory::shrink_report`).
    pub(crate) reports_shrunk: AtomicU64,
    /// Host history records written, observations dropped (the queue was full), and
    /// batches whose write failed (`history`).
    pub(crate) host_history_writes: AtomicU64,
    pub(crate) host_history_dropped: AtomicU64,
    pub(crate) host_history_errors: AtomicU64,
    /// Times the heap's free pages went back to the system after a burst of history
    /// writes (`heap`): when RSS stops paying for the burst's peak.
    pub(crate) heap_trims: AtomicU64,
    /// Rounds of the host history writer, written or not: after each it trims the heap
    /// if a burst is over (`history::run`).
    pub(crate) host_history_rounds: AtomicU64,
    /// Heartbeats that changed what this replica's report counts (`state::HostChanges`,
    /// which shares this counter): each wakes the report loop.
    pub(crate) report_changes: std::sync::Arc<AtomicU64>,
    /// Store probes answered (`server::store_contact`): what keeps a quiet replica in
    /// contact with its store (`--store-contact-bound`).
    pub(crate) store_probes: AtomicU64,
    /// Reconcile durations.
    pub(crate) reconcile_hist: Histogram,
}

/// Reconcile duration buckets (seconds) for the histogram.
const BUCKETS: [f64; 8] = [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0];

#[derive(Debug, Default)]
pub(crate) struct Histogram {
    counts: [AtomicU64; 8],
}

impl Metrics {
    pub(crate) fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn inc(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn event(&self, kind: &str) {
        let mut ev = self.events.lock().unwrap_or_else(|p| p.into_inner());
        *ev.entry(kind.to_string()).or_default() += 1;
    }

    pub(crate) fn reconcile_done(&self, secs: f64, ok: bool) {
        Self::inc(&self.reconciles);
        if !ok {
            Self::inc(&self.reconcile_errors);
        }
        let micros = (secs * 1e6) as u64;
        self.reconcile_micros_sum
            .fetch_add(micros, Ordering::Relaxed);
        self.reconcile_micros_last.store(micros, Ordering::Relaxed);
        for (i, b) in BUCKETS.iter().enumerate() {
            if secs <= *b {
                self.reconcile_hist.counts[i].fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    pub(crate) fn render_counters(&self, out: &mut String) {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        counter(
            out,
            "tern_find_requests_total",
            "find requests answered",
            get(&self.find_requests),
        );
        counter(
            out,
            "tern_find_rate_limited_total",
            "public requests refused with 429",
            get(&self.find_rate_limited),
        );
        counter(
            out,
            "tern_channel_requests_total",
            "channel requests answered",
            get(&self.channel_requests),
        );
        counter(
            out,
            "tern_schedule_requests_total",
            "maintenance schedule requests answered",
            get(&self.schedule_requests),
        );
        counter(
            out,
            "tern_heartbeats_total",
            "heartbeats accepted",
            get(&self.heartbeats),
        );
        counter(
            out,
            "tern_heartbeats_rejected_total",
            "heartbeats refused (auth or bad body)",
            get(&self.heartbeats_rejected),
        );
        counter(
            out,
            "tern_heartbeats_rate_limited_total",
            "heartbeats refused with 429",
            get(&self.heartbeats_rate_limited),
        );
        counter(
            out,
            "tern_heartbeats_inventory_full_total",
            "heartbeats of new agents refused: the inventory holds --max-agents",
            get(&self.heartbeats_inventory_full),
        );
        counter(
            out,
            "tern_heartbeats_shared_token_total",
            "heartbeats sent with a shared agent token instead of a host credential",
            get(&self.heartbeats_shared_token),
        );
        counter(
            out,
            "tern_admin_rate_limited_total",
            "admin requests refused with 429: one token past --admin-rate",
            get(&self.admin_rate_limited),
        );
        counter(
            out,
            "tern_auth_refused_total",
            "requests refused with 401 for their token: none, malformed, unknown, revoked, a wrong secret, expired",
            get(&self.auth_refused),
        );
        counter(
            out,
            "tern_auth_address_limited_total",
            "admin requests refused with 429 before their token was looked up: their address had too many refused authentications (--auth-failure-rate)",
            get(&self.auth_address_limited),
        );
        counter(
            out,
            "tern_host_history_writes_total",
            "host history records written to the store",
            get(&self.host_history_writes),
        );
        counter(
            out,
            "tern_host_history_dropped_total",
            "host history observations dropped: the write queue was full",
            get(&self.host_history_dropped),
        );
        counter(
            out,
            "tern_host_history_errors_total",
            "host history writes that failed (those changes are missing from the history)",
            get(&self.host_history_errors),
        );
        counter(
            out,
            "tern_heap_trims_total",
            "times the heap's free pages were given back to the system after a burst of host history writes",
            get(&self.heap_trims),
        );
        counter(
            out,
            "tern_host_history_rounds_total",
            "rounds of the host history writer (every 2 s), written or not; the heap is trimmed, when a burst is over, at the end of one",
            get(&self.host_history_rounds),
        );
        counter(
            out,
            "tern_report_changes_total",
            "heartbeats that changed what this replica's report counts (a known host's version, group or health); while a rollout moves, each brings the report forward to --report-after-change",
            get(&self.report_changes),
        );
        counter(
            out,
            "tern_store_probes_total",
            "store probes answered, a few per --store-contact-bound: a quiet replica stays in contact with its store through them",
            get(&self.store_probes),
        );
        counter(
            out,
            "tern_report_entries_folded_total",
            "report entries counted under (other): too many groups or versions",
            get(&self.report_entries_folded),
        );
        counter(
            out,
            "tern_reports_too_large_total",
            "reports not written for being over the size bound even shrunk",
            get(&self.reports_too_large),
        );
        counter(
            out,
            "tern_reports_shrunk_total",
            "reports shrunk to fit the size bound (canary candidates' details and the like cut, never a count)",
            get(&self.reports_shrunk),
        );
        counter(
            out,
            "tern_reconciles_total",
            "reconciles run by this replica as leader",
            get(&self.reconciles),
        );
        counter(
            out,
            "tern_reconcile_errors_total",
            "reconciles that failed",
            get(&self.reconcile_errors),
        );
        counter(
            out,
            "tern_reconcile_conflicts_total",
            "rollout writes retried after a revision conflict",
            get(&self.reconcile_conflicts),
        );
        counter(
            out,
            "tern_admin_write_conflicts_total",
            "admin writes retried after a revision conflict",
            get(&self.write_conflicts),
        );
        counter(
            out,
            "tern_report_errors_total",
            "report writes that failed",
            get(&self.report_errors),
        );
        counter(
            out,
            "tern_leader_acquired_total",
            "times this replica took the reconcile leader lease",
            get(&self.leader_acquired),
        );
        counter(
            out,
            "tern_fenced_writes_total",
            "rollout writes refused because the leader lease was lost just before",
            get(&self.fenced_writes),
        );
        let counts = &self.reconcile_hist.counts;
        metrics_text::histogram(
            out,
            "tern_reconcile_duration_seconds",
            "time taken by one reconcile",
            BUCKETS.iter().zip(counts).map(|(b, c)| (*b, get(c))),
            get(&self.reconcile_micros_sum) as f64 / 1e6,
            get(&self.reconciles),
        );
        metrics_text::family(
            out,
            "tern_reconcile_events_total",
            Kind::Counter,
            "rollout events by kind",
        );
        let ev = self.events.lock().unwrap_or_else(|p| p.into_inner());
        for (kind, n) in ev.iter() {
            metrics_text::sample(out, "tern_reconcile_events_total", &[("event", kind)], n);
        }
    }
}

/// At most this many group label values that the rollout lacks on one series family;
/// the rest are `(other)`.
pub(crate) const MAX_UNKNOWN_GROUP_SERIES: usize = 32;
/// At most this many version label values per group; the rest are `(other)`.
pub(crate) const MAX_VERSION_SERIES: usize = 20;

/// The `tern_inventory_agents{group,version}` series, bounded whatever the agents
/// present (an agent flood once made 50,011 series): every group `known` to the
/// rollout, the largest others, each with its most common versions and those in
/// `keep` (start and target); the rest summed under `(other)`. Returns the series and
/// how many (group, version) pairs were folded.
pub(crate) fn bounded_agent_series(
    counts: &BTreeMap<(&str, &str), u64>,
    known: impl Fn(&str) -> bool,
    keep: &[&str],
) -> (BTreeMap<(String, String), u64>, usize) {
    use tern_core::inventory::{FOLDED as OTHER, sort_largest_first};
    let mut groups: BTreeMap<&str, Vec<(u64, &str)>> = BTreeMap::new();
    for (&(g, v), &n) in counts {
        groups.entry(g).or_default().push((n, v));
    }
    let mut unknown: Vec<(u64, &str)> = groups
        .iter()
        .filter(|(g, _)| !known(g))
        .map(|(g, vs)| (vs.iter().map(|(n, _)| n).sum(), *g))
        .collect();
    sort_largest_first(&mut unknown);
    let kept_unknown: std::collections::HashSet<&str> = unknown
        .iter()
        .take(MAX_UNKNOWN_GROUP_SERIES)
        .map(|(_, g)| *g)
        .collect();
    let mut out: BTreeMap<(String, String), u64> = BTreeMap::new();
    let mut folded = 0;
    for (g, mut versions) in groups {
        let group = if known(g) || kept_unknown.contains(g) {
            g
        } else {
            OTHER
        };
        sort_largest_first(&mut versions);
        for (i, (n, v)) in versions.into_iter().enumerate() {
            let version = if group != OTHER && (i < MAX_VERSION_SERIES || keep.contains(&v)) {
                v
            } else {
                OTHER
            };
            if group == OTHER || version == OTHER {
                folded += 1;
            }
            *out.entry((group.to_string(), version.to_string()))
                .or_default() += n;
        }
    }
    (out, folded)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_series_stay_bounded_and_keep_every_agent() {
        let names: Vec<(String, String)> = (0..5_000)
            .map(|i| (format!("g{i}"), format!("1.0.{i}")))
            .chain((0..100).map(|i| ("prod".to_string(), format!("2.0.{i}"))))
            .collect();
        let mut counts: BTreeMap<(&str, &str), u64> = BTreeMap::new();
        for (g, v) in &names {
            counts.insert((g, v), 1);
        }
        counts.insert(("prod", "9.9.9"), 1);
        let (series, folded) = bounded_agent_series(&counts, |g| g == "prod", &["9.9.9"]);
        assert!(series.len() <= MAX_UNKNOWN_GROUP_SERIES + 1 + MAX_VERSION_SERIES + 2);
        assert_eq!(series.values().sum::<u64>(), 5_101, "no agent lost");
        assert!(folded >= 5_000 - MAX_UNKNOWN_GROUP_SERIES);
        assert_eq!(
            series[&("prod".into(), "9.9.9".into())],
            1,
            "start/target kept"
        );
        assert_eq!(series[&("(other)".into(), "(other)".into())], 5_000 - 32);
    }
}
