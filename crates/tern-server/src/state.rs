//! The shared state of one ternd replica.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::FromRef;
use jiff::SignedDuration;
use tern_core::resource::{AutoUpdateAgentRollout, AutoUpdateConfig, AutoUpdateVersion};
use tern_store::{LeaseKeeper, Store};
use tokio::sync::Notify;

use crate::auth::Authenticator;
use crate::clock::{Clock, SharedClock};
use crate::directive_loop::DirectiveState;
use crate::downloads::Installer;
use crate::error::ApiResult;
use crate::group_fallback::Fallbacks;
use crate::inventory::Inventory;
use crate::keys;
use crate::metrics::Metrics;
use crate::notify::Notifiers;
use crate::ratelimit::{RateLimiter, RateLimits};
use crate::resources::{self, Stored};
use crate::snapshot::{Answers, Channel, Snapshot};

/// Tunables of a replica (from the command line).
#[derive(Clone, Debug)]
pub struct Settings {
    pub data_dir: PathBuf,
    pub replica_id: String,
    /// How often reports are written and the rollout reconciled.
    pub report_period: SignedDuration,
    /// How often instead while the rollout is moving (`rollout::in_motion`); `None`:
    /// the report period throughout.
    pub active_report_period: Option<Duration>,
    /// While the rollout moves, the report after a change among this replica's hosts
    /// (`rollout::ReportPeriods::after_change`); `None`: no early report.
    pub report_after_change: Option<Duration>,
    /// What updaters are told in `next_heartbeat_seconds`; agents silent for three
    /// intervals are forgotten.
    pub heartbeat_interval: Duration,
    pub find_rate: f64,
    pub find_burst: u32,
    pub heartbeat_rate: f64,
    pub heartbeat_burst: u32,
    pub leader_ttl: Duration,
    pub edition: String,
    /// Seconds of `Cache-Control: max-age` on public answers.
    pub public_max_age: u64,
    /// Agents tracked in memory at most (`--max-agents`).
    pub max_agents: usize,
    /// Of those, agents heartbeating with a shared agent token at most
    /// (`--max-shared-token-hosts`).
    pub max_shared_token_hosts: usize,
    /// How long this replica may go without reaching its store and still tell hosts
    /// to update (`--store-contact-bound`; zero: forever).
    pub store_contact_bound: Duration,
    /// How long a host must have been heard from to be offered as a canary
    /// (`--canary-tenure`).
    pub canary_tenure: SignedDuration,
    /// How often the directive loop passes over this replica's hosts
    /// (`--directive-period`).
    pub directive_period: Duration,
    /// The signed release repository target versions are checked against
    /// (`--trust-root`); `None`: versions are not checked.
    pub release_trust: Option<crate::trust::ReleaseTrust>,
    /// Long-poll find's bounds (`--long-poll-…`).
    pub long_poll: crate::longpoll::LongPollSettings,
    /// Where the leader runs groups' canary analyses (`--prometheus-url`); `None`: a
    /// group with an analysis holds at its canaries.
    pub prometheus: Option<std::sync::Arc<crate::analysis::Prometheus>>,
    /// What the API may reach of ternd's own secrets, and admin rate limits.
    pub security: SecuritySettings,
    /// Where the hosts download a version (`--artifact-url-template`, with
    /// `--artifact-ca-cert`): `new-rollout` checks the tarball and its `.sha256` are
    /// there for the fleet's platforms and warns when not. `None`: not checked.
    pub artifact_check: Option<crate::artifacts::ArtifactCheck>,
}

/// Log lines of refused authentications per second (each says how many were held
/// back before it); every refusal is counted in `tern_auth_refused_total`.
const REFUSAL_LOG_PER_SECOND: f64 = 1.0;
const REFUSAL_LOG_BURST: u32 = 10;

