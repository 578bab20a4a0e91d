//! Leader election on a `coordination.k8s.io/v1` Lease, so that of several controller
//! replicas exactly one writes to workloads at a time.
//!
//! Every write of the Lease is a compare-and-swap on its `resourceVersion` (the API
//! server answers 409 Conflict to a stale one), so two replicas that read the same
//! record cannot both take it. Expiry is judged on this replica's own monotonic clock,
//! never by comparing the record's `renewTime` with the local time: a Lease is free
//! once its record has not changed for its whole duration as this replica observed
//! it, which no clock skew between machines can shorten. A leader counts itself
//! leader only until its last successful write plus the duration, minus a tenth for
//! clock-rate drift; a follower waits the whole duration after the last change it
//! saw, which came no earlier than that write: their windows never overlap.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Api;
use kube::api::PostParams;

/// The longest duration a Lease record may claim (a hostile or broken record cannot
/// keep this replica waiting longer).
const MAX_LEASE_SECONDS: i32 = 3600;

/// What the elector needs to know about the Lease record it read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    /// `spec.holderIdentity`; `None` or empty: released.
    pub holder: Option<String>,
    /// `spec.leaseDurationSeconds` as the holder wrote it (untrusted).
    pub lease_seconds: Option<i32>,
}

/// What to do with the Lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// There is none: create it, held by this replica.
    Create,
    /// This replica holds it: write it again (a new `renewTime`).
    Renew,
    /// Released, or unchanged for its whole duration: take it.
    TakeOver,
    /// Another replica holds it.
    Follow { holder: String },
}

/// The election rule, pure: `me` is this replica's identity, `lease` the record read
/// (`None`: there is none), `unchanged_for` how long this replica has seen that same
/// record (same `resourceVersion`), and `ours` the duration this replica writes.
pub fn step(me: &str, lease: Option<&Observed>, unchanged_for: Duration, ours: Duration) -> Step {
    let Some(lease) = lease else {
        return Step::Create;
    };
    let holder = lease.holder.as_deref().unwrap_or("");
    if holder == me {
        return Step::Renew;
    }
    if holder.is_empty() {
        return Step::TakeOver;
    }
    // The holder's own duration when it is sane, ours otherwise; never shorter than
    // ours, so that a record claiming 1 s cannot make followers take over early.
    let claimed = lease
        .lease_seconds
        .filter(|s| (1..=MAX_LEASE_SECONDS).contains(s))
        .map_or(ours, |s| Duration::from_secs(s.unsigned_abs().into()));
    if unchanged_for >= claimed.max(ours) {
        Step::TakeOver
    } else {
        Step::Follow {
            holder: holder.to_string(),
        }
    }
}

/// Why a round of the election failed (the replica is then not the leader).
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("reading or writing the Lease {namespace}/{name}")]
    Api {
        namespace: String,
        name: String,
        #[source]
        source: Box<kube::Error>,
    },
    #[error("the Lease {namespace}/{name} has no resourceVersion: cannot write it safely")]
    NoResourceVersion { namespace: String, name: String },
}

/// Which Lease, and who this replica is.
#[derive(Clone, Debug)]
pub struct LeaseSettings {
    pub namespace: String,
    pub name: String,
    /// This replica's identity (the pod's name, as Kubernetes' own controllers use).
    pub identity: String,
    /// How long a write holds the Lease; renew well within it (a third is usual).
    pub duration: Duration,
}

/// The monotonic clock the election reads: how long a record stayed unchanged and until
/// when this replica leads. Injected so that tests move time instead of sleeping.
pub trait Monotonic: Send + Sync {
    fn now(&self) -> Instant;
}

/// The machine's monotonic clock (what the controller runs on).
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemMonotonic;

