//! The maintenance schedule as a systemd timer override, for hosts set up with
//! `setup --schedule-timers`: the updater's timer fires every 30 minutes by default;
//! while the agent is healthy, `schedule sync` restricts it to the group's window with
//! an `OnCalendar=` override; when the agent stops (`ExecStopPost`) or a critical
//! update is waiting (`schedule check`), `schedule clear` removes the override and the
//! timer fires freely again. `update` applies the same rules itself on every run; the
//! override only spares the runs that would decide nothing.

use std::path::PathBuf;

use tern_core::host_update::{CriticalAnswer, Health, VersionAnswer};

use crate::agent;
use crate::ctx::Ctx;
use crate::error::{Error, Result};
use crate::fsutil;
use crate::layout::Layout;
use crate::state::UpdateFile;

/// The drop-in that restricts the updater's timer to the window.
pub(crate) fn override_path(layout: &Layout) -> PathBuf {
    layout
        .systemd_dir
        .join(format!("{}.timer.d", layout.updater_unit_stem()))
        .join("schedule.conf")
}

/// The drop-in's text: the monotonic triggers blanked, one `OnCalendar=` per window
/// (systemd fires the timer at each).
pub(crate) fn override_text(on_calendars: &[String]) -> String {
    let mut text = String::from(
        "# Written by `tern-update schedule sync`: the group's maintenance window.\n# Removed by `tern-update schedule clear` (the agent stopped, or a critical update).\n# Blackout dates have no systemd form: the timer fires then, and `update` holds.\n[Timer]\nOnActiveSec=\nOnUnitActiveSec=\n",
    );
    for cal in on_calendars {
        text.push_str(&format!("OnCalendar={cal}\n"));
    }
    text
}

/// An `OnCalendar=` value from the network, checked before it goes into a unit file:
/// what tern-core writes (day names, `*`, digits, `-`, `:`, `,`, spaces, a zone name
/// such as `UTC`, `Europe/Paris`, `America/Port-au-Prince` or `Etc/GMT+5`) and nothing
/// that could end the line or start another directive.
fn checked_calendar(value: &str) -> Result<&str> {
    let ok = !value.is_empty()
        && value.len() <= 128
        && value.chars().all(|c| {
            c.is_ascii_alphanumeric()
                || matches!(c, '*' | '-' | ':' | ',' | ' ' | '.' | '/' | '_' | '+')
        });
    if ok {
        Ok(value)
    } else {
        Err(Error::BadCalendar {
            value: value.chars().take(64).collect(),
        })
    }
}

/// What `schedule sync|clear|check` did.
pub(crate) enum Done {
    Wrote(String),
    Cleared(&'static str),
    Kept(String),
}

impl std::fmt::Display for Done {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Wrote(cal) => write!(
                f,
                "the updater's timer fires in the window: OnCalendar={cal}"
            ),
            Self::Cleared(why) => {
                write!(f, "the updater's timer fires every 30 minutes again: {why}")
            }
            Self::Kept(why) => f.write_str(why),
        }
    }
}

/// `schedule sync`: asks ternd for the group's window and writes the override, when
/// the agent is healthy; an unhealthy agent clears it instead (it may update outside
/// the window). `file.status.schedule` keeps what ternd sent (the caller saves).
pub(crate) fn sync(ctx: &Ctx, file: &mut UpdateFile) -> Result<Done> {
    if file.spec.server.is_empty() {
        return Err(Error::NoServer);
    }
    if let Health::Unhealthy(_) = agent::agent_health(ctx, file) {
        return clear_because(
            ctx,
            "the agent is unhealthy, so it may update outside the window",
        );
    }
    let schedule = ctx.http.schedule(&file.spec.server, &file.spec.group)?;
    schedule
        .window()
        .map_err(|problem| Error::UnusableSchedule {
            server: file.spec.server.clone(),
            problem,
        })?;
    // A schedule with several windows lists one value per window; an older ternd
    // sends the one.
    let calendars: Vec<String> = if schedule.on_calendars.is_empty() {
        schedule.on_calendar.iter().cloned().collect()
    } else {
        schedule.on_calendars.clone()
    };
    if calendars.is_empty() {
        return Err(Error::UnusableSchedule {
            server: file.spec.server.clone(),
            problem: "the group's window never opens".into(),
        });
    }
    for cal in &calendars {
        checked_calendar(cal)?;
    }
    let calendar = calendars.join("; ");
    let path = override_path(&ctx.layout);
    let text = override_text(&calendars);
    let unchanged = std::fs::read_to_string(&path).is_ok_and(|old| old == text);
    file.status.schedule = Some(schedule);
    if !unchanged {
        fsutil::write_atomic(&path, text.as_bytes(), 0o644)?;
        crate::service::systemctl(&["daemon-reload"])?;
    }
    Ok(Done::Wrote(calendar))
}

/// `schedule clear`: removes the override (run by the agent unit's `ExecStopPost`).
pub(crate) fn clear(ctx: &Ctx) -> Result<Done> {
    clear_because(ctx, "cleared")
}

fn clear_because(ctx: &Ctx, why: &'static str) -> Result<Done> {
    let path = override_path(&ctx.layout);
    if path.exists() {
        fsutil::remove_file_durable(&path)?;
        crate::service::systemctl(&["daemon-reload"])?;
    }
    Ok(Done::Cleared(why))
}

/// `schedule check` (its own timer, every few minutes): a channel that says
/// `critical: yes` for a version this host does not run clears the override, so the
/// next runs come within 30 minutes instead of at the next window.
pub(crate) fn check(ctx: &Ctx, file: &UpdateFile) -> Result<Done> {
    let Some(channel) = &file.spec.channel else {
        return Ok(Done::Kept(
            "not following a channel: nothing to check".into(),
        ));
    };
    match crate::channel::answers(ctx, &file.spec, channel) {
        (VersionAnswer::Version(v), CriticalAnswer::Yes)
            if file
                .status
                .active
                .as_deref()
                .map(tern_core::version::normalize)
                != Some(v.to_string()) =>
        {
            clear_because(ctx, "a critical update is waiting")
        }
        _ => Ok(Done::Kept(
            "no critical update waiting: the schedule stays".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calendars_from_the_network_are_checked() {
        for ok in [
            "Mon,Tue *-*-* 12:00:00 UTC",
            "*-*-* 00:00:00 UTC",
            "Mon,Tue *-*-* 22:30:00 Europe/Paris",
            "Sat *-*-* 06:15:00 America/Port-au-Prince",
            "*-*-* 06:15:00 America/New_York",
            "*-*-* 06:15:00 Etc/GMT+5",
        ] {
            assert!(checked_calendar(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "*-*-* 12:00:00 UTC\nExecStart=/bin/sh",
            "Mon; rm -rf /",
            "$(id)",
            &"1".repeat(200),
        ] {
            assert!(checked_calendar(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_override_blanks_the_monotonic_triggers() {
        let t = override_text(&["Mon *-*-* 12:00:00 UTC".to_string()]);
        assert!(t.contains(
            "\n[Timer]\nOnActiveSec=\nOnUnitActiveSec=\nOnCalendar=Mon *-*-* 12:00:00 UTC\n"
        ));
        let two = override_text(&[
            "Mon *-*-* 22:30:00 Europe/Paris".to_string(),
            "Sat *-*-* 06:00:00 Europe/Paris".to_string(),
        ]);
        assert!(
            two.ends_with("OnCalendar=Mon *-*-* 22:30:00 Europe/Paris\nOnCalendar=Sat *-*-* 06:00:00 Europe/Paris\n"),
            "{two}"
        );
    }
}