/// The security settings of `ternd start` (docs/security.md).
#[derive(Clone, Debug)]
pub struct SecuritySettings {
    /// The environment variables of ternd that a controller's configuration may name
    /// as a secret to send (`--controller-secret-env`); any other name is refused, so
    /// that an API token cannot have ternd send its other secrets elsewhere.
    pub controller_secret_env: Vec<String>,
    /// Admin requests per second per token (`--admin-rate`; 0: no limit).
    pub admin_rate: f64,
    /// Admin requests a token may make at once before `admin_rate` applies.
    pub admin_burst: u32,
    /// Refused authentications per second per client address on admin routes
    /// (`--auth-failure-rate`; 0: no limit); past it, the address's admin requests
    /// whose token this replica has not accepted lately get 429 before any store read.
    pub auth_failure_rate: f64,
    /// Refused authentications an address may have at once before
    /// `auth_failure_rate` applies.
    pub auth_failure_burst: u32,
    /// Refuse heartbeats and find of hosts that pin no release root
    /// (`--require-trust`).
    pub require_trust: bool,
    /// Whether the shared agent tokens of earlier releases are accepted
    /// (`--shared-agent-token`). `None`: as the store says, which `serve` resolves:
    /// refused on stores initialised by this release or later, accepted (deprecated,
    /// with a warning) on older ones. Embeddings that never resolve it accept them.
    pub shared_agent_token: Option<SharedAgentToken>,
}

/// What ternd does with a shared agent token (an agent token bound to no host and not
/// minted for a controller), `--shared-agent-token`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SharedAgentToken {
    /// Accepted for heartbeats and joins (deprecated; counted in
    /// `tern_inventory_shared_token_hosts`).
    Allow,
    /// Refused with 403 `shared_token_refused`: hosts use their own credentials.
    Refuse,
}

impl Default for SecuritySettings {
    fn default() -> Self {
        Self {
            controller_secret_env: Vec::new(),
            admin_rate: 50.0,
            admin_burst: 500,
            auth_failure_rate: 1.0,
            auth_failure_burst: 100,
            require_trust: false,
            shared_agent_token: None,
        }
    }
}

impl SecuritySettings {
    /// True when shared agent tokens are refused.
    pub(crate) fn refuses_shared_agent_token(&self) -> bool {
        self.shared_agent_token == Some(SharedAgentToken::Refuse)
    }

    /// Whether a controller may read the variable `name`.
    pub(crate) fn secret_env_allowed(&self, name: &str) -> bool {
        self.controller_secret_env.iter().any(|n| n == name)
    }
}

impl Settings {
    pub(crate) fn max_silence(&self) -> Duration {
        self.heartbeat_interval.saturating_mul(3)
    }

    pub(crate) fn report_ttl(&self) -> Duration {
        Duration::from_secs(3600)
    }

    /// How long after it starts this replica's reports say it is warming up: long
    /// enough for every connected host to heartbeat once and settle.
    pub(crate) fn warm_up(&self) -> Duration {
        self.heartbeat_interval
            .saturating_add(self.report_period.unsigned_abs())
    }
}

/// The shared state of one replica, by concern: each part below is owned by the code
/// that keeps it, so a function's signature shows which parts it touches. Each part is
/// behind its own `Arc`: the router's state is the whole (cloned once per route when the
/// router is built), and a handler takes only its parts (`State<Arc<Part>>`, or
/// [`Resources`], by [`FromRef`]) at the cost of one reference count each.
#[derive(Clone)]
pub struct AppState {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) clock: Arc<dyn Clock>,
    pub settings: Arc<Settings>,
    pub(crate) auth: Arc<Authenticator>,
    pub(crate) metrics: Arc<Metrics>,
    /// Alert notices to the `--notify-…` receivers. Only the leader sends (its
    /// reconcile, right after writing the rollout); every replica has them configured
    /// so that whichever leads can.
    pub(crate) notifiers: Arc<Notifiers>,
    /// What find and the other public endpoints answer from (`snapshot`).
    pub(crate) answers: Arc<Answers>,
    /// The hosts heard from (`routes::public`'s heartbeat; `history`).
    pub(crate) hosts: Arc<Hosts>,
    /// Requests per address or token (`ratelimit`).
    pub(crate) limits: Arc<RateLimits>,
    /// The leader lease and the reconciles under it (`reconciler`).
    pub(crate) leadership: Arc<Leadership>,
    /// Since when this replica runs, whether it serves, when it last reached its store.
    pub(crate) health: Arc<Health>,
    /// The directive loop's state (`directives`).
    pub(crate) directives: Arc<DirectiveState>,
    /// The one-line installer (`routes::install`).
    pub(crate) installer: Arc<Installer>,
    /// Group names answered by the catch-all group, as said in find's answers and logs.
    pub(crate) fallbacks: Arc<Fallbacks>,
    /// The parts above that the public answers and heartbeats read, together.
    pub(crate) answering: Arc<Answering>,
}

