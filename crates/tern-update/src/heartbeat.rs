//! The heartbeat: what the host tells ternd it runs and how it fares, sent best effort
//! (`heartbeat`), also while a run waits out its jitter (`wait_heartbeating`), and by
//! `enable` to check that ternd takes the host's token (`check_token`); with what
//! ternd answers (a group it lacks, a placement by labels, an install instruction kept
//! for the next step holding the lock).

use std::time::Duration;

use jiff::Timestamp;
use tern_client::StatusCode;
use tern_core::wire::Heartbeat;

use crate::agent::agent_health;
use crate::ctx::Ctx;
use crate::error::{Error, IoContext, Result};
use crate::host_facts::{host_facts, host_os_version};
use crate::identity::{self, updater_id};
use crate::join::host_token;
use crate::log;
use crate::state::{self, LastUpdate, UpdateFile};

/// How often a run waiting out its jitter still heartbeats, so that ternd (which forgets
/// a host after three silent minutes) keeps seeing it.
const HEARTBEAT_WHILE_WAITING: Duration =
    Duration::from_secs(tern_core::wire::DEFAULT_HEARTBEAT_SECONDS);

/// Waits out a jitter without the lock, heartbeating what the host runs now and then.
pub(crate) fn wait_heartbeating(ctx: &Ctx, wait: Duration) {
    let deadline = std::time::Instant::now() + wait;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return;
        }
        std::thread::sleep(left.min(HEARTBEAT_WHILE_WAITING));
        if std::time::Instant::now() >= deadline {
            return;
        }
        // Without the lock another command may be saving update.yaml: it is replaced
        // whole, so this reads either version of it.
        if let Ok(Some(file)) = state::load(&ctx.layout.update_yaml()) {
            heartbeat(ctx, &file);
        }
    }
}

/// What became of a heartbeat.
#[derive(Debug)]
pub(crate) enum Sent {
    Accepted,
    /// Not sent (no server, no updater id) or not taken; says why.
    Failed(Error),
}

impl Sent {
    /// ternd refused the heartbeat's credentials (401, 403): a wrong or revoked token.
    pub(crate) fn refused_token(&self) -> Option<(StatusCode, Option<String>)> {
        match self {
            Self::Failed(Error::Http(tern_client::Error::HeartbeatRejected {
                status,
                reason,
                ..
            })) if *status == StatusCode::UNAUTHORIZED || *status == StatusCode::FORBIDDEN => {
                Some((*status, reason.as_ref().map(|r| r.message.clone())))
            }
            _ => None,
        }
    }
}

/// Best effort: tell ternd what this host runs, and record when and how it went (for
/// `status`). Never fails the run.
pub(crate) fn heartbeat(ctx: &Ctx, file: &UpdateFile) -> Sent {
    let sent = send_heartbeat(ctx, file);
    match &sent {
        Sent::Accepted | Sent::Failed(Error::NotEnabled) => {}
        Sent::Failed(e) if sent.refused_token().is_some() => log::warn(format!(
            "ternd refused this host's token: {e}; the run itself is not affected, but ternd does not hear from this host (check --join-token-file)"
        )),
        Sent::Failed(e) => log::warn(format!("heartbeat failed (ignored): {e}")),
    }
    record_heartbeat(ctx, &sent);
    sent
}

/// Saves when a heartbeat was sent and how it went, for `status`.
fn record_heartbeat(ctx: &Ctx, sent: &Sent) {
    let (accepted, error) = match sent {
        Sent::Accepted => (true, None),
        // Nothing was sent: nothing to record.
        Sent::Failed(Error::NotEnabled) => return,
        Sent::Failed(e) => (false, Some(e.to_string())),
    };
    state::save_heartbeat(
        &ctx.layout.heartbeat_file(),
        &state::LastHeartbeat {
            time: Timestamp::now(),
            accepted,
            error,
            by: Some(crate::self_check::running_release()),
        },
    );
}

fn send_heartbeat(ctx: &Ctx, file: &UpdateFile) -> Sent {
    let spec = &file.spec;
    if spec.server.is_empty() {
        return Sent::Failed(Error::NotEnabled);
    }
    let id = match updater_id(&ctx.layout) {
        Ok(id) => id,
        Err(e) => return Sent::Failed(e),
    };
    let token = match host_token(ctx, spec, &id) {
        Ok(t) => t,
        Err(e) => return Sent::Failed(e),
    };
    // After an environment failure the running version failed its health check, and
    // nothing has checked it since: the host is not healthy, though no version is blamed
    // (no rollback, no failed version) until an update succeeds. Otherwise what the
    // host sees: the service running and its health URL answering, when one is set;
    // nothing to observe is unknown, never healthy.
    let healthy = if file.status.environment_failure.is_some() {
        Some(false)
    } else {
        match agent_health(ctx, file) {
            tern_core::host_update::Health::Healthy => Some(true),
            tern_core::host_update::Health::Unhealthy(_) => Some(false),
            tern_core::host_update::Health::Unknown => None,
        }
    };
    let facts = host_facts(&ctx.layout, &file.spec, &file.status);
    let hb = Heartbeat {
        updater_id: id,
        host_id: identity::host_id(&ctx.settings),
        hostname: identity::hostname(&ctx.settings),
        group: spec.group.clone(),
        version: facts.version,
        updater_version: Some(env!("CARGO_PKG_VERSION").to_string()),
        updater_status: spec.updater_status(),
        rollback: file.status.rollback,
        failed_version: file.status.skip.clone(),
        healthy,
        follows: if spec.channel.is_some() {
            tern_core::wire::Follows::Channel
        } else {
            tern_core::wire::Follows::Rollout
        },
        install_failure: state::load_install_failure(&ctx.layout.install_failure_file()),
        update_failure: file
            .status
            .last_update
            .as_ref()
            .and_then(LastUpdate::failure),
        labels: facts.labels,
        arch: facts.arch,
        os: facts.os,
        os_version: host_os_version(),
        fips: facts.fips,
        // The host's own installer, and those it opted in to (`enable --installer`).
        installers: facts.installers,
        install_result: file.status.install_result.clone(),
        trust: Some(tern_core::wire::HostTrust {
            pinned: facts.trust_root > 0,
            root_version: facts.trust_root,
        }),
        product: spec.product.clone().unwrap_or_default(),
    };
    match ctx.http.heartbeat(&spec.server, &hb, token.as_deref()) {
        Err(e) => Sent::Failed(e.into()),
        Ok(answer) => {
            if let Some(u) = answer.unknown_group {
                log::warn(unknown_group_warning(&u));
            }
            if let Some(g) = answer.placed_group {
                log::info(placed_note(&g, &spec.group));
            }
            // Sent with or without the lock: the instruction is only kept here, and
            // run by the next step that holds the lock (`directive::run_pending`).
            if let Some(instruction) = answer.install {
                crate::pending_install::keep(&ctx.layout, &instruction);
            }
            Sent::Accepted
        }
    }
}

