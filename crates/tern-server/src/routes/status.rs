//! The read-only views: `agents status`, `agents report`, `inventory ls`. What they
//! show is computed by `tern_core::views`; this module reads the store and memory.

use std::collections::BinaryHeap;
use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State};
use tern_core::api::{
    HostResponse, InventoryEntry, InventoryResponse, PendingHosts, ProductsResponse,
    ReportResponse, StatusResponse,
};
use tern_core::inventory::AgentView;
use tern_core::resource::{AutoUpdateAgentRollout, AutoUpdateVersion};
use tern_core::rollout::Groups;
use tern_core::views;
use tern_store::Store;

use crate::clock::Clock;
use crate::directive_loop::DirectiveState;
use crate::error::{ApiError, ApiResult};
use crate::history::HistoryWriter;
use crate::inventory::AgentRef;
use crate::inventory::id::IdRef;
use crate::products::{self, ProductQuery};
use crate::resources;
use crate::snapshot::Answers;
use crate::state::{Health, Hosts, Resources, Settings};

/// `GET /v1/agents/status[?product=P]`: with each moving group's pending hosts among
/// this replica's.
pub(crate) async fn status(
    State(res): State<Resources>,
    State(settings): State<Arc<Settings>>,
    State(hosts): State<Arc<Hosts>>,
    Query(q): Query<ProductQuery>,
) -> ApiResult<Json<StatusResponse>> {
    let product = q.served(res.store()).await?;
    Ok(Json(
        product_status(res.store(), res.clock.as_ref(), &settings, &hosts, product)
            .await?
            .0,
    ))
}

/// `product`'s status (as `agents status` shows it), and whether it runs under a config
/// of its own.
async fn product_status(
    store: &dyn Store,
    clock: &dyn Clock,
    settings: &Settings,
    hosts: &Hosts,
    product: &str,
) -> ApiResult<(StatusResponse, bool)> {
    let now = clock.now();
    let modes = products::modes(store, product).await?;
    let (config, own_config) = products::config_in_force(store, product).await?;
    let rollout = resources::load_for::<AutoUpdateAgentRollout>(store, product)
        .await?
        .map(|s| s.value);
    let reports = resources::reports_for(store, product).await?;
    let version_exists = rollout.is_some()
        || resources::load_for::<AutoUpdateVersion>(store, product)
            .await?
            .is_some();
    let pending = rollout
        .as_ref()
        .map(|r| pending_hosts(settings, hosts, product, r, now))
        .unwrap_or_default();
    let mut status = views::status(
        now,
        modes,
        config.as_ref(),
        rollout,
        version_exists,
        &reports,
        settings.report_period,
    );
    for g in &mut status.groups {
        g.pending = pending.get(&g.name).cloned();
    }
    Ok((status, own_config))
}

/// `GET /v1/products`: every product this ternd serves (the agent first), each with
/// its rollout at a glance (`views::product_summary` of its status).
pub(crate) async fn products(
    State(res): State<Resources>,
    State(settings): State<Arc<Settings>>,
    State(hosts): State<Arc<Hosts>>,
) -> ApiResult<Json<ProductsResponse>> {
    let mut summaries = Vec::new();
    for product in products::served(res.store()).await? {
        let (status, own_config) =
            product_status(res.store(), res.clock.as_ref(), &settings, &hosts, &product).await?;
        summaries.push(views::product_summary(
            &product,
            products::is_builtin(&product),
            own_config,
            &status,
        ));
    }
    Ok(Json(ProductsResponse {
        now: res.clock.now(),
        max_products: products::MAX_PRODUCTS,
        products: summaries,
    }))
}

/// The pending hosts of each group in canary or active among this replica's hosts of
/// `product` (`views::pending`), each with its next run by the heartbeat interval hosts
/// are told.
fn pending_hosts(
    settings: &Settings,
    hosts: &Hosts,
    product: &str,
    rollout: &AutoUpdateAgentRollout,
    now: jiff::Timestamp,
) -> std::collections::BTreeMap<String, PendingHosts> {
    let interval = jiff::SignedDuration::try_from(settings.heartbeat_interval)
        .unwrap_or(jiff::SignedDuration::from_secs(60));
    let pending = hosts.with_inventory(product, |inv| {
        views::pending(
            rollout,
            inv.agents(),
            now,
            settings.report_period,
            views::PENDING_LISTED,
        )
        .into_iter()
        .map(|(group, (total, first))| {
            let hosts: Vec<_> = first
                .into_iter()
                .map(|a| views::pending_host(a.to_inventory_agent(), interval))
                .collect();
            (group, (total, hosts))
        })
        .collect::<Vec<_>>()
    });
    pending
        .unwrap_or_default()
        .into_iter()
        .map(|(group, (total, hosts))| {
            let pending = PendingHosts {
                replica: settings.replica_id.clone(),
                total,
                hosts,
            };
            (group, pending)
        })
        .collect()
}

