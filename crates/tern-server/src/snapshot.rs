//! What the public endpoints answer from, in memory: the rollout (with the mode the
//! config and version ask for right now) of the agent and of every other product, the
//! tools version and the channels. Refreshed after every local write and on every
//! change seen by a watch of the store.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use arc_swap::{ArcSwap, Guard};

use axum::body::Bytes;
use axum::http::HeaderValue;
use tern_core::gate::Answer;
use tern_core::resource::{AutoUpdateAgentRollout, AutoUpdateConfig, AutoUpdateVersion};
use tern_core::wire::{AutoUpdateSettings, FindResponse};

use crate::longpoll::{LongPoll, LongPollSettings};

pub(crate) use tern_core::api::Channel;

/// What find and the other public endpoints answer from: the current snapshot, swapped
/// whole by `state::refresh_snapshot`, and the finds held until it changes.
pub(crate) struct Answers {
    /// Read by every find: an `ArcSwap`, whose reads write nothing the cores share
    /// (a lock's count or the `Arc`'s would be written by both cores on every find).
    snapshot: ArcSwap<Snapshot>,
    /// Serializes refreshes, so that the last to finish saw the newest data.
    pub(crate) refresh_lock: tokio::sync::Mutex<()>,
    /// Find requests held until the host's answer changes.
    pub(crate) long_poll: LongPoll,
    /// `Cache-Control` of the public endpoints (`--public-max-age`), made once.
    pub(crate) cache_control: HeaderValue,
    /// The signed minimums last read (`release_check`), copied into each snapshot.
    revocation: RwLock<Arc<tern_core::revocation::Revocation>>,
}

impl Answers {
    pub(crate) fn new(public_max_age: u64, long_poll: LongPollSettings) -> Self {
        Self {
            snapshot: ArcSwap::from_pointee(Snapshot::default()),
            refresh_lock: tokio::sync::Mutex::new(()),
            long_poll: LongPoll::new(long_poll),
            // ASCII letters and digits: always a valid header value.
            cache_control: HeaderValue::from_str(&format!("public, max-age={public_max_age}"))
                .unwrap_or(HeaderValue::from_static("no-cache")),
            revocation: RwLock::default(),
        }
    }

    /// The signed minimums known now.
    pub(crate) fn revocation(&self) -> Arc<tern_core::revocation::Revocation> {
        Arc::clone(&self.revocation.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// Keeps `revocation`; whether it differs from what was known.
    pub(crate) fn set_revocation(&self, revocation: tern_core::revocation::Revocation) -> bool {
        let mut known = self.revocation.write().unwrap_or_else(|p| p.into_inner());
        if **known == revocation {
            return false;
        }
        *known = Arc::new(revocation);
        true
    }

    /// The snapshot find answers from now.
    pub(crate) fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot.load_full()
    }

    /// The snapshot for a request's work that does not wait (no `.await` while it is
    /// held): no reference count is taken.
    pub(crate) fn current(&self) -> Guard<Arc<Snapshot>> {
        self.snapshot.load()
    }

    /// Swaps in a new snapshot and wakes the held finds to look again.
    pub(crate) fn publish(&self, snapshot: Snapshot) {
        self.snapshot.store(Arc::new(snapshot));
        self.long_poll.snapshot_changed();
    }
}

/// The active directive with its installers (`Snapshot::directive`).
#[derive(Debug)]
pub(crate) struct ActiveDirective {
    pub(crate) spec: tern_core::directive::resource::DirectiveSpec,
    pub(crate) installers: BTreeMap<String, tern_core::directive::resource::Installer>,
}

impl ActiveDirective {
    /// The view the one answer reads.
    pub(crate) fn view(&self) -> tern_core::gate::Directive<'_> {
        tern_core::gate::Directive {
            spec: &self.spec,
            installers: &self.installers,
        }
    }
}

