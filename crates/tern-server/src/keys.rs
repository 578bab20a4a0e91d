//! Where ternd keeps things in the store.

pub(crate) const RESOURCES_PREFIX: &str = "/tern/resources/";
pub(crate) const CONFIG: &str = "/tern/resources/autoupdate_config";
pub(crate) const VERSION: &str = "/tern/resources/autoupdate_version";
pub(crate) const ROLLOUT: &str = "/tern/resources/autoupdate_agent_rollout";
/// `/tern/reports/<replica id>`, written with a TTL of one hour.
pub(crate) const REPORTS_PREFIX: &str = "/tern/reports/";
/// `/tern/products/<product>/{config,version,rollout}`: the resources of every product
/// but the agent, whose keys are the ones above (`products`).
pub(crate) const PRODUCTS_PREFIX: &str = "/tern/products/";
/// `/tern/product-reports/<product>/<replica id>` (TTL): the reports of every product
/// but the agent. Apart from the products' resources, so that listing those (every
/// snapshot refresh, every product-scoped request) never reads the reports.
pub(crate) const PRODUCT_REPORTS_PREFIX: &str = "/tern/product-reports/";
/// `/tern/tokens/<token id>`: role and SHA-256 of the token, never the token.
pub(crate) const TOKENS_PREFIX: &str = "/tern/tokens/";
/// `/tern/channels/<name>`: a cloud-stable style channel.
pub(crate) const CHANNELS_PREFIX: &str = "/tern/channels/";
/// Created (if absent) by the replica that initialises a fresh store: it alone mints the
/// operator token and writes it to its data dir.
pub(crate) const BOOTSTRAP: &str = "/tern/bootstrap";
/// The shared dev clock (`ternd start --dev-clock`): `{"now": RFC3339}`, watched by every
/// replica so that they all agree on the time.
pub(crate) const DEV_CLOCK: &str = "/tern/dev/clock";
/// `/tern/audit/<nanos>-<random>`: one record of the audit trail (`audit`).
pub(crate) const AUDIT_PREFIX: &str = "/tern/audit/";
/// Refused admin attempts: a trail of their own, so that a flood of them cannot push
/// the accepted actions out of [`AUDIT_PREFIX`].
pub(crate) const AUDIT_REFUSED_PREFIX: &str = "/tern/audit-refused/";
/// The global freeze (`tern_core::api::Freeze`), while one holds.
pub(crate) const FREEZE: &str = "/tern/freeze";
/// `/tern/pins/<updater_id>`: a server-side pin of one host (`pins`).
pub(crate) const PINS_PREFIX: &str = "/tern/pins/";
/// `/tern/history/<updater_id>`: the host's history (`history`), with a TTL renewed by
/// every write.
pub(crate) const HISTORY_PREFIX: &str = "/tern/history/";
/// The rollouts' history (`rollout_history`): `rollouts/<id>`, one per rollout, and
/// `records/<id>/<revision>-<n>`, what each write of it changed and who asked.
pub(crate) const ROLLOUT_HISTORY_ROLLOUTS: &str = "/tern/rollout-history/rollouts/";
pub(crate) const ROLLOUT_HISTORY_RECORDS: &str = "/tern/rollout-history/records/";
/// `/tern/hosts/<updater_id>`: the token id of the host's credential.
pub(crate) const HOSTS_PREFIX: &str = "/tern/hosts/";
/// The modular upgrade system (`directives`): installers by name, the control config,
/// the active directive, drafts by name, the pending promotion, the pause, each host's
/// last install attempt, and the replicas' reports (with a TTL).
pub(crate) const INSTALLERS_PREFIX: &str = "/tern/directives/installers/";
pub(crate) const DIRECTIVE_CONFIG: &str = "/tern/directives/config";
pub(crate) const ACTIVE_DIRECTIVE: &str = "/tern/directives/active";
pub(crate) const DRAFTS_PREFIX: &str = "/tern/directives/drafts/";
pub(crate) const PENDING_DIRECTIVE: &str = "/tern/directives/pending";
/// A change of the control config's `promotion` waiting for its approvals.
pub(crate) const PENDING_CONFIG: &str = "/tern/directives/pending-config";
pub(crate) const DIRECTIVES_PAUSED: &str = "/tern/directives/paused";
pub(crate) const ATTEMPTS_PREFIX: &str = "/tern/directives/attempts/";
pub(crate) const DIRECTIVE_REPORTS_PREFIX: &str = "/tern/directives/reports/";
/// The directive alerts raised now (notification flags, a stale directive), by kind.
pub(crate) const DIRECTIVE_ALERTS: &str = "/tern/directives/alerts";
/// Each built-in version controller's last run, by name.
pub(crate) const CONTROLLERS_PREFIX: &str = "/tern/directives/controllers/";
/// Each host's dry run for the pending plan (with the plan's nonce; TTL to its expiry).
pub(crate) const DRY_RUNS_PREFIX: &str = "/tern/directives/dryruns/";
/// The leader lease the reconciler holds.
pub(crate) const LEADER_LEASE: &str = "tern-reconciler";

pub(crate) fn report(replica: &str) -> String {
    format!("{REPORTS_PREFIX}{replica}")
}

/// `product`'s own resource `what` (`config`, `version`, `rollout`); never the agent's.
pub(crate) fn product(product: &str, what: &str) -> String {
    format!("{PRODUCTS_PREFIX}{product}/{what}")
}

/// Where the replicas' reports of `product` (not the agent) live.
pub(crate) fn product_reports(product: &str) -> String {
    format!("{PRODUCT_REPORTS_PREFIX}{product}/")
}

pub(crate) fn token(id: &str) -> String {
    format!("{TOKENS_PREFIX}{id}")
}

pub(crate) fn channel(name: &str) -> String {
    format!("{CHANNELS_PREFIX}{name}")
}

pub(crate) fn host(updater_id: &str) -> String {
    format!("{HOSTS_PREFIX}{updater_id}")
}

pub(crate) fn installer(name: &str) -> String {
    format!("{INSTALLERS_PREFIX}{name}")
}

pub(crate) fn draft(name: &str) -> String {
    format!("{DRAFTS_PREFIX}{name}")
}

pub(crate) fn attempt(updater_id: &str) -> String {
    format!("{ATTEMPTS_PREFIX}{updater_id}")
}

pub(crate) fn dry_run(updater_id: &str) -> String {
    format!("{DRY_RUNS_PREFIX}{updater_id}")
}

pub(crate) fn directive_report(replica: &str) -> String {
    format!("{DIRECTIVE_REPORTS_PREFIX}{replica}")
}