/// `GET /v1/agents/report[?product=P]`: the sum of the live reports.
pub(crate) async fn report(
    State(res): State<Resources>,
    State(settings): State<Arc<Settings>>,
    Query(q): Query<ProductQuery>,
) -> ApiResult<Json<ReportResponse>> {
    let product = q.served(res.store()).await?;
    let reports = resources::reports_for(res.store(), product).await?;
    let groups = rollout_groups(&res.answers, product);
    Ok(Json(views::report(
        res.clock.now(),
        &reports,
        settings.report_period,
        &groups,
    )))
}

/// Most agents one page of `GET /v1/inventory` holds.
pub(crate) const MAX_PAGE: usize = 1000;

/// `GET /v1/inventory` parameters, all optional. Read as text so that a bad one gets
/// an error naming it.
#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct InventoryQuery {
    limit: Option<String>,
    cursor: Option<String>,
    group: Option<String>,
    version: Option<String>,
    state: Option<String>,
    /// `?product=P`: its hosts (the agent's by default).
    product: Option<String>,
}

/// The `state` filter's values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StateFilter {
    /// Runs the rollout's target version.
    UpToDate,
    /// Runs another version.
    Outdated,
    /// Rolled back or unhealthy.
    Failed,
    /// Presents a group the rollout lacks.
    UnknownGroup,
}

impl StateFilter {
    fn parse(s: &str) -> Result<Self, ApiError> {
        Ok(match s {
            "up-to-date" => Self::UpToDate,
            "outdated" => Self::Outdated,
            "failed" => Self::Failed,
            "unknown-group" => Self::UnknownGroup,
            other => {
                return Err(ApiError::bad_request(format!(
                    "state: {other:?} is not one of up-to-date, outdated, failed, unknown-group"
                )));
            }
        })
    }
}

/// Where a page starts: after the agent with this sort key (group, hostname,
/// updater_id), written as hex so that it survives any URL.
fn encode_cursor(key: (&str, &str, &str)) -> String {
    crate::auth::hex(format!("{}\0{}\0{}", key.0, key.1, key.2).as_bytes())
}

fn decode_cursor(c: &str) -> Result<(String, String, String), ApiError> {
    let bad = || {
        ApiError::bad_request(
            "cursor: not a cursor this ternd gave (pass next_cursor back as it came)",
        )
    };
    if !c.len().is_multiple_of(2) || c.len() > 4096 {
        return Err(bad());
    }
    let bytes = (0..c.len())
        .step_by(2)
        .map(|i| c.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok()))
        .collect::<Option<Vec<u8>>>()
        .ok_or_else(bad)?;
    let text = String::from_utf8(bytes).map_err(|_| bad())?;
    let mut parts = text.splitn(3, '\0').map(str::to_string);
    match (parts.next(), parts.next(), parts.next()) {
        (Some(g), Some(h), Some(u)) => Ok((g, h, u)),
        _ => Err(bad()),
    }
}

fn parse_limit(limit: Option<&str>) -> Result<Option<usize>, ApiError> {
    let Some(l) = limit else { return Ok(None) };
    match l.parse::<usize>() {
        Ok(n) if (1..=MAX_PAGE).contains(&n) => Ok(Some(n)),
        _ => Err(ApiError::bad_request(format!(
            "limit: {l:?} is not a page size (1 to {MAX_PAGE})"
        ))),
    }
}

/// How many groups the inventory page remembers by pointer (a fleet has a few).
const MET_GROUPS: usize = 16;

/// An agent ordered by its inventory key alone: (group, hostname, updater_id as kept),
/// unique per agent since updater ids are.
struct ByKey<'a>((&'a str, &'a str, IdRef<'a>), AgentRef<'a>);

impl PartialEq for ByKey<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}
impl Eq for ByKey<'_> {}
impl PartialOrd for ByKey<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for ByKey<'_> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.cmp(&other.0)
    }
}

