//! The products one ternd serves (`tern_core::product`): the agent, whose resources are
//! Teleport's at the keys ternd always used; the updater (tern-update's own releases),
//! built in; and any other an operator adds by writing its version resource
//! (`?product=P`), kept under `/tern/products/P/` (`keys::product`). Each has its own
//! version, rollout, reports, canaries and alerts; the shared config's groups, windows
//! and mode apply to every product that has no config of its own. This module says which
//! products exist, holds their number to a bound, and gives the config each runs under.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;
use tern_core::api::{Freeze, Modes};
use tern_core::product::{AGENT, UPDATER, is_product_name};
use tern_core::resource::{AutoUpdateAgentRollout, AutoUpdateConfig, AutoUpdateVersion};
use tern_store::{KeyValue, Store};

use crate::error::{ApiError, ApiResult};
use crate::keys;
use crate::resources::{self, Resource};

/// The most products one ternd serves, the agent and the updater included: each costs
/// a report per replica per period, a reconcile per leader period, an inventory per
/// replica and a copy in every snapshot.
pub(crate) const MAX_PRODUCTS: usize = 16;

/// The agent and the updater: served whether or not they have a version resource.
pub(crate) fn is_builtin(product: &str) -> bool {
    product == AGENT || product == UPDATER
}

/// The products other than the agent that have a config, version or rollout among
/// `kvs` (a listing of [`keys::PRODUCTS_PREFIX`]).
fn named_in(kvs: &[KeyValue]) -> BTreeSet<String> {
    kvs.iter()
        .filter_map(|kv| {
            let (product, what) = kv
                .key
                .strip_prefix(keys::PRODUCTS_PREFIX)?
                .split_once('/')?;
            let kind = [
                AutoUpdateConfig::PART,
                AutoUpdateVersion::PART,
                AutoUpdateAgentRollout::PART,
            ];
            (kind.contains(&what) && is_product_name(product) && product != AGENT)
                .then(|| product.to_string())
        })
        .collect()
}

/// Every product served: the agent first, then the others by name (the updater always).
pub(crate) fn served_of(stored: BTreeSet<String>) -> Vec<String> {
    let mut others = stored;
    others.insert(UPDATER.to_string());
    std::iter::once(AGENT.to_string()).chain(others).collect()
}

/// Every product this ternd serves now, as the store says (the agent first).
pub(crate) async fn served(store: &dyn Store) -> ApiResult<Vec<String>> {
    let listing = store.list(keys::PRODUCTS_PREFIX).await?;
    Ok(served_of(named_in(&listing.kvs)))
}

/// A product's resources as stored (its own config, if any).
#[derive(Clone, Debug, Default)]
pub(crate) struct Stored {
    pub(crate) config: Option<AutoUpdateConfig>,
    pub(crate) version: Option<AutoUpdateVersion>,
    pub(crate) rollout: Option<AutoUpdateAgentRollout>,
}

/// Every product other than the agent with its stored resources, the updater always,
/// from a listing of [`keys::PRODUCTS_PREFIX`]. A resource that cannot be read is left
/// out and logged (as an unreadable report is).
pub(crate) fn stored_of(kvs: &[KeyValue]) -> BTreeMap<String, Stored> {
    let mut out: BTreeMap<String, Stored> = served_of(named_in(kvs))
        .into_iter()
        .filter(|p| p != AGENT)
        .map(|p| (p, Stored::default()))
        .collect();
    for kv in kvs {
        let Some((product, what)) = kv
            .key
            .strip_prefix(keys::PRODUCTS_PREFIX)
            .and_then(|k| k.split_once('/'))
        else {
            continue;
        };
        let Some(entry) = out.get_mut(product) else {
            continue;
        };
        let decoded =
            match what {
                AutoUpdateConfig::PART => resources::decode(kv)
                    .map(|s: resources::Stored<_>| entry.config = Some(s.value)),
                AutoUpdateVersion::PART => resources::decode(kv)
                    .map(|s: resources::Stored<_>| entry.version = Some(s.value)),
                AutoUpdateAgentRollout::PART => resources::decode(kv)
                    .map(|s: resources::Stored<_>| entry.rollout = Some(s.value)),
                _ => Ok(()),
            };
        if let Err(e) = decoded {
            tracing::warn!(key = %kv.key, error = %e, "skipping an unreadable product resource");
        }
    }
    out
}

