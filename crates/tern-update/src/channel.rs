//! Channel mode (seed 001): the host follows a channel's `version`, updating inside
//! its maintenance window, at once when the channel's `critical` says `yes`, and
//! outside the window when the agent is unhealthy. This module gathers the inputs
//! (the channel's two answers, the schedule from ternd, what the service looks like);
//! tern-core's `host_update` decides.

use jiff::Timestamp;
use tern_core::host_update::{CriticalAnswer, Source, VersionAnswer, WindowState};

use crate::ctx::Ctx;
use crate::decide::{self, Decision};
use crate::log;
use crate::state::{ChannelSeen, UpdateFile};
use crate::{agent, identity};

/// The decision of one run in channel mode, and the channel's version answer it was
/// made from; `file.status` keeps what the channel answered and the schedule ternd
/// sent (the caller saves it).
pub(crate) fn decide(
    ctx: &Ctx,
    file: &mut UpdateFile,
    now_flag: bool,
) -> (Decision, VersionAnswer) {
    let Some(channel) = file.spec.channel.clone() else {
        let none = VersionAnswer::Unreachable("no channel configured".into());
        return (Decision::Nothing("no channel configured".into()), none);
    };
    let (version, critical) = answers(ctx, &file.spec, &channel);
    refresh_schedule(ctx, file);
    let clock = Timestamp::now();
    // Inside or outside the maintenance window: a host that never had a schedule (ternd
    // has not sent one, or the channel has no ternd) knows none and holds all but a
    // critical version; the stored schedule was checked when it came, so a hand-edited
    // update.yaml is no window either.
    let window = WindowState::of(file.status.schedule.as_ref(), clock);
    let health = agent::agent_health(ctx, file);
    let decision = decide::decide_source(
        &file.spec,
        &file.status,
        Source::Channel {
            version: version.clone(),
            critical: critical.clone(),
            window,
        },
        health,
        clock,
        now_flag,
    );
    file.status.channel = Some(ChannelSeen {
        time: clock,
        version: match &version {
            VersionAnswer::Version(v) => v.to_string(),
            VersionAnswer::Unreachable(why) => format!("(unreachable: {why})"),
            VersionAnswer::Malformed(why) => format!("(malformed: {why})"),
        },
        critical: match &critical {
            CriticalAnswer::Yes => "yes".into(),
            CriticalAnswer::Other(v) => v.clone(),
            CriticalAnswer::Unreachable(why) => {
                format!("(unreachable: {why}; taken as not critical)")
            }
        },
        in_window: window == WindowState::Open,
        window_known: window != WindowState::Unknown,
        decision: match &decision {
            Decision::Update { target, trigger } => format!("update to {target} ({trigger:?})"),
            Decision::Nothing(why) | Decision::Refused(why) => why.clone(),
        },
    });
    (decision, version)
}

/// The channel's two answers, read strictly; an unreachable one says why. A channel
/// this host's ternd serves learns who asks, so that a pin of the host holds it.
pub(crate) fn answers(
    ctx: &Ctx,
    spec: &crate::state::Spec,
    channel: &str,
) -> (VersionAnswer, CriticalAnswer) {
    let ours = !spec.server.is_empty() && channel.starts_with(spec.server.trim_end_matches('/'));
    let id = identity::updater_id(&ctx.layout).ok().filter(|_| ours);
    let updater_id = id.as_deref();
    let version = match ctx.http.channel_value_as(channel, "version", updater_id) {
        Ok(body) => VersionAnswer::from_body(&body),
        Err(why) => VersionAnswer::Unreachable(why),
    };
    let critical = match ctx.http.channel_value_as(channel, "critical", updater_id) {
        Ok(body) => CriticalAnswer::from_body(&body),
        Err(why) => CriticalAnswer::Unreachable(why),
    };
    (version, critical)
}

/// Asks ternd (when the host has one) for its group's maintenance schedule. A failed
/// request keeps the last one: a host does not need to rediscover its window while
/// the server is away (seed 001).
fn refresh_schedule(ctx: &Ctx, file: &mut UpdateFile) {
    if file.spec.server.is_empty() {
        return;
    }
    let kept = if file.status.schedule.is_some() {
        "keeping the last one"
    } else {
        "none is known yet: only a critical version installs"
    };
    match ctx.http.schedule(&file.spec.server, &file.spec.group) {
        Ok(s) => match s.window() {
            Ok(_) => file.status.schedule = Some(s),
            Err(why) => log::warn(format!(
                "ternd's maintenance schedule is not usable ({why}); {kept}"
            )),
        },
        Err(e) => log::warn(format!(
            "cannot refresh the maintenance schedule ({e}); {kept}"
        )),
    }
}
