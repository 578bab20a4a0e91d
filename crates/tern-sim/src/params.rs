//! The knobs of a simulation and the parsers for how operators write them on the
//! command line (`60s`, `10m`, `3d`, `10%`, `0.01/h`, `1.2.0=0.3`, `dev=10%`).

use std::collections::BTreeMap;

use jiff::Timestamp;
use serde::Serialize;
use tern_core::duration::GoDuration;
use tern_core::version::{Version, normalize};

/// A parameter that does not make sense; the message names it and says what is right.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ParamError(pub String);

fn err(msg: impl Into<String>) -> ParamError {
    ParamError(msg.into())
}

/// Everything about the simulated fleet and servers. The rollout itself comes from the
/// config and version resources given to [`crate::Sim::new`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Params {
    /// Agents at the start.
    pub agents: u32,
    /// The simulated instant the simulation starts at (the first reconcile).
    pub start: Timestamp,
    /// Seeds every random choice (updater ids, phases, jitter, failures, churn,
    /// canary picks): the same seed gives the same timeline.
    pub seed: u64,
    /// Share of agents per presented group name, relative weights. Empty: spread
    /// evenly over the config's groups. A name the config does not know is served by
    /// the catch-all (last) group, like an ungrouped agent.
    pub groups: Vec<(String, f64)>,
    /// Share of agents presenting no group at all (served by the catch-all group), in
    /// [0, 1].
    pub ungrouped: f64,
    /// The version the fleet runs at the start; `None`: the version's start_version.
    pub from_version: Option<String>,
    /// Seconds between two runs of an agent's updater (its timer).
    pub poll_secs: i64,
    /// Overrides the jitter bound find answers (`agent_update_jitter_seconds`);
    /// `None`: use what find says (60 s, 10 s under backpressure).
    pub jitter_secs: Option<i64>,
    /// Agents also long-poll find (`tern-update watch`): when a reconcile changes what
    /// find tells an agent, it asks again after a random wait up to this bound
    /// (ternd's `--long-poll-jitter`) and then skips find's jitter, instead of waiting
    /// for its timer. `None`: the timer alone. The timer runs in both.
    pub long_poll_jitter_secs: Option<i64>,
    /// Seconds from the end of the jitter to the new version running (download,
    /// install, restart, health check).
    pub install_secs: i64,
    /// Probability that installing a version fails (normalized version → p in [0, 1]).
    pub fail: BTreeMap<String, f64>,
    /// Share of its requests a version fails while running healthy (normalized version
    /// → ratio in [0, 1]); unlisted: [`DEFAULT_ERROR_RATIO`]. The simulated Prometheus
    /// answers a group's canary analysis with it (see `Sim`'s `measure`).
    pub errors: BTreeMap<String, f64>,
    /// Agents leaving per agent per hour; as many join (on average) as leave.
    pub churn_per_hour: f64,
    /// ternd replicas; replica 0 is the leader. Agents are spread evenly at random.
    pub replicas: u16,
    /// Seconds between two reports of a replica, and between two reconciles.
    pub report_period_secs: i64,
    /// Seconds between two reports and reconciles while the rollout is moving
    /// (`rollout::in_motion`), as ternd's `--active-report-period`; `None`: the
    /// report period throughout.
    pub active_report_period_secs: Option<i64>,
    /// While the rollout moves, a replica reports this long after a change among its
    /// hosts (an update done, a rollback), at most once per this long, as
    /// ternd's `--report-after-change`; `None`: no early report.
    pub report_after_change_secs: Option<i64>,
}

/// The share of requests a version fails unless `Params::errors` says otherwise.
pub const DEFAULT_ERROR_RATIO: f64 = 0.01;

/// Monday 2026-11-23 00:00 UTC: a start before every window of a typical week.
pub const DEFAULT_START: &str = "2026-11-23T00:00:00Z";

impl Default for Params {
    fn default() -> Self {
        Self {
            agents: 1000,
            start: DEFAULT_START.parse().unwrap_or(Timestamp::UNIX_EPOCH),
            seed: 0,
            groups: Vec::new(),
            ungrouped: 0.0,
            from_version: None,
            poll_secs: 60,
            jitter_secs: None,
            long_poll_jitter_secs: None,
            install_secs: 20,
            fail: BTreeMap::new(),
            errors: BTreeMap::new(),
            churn_per_hour: 0.0,
            replicas: 1,
            report_period_secs: 60,
            active_report_period_secs: None,
            report_after_change_secs: None,
        }
    }
}