/// `?product=P` of the product-scoped admin routes (the agent when absent).
#[derive(Clone, Debug, Default, Deserialize)]
pub(crate) struct ProductQuery {
    #[serde(default)]
    product: Option<String>,
}

impl ProductQuery {
    /// The product named (checked for shape), the agent by default.
    pub(crate) fn name(&self) -> ApiResult<&str> {
        named(self.product.as_deref())
    }

    /// The product named, which this ternd must serve (404 otherwise).
    pub(crate) async fn served(&self, store: &dyn Store) -> ApiResult<&str> {
        served_named(store, self.product.as_deref()).await
    }
}

/// The product a `product=` parameter names (checked for shape), the agent when it is
/// absent or empty. (Queries with other typed fields take it as a plain field: serde's
/// `flatten` would read their numbers and booleans as strings.)
pub(crate) fn named(product: Option<&str>) -> ApiResult<&str> {
    match product {
        None | Some("") => Ok(AGENT),
        Some(p) => check_name(p).map(|()| p),
    }
}

/// [`named`], which this ternd must serve (404 otherwise).
pub(crate) async fn served_named<'a>(
    store: &dyn Store,
    product: Option<&'a str>,
) -> ApiResult<&'a str> {
    let product = named(product)?;
    require_served(store, product).await?;
    Ok(product)
}

/// 400 unless `product` has a product name's shape.
pub(crate) fn check_name(product: &str) -> ApiResult<()> {
    if is_product_name(product) {
        Ok(())
    } else {
        Err(ApiError::bad_request(format!(
            "product: {:?} is not a product name (1 to 63 of a-z, 0-9 and '-', starting with a letter)",
            tern_core::text::excerpt(product, 64)
        )))
    }
}

/// 404 `unknown_product` unless this ternd serves `product`.
pub(crate) async fn require_served(store: &dyn Store, product: &str) -> ApiResult<()> {
    if is_builtin(product) {
        return Ok(());
    }
    let served = served(store).await?;
    if served.iter().any(|p| p == product) {
        return Ok(());
    }
    Err(unknown(product, &served))
}

/// 404 `unknown_product`, naming the products served.
pub(crate) fn unknown(product: &str, served: &[String]) -> ApiError {
    ApiError::new(
        axum::http::StatusCode::NOT_FOUND,
        "unknown_product",
        format!(
            "product {product:?}: this ternd serves no such product (it serves {}); add it by writing its autoupdate_version (ternctl --product {product} agents new-rollout VERSION)",
            served.join(", ")
        ),
    )
}

/// Before a write that may add `product` to the store (its version or its own
/// config): refused (409 `too_many_products`) when that would make more than
/// [`MAX_PRODUCTS`]. Two writers adding two products at once may both pass: the bound
/// may be passed by as many as write at the same moment, never more.
pub(crate) async fn admit(store: &dyn Store, product: &str) -> ApiResult<()> {
    check_name(product)?;
    if is_builtin(product) {
        return Ok(());
    }
    let served = served(store).await?;
    if served.iter().any(|p| p == product) || served.len() < MAX_PRODUCTS {
        return Ok(());
    }
    Err(ApiError::new(
        axum::http::StatusCode::CONFLICT,
        "too_many_products",
        format!(
            "product {product:?} is not added: this ternd serves at most {MAX_PRODUCTS} products and serves {} already ({}); delete another's resources first (ternctl --product NAME rm version, and rm config if it has its own)",
            served.len(),
            served.join(", ")
        ),
    ))
}

/// The shared config as a product other than the agent runs under it: the same groups,
/// windows and mode, without the groups' canary analysis, whose queries are about the
/// agent (a product's own config may declare its own).
pub(crate) fn shared_for(
    product: &str,
    config: Option<&AutoUpdateConfig>,
) -> Option<AutoUpdateConfig> {
    let mut config = config?.clone();
    if product != AGENT
        && let Some(schedules) = config
            .spec
            .agents
            .as_mut()
            .and_then(|a| a.schedules.as_mut())
    {
        for group in &mut schedules.regular {
            group.analysis = None;
        }
    }
    Some(config)
}

/// The config `product` runs under now (its own, else the shared one as
/// [`shared_for`] gives it), and whether it is its own.
pub(crate) async fn config_in_force(
    store: &dyn Store,
    product: &str,
) -> ApiResult<(Option<AutoUpdateConfig>, bool)> {
    if product != AGENT
        && let Some(own) = resources::load_for::<AutoUpdateConfig>(store, product).await?
    {
        return Ok((Some(own.value), true));
    }
    let shared = resources::load::<AutoUpdateConfig>(store).await?;
    Ok((
        shared_for(product, shared.as_ref().map(|s| &s.value)),
        false,
    ))
}

