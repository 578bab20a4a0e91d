//! Fleets of hosts following a channel (seed 001). Such hosts check their maintenance
//! window against the real clock, not ternd's dev clock, so a test that means to move
//! them only by what it does (a critical version, a pin lifted) places their group's
//! window where the real clock keeps it closed.

use crate::release::Release;
use crate::{Fleet, FleetOptions};

/// A start hour (UTC) whose one-hour window stays closed for the next hour of real
/// time: two hours after the current one.
pub fn closed_hour() -> u8 {
    let hour = jiff::Timestamp::now()
        .to_zoned(jiff::tz::TimeZone::UTC)
        .hour();
    // 0..=23 plus 2, modulo 24: always fits.
    u8::try_from((hour + 2) % 24).unwrap_or(0)
}

/// A fleet serving `releases`, whose one group `prod` has a one-hour window closed
/// throughout the test ([`closed_hour`]), with `n` hosts in `prod` following the
/// channel `stable` at 1.0.0 and running it. `version`: the agent's version resource
/// (start and target, regular schedule), or none, so that no rollout exists.
pub fn closed_window_fleet(
    releases: Vec<Release>,
    version: Option<&str>,
    n: usize,
) -> anyhow::Result<(Fleet, Vec<String>)> {
    let mut f = Fleet::start(FleetOptions {
        releases,
        ..FleetOptions::default()
    })?;
    f.apply(&tern_core::fixtures::time_based(
        "1h",
        &[("prod", closed_hour())],
    ))?;
    if let Some(v) = version {
        f.set_version(v, v, "regular")?;
    }
    f.ctl.run(&["channels", "set", "stable", "1.0.0"])?;
    let names = f.add_channel_hosts("prod", n, "stable")?;
    let behind = f.wait_running(&names, "1.0.0");
    anyhow::ensure!(
        behind.is_empty(),
        "channel hosts not running 1.0.0: {behind:?}\n{}",
        f.describe()
    );
    Ok((f, names))
}