impl Monotonic for SystemMonotonic {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// A clock that moves only when told (tests): it starts at the instant it is made.
#[derive(Debug)]
pub struct ManualMonotonic {
    start: Instant,
    advanced: Mutex<Duration>,
}

impl ManualMonotonic {
    pub fn new() -> Self {
        Self {
            start: Instant::now(),
            advanced: Mutex::new(Duration::ZERO),
        }
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let mut advanced = self.advanced.lock().unwrap_or_else(PoisonError::into_inner);
        *advanced = advanced.saturating_add(by);
    }
}

impl Default for ManualMonotonic {
    fn default() -> Self {
        Self::new()
    }
}

impl Monotonic for ManualMonotonic {
    fn now(&self) -> Instant {
        let advanced = *self.advanced.lock().unwrap_or_else(PoisonError::into_inner);
        self.start + advanced
    }
}

/// One replica's side of the election.
pub struct Elector {
    api: Api<Lease>,
    settings: LeaseSettings,
    clock: Arc<dyn Monotonic>,
    /// The record's `resourceVersion` as last read, and since when this replica has
    /// seen it unchanged.
    seen: Option<(String, Instant)>,
    /// Until when this replica is the leader (its last successful write's start plus
    /// nine tenths of the duration).
    held_until: Option<Instant>,
}

impl Elector {
    /// An elector on the machine's monotonic clock.
    pub fn new(client: kube::Client, settings: LeaseSettings) -> Self {
        Self::with_clock(client, settings, Arc::new(SystemMonotonic))
    }

    /// An elector reading `clock` (tests pass a [`ManualMonotonic`]).
    pub fn with_clock(
        client: kube::Client,
        settings: LeaseSettings,
        clock: Arc<dyn Monotonic>,
    ) -> Self {
        Self {
            api: Api::namespaced(client, &settings.namespace),
            settings,
            clock,
            seen: None,
            held_until: None,
        }
    }

    /// Whether this replica may write now: it holds the Lease and its last write is
    /// recent enough that no other replica can have taken it.
    pub fn is_leader(&self) -> bool {
        self.held_until
            .is_some_and(|until| self.clock.now() < until)
    }

    pub fn identity(&self) -> &str {
        &self.settings.identity
    }

    /// One round: read the Lease, then create, renew or take it over when the rule
    /// says so. Returns whether this replica is the leader after the round. Any error,
    /// a conflict included, leaves it not the leader.
    pub async fn round(&mut self) -> Result<bool, LeaseError> {
        let result = self.try_round().await;
        if !matches!(result, Ok(true)) {
            self.held_until = None;
        }
        result
    }

    async fn try_round(&mut self) -> Result<bool, LeaseError> {
        let started = self.clock.now();
        let current = self
            .api
            .get_opt(&self.settings.name)
            .await
            .map_err(|e| self.api_error(e))?;
        let observed = current.as_ref().map(|l| {
            let spec = l.spec.as_ref();
            Observed {
                holder: spec.and_then(|s| s.holder_identity.clone()),
                lease_seconds: spec.and_then(|s| s.lease_duration_seconds),
            }
        });
        let version = current
            .as_ref()
            .and_then(|l| l.metadata.resource_version.clone());
        let unchanged_for = match (&self.seen, &version) {
            (Some((seen, since)), Some(now)) if seen == now => {
                started.saturating_duration_since(*since)
            }
            _ => {
                self.seen = version.clone().map(|v| (v, started));
                Duration::ZERO
            }
        };
        let step = step(
            &self.settings.identity,
            observed.as_ref(),
            unchanged_for,
            self.settings.duration,
        );
        let written = match step {
            Step::Follow { holder } => {
                tracing::debug!(%holder, "the Lease is held by another replica");
                return Ok(false);
            }
            Step::Create => {
                let lease = self.record(None, None, 0);
                match self.api.create(&PostParams::default(), &lease).await {
                    Ok(l) => l,
                    Err(e) if is_conflict(&e) => return Ok(false),
                    Err(e) => return Err(self.api_error(e)),
                }
            }
            Step::Renew | Step::TakeOver => {
                let Some(mut lease) = current else {
                    return Ok(false);
                };
                if version.is_none() {
                    return Err(LeaseError::NoResourceVersion {
                        namespace: self.settings.namespace.clone(),
                        name: self.settings.name.clone(),
                    });
                }
                let spec = lease.spec.take().unwrap_or_default();
                let transitions = spec.lease_transitions.unwrap_or(0).clamp(0, i32::MAX - 1);
                let (acquired, transitions) = if step == Step::Renew {
                    (spec.acquire_time, transitions)
                } else {
                    (None, transitions + 1)
                };
                let fresh = self.record(
                    lease.metadata.resource_version.take(),
                    acquired,
                    transitions,
                );
                lease.spec = fresh.spec;
                lease.metadata.resource_version = fresh.metadata.resource_version;
                match self
                    .api
                    .replace(&self.settings.name, &PostParams::default(), &lease)
                    .await
                {
                    Ok(l) => l,
                    Err(e) if is_conflict(&e) => return Ok(false),
                    Err(e) => return Err(self.api_error(e)),
                }
            }
        };
        self.seen = written
            .metadata
            .resource_version
            .map(|v| (v, self.clock.now()));
        let margin = self.settings.duration / 10;
        self.held_until = Some(started + self.settings.duration - margin);
        Ok(true)
    }

