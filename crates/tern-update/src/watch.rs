//! `watch`: between the timer's runs, a long-poll find. ternd holds the request until
//! this host's answer changes (or for the hold); when the new answer says "update
//! now", the watcher runs `tern-update update`, the timer's own command (its lock,
//! its hand-over to the active version's updater, its decision), so the timer and the
//! watcher never update at once and decide alike. The timer stays: it is the safety
//! net when the watcher or the server's long poll is missing.
//!
//! Everything the server sends is untrusted: the hold is the host's own (capped),
//! each request has its own deadline, errors back off exponentially with jitter, and
//! a server that answers at once (an older ternd, one holding too many requests, or a
//! broken one) is asked less and less often rather than in a loop.

use std::ffi::OsString;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::ctx::Ctx;
use crate::error::Result;
use crate::log;
use crate::state;
use crate::{host_facts, identity, random};

/// The longest hold a host asks for (ternd caps it too, at `--long-poll-max-hold`).
pub const MAX_HOLD_SECONDS: u64 = 600;
/// How long past its hold one request may take: ternd's release jitter (3 s by
/// default) and the network.
const HOLD_GRACE: Duration = Duration::from_secs(60);
/// Backoff bounds: after errors, and after answers that came back at once.
const ERROR_BACKOFF_CAP: Duration = Duration::from_secs(300);
const QUICK_BACKOFF_CAP: Duration = Duration::from_secs(60);
const BACKOFF_BASE: Duration = Duration::from_secs(1);
/// A ternd that sends no ETag does not long-poll: asked again this rarely (it may be
/// upgraded meanwhile); the timer keeps the host updated.
const NO_LONG_POLL_RECHECK: Duration = Duration::from_secs(300);
/// A hold the server says ran out (`expired`) after at least this long counts as a
/// hold, even when shorter than half ours: ternd caps holds (`--long-poll-max-hold`,
/// 50 s by default) and a host may ask for more. Shorter, it is paced as an answer
/// that came back at once, so a server cannot make the host ask in a loop.
const SHORTEST_SERVER_HOLD: Duration = Duration::from_secs(10);
/// How often an idle watcher (not enabled, channel mode) reads update.yaml again.
const IDLE_RECHECK: Duration = Duration::from_secs(60);

/// When to ask again: the pacing of the watcher's requests, pure so that it is tested
/// without a clock.
#[derive(Debug, Default)]
pub(crate) struct Pacer {
    failures: u32,
    quick: u32,
}

impl Pacer {
    /// After a failed request: exponential from [`BACKOFF_BASE`], capped.
    pub(crate) fn after_error(&mut self) -> Duration {
        self.failures = self.failures.saturating_add(1);
        self.quick = 0;
        backoff(self.failures, ERROR_BACKOFF_CAP)
    }

    /// After an answer that took `took` for a hold of `hold`: at once when it was held
    /// (half the hold or more, or a hold the server `expired` after at least
    /// [`SHORTEST_SERVER_HOLD`]); otherwise a pause that doubles with each answer in a
    /// row that came back early.
    pub(crate) fn after_answer(
        &mut self,
        took: Duration,
        hold: Duration,
        expired: bool,
    ) -> Duration {
        self.failures = 0;
        if took >= hold / 2 || (expired && took >= SHORTEST_SERVER_HOLD) {
            self.quick = 0;
            return Duration::ZERO;
        }
        self.quick = self.quick.saturating_add(1);
        backoff(self.quick, QUICK_BACKOFF_CAP)
    }
}

/// `BACKOFF_BASE · 2^(n-1)`, at most `cap`.
fn backoff(n: u32, cap: Duration) -> Duration {
    tern_core::backoff::Backoff::new(BACKOFF_BASE, cap).after(n)
}

/// A pause of `d` spread over [d/2, d] (`random` in [0, u64::MAX]), so that hosts that
/// failed together do not retry together.
pub(crate) fn spread(d: Duration, random: u64) -> Duration {
    let half = d / 2;
    let span = u64::try_from((d - half).as_millis()).unwrap_or(u64::MAX);
    half + Duration::from_millis(random % span.saturating_add(1))
}