/// `enable`'s check that ternd takes this host's token, before anything is saved or
/// installed: a host enrolled with a wrong or revoked token would look enrolled and
/// never be heard. Other failures (ternd busy, 5xx) only warn: they pass.
pub(crate) fn check_token(ctx: &Ctx, file: &UpdateFile) -> Result<()> {
    if file.spec.server.is_empty() {
        // A channel without ternd: no heartbeats, nothing to check.
        return Ok(());
    }
    if let Some(path) = &file.spec.join_token_file {
        match std::fs::read_to_string(path) {
            Ok(t) if !t.trim().is_empty() => {}
            Ok(_) => {
                return Err(Error::TokenFile {
                    path: path.clone(),
                    problem: "the file is empty".into(),
                });
            }
            Err(e) => {
                return Err(Error::TokenFile {
                    path: path.clone(),
                    problem: e.to_string(),
                });
            }
        }
    }
    let mut sent = send_heartbeat(ctx, file);
    let credential = ctx.layout.credential_file();
    if sent.refused_token().is_some() && credential.exists() {
        // This host's credential was revoked: join again with the token given now.
        log::warn(format!(
            "ternd refused this host's credential ({}): joining again with the join token",
            credential.display()
        ));
        std::fs::remove_file(&credential).ctx("remove", &credential)?;
        sent = send_heartbeat(ctx, file);
    }
    record_heartbeat(ctx, &sent);
    if let Some((status, reason)) = sent.refused_token() {
        return Err(Error::TokenRefused {
            status,
            reason,
            token_file: file.spec.join_token_file.clone(),
        });
    }
    if let Sent::Failed(e) = sent {
        log::warn(format!(
            "heartbeat failed ({e}); enabling anyway: the next runs heartbeat again"
        ));
    }
    Ok(())
}

/// A name from the network, for a log line: printable characters only, at most 64.
fn clean(s: &str) -> String {
    tern_core::text::excerpt(s, 64)
}

/// What the host is told when the server places it by its labels (the name comes from
/// the network: cleaned as [`clean`] does).
fn placed_note(placed: &str, presented: &str) -> String {
    let presented = if presented.is_empty() {
        "no group".to_string()
    } else {
        format!("group {:?}", clean(presented))
    };
    format!(
        "ternd counts this host in group {:?} by its labels (it presents {presented})",
        clean(placed)
    )
}

/// The warning for a group the rollout lacks. The names come from the network: only
/// printable characters are kept and each is bounded, so a hostile answer cannot
/// forge log lines or flood them.
fn unknown_group_warning(u: &tern_core::wire::UnknownGroup) -> String {
    let mut groups: Vec<String> = u.groups.iter().take(20).map(|g| clean(g)).collect();
    if u.groups.len() > 20 {
        groups.push("…".into());
    }
    format!(
        "group {:?} is not one of this rollout's groups ({}); this host is updated with the catch-all group {:?} (check --group)",
        clean(&u.group),
        groups.join(", "),
        clean(&u.served_by)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_placement_note_keeps_hostile_names_harmless() {
        assert_eq!(
            placed_note("dev", ""),
            "ternd counts this host in group \"dev\" by its labels (it presents no group)"
        );
        let note = placed_note(&format!("x\n{}", "y".repeat(200)), "prod");
        assert!(
            !note.contains('\n') && note.contains('…') && note.contains("group \"prod\""),
            "{note}"
        );
    }

    #[test]
    fn the_unknown_group_warning_names_the_groups_and_keeps_hostile_names_harmless() {
        let u = tern_core::wire::UnknownGroup {
            group: "prdo".into(),
            served_by: "prod".into(),
            groups: vec!["dev".into(), "staging".into(), "prod".into()],
        };
        assert_eq!(
            unknown_group_warning(&u),
            "group \"prdo\" is not one of this rollout's groups (dev, staging, prod); this host is updated with the catch-all group \"prod\" (check --group)"
        );
        let hostile = tern_core::wire::UnknownGroup {
            group: "x\ntern-update: info: all good".into(),
            served_by: "p".repeat(10_000),
            groups: (0..1000).map(|i| format!("g{i}")).collect(),
        };
        let w = unknown_group_warning(&hostile);
        assert!(!w.contains('\n'), "{w}");
        assert!(w.len() < 1000, "{}", w.len());
    }
}