    /// The Lease as this replica writes it: held by it, renewed now.
    fn record(
        &self,
        resource_version: Option<String>,
        acquired: Option<MicroTime>,
        transitions: i32,
    ) -> Lease {
        let now = MicroTime(jiff::Timestamp::now());
        let seconds = i32::try_from(self.settings.duration.as_secs())
            .unwrap_or(MAX_LEASE_SECONDS)
            .clamp(1, MAX_LEASE_SECONDS);
        Lease {
            metadata: ObjectMeta {
                name: Some(self.settings.name.clone()),
                namespace: Some(self.settings.namespace.clone()),
                resource_version,
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.settings.identity.clone()),
                lease_duration_seconds: Some(seconds),
                acquire_time: Some(acquired.unwrap_or_else(|| now.clone())),
                renew_time: Some(now),
                lease_transitions: Some(transitions),
                ..LeaseSpec::default()
            }),
        }
    }

    fn api_error(&self, e: kube::Error) -> LeaseError {
        LeaseError::Api {
            namespace: self.settings.namespace.clone(),
            name: self.settings.name.clone(),
            source: Box::new(e),
        }
    }
}

/// 409: another replica wrote first (a stale `resourceVersion`, or a create of a Lease
/// that exists by now).
fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(status) if status.code == 409)
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: Duration = Duration::from_secs(15);

    fn held_by(holder: &str, seconds: Option<i32>) -> Observed {
        Observed {
            holder: Some(holder.to_string()),
            lease_seconds: seconds,
        }
    }

    #[test]
    fn the_election_rule() {
        let follow = |h: &str| Step::Follow {
            holder: h.to_string(),
        };
        let cases: &[(Option<Observed>, u64, Step)] = &[
            (None, 0, Step::Create),
            (Some(held_by("me", Some(15))), 0, Step::Renew),
            (Some(held_by("me", Some(15))), 3600, Step::Renew),
            (Some(held_by("other", Some(15))), 0, follow("other")),
            (Some(held_by("other", Some(15))), 14, follow("other")),
            (Some(held_by("other", Some(15))), 15, Step::TakeOver),
            // The holder's longer duration is honoured...
            (Some(held_by("other", Some(60))), 30, follow("other")),
            (Some(held_by("other", Some(60))), 60, Step::TakeOver),
            // ...a shorter one is not: never sooner than ours.
            (Some(held_by("other", Some(1))), 5, follow("other")),
            // Nonsense durations fall back to ours.
            (Some(held_by("other", Some(-5))), 14, follow("other")),
            (Some(held_by("other", Some(i32::MAX))), 15, Step::TakeOver),
            (Some(held_by("other", None)), 15, Step::TakeOver),
            // Released.
            (Some(held_by("", Some(15))), 0, Step::TakeOver),
            (
                Some(Observed {
                    holder: None,
                    lease_seconds: None,
                }),
                0,
                Step::TakeOver,
            ),
        ];
        for (lease, unchanged, want) in cases {
            assert_eq!(
                step("me", lease.as_ref(), Duration::from_secs(*unchanged), D),
                *want,
                "{lease:?} unchanged for {unchanged}s"
            );
        }
    }
}