fn pause(d: Duration) {
    if !d.is_zero() {
        std::thread::sleep(spread(d, random::random_up_to(u64::MAX)));
    }
}

/// What `watch` needs: the hold to ask for and the command line of the timer's
/// `update` (this binary and the global flags it was given).
pub struct WatchArgs {
    pub hold: Duration,
    pub update_command: Vec<OsString>,
}

/// Why the watcher has nothing to watch now.
fn idle_reason(file: Option<&state::UpdateFile>) -> Option<&'static str> {
    let Some(file) = file else {
        return Some("not enabled (no update.yaml)");
    };
    if file.spec.channel.is_some() {
        return Some("this host follows a channel, which has no long poll");
    }
    if file.spec.server.is_empty() {
        return Some("no server is set");
    }
    if !file.spec.enabled {
        return Some("updates are disabled (`tern-update enable` turns them on)");
    }
    None
}

/// Runs until killed (systemd stops it). Returns only on an error reading the host's
/// own state.
pub fn run(ctx: &Ctx, args: &WatchArgs) -> Result<()> {
    let hold = args.hold.clamp(
        Duration::from_secs(1),
        Duration::from_secs(MAX_HOLD_SECONDS),
    );
    let mut pacer = Pacer::default();
    let mut seen: Option<String> = None;
    let mut said_idle: Option<&'static str> = None;
    let mut said_watching = false;
    let mut said_no_long_poll = false;
    loop {
        let file = state::load(&ctx.layout.update_yaml())?;
        // `idle_reason` is `None` only for a file that is there.
        let idle = idle_reason(file.as_ref());
        let (None, Some(file)) = (idle, file) else {
            let why = idle.unwrap_or("not enabled (no update.yaml)");
            if said_idle != Some(why) {
                log::info(format!(
                    "watch: nothing to watch: {why}; looking again every {}s",
                    IDLE_RECHECK.as_secs()
                ));
                said_idle = Some(why);
                said_watching = false;
            }
            std::thread::sleep(IDLE_RECHECK);
            continue;
        };
        said_idle = None;
        let (server, group) = (&file.spec.server, &file.spec.group);
        if !said_watching {
            log::info(format!(
                "watch: long-polling {server} for group {group:?} (holds of up to {}s); the timer still runs",
                hold.as_secs()
            ));
            said_watching = true;
        }
        let id = identity::updater_id(&ctx.layout)?;
        let asked = Instant::now();
        let facts = host_facts::host_facts(&ctx.layout, &file.spec, &file.status);
        let polled = match ctx.http.find_long_poll(
            server,
            group,
            &id,
            &facts,
            hold,
            HOLD_GRACE,
            seen.as_deref(),
        ) {
            Ok(p) => p,
            Err(e) => {
                let wait = pacer.after_error();
                log::warn(format!(
                    "watch: find failed ({e}); asking again in up to {}s",
                    wait.as_secs()
                ));
                pause(wait);
                continue;
            }
        };
        let took = asked.elapsed();
        let Some(etag) = polled.etag else {
            if !said_no_long_poll {
                log::warn(format!(
                    "watch: {server} answers find without an ETag: it does not long-poll; asking again every {}s, the timer keeps this host updated",
                    NO_LONG_POLL_RECHECK.as_secs()
                ));
                said_no_long_poll = true;
            }
            seen = None;
            pause(NO_LONG_POLL_RECHECK);
            continue;
        };
        said_no_long_poll = false;
        let changed = seen.as_deref() != Some(etag.as_str());
        seen = Some(etag);
        let a = &polled.find.auto_update;
        if changed && a.agent_auto_update {
            log::info(format!(
                "watch: ternd says update to {} now{}: running `update`",
                tern_core::text::excerpt(&a.agent_version, 64),
                if polled.released {
                    " (released by a change, already spread by ternd)"
                } else {
                    ""
                }
            ));
            run_update(&args.update_command, polled.released);
        }
        pause(pacer.after_answer(took, hold, polled.expired));
    }
}