#[derive(Clone, Debug, Default)]
pub(crate) struct Snapshot {
    /// The rollout, its `autoupdate_mode` replaced by the mode config and version ask
    /// for now, so that suspend takes effect at once rather than at the next reconcile.
    pub(crate) rollout: Option<AutoUpdateAgentRollout>,
    /// The config, for what is the cluster's whether or not a rollout exists (the
    /// maintenance schedule channel hosts follow), and the mode in force.
    pub(crate) config: Option<AutoUpdateConfig>,
    /// The version resource: the mode in force with the config's.
    pub(crate) version: Option<AutoUpdateVersion>,
    /// The signed minimums of `--trust-root` (empty without one): revoked versions
    /// are held on every path.
    pub(crate) revocation: Arc<tern_core::revocation::Revocation>,
    pub(crate) tools_version: String,
    pub(crate) tools_auto_update: bool,
    pub(crate) channels: BTreeMap<String, Channel>,
    /// The global freeze, while one holds: the rollout's mode is then at least
    /// suspended, channels give no version and directives no install.
    pub(crate) freeze: Option<tern_core::api::Freeze>,
    /// Server-side pins: updater_id → when the pin lifts and what it holds (`pins`).
    pub(crate) pins: ServerPins,
    /// Every product but the agent (whose rollout, config and version are the fields
    /// above): the updater always, and each other product the store has.
    pub(crate) products: BTreeMap<String, ProductAnswers>,
    /// The active version directive and the installers it may name, as the store holds
    /// them: find tells from the facts a host sends whether it governs the host, the
    /// same on every replica and right after a restart.
    pub(crate) directive: Option<Arc<ActiveDirective>>,
    /// The find answers already serialized for this snapshot, by decision.
    find_bodies: FindBodies,
}

/// What find needs of the server pins (`pins`): by updater id, when the pin lifts and
/// the products it holds (empty: every product). A host uses one updater id for all
/// its products on a ternd, so a pin of every product holds all of them.
#[derive(Clone, Debug, Default)]
pub(crate) struct ServerPins(std::collections::HashMap<String, (jiff::Timestamp, Vec<String>)>);

impl ServerPins {
    pub(crate) fn new(
        pins: std::collections::HashMap<String, (jiff::Timestamp, Vec<String>)>,
    ) -> Self {
        Self(pins)
    }

    /// Whether `updater_id`'s pin holds `product` at `now`.
    pub(crate) fn holds(&self, updater_id: &str, product: &str, now: jiff::Timestamp) -> bool {
        tern_core::gate::Pins::until(self, updater_id, product).is_some_and(|until| now < until)
    }
}

impl tern_core::gate::Pins for ServerPins {
    fn until(&self, updater_id: &str, product: &str) -> Option<jiff::Timestamp> {
        if self.0.is_empty() {
            return None;
        }
        let (until, products) = self.0.get(updater_id)?;
        (products.is_empty() || products.iter().any(|p| p == product)).then_some(*until)
    }
}

/// One product's config (the one in force: its own or the shared one), version and
/// rollout as find answers from them: the rollout's `autoupdate_mode` replaced by the
/// mode they ask for now, a freeze of the product included, so that a suspend or a
/// freeze takes effect at once rather than at the next reconcile.
#[derive(Clone, Debug, Default)]
pub(crate) struct ProductAnswers {
    pub(crate) config: Option<AutoUpdateConfig>,
    pub(crate) version: Option<AutoUpdateVersion>,
    pub(crate) rollout: Option<AutoUpdateAgentRollout>,
}

impl ProductAnswers {
    pub(crate) fn build(
        product: &str,
        config: Option<AutoUpdateConfig>,
        version: Option<AutoUpdateVersion>,
        rollout: Option<&AutoUpdateAgentRollout>,
        freeze: Option<&tern_core::api::Freeze>,
    ) -> Self {
        let mode = tern_core::rollout::frozen_mode(
            tern_core::rollout::mode_in_force(config.as_ref(), version.as_ref()),
            freeze.is_some_and(|f| f.holds(product)),
        );
        let rollout = rollout.map(|r| {
            let mut r = r.clone();
            r.spec.autoupdate_mode = mode;
            r
        });
        Self {
            config,
            version,
            rollout,
        }
    }
}

/// Serialized find answers. A snapshot gives only a handful of different answers (start
/// or target version, update now or not, two jitters), and serializing one was a fifth
/// of a find's instructions (profiled), so each is serialized once. Read without a lock
/// (every find reads them; one that serializes a new answer adds it). Derived data: a
/// clone starts empty.
#[derive(Debug, Default)]
struct FindBodies(ArcSwap<Vec<(Answer, String, FindBody)>>);

/// A serialized find answer and its ETag (what a long-polling host sends back).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FindBody {
    pub(crate) body: Bytes,
    pub(crate) etag: HeaderValue,
}

impl FindBody {
    /// Copies of the bytes: a clone of the cached ones would count a reference on a line
    /// every core writes for every find, which costs more than copying a few hundred
    /// bytes into the response's own allocation.
    fn copy(&self) -> Self {
        Self {
            body: Bytes::copy_from_slice(&self.body),
            // Copied from a valid header value: valid.
            etag: HeaderValue::from_bytes(self.etag.as_bytes())
                .unwrap_or(HeaderValue::from_static("\"\"")),
        }
    }
}