/// What the public answers (find, channels, the schedule) and heartbeats read on this
/// replica: the snapshot, the clock, the settings, whether it is cut off from its
/// store, what its heartbeats recorded, the request limits, the counters, and the
/// catch-all group's names. Built once with the state and taken as one `Arc`: find is
/// the hot path, and taking each part alone cost it a reference count per part and
/// request, written by both cores (measured in docs/benchmarks.md, 2026-11-30).
pub(crate) struct Answering {
    pub(crate) answers: Arc<Answers>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) settings: Arc<Settings>,
    pub(crate) health: Arc<Health>,
    pub(crate) hosts: Arc<Hosts>,
    pub(crate) limits: Arc<RateLimits>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) fallbacks: Arc<Fallbacks>,
}

/// Each part of [`AppState`] is a handler's substate (`State<Arc<Part>>`).
macro_rules! parts {
    ($($field:ident: $part:ty),* $(,)?) => {
        $(impl FromRef<AppState> for $part {
            fn from_ref(state: &AppState) -> Self {
                Arc::clone(&state.$field)
            }
        })*
    };
}

parts!(
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    settings: Arc<Settings>,
    auth: Arc<Authenticator>,
    metrics: Arc<Metrics>,
    notifiers: Arc<Notifiers>,
    answers: Arc<Answers>,
    hosts: Arc<Hosts>,
    limits: Arc<RateLimits>,
    leadership: Arc<Leadership>,
    health: Arc<Health>,
    directives: Arc<DirectiveState>,
    installer: Arc<Installer>,
    fallbacks: Arc<Fallbacks>,
    answering: Arc<Answering>,
);