/// `tern-update … update` as a child, as the timer runs it. `released`: ternd spread
/// the hosts this change released, so the update skips its own jitter.
fn run_update(command: &[OsString], released: bool) {
    let Some((program, args)) = command.split_first() else {
        return;
    };
    let mut cmd = Command::new(program);
    cmd.args(args).arg("update");
    if released {
        cmd.arg("--released");
    }
    match cmd.status() {
        Ok(s) if s.success() => {}
        Ok(s) => log::warn(format!(
            "watch: `update` ended with {s}; the timer will try again"
        )),
        Err(e) => log::warn(format!(
            "watch: cannot run {}: {e}; the timer will update this host",
            std::path::Path::new(program).display()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOLD: Duration = Duration::from_secs(50);

    #[test]
    fn errors_back_off_exponentially_to_a_cap() {
        let mut p = Pacer::default();
        let waits: Vec<u64> = (0..12).map(|_| p.after_error().as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300]);
        for _ in 0..100 {
            assert_eq!(p.after_error(), ERROR_BACKOFF_CAP, "no overflow");
        }
        // An answer ends it.
        assert_eq!(p.after_answer(HOLD, HOLD, true), Duration::ZERO);
        assert_eq!(p.after_error().as_secs(), 1);
    }

    #[test]
    fn a_server_that_answers_at_once_is_asked_less_and_less() {
        let mut p = Pacer::default();
        let quick = Duration::from_millis(3);
        let waits: Vec<u64> = (0..9)
            .map(|_| p.after_answer(quick, HOLD, false).as_secs())
            .collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
        // A held answer (a change late in the hold, or the hold's end): at once again.
        assert_eq!(p.after_answer(HOLD / 2, HOLD, false), Duration::ZERO);
        assert_eq!(p.after_answer(quick, HOLD, false).as_secs(), 1);
    }

    /// ternd caps holds below what a host may ask: a hold it ends after 50 s of our 300
    /// is a hold, not an answer that came back early; an `expired` at once is not.
    #[test]
    fn a_hold_the_server_capped_is_asked_again_at_once() {
        let mut p = Pacer::default();
        let ours = Duration::from_secs(300);
        for _ in 0..5 {
            assert_eq!(p.after_answer(HOLD, ours, true), Duration::ZERO);
        }
        assert_eq!(
            p.after_answer(HOLD, ours, false).as_secs(),
            1,
            "not labelled"
        );
        let waits: Vec<u64> = (0..4)
            .map(|_| p.after_answer(Duration::from_secs(2), ours, true).as_secs())
            .collect();
        assert_eq!(waits, [2, 4, 8, 16], "`expired` at once is paced");
        assert_eq!(
            p.after_answer(SHORTEST_SERVER_HOLD, ours, true),
            Duration::ZERO
        );
    }

    #[test]
    fn spread_stays_in_the_upper_half() {
        let d = Duration::from_secs(8);
        for r in [0, 1, 3999, 4000, 4001, u64::MAX / 3, u64::MAX] {
            let s = spread(d, r);
            assert!(s >= d / 2 && s <= d, "{r}: {s:?}");
        }
        assert_eq!(spread(Duration::ZERO, 7), Duration::ZERO);
    }

    #[test]
    fn idle_without_a_server_to_watch() {
        assert!(idle_reason(None).is_some());
        let mut file = state::UpdateFile::default();
        assert_eq!(idle_reason(Some(&file)), Some("no server is set"));
        file.spec.server = "https://ternd".into();
        file.spec.enabled = true;
        assert_eq!(idle_reason(Some(&file)), None);
        file.spec.enabled = false;
        assert!(idle_reason(Some(&file)).unwrap().contains("disabled"));
        file.spec.enabled = true;
        file.spec.channel = Some("https://chan".into());
        assert!(idle_reason(Some(&file)).unwrap().contains("channel"));
    }
}
