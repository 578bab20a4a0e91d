//! Prometheus metrics, hand-written: a few counters here, and gauges computed from the
//! state at scrape time (see `routes::metrics`).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, Default)]
pub(crate) struct Metrics {
    pub(crate) find_requests: AtomicU64,
    pub(crate) find_rate_limited: AtomicU64,
    pub(crate) channel_requests: AtomicU64,
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
    pub(crate) connections: std::sync::OnceLock<std::sync::Arc<crate::listen::conns::Conns>>,
    pub(crate) connections_shed_per_address: AtomicU64,
    pub(crate) connections_shed_full: AtomicU64,
    pub(crate) connections_evicted: AtomicU64,
    pub(crate) connections_timed_out: AtomicU64,
    pub(crate) accept_errors: AtomicU64,
}

/// Reconcile duration buckets (seconds) for the histogram.
const BUCKETS: [f64; 8] = [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0];

#[derive(Debug, Default)]
pub(crate) struct Histogram {
    counts: [AtomicU64; 8],
}

impl Metrics {
    pub(crate) fn inc(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn event(&self, kind: &str) {
        let mut ev = self.events.lock().unwrap_or_else(|p| p.into_inner());
        *ev.entry(kind.to_string()).or_default() += 1;
    }

    pub(crate) fn reconcile_done(&self, hist: &Histogram, secs: f64, ok: bool) {
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
                hist.counts[i].fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    pub(crate) fn render_counters(&self, hist: &Histogram, out: &mut String) {
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
        let _ = writeln!(
            out,
            "# HELP tern_reconcile_duration_seconds time taken by one reconcile\n# TYPE tern_reconcile_duration_seconds histogram"
        );
        for (i, b) in BUCKETS.iter().enumerate() {
            let _ = writeln!(
                out,
                "tern_reconcile_duration_seconds_bucket{{le=\"{b}\"}} {}",
                hist.counts[i].load(Ordering::Relaxed)
            );
        }
        let n = get(&self.reconciles);
        let _ = writeln!(
            out,
            "tern_reconcile_duration_seconds_bucket{{le=\"+Inf\"}} {n}\ntern_reconcile_duration_seconds_sum {}\ntern_reconcile_duration_seconds_count {n}",
            get(&self.reconcile_micros_sum) as f64 / 1e6
        );
        let _ = writeln!(
            out,
            "# HELP tern_reconcile_events_total rollout events by kind\n# TYPE tern_reconcile_events_total counter"
        );
        let ev = self.events.lock().unwrap_or_else(|p| p.into_inner());
        for (kind, n) in ev.iter() {
            let _ = writeln!(
                out,
                "tern_reconcile_events_total{{event=\"{}\"}} {n}",
                escape(kind)
            );
        }
    }
}

fn counter(out: &mut String, name: &str, help: &str, v: u64) {
    let _ = writeln!(
        out,
        "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}"
    );
}

/// Escapes a label value.
pub(crate) fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