/// `GET /v1/inventory[?group=G&version=V&state=S&limit=N&cursor=C]`: the agents
/// connected to this replica that match, in (group, hostname, updater_id as kept) order; with
/// `limit`, one page and the cursor of the next. Only the page's entries are built:
/// the others are compared in place against the page's largest key, so a page out of
/// 1M agents costs one pass and holds the page, not the fleet.
pub(crate) async fn inventory(
    State(res): State<Resources>,
    State(settings): State<Arc<Settings>>,
    State(hosts): State<Arc<Hosts>>,
    Query(q): Query<InventoryQuery>,
) -> ApiResult<Json<InventoryResponse>> {
    let now = res.clock.now();
    let period = settings.report_period;
    let limit = parse_limit(q.limit.as_deref())?;
    let cursor = q.cursor.as_deref().map(decode_cursor).transpose()?;
    let cursor = cursor
        .as_ref()
        .map(|(g, h, u)| (g.as_str(), h.as_str(), IdRef::parse(u)));
    let filter_state = q.state.as_deref().map(StateFilter::parse).transpose()?;
    let product = products::served_named(res.store(), q.product.as_deref()).await?;
    let groups = rollout_groups(&res.answers, product);
    let target = res
        .snapshot()
        .rollout_of(product)
        .map(|r| r.spec.target_version.to_string());
    let page_of = |inv: &mut crate::inventory::Inventory| {
        inv.expire(res.clock.monotonic(), settings.max_silence());
        let mut presented = std::collections::BTreeSet::new();
        let mut matched = 0u64;
        let page = limit.unwrap_or(usize::MAX);
        // The page's agents and one more (to know whether a next page exists), the
        // greatest key on top: a page of 50 out of 1M agents keeps 51 entries, not 1M.
        let mut smallest = BinaryHeap::new();
        let mut after_cursor = 0usize;
        // Group names are interned, so one group's agents give the same `&str`: a
        // pointer compare against the first few groups met spares nearly every agent
        // the set's string compares (a twentieth of the page's time at 1M agents).
        let mut met: Vec<&str> = Vec::with_capacity(MET_GROUPS);
        for a in inv.agents() {
            let (group, version) = (a.group_name(), a.version_name());
            if !met.iter().any(|m| std::ptr::eq(*m, group)) {
                presented.insert(group);
                if met.len() < MET_GROUPS {
                    met.push(group);
                }
            }
            let keep = q.group.as_deref().is_none_or(|g| g == group)
                && q.version.as_deref().is_none_or(|v| v == version)
                && filter_state.is_none_or(|f| match f {
                    StateFilter::UpToDate => target.as_deref() == Some(version),
                    StateFilter::Outdated => target.as_deref() != Some(version),
                    StateFilter::Failed => a.is_failed(),
                    StateFilter::UnknownGroup => groups.unknown(group).is_some(),
                });
            if !keep {
                continue;
            }
            matched += 1;
            // The id as kept, not as text: no string built per agent (100k per page).
            let key = (group, a.hostname(), a.updater_id_key());
            if let Some(c) = cursor
                && key <= c
            {
                continue;
            }
            after_cursor += 1;
            if smallest.len() <= page {
                smallest.push(ByKey(key, a));
            } else if smallest.peek().is_some_and(|top: &ByKey<'_>| key < top.0) {
                smallest.pop();
                smallest.push(ByKey(key, a));
            }
        }
        let more = after_cursor > page;
        // Ascending; the extra one (if any) is the first of the next page.
        let mut keyed = smallest.into_sorted_vec();
        keyed.truncate(page);
        let next = more
            .then(|| {
                keyed
                    .last()
                    .map(|ByKey(k, _)| encode_cursor((k.0, k.1, &k.2.to_string())))
            })
            .flatten();
        let agents: Vec<InventoryEntry> = keyed
            .iter()
            .map(|ByKey(_, a)| InventoryEntry {
                install_state: a.install_state(),
                ..views::inventory_entry(a.to_inventory_agent(), now, period)
            })
            .collect();
        let unknown = groups.unknown_among(presented);
        (agents, matched, next, unknown)
    };
    let (agents, matched, next_cursor, unknown_groups) =
        match hosts.with_inventory(product, page_of) {
            Some(page) => page,
            None => page_of(&mut crate::inventory::Inventory::default()),
        };
    Ok(Json(InventoryResponse {
        replica: settings.replica_id.clone(),
        now,
        agents,
        unknown_groups,
        matched,
        next_cursor,
    }))
}