impl Clone for FindBodies {
    fn clone(&self) -> Self {
        Self::default()
    }
}

/// More distinct answers than a snapshot can give; past it nothing more is kept.
const MAX_FIND_BODIES: usize = 32;

impl Snapshot {
    pub(crate) fn build(
        config: Option<&AutoUpdateConfig>,
        version: Option<&AutoUpdateVersion>,
        rollout: Option<&AutoUpdateAgentRollout>,
        channels: BTreeMap<String, Channel>,
        freeze: Option<tern_core::api::Freeze>,
    ) -> Self {
        let agent = ProductAnswers::build(
            tern_core::product::AGENT,
            config.cloned(),
            version.cloned(),
            rollout,
            freeze.as_ref(),
        );
        Self {
            rollout: agent.rollout,
            config: agent.config,
            version: agent.version,
            revocation: Arc::default(),
            tools_version: String::new(),
            tools_auto_update: false,
            channels,
            freeze,
            pins: ServerPins::default(),
            products: BTreeMap::new(),
            directive: None,
            find_bodies: FindBodies::default(),
        }
    }

    /// The fleet as the one answer reads it, from this snapshot and what the replica
    /// knows of itself (`cut_off`), its settings (`require_trust`) and its clock.
    pub(crate) fn fleet(
        &self,
        cut_off: bool,
        require_trust: bool,
        jitter: bool,
        now: jiff::Timestamp,
    ) -> tern_core::gate::Fleet<'_> {
        tern_core::gate::Fleet {
            config: self.config.as_ref(),
            version: self.version.as_ref(),
            rollout: self.rollout.as_ref(),
            freeze: self.freeze.as_ref(),
            pins: &self.pins,
            revocation: &self.revocation,
            require_trust,
            cut_off,
            directive: self.directive.as_deref().map(ActiveDirective::view),
            jitter,
            now,
        }
    }

    /// [`fleet`](Self::fleet) for `product`: its config (its own or the shared one),
    /// version and rollout, the freeze, pins, revocation and cut-off of every product.
    /// A product this ternd does not serve has no rollout (find answers `no_rollout`).
    /// The directive governs the agent only.
    pub(crate) fn fleet_for(
        &self,
        product: &str,
        cut_off: bool,
        require_trust: bool,
        jitter: bool,
        now: jiff::Timestamp,
    ) -> tern_core::gate::Fleet<'_> {
        let mut fleet = self.fleet(cut_off, require_trust, jitter, now);
        if product != tern_core::product::AGENT {
            let answers = self.products.get(product);
            fleet.config = answers.and_then(|p| p.config.as_ref());
            fleet.version = answers.and_then(|p| p.version.as_ref());
            fleet.rollout = answers.and_then(|p| p.rollout.as_ref());
            fleet.directive = None;
        }
        fleet
    }

    /// Whether this ternd serves `product` (the agent, the updater, or another the store
    /// has).
    pub(crate) fn serves(&self, product: &str) -> bool {
        product == tern_core::product::AGENT || self.products.contains_key(product)
    }

    /// `product`'s rollout, as find answers from it.
    pub(crate) fn rollout_of(&self, product: &str) -> Option<&AutoUpdateAgentRollout> {
        if product == tern_core::product::AGENT {
            self.rollout.as_ref()
        } else {
            self.products.get(product)?.rollout.as_ref()
        }
    }

    /// The tools' version and flag, worked out once the snapshot is complete (the one
    /// answer's `gate::tools`: never a target its canaries failed, nor a revoked one).
    pub(crate) fn settle_tools(&mut self) {
        let (version, auto) =
            tern_core::gate::tools(&self.fleet(false, false, true, jiff::Timestamp::UNIX_EPOCH));
        self.tools_version = version.map(|v| v.to_string()).unwrap_or_default();
        self.tools_auto_update = auto;
    }

    /// The JSON of [`response`](Self::response) for `decision` and its ETag,
    /// serialized once per snapshot.
    pub(crate) fn find_body(&self, decision: &Answer, edition: &str) -> FindBody {
        let known = |bodies: &[(Answer, String, FindBody)]| {
            bodies
                .iter()
                .find(|(d, e, _)| d == decision && e == edition)
                .map(|(_, _, body)| body.copy())
        };
        if let Some(body) = known(&self.find_bodies.0.load()) {
            return body;
        }
        // Serializing plain structs of strings, numbers and booleans cannot fail.
        let body =
            Bytes::from(serde_json::to_vec(&self.response(decision, edition)).unwrap_or_default());
        let etag = crate::longpoll::etag_of(&body);
        let found = FindBody {
            // Quotes and hex digits: always a valid header value.
            etag: HeaderValue::from_str(&etag).unwrap_or(HeaderValue::from_static("\"\"")),
            body,
        };
        // Another find may have added it, or others, meanwhile: added only if still
        // missing, and the bound kept.
        self.find_bodies.0.rcu(|bodies| {
            let mut bodies = Vec::clone(bodies);
            if bodies.len() < MAX_FIND_BODIES && known(&bodies).is_none() {
                bodies.push((decision.clone(), edition.to_owned(), found.clone()));
            }
            bodies
        });
        found
    }

    fn response(&self, decision: &Answer, edition: &str) -> FindResponse {
        let agent = decision.settings();
        FindResponse {
            edition: edition.to_string(),
            fips: false,
            server_version: env!("CARGO_PKG_VERSION").to_string(),
            auto_update: AutoUpdateSettings {
                tools_version: self.tools_version.clone(),
                tools_auto_update: self.tools_auto_update,
                ..agent
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decision(version: Option<&str>, update: bool, jitter_seconds: u64) -> Answer {
        Answer {
            version: version.map(|v| tern_core::version::Version::parse(v).unwrap()),
            holds: if update {
                tern_core::hold::Holds::NONE
            } else {
                tern_core::hold::Holds::of([tern_core::hold::Hold::GroupNotStarted])
            },
            jitter_seconds,
            critical: false,
        }
    }

    #[test]
    fn memoized_find_bodies_are_the_answers() {
        let snap = Snapshot {
            tools_version: "1.0.0".into(),
            ..Snapshot::default()
        };
        let decisions = [
            decision(None, false, 60),
            decision(Some("1.0.0"), false, 60),
            decision(Some("1.1.0"), true, 60),
            decision(Some("1.1.0"), true, 10),
            decision(Some("1.1.0-rc.1"), true, 0),
        ];
        for round in 0..2 {
            let mut seen = Vec::new();
            for d in &decisions {
                for edition in ["community", "enterprise"] {
                    let body = snap.find_body(d, edition).body;
                    let want = serde_json::to_vec(&snap.response(d, edition)).unwrap();
                    assert_eq!(
                        body.as_ref(),
                        want.as_slice(),
                        "round {round}: {d:?} {edition}"
                    );
                    assert!(!seen.contains(&body), "two decisions, one body");
                    seen.push(body);
                }
            }
        }
        assert_eq!(snap.find_bodies.0.load().len(), 2 * decisions.len());
        // A clone (a new snapshot) starts without them.
        assert!(snap.clone().find_bodies.0.load().is_empty());
    }

    #[test]
    fn tools_default_to_the_agents_target() {
        let version = tern_core::fixtures::version("1.0.0", "1.1.0", "regular");
        let version = AutoUpdateVersion::from_text(&version).unwrap();
        let mut snap = Snapshot::build(None, Some(&version), None, BTreeMap::new(), None);
        snap.settle_tools();
        assert_eq!(snap.tools_version, "1.1.0");
    }

    /// A pin naming no product holds the host's every product; one naming products
    /// holds those alone; a lifted one holds nothing.
    #[test]
    fn a_pin_holds_the_products_it_names_or_all() {
        let until: jiff::Timestamp = "2026-12-01T00:00:00Z".parse().unwrap();
        let now: jiff::Timestamp = "2026-11-23T09:00:00Z".parse().unwrap();
        let pins = ServerPins::new(
            [
                ("all".to_string(), (until, Vec::new())),
                ("upd".to_string(), (until, vec!["updater".to_string()])),
            ]
            .into(),
        );
        for product in ["agent", "updater", "sidecar"] {
            assert!(pins.holds("all", product, now), "{product}");
            assert_eq!(pins.holds("upd", product, now), product == "updater");
            assert!(!pins.holds("none", product, now));
        }
        assert!(!pins.holds("all", "agent", until), "lifted at its time");
    }

    #[test]
    fn memo_is_bounded() {
        let snap = Snapshot::default();
        for jitter in 0..(2 * MAX_FIND_BODIES as u64) {
            let d = decision(Some("1.0.0"), true, jitter);
            let body = snap.find_body(&d, "community").body;
            assert_eq!(
                body.as_ref(),
                serde_json::to_vec(&snap.response(&d, "community")).unwrap()
            );
        }
        assert_eq!(snap.find_bodies.0.load().len(), MAX_FIND_BODIES);
    }
}