/// The freeze as it holds `product`: `None` when none holds or it names other products.
pub(crate) fn freeze_of(freeze: Option<Freeze>, product: &str) -> Option<Freeze> {
    freeze.filter(|f| f.holds(product))
}

/// The mode in force for `product` and where it comes from.
pub(crate) async fn modes(store: &dyn Store, product: &str) -> ApiResult<Modes> {
    let (config, _) = config_in_force(store, product).await?;
    let version = resources::load_for::<AutoUpdateVersion>(store, product).await?;
    let freeze = freeze_of(crate::freeze::load(store).await?, product);
    let mut modes = tern_core::views::modes(
        config.as_ref(),
        version.as_ref().map(|s| &s.value),
        freeze.as_ref(),
    );
    if let Some(why) = modes.why_stopped.as_mut() {
        *why = stopped_of(why, product);
    }
    Ok(modes)
}

/// Why updates of `product` stop, in its name: the core says it of the agent
/// ("agent updates are suspended: …"), whose config the other products share.
fn stopped_of(why: &str, product: &str) -> String {
    match why.strip_prefix("agent updates ") {
        Some(rest) if product != AGENT => format!("updates of {product} {rest}"),
        _ => why.to_string(),
    }
}

/// Checks the products a freeze or a pin names: each served by this ternd (a typo
/// would otherwise hold nothing while its writer believes it holds), no repeats;
/// returned sorted. Empty: every product.
pub(crate) async fn check_named(store: &dyn Store, named: &[String]) -> ApiResult<Vec<String>> {
    if named.is_empty() {
        return Ok(Vec::new());
    }
    if named.len() > MAX_PRODUCTS {
        return Err(ApiError::bad_request(format!(
            "products: {} named, more than the {MAX_PRODUCTS} a ternd serves",
            named.len()
        )));
    }
    let served = served(store).await?;
    let mut out = BTreeSet::new();
    for p in named {
        check_name(p)?;
        if !served.contains(p) {
            return Err(unknown(p, &served));
        }
        out.insert(p.clone());
    }
    Ok(out.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(key: &str) -> KeyValue {
        KeyValue {
            key: key.to_string(),
            value: Vec::new(),
            create_revision: 1,
            mod_revision: 1,
        }
    }

    #[test]
    fn products_are_named_by_their_resources() {
        let kvs = [
            kv("/tern/products/sidecar/version"),
            kv("/tern/products/sidecar/elsewhere"),
            kv("/tern/products/own/config"),
            kv("/tern/products/Bad/version"),
            kv("/tern/products/agent/version"),
        ];
        assert_eq!(
            served_of(named_in(&kvs)),
            ["agent", "own", "sidecar", "updater"]
        );
        assert_eq!(served_of(BTreeSet::new()), ["agent", "updater"]);
    }

    #[test]
    fn why_a_product_stops_names_it() {
        let why =
            "agent updates are suspended: spec.agents.mode is suspended in the autoupdate_config";
        assert_eq!(
            stopped_of(why, UPDATER),
            "updates of updater are suspended: spec.agents.mode is suspended in the autoupdate_config"
        );
        assert_eq!(stopped_of(why, AGENT), why);
        let frozen = "updates of every product are frozen since …";
        assert_eq!(stopped_of(frozen, UPDATER), frozen);
    }

    #[test]
    fn the_shared_config_runs_other_products_without_analysis() {
        let text = r#"
kind: autoupdate_config
spec:
  agents:
    mode: enabled
    schedules:
      regular:
        - name: dev
          canary_count: 1
          analysis:
            queries:
              - name: errors
                query: sum(rate(errors_total{version="{{version}}"}[5m]))
                max: 0
"#;
        let config = AutoUpdateConfig::from_text(text).unwrap();
        assert!(config.groups()[0].analysis.is_some());
        let agent = shared_for(AGENT, Some(&config)).unwrap();
        assert!(agent.groups()[0].analysis.is_some(), "the agent keeps it");
        let updater = shared_for(UPDATER, Some(&config)).unwrap();
        assert!(updater.groups()[0].analysis.is_none());
        assert_eq!(updater.mode(), config.mode(), "the mode is shared");
        assert_eq!(updater.groups()[0].name, "dev", "the groups are shared");
        assert!(shared_for(UPDATER, None).is_none());
    }
}