/// `GET /v1/inventory/{updater_id}`: one host as the inventory has it, and when it will
/// update (`tern_core::forecast`, over the rollout find answers from and the
/// backpressure numerals of the hosts its group serves here).
pub(crate) async fn host(
    State(clock): State<Arc<dyn Clock>>,
    State(answers): State<Arc<Answers>>,
    State(directives): State<Arc<DirectiveState>>,
    State(health): State<Arc<Health>>,
    // The history writer holds the settings and the hosts this page reads too.
    State(history): State<HistoryWriter>,
    Path(updater_id): Path<String>,
) -> ApiResult<Json<HostResponse>> {
    let settings = &history.settings;
    let now = clock.now();
    let period = settings.report_period;
    let snapshot = answers.snapshot();
    let rollout = snapshot.rollout.as_ref();
    let groups = rollout.map(Groups::of).unwrap_or_default();
    let (agent, forecast) = {
        let mut inv = history.hosts.inventory();
        inv.expire(clock.monotonic(), settings.max_silence());
        let Some(a) = inv.by_updater_id(&updater_id) else {
            return Err(ApiError::not_found(format!(
                "updater {updater_id:?} is not in this replica's inventory (it has not heartbeated here lately)"
            )));
        };
        let serving = groups.serving(a.group()).map(str::to_string);
        let peers = inv
            .agents()
            .filter(|b| {
                b.has_updater_id()
                    && serving
                        .as_deref()
                        .is_some_and(|s| groups.serves(s, b.group()))
            })
            .map(|b| b.updater_numeral());
        // The same rule as the report's canary candidates (`inventory::replica_report`).
        let tenure = settings.report_period.max(settings.canary_tenure);
        let canary_eligible_at = a.first_seen().checked_add(tenure).ok();
        let host = a.to_inventory_agent();
        let governed_by_directive = directives.active.load(std::sync::atomic::Ordering::Relaxed)
            && a.install_state().is_some();
        let fleet = snapshot.fleet(health.cut_off(), settings.security.require_trust, true, now);
        let mut asking = tern_core::gate::Host::new(tern_core::gate::AGENT, a.group(), &updater_id);
        asking.recorded.governed = governed_by_directive;
        asking.pins_root = host.heartbeat.trust.is_some_and(|t| t.pinned);
        let directive_facts = a.directive_facts();
        let forecast = tern_core::forecast::forecast(
            &fleet,
            &asking,
            tern_core::forecast::HostState {
                version: &host.heartbeat.version,
                failed_version: host.heartbeat.failed_version.as_deref(),
                canary_eligible_at: canary_eligible_at.filter(|at| *at > now),
                directive_facts: Some(&directive_facts),
            },
            peers,
        );
        let agent = InventoryEntry {
            install_state: a.install_state(),
            ..views::inventory_entry(host, now, period)
        };
        (agent, forecast)
    };
    let (history, history_error) = match crate::history::read(&history, &updater_id).await {
        Ok(h) => (h, None),
        Err(e) => (
            Vec::new(),
            Some(format!("the host's history could not be read: {e}")),
        ),
    };
    Ok(Json(HostResponse {
        replica: settings.replica_id.clone(),
        now,
        agent,
        forecast,
        history,
        history_error,
    }))
}

/// The groups of `product`'s rollout find serves (none without a rollout).
fn rollout_groups(answers: &Answers, product: &str) -> Groups {
    answers
        .snapshot()
        .rollout_of(product)
        .map(Groups::of)
        .unwrap_or_default()
}

#[derive(Debug, serde::Deserialize)]
pub(crate) struct SignedQuery {
    version: String,
}

/// `GET /v1/releases/signed?version=V` (for `ternctl agents new-rollout`'s warning).
pub(crate) async fn release_signed(
    State(settings): State<Arc<Settings>>,
    axum::extract::Query(q): axum::extract::Query<SignedQuery>,
) -> ApiResult<Json<tern_core::api::ReleaseSignedResponse>> {
    use tern_core::api::ReleaseSignedResponse as R;
    let Some(trust) = &settings.release_trust else {
        return Ok(Json(R {
            verified: false,
            signed: None,
            revoked: false,
            detail: "ternd has no signed release repository (ternd start --trust-root)".into(),
        }));
    };
    let version = crate::routes::body::version("version", &q.version)?.to_string();
    Ok(Json(
        match trust.signed(&version).await.map(|(signed, _)| signed) {
            Ok(crate::trust::Signed::Yes { targets_version }) => R {
                verified: true,
                signed: Some(true),
                revoked: false,
                detail: format!("signed (targets version {targets_version})"),
            },
            Ok(crate::trust::Signed::No { targets_version }) => R {
                verified: true,
                signed: Some(false),
                revoked: false,
                detail: format!("not signed (targets version {targets_version})"),
            },
            Ok(crate::trust::Signed::Revoked { why }) => R {
                verified: true,
                signed: Some(true),
                revoked: true,
                detail: why,
            },
            Err(e) => R {
                verified: false,
                signed: None,
                revoked: false,
                detail: e.message.clone(),
            },
        },
    ))
}