impl Params {
    /// Refuses values the simulation cannot run with.
    pub fn validate(&self) -> Result<(), ParamError> {
        if self.poll_secs <= 0 {
            return Err(err("poll: the updater's period must be at least 1s"));
        }
        if self.report_period_secs <= 0 {
            return Err(err("report period: must be at least 1s"));
        }
        if self.active_report_period_secs.is_some_and(|p| p <= 0) {
            return Err(err("active report period: must be at least 1s"));
        }
        if self.report_after_change_secs.is_some_and(|p| p <= 0) {
            return Err(err("report after change: must be at least 1s"));
        }
        if self.install_secs < 0
            || self.jitter_secs.is_some_and(|j| j < 0)
            || self.long_poll_jitter_secs.is_some_and(|j| j < 0)
        {
            return Err(err(
                "install, jitter and long-poll jitter durations cannot be negative",
            ));
        }
        if self.replicas == 0 {
            return Err(err("replicas: at least one ternd replica is needed"));
        }
        if !(0.0..=1.0).contains(&self.ungrouped) {
            return Err(err(format!(
                "ungrouped: {} is not a share between 0% and 100%",
                self.ungrouped
            )));
        }
        for (name, w) in &self.groups {
            if !w.is_finite() || *w < 0.0 {
                return Err(err(format!("group {name}: {w} is not a share")));
            }
        }
        if !self.groups.is_empty() && self.groups.iter().all(|(_, w)| *w == 0.0) {
            return Err(err("group: every group has a share of 0%"));
        }
        if !self.churn_per_hour.is_finite() || self.churn_per_hour < 0.0 {
            return Err(err("churn: must be a non-negative rate like 0.01/h"));
        }
        for (v, p) in &self.fail {
            if !(0.0..=1.0).contains(p) {
                return Err(err(format!("fail {v}: {p} is not a probability in [0, 1]")));
            }
        }
        for (v, r) in &self.errors {
            if !(0.0..=1.0).contains(r) {
                return Err(err(format!("errors {v}: {r} is not a ratio in [0, 1]")));
            }
        }
        Ok(())
    }
}

/// `60s`, `10m`, `1h30m`, `3d` → seconds.
pub fn parse_duration(s: &str) -> Result<i64, ParamError> {
    let d = GoDuration::parse(s).map_err(|e| err(e.to_string()))?;
    i64::try_from(d.as_secs()).map_err(|_| err(format!("{s:?} is too long")))
}

/// `10%` or `0.1` → 0.1.
pub fn parse_share(s: &str) -> Result<f64, ParamError> {
    let t = s.trim();
    let v = match t.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().map(|x| x / 100.0),
        None => t.parse::<f64>(),
    }
    .map_err(|_| err(format!("{s:?} is not a share (write it like 10% or 0.1)")))?;
    if !(0.0..=1.0).contains(&v) {
        return Err(err(format!("{s:?} is not between 0% and 100%")));
    }
    Ok(v)
}

/// `0.01/h`, `1%/h`, `5%/d`, `0.001/m` → agents leaving per agent per hour.
pub fn parse_churn(s: &str) -> Result<f64, ParamError> {
    let bad = || {
        err(format!(
            "{s:?} is not a churn rate (write it like 0.01/h or 5%/d)"
        ))
    };
    let (share, unit) = s.trim().split_once('/').ok_or_else(bad)?;
    let share = parse_share(share).map_err(|_| bad())?;
    let per_hour = match unit.trim() {
        "h" | "hour" => 1.0,
        "d" | "day" => 1.0 / 24.0,
        "m" | "min" => 60.0,
        _ => return Err(bad()),
    };
    Ok(share * per_hour)
}

/// `1.2.0=0.3` or `v1.2.0=30%` → (`1.2.0`, 0.3).
pub fn parse_fail(s: &str) -> Result<(String, f64), ParamError> {
    let bad = || err(format!("{s:?} is not VERSION=PROBABILITY (like 1.2.0=0.3)"));
    let (v, p) = s.split_once('=').ok_or_else(bad)?;
    Version::parse(v).map_err(|e| err(e.to_string()))?;
    Ok((normalize(v), parse_share(p).map_err(|_| bad())?))
}

/// `dev=10%` → (`dev`, 0.1).
pub fn parse_group(s: &str) -> Result<(String, f64), ParamError> {
    let bad = || err(format!("{s:?} is not GROUP=SHARE (like dev=10%)"));
    let (name, share) = s.split_once('=').ok_or_else(bad)?;
    if name.trim().is_empty() {
        return Err(err(format!(
            "{s:?}: the group name is empty (use --ungrouped for agents without a group)"
        )));
    }
    Ok((
        name.trim().to_string(),
        parse_share(share).map_err(|_| bad())?,
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn flags_parse_like_an_operator_writes_them() {
        assert_eq!(parse_duration("10m").unwrap(), 600);
        assert_eq!(parse_duration("3d").unwrap(), 3 * 86_400);
        assert!(parse_duration("10").is_err());
        assert_eq!(parse_share("10%").unwrap(), 0.1);
        assert_eq!(parse_share("0.25").unwrap(), 0.25);
        assert!(parse_share("120%").is_err());
        assert!((parse_churn("0.01/h").unwrap() - 0.01).abs() < 1e-12);
        assert!((parse_churn("24%/d").unwrap() - 0.01).abs() < 1e-12);
        assert!(parse_churn("0.01").is_err());
        assert_eq!(
            parse_fail("v1.2.0=0.3").unwrap(),
            ("1.2.0".to_string(), 0.3)
        );
        assert!(parse_fail("banana=0.3").is_err());
        assert_eq!(parse_group("dev=10%").unwrap(), ("dev".to_string(), 0.1));
        assert!(parse_group("=10%").is_err());
    }

    #[test]
    fn validation_names_the_bad_knob() {
        let p = Params {
            poll_secs: 0,
            ..Params::default()
        };
        assert!(p.validate().unwrap_err().0.contains("poll"));
        let p = Params {
            replicas: 0,
            ..Params::default()
        };
        assert!(p.validate().unwrap_err().0.contains("replicas"));
        assert!(Params::default().validate().is_ok());
    }
}