/// Declares a group of [`AppState`]'s parts that some code takes together: a struct
/// whose fields are parts (each of a type that has a [`FromRef`] of the state: an
/// `Arc` of a part, or another group), with `of` for the background loops and
/// [`FromRef`] for the handlers.
macro_rules! parts_group {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            $($(#[$field_meta:meta])* $field:ident: $part:ty),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone)]
        $vis struct $name {
            $($(#[$field_meta])* pub(crate) $field: $part),*
        }

        impl $name {
            /// The parts of `state` this group holds.
            $vis fn of(state: &$crate::state::AppState) -> Self {
                Self {
                    $($field: <$part as ::axum::extract::FromRef<$crate::state::AppState>>::from_ref(
                        state,
                    )),*
                }
            }
        }

        impl ::axum::extract::FromRef<$crate::state::AppState> for $name {
            fn from_ref(state: &$crate::state::AppState) -> Self {
                Self::of(state)
            }
        }
    };
}
pub(crate) use parts_group;

/// The parts that travel together wherever resources are read and written: the store,
/// the clock writes are stamped with, the snapshot find answers from (refreshed after a
/// write), and the background loop's reconcile an admin write asks for.
#[derive(Clone)]
pub(crate) struct Resources {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) answers: Arc<Answers>,
    /// [`Leadership::kick`].
    kick: Arc<Notify>,
}

impl FromRef<AppState> for Resources {
    fn from_ref(state: &AppState) -> Self {
        state.resources()
    }
}

/// The hosts heard from: the inventory heartbeats write and find reads, and what a
/// change among them sets going.
pub(crate) struct Hosts {
    /// The agent's hosts.
    pub(crate) inventory: Mutex<Inventory>,
    /// The hosts of each other product, made at the first heartbeat of a product this
    /// ternd serves (so at most `products::MAX_PRODUCTS`), each bounded as the agent's.
    pub(crate) products: Mutex<BTreeMap<String, Arc<Mutex<Inventory>>>>,
    /// A heartbeat changed what this replica's report counts (a known host's version,
    /// group or health): the background loop may report sooner
    /// (`--report-after-change`).
    pub(crate) changed: HostChanges,
    /// Host history observations waiting for the store (`history`).
    pub(crate) history: crate::history_queue::Pending,
    /// The bound of each inventory (`--max-agents`, `--max-shared-token-hosts`).
    max_agents: usize,
    max_shared: usize,
}

/// The signal a change among the hosts sends the report loop, counted
/// (`tern_report_changes_total`): what the loop reacts to is seen from outside, so that a
/// heartbeat that should not bring a report forward is shown not to, at once.
pub(crate) struct HostChanges {
    notify: Notify,
    /// Shared with [`Metrics::report_changes`].
    sent: Arc<AtomicU64>,
}

impl HostChanges {
    pub(crate) fn new(sent: Arc<AtomicU64>) -> Self {
        Self {
            notify: Notify::new(),
            sent,
        }
    }

    /// Wakes the report loop (or the next wait of it), and counts.
    pub(crate) fn notify_one(&self) {
        Metrics::inc(&self.sent);
        self.notify.notify_one();
    }

    /// Completes at the next change (or at once, for one sent while nobody waited).
    pub(crate) fn notified(&self) -> tokio::sync::futures::Notified<'_> {
        self.notify.notified()
    }
}

/// The leader lease and what serializes the work done under it.
pub(crate) struct Leadership {
    /// The leader lease while this replica holds it.
    pub(crate) leader: tokio::sync::Mutex<Option<LeaseKeeper>>,
    /// Serializes attempts to take the leader lease (campaign, reconciles).
    pub(crate) acquire: tokio::sync::Mutex<()>,
    /// Serializes this replica's reconciles.
    pub(crate) reconcile_lock: tokio::sync::Mutex<()>,
    /// Asks the background loop for a reconcile soon (after an admin write).
    pub(crate) kick: Arc<Notify>,
}

/// Whether this replica serves, since when, and whether it still reaches its store.
pub(crate) struct Health {
    pub(crate) ready: AtomicBool,
    /// When this replica started, on the clock silences are measured with (real
    /// monotonic time; dev time under `--dev-clock`).
    pub(crate) started: std::time::Instant,
    /// Real time at start, what `store_contact` counts from.
    real_start: std::time::Instant,
    /// `--store-contact-bound` (zero: never cut off).
    contact_bound: Duration,
    /// When this replica last reached its store (milliseconds since `real_start`):
    /// past `--store-contact-bound` it tells no host to update, since a freeze, a
    /// suspend or a pin written meanwhile would not be in its answer.
    store_contact: AtomicU64,
}

impl Health {
    fn new(started: std::time::Instant, contact_bound: Duration) -> Self {
        Self {
            ready: AtomicBool::new(false),
            started,
            real_start: std::time::Instant::now(),
            contact_bound,
            store_contact: AtomicU64::new(0),
        }
    }

    pub(crate) fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    /// This replica just reached its store.
    pub(crate) fn touch_store(&self) {
        let ms = u64::try_from(self.real_start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.store_contact.fetch_max(ms, Ordering::Relaxed);
    }

    /// Whether this replica has not reached its store for longer than
    /// `--store-contact-bound` (never with a bound of zero).
    pub(crate) fn cut_off(&self) -> bool {
        if self.contact_bound.is_zero() {
            return false;
        }
        let last = Duration::from_millis(self.store_contact.load(Ordering::Relaxed));
        self.real_start.elapsed().saturating_sub(last) > self.contact_bound
    }
}

impl AppState {
    pub fn new(store: Arc<dyn Store>, clock: Arc<dyn Clock>, settings: Settings) -> Arc<Self> {
        Self::with_notifiers(store, clock, settings, Notifiers::none())
    }

    pub(crate) fn with_notifiers(
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        settings: Settings,
        notifiers: Notifiers,
    ) -> Arc<Self> {
        let started = clock.monotonic();
        let metrics = Metrics::default();
        let limits = Arc::new(RateLimits {
            find: RateLimiter::new(settings.find_rate, settings.find_burst),
            heartbeat: RateLimiter::new(settings.heartbeat_rate, settings.heartbeat_burst),
            admin: RateLimiter::new(settings.security.admin_rate, settings.security.admin_burst),
            auth_failures: RateLimiter::new(
                settings.security.auth_failure_rate,
                settings.security.auth_failure_burst,
            ),
            refusal_log: crate::ratelimit::LogLimit::new(REFUSAL_LOG_PER_SECOND, REFUSAL_LOG_BURST),
        });
        let answers = Arc::new(Answers::new(settings.public_max_age, settings.long_poll));
        let hosts = Arc::new(Hosts {
            inventory: Mutex::new(
                Inventory::with_max_agents(settings.max_agents)
                    .with_max_shared(settings.max_shared_token_hosts),
            ),
            products: Mutex::default(),
            changed: HostChanges::new(Arc::clone(&metrics.report_changes)),
            history: crate::history_queue::Pending::default(),
            max_agents: settings.max_agents,
            max_shared: settings.max_shared_token_hosts,
        });
        let health = Arc::new(Health::new(started, settings.store_contact_bound));
        let fallbacks: Arc<Fallbacks> = Arc::default();
        let settings = Arc::new(settings);
        let metrics = Arc::new(metrics);
        let answering = Arc::new(Answering {
            answers: Arc::clone(&answers),
            clock: Arc::clone(&clock),
            settings: Arc::clone(&settings),
            health: Arc::clone(&health),
            hosts: Arc::clone(&hosts),
            limits: Arc::clone(&limits),
            metrics: Arc::clone(&metrics),
            fallbacks: Arc::clone(&fallbacks),
        });
        Arc::new(Self {
            limits,
            answers,
            hosts,
            leadership: Arc::new(Leadership {
                leader: tokio::sync::Mutex::new(None),
                acquire: tokio::sync::Mutex::new(()),
                reconcile_lock: tokio::sync::Mutex::new(()),
                kick: Arc::new(Notify::new()),
            }),
            health,
            directives: Arc::default(),
            installer: Arc::default(),
            fallbacks,
            answering,
            store,
            clock,
            settings,
            auth: Arc::new(Authenticator::new()),
            metrics,
            notifiers: Arc::new(notifiers),
        })
    }

    pub fn store(&self) -> &dyn Store {
        self.store.as_ref()
    }

    /// The agent's inventory.
    pub fn inventory(&self) -> std::sync::MutexGuard<'_, Inventory> {
        self.hosts.inventory()
    }

    /// The resources part: the store, the clock, the answers, the reconcile kick.
    pub(crate) fn resources(&self) -> Resources {
        Resources {
            store: Arc::clone(&self.store),
            clock: Arc::clone(&self.clock),
            answers: Arc::clone(&self.answers),
            kick: Arc::clone(&self.leadership.kick),
        }
    }
}

impl Hosts {
    pub(crate) fn inventory(&self) -> std::sync::MutexGuard<'_, Inventory> {
        self.inventory.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f` on `product`'s inventory; `None` when this replica has none for it
    /// (no host of it heartbeated here).
    pub(crate) fn with_inventory<R>(
        &self,
        product: &str,
        f: impl FnOnce(&mut Inventory) -> R,
    ) -> Option<R> {
        self.on_inventory(product, false, f)
    }

    /// Runs `f` on `product`'s inventory, made empty if this replica has none yet;
    /// `None` when that would make more inventories than products a ternd serves.
    /// Only for a product the snapshot serves (the heartbeat checks it first).
    pub(crate) fn record_in<R>(
        &self,
        product: &str,
        f: impl FnOnce(&mut Inventory) -> R,
    ) -> Option<R> {
        self.on_inventory(product, true, f)
    }

    /// Runs `f` on `product`'s inventory (the agent's always there; another's made
    /// when `make`, within the bound).
    fn on_inventory<R>(
        &self,
        product: &str,
        make: bool,
        f: impl FnOnce(&mut Inventory) -> R,
    ) -> Option<R> {
        if product == tern_core::product::AGENT {
            return Some(f(&mut self.inventory()));
        }
        let inventory = {
            let mut all = self.products.lock().unwrap_or_else(|p| p.into_inner());
            match all.get(product) {
                Some(i) => Arc::clone(i),
                // The agent's is not in `all`: at most MAX_PRODUCTS - 1 others.
                None if !make || all.len() + 1 >= crate::products::MAX_PRODUCTS => return None,
                None => {
                    let fresh = Arc::new(Mutex::new(
                        Inventory::with_max_agents(self.max_agents)
                            .with_max_shared(self.max_shared),
                    ));
                    all.insert(product.to_string(), Arc::clone(&fresh));
                    fresh
                }
            }
        };
        let mut inv = inventory.lock().unwrap_or_else(|p| p.into_inner());
        Some(f(&mut inv))
    }

    /// Forgets the inventories of products this ternd no longer serves.
    pub(crate) fn keep_inventories(&self, served: impl Fn(&str) -> bool) {
        self.products
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|p, _| served(p));
    }

    /// Runs `f` on every inventory of a product other than the agent.
    pub(crate) fn each_product_inventory(&self, mut f: impl FnMut(&str, &mut Inventory)) {
        let all: Vec<(String, Arc<Mutex<Inventory>>)> = self
            .products
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(p, i)| (p.clone(), Arc::clone(i)))
            .collect();
        for (product, inventory) in all {
            f(
                &product,
                &mut inventory.lock().unwrap_or_else(|p| p.into_inner()),
            );
        }
    }
}

impl Resources {
    pub(crate) fn store(&self) -> &dyn Store {
        self.store.as_ref()
    }

    pub(crate) fn snapshot(&self) -> Arc<Snapshot> {
        self.answers.snapshot()
    }

    /// Re-reads config, version, rollout (of every product) and channels and swaps the
    /// snapshot: [`refresh_snapshot`].
    pub(crate) async fn refresh_snapshot(&self) -> ApiResult<()> {
        refresh_snapshot(self.store(), &self.answers).await
    }

    /// Re-reads the shared dev clock (when there is one), so this replica acts at the
    /// time another replica may just have set.
    pub(crate) async fn sync_dev_clock(&self) -> ApiResult<()> {
        if self.clock.as_dev().is_none() {
            return Ok(());
        }
        if let Some(kv) = self.store().get(keys::DEV_CLOCK).await? {
            adopt_dev_clock(self.clock.as_ref(), &self.answers, &kv);
        }
        Ok(())
    }

    /// After an admin write: refresh what find serves now, and (with the system clock)
    /// reconcile soon. With the dev clock reconciles happen only when asked.
    pub(crate) async fn after_write(&self) {
        if let Err(e) = self.refresh_snapshot().await {
            tracing::warn!(error = %e, "refreshing the find snapshot failed");
        }
        if self.clock.as_dev().is_none() {
            self.kick.notify_one();
        }
    }
}

/// Re-reads config, version, rollout (of every product) and channels and swaps the
/// snapshot `answers` serves. Calls are serialized, so the last one to finish saw the
/// newest data.
pub(crate) async fn refresh_snapshot(store: &dyn Store, answers: &Answers) -> ApiResult<()> {
    let _guard = answers.refresh_lock.lock().await;
    let config = resources::load::<AutoUpdateConfig>(store).await?;
    let version = resources::load::<AutoUpdateVersion>(store).await?;
    let rollout = resources::load::<AutoUpdateAgentRollout>(store).await?;
    let listing = store.list(keys::CHANNELS_PREFIX).await?;
    let mut channels = BTreeMap::new();
    for kv in listing.kvs {
        match serde_json::from_slice::<Channel>(&kv.value) {
            Ok(c) => {
                channels.insert(c.name.clone(), c);
            }
            Err(e) => tracing::warn!(key = %kv.key, error = %e, "skipping unreadable channel"),
        }
    }
    let freeze = crate::freeze::load(store).await?;
    let pins = crate::pins::by_updater(crate::pins::load_all(store).await?);
    let shared = config.as_ref().map(|s: &Stored<_>| &s.value);
    let products = store.list(keys::PRODUCTS_PREFIX).await?;
    let products = crate::products::stored_of(&products.kvs)
        .into_iter()
        .map(|(name, p)| {
            let config = p
                .config
                .or_else(|| crate::products::shared_for(&name, shared));
            let product = crate::snapshot::ProductAnswers::build(
                &name,
                config,
                p.version,
                p.rollout.as_ref(),
                freeze.as_ref(),
            );
            (name, product)
        })
        .collect();
    let mut snap = Snapshot::build(
        shared,
        version.as_ref().map(|s| &s.value),
        rollout.as_ref().map(|s| &s.value),
        channels,
        freeze,
    );
    snap.pins = pins;
    snap.products = products;
    snap.directive = crate::directive_store::active_directive(store)
        .await?
        .map(Arc::new);
    snap.revocation = answers.revocation();
    snap.settle_tools();
    answers.publish(snap);
    Ok(())
}

/// Adopts a value of the shared dev clock (from the store watch or a local write).
pub(crate) fn adopt_dev_clock(clock: &dyn Clock, answers: &Answers, kv: &tern_store::KeyValue) {
    if let (Some(dev), Some(now)) = (clock.as_dev(), SharedClock::decode(&kv.value))
        && dev.adopt(now, kv.mod_revision)
    {
        tracing::info!(%now, "dev clock moved (shared)");
        // A pin lifts at a time: held finds look again.
        answers.long_poll.snapshot_changed();
    }
}
