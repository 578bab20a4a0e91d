//! ternd's `/metrics` page: what this replica exposes to Prometheus (its counters, the
//! accept loop's, long poll's and the notifiers' series, the directive loop, each
//! product's rollout and group states, active alerts, the bounded inventory series,
//! leadership and readiness), written with `metrics_text`. The route only serves it.

use std::sync::Arc;

use tern_core::resource::RolloutState;
use tern_core::rollout::Groups;

use crate::directive_loop::DirectiveState;
use crate::metrics::{Metrics, bounded_agent_series};
use crate::metrics_text::{Kind, counter, family, gauge, sample};
use crate::notify::Notifiers;
use crate::snapshot::Answers;
use crate::state::{Health, Hosts, Leadership, parts_group};

parts_group! {
    /// What the page shows series of: the counters, the answers (rollouts, long poll), the
    /// notifiers, the directive loop, the hosts, readiness, leadership.
    pub(crate) struct MetricsPage {
        metrics: Arc<Metrics>,
        answers: Arc<Answers>,
        notifiers: Arc<Notifiers>,
        directives: Arc<DirectiveState>,
        hosts: Arc<Hosts>,
        health: Arc<Health>,
        leadership: Arc<Leadership>,
    }
}

/// Metric labels with the product's first, when it is not the agent (whose series
/// carry none, as before products).
fn product_labelled<'a>(
    product: Option<&'a str>,
    more: [(&'static str, &'a str); 2],
) -> Vec<(&'static str, &'a str)> {
    product
        .map(|p| ("product", p))
        .into_iter()
        .chain(more)
        .collect()
}

/// The whole `/metrics` page of this replica, in the order ternd has always served it.
pub(crate) async fn render(state: &MetricsPage) -> String {
    let mut text = String::new();
    let out = &mut text;
    state.metrics.render_counters(out);
    crate::listen::render(&state.metrics, out);
    state.answers.long_poll.render(out);
    state.notifiers.render_metrics(out);
    {
        let dl = state.directives.pass.lock().await;
        family(
            out,
            "tern_directive_hosts",
            Kind::Gauge,
            "hosts of this replica governed by the active directive, per install state",
        );
        for s in tern_core::directive::state::InstallState::ALL {
            let n = dl.states.get(&s).copied().unwrap_or(0);
            sample(out, "tern_directive_hosts", &[("state", s.as_str())], n);
        }
        counter(
            out,
            "tern_directive_installs_triggered_total",
            "installs this replica's directive loop triggered",
            dl.triggered_total,
        );
    }
    let snap = state.answers.snapshot();
    family(
        out,
        "tern_rollout_state",
        Kind::Gauge,
        "1 for the rollout's current state",
    );
    let current = snap
        .rollout
        .as_ref()
        .map_or(RolloutState::Unspecified, |r| r.status.state);
    const STATES: [RolloutState; 5] = [
        RolloutState::Unspecified,
        RolloutState::Unstarted,
        RolloutState::Active,
        RolloutState::Done,
        RolloutState::Rolledback,
    ];
    for s in STATES {
        let on = u8::from(s == current);
        sample(out, "tern_rollout_state", &[("state", s.as_str())], on);
    }
    // The other products' series carry a `product` label; the agent's have none, as
    // before products.
    for (product, p) in &snap.products {
        let current = p
            .rollout
            .as_ref()
            .map_or(RolloutState::Unspecified, |r| r.status.state);
        for s in STATES {
            let labels = [("product", product.as_str()), ("state", s.as_str())];
            sample(out, "tern_rollout_state", &labels, u8::from(s == current));
        }
    }
    // Both headers first, then the samples of each group in turn: the order of the
    // text ternd has always served.
    family(
        out,
        "tern_rollout_group_state",
        Kind::Gauge,
        "1 for each group's current state",
    );
    family(
        out,
        "tern_rollout_group_agents",
        Kind::Gauge,
        "agents of each group at the last reconcile",
    );
    let rollouts = std::iter::once((None, snap.rollout.as_ref())).chain(
        snap.products
            .iter()
            .map(|(name, p)| (Some(name.as_str()), p.rollout.as_ref())),
    );
    for (product, r) in rollouts {
        let Some(r) = r else { continue };
        for g in &r.status.groups {
            let group = g.name.as_str();
            let labels = product_labelled(product, [("group", group), ("state", g.state.as_str())]);
            sample(out, "tern_rollout_group_state", &labels, 1);
            for (kind, n) in [
                ("initial", g.initial_count),
                ("present", g.present_count),
                ("up_to_date", g.up_to_date_count),
                ("failed", g.failed_count),
            ] {
                let labels = product_labelled(product, [("group", group), ("kind", kind)]);
                sample(out, "tern_rollout_group_agents", &labels, n);
            }
        }
    }
    family(
        out,
        "tern_alerts_active",
        Kind::Gauge,
        "active alerts of the rollout, by kind",
    );
    const ALERTS: [&str; 7] = [
        tern_core::alert::kind::GROUP_OVERDUE,
        tern_core::alert::kind::CANARY_FAILED,
        tern_core::alert::kind::GROUP_HALTED,
        tern_core::alert::kind::AGENTS_VANISHED,
        tern_core::alert::kind::INSTALL_REFUSED,
        tern_core::alert::kind::REPORTS_MISSING,
        tern_core::alert::kind::ROLLBACK,
    ];
    let alerts = snap.rollout.as_ref().map(|r| r.status.alerts.as_slice());
    for kind in ALERTS {
        let n = alerts.map_or(0, |a| a.iter().filter(|a| a.kind == kind).count());
        sample(out, "tern_alerts_active", &[("kind", kind)], n);
    }
    for (product, p) in &snap.products {
        let alerts = p.rollout.as_ref().map(|r| r.status.alerts.as_slice());
        for kind in ALERTS {
            let n = alerts.map_or(0, |a| a.iter().filter(|a| a.kind == kind).count());
            let labels = [("product", product.as_str()), ("kind", kind)];
            sample(out, "tern_alerts_active", &labels, n);
        }
    }
    family(
        out,
        "tern_inventory_agents",
        Kind::Gauge,
        "agents connected to this replica by group and version",
    );
    let rollout_groups = snap.rollout.as_ref().map(Groups::of).unwrap_or_default();
    let keep: Vec<String> = snap
        .rollout
        .as_ref()
        .map(|r| {
            vec![
                r.spec.start_version.to_string(),
                r.spec.target_version.to_string(),
            ]
        })
        .unwrap_or_default();
    let keep: Vec<&str> = keep.iter().map(String::as_str).collect();
    let mut unknown = 0;
    let (total, folded, shared_hosts, unrecorded) = {
        let inv = state.hosts.inventory();
        let counts = inv.counts_by_group_and_version();
        for (&(g, _), n) in &counts {
            if rollout_groups.unknown(g).is_some() {
                unknown += n;
            }
        }
        let known = |g: &str| snap.rollout.as_ref().is_some_and(|r| r.group(g).is_some());
        let (series, folded) = bounded_agent_series(&counts, known, &keep);
        for ((g, v), n) in series {
            let labels = [("group", g.as_str()), ("version", v.as_str())];
            sample(out, "tern_inventory_agents", &labels, n);
        }
        (
            inv.len(),
            folded,
            inv.shared_token_hosts(),
            inv.history_unrecorded(),
        )
    };
    gauge(
        out,
        "tern_host_history_pending_hosts",
        "hosts with history observations waiting to be written",
        state.hosts.history.hosts(),
    );
    gauge(
        out,
        "tern_host_history_unrecorded_hosts",
        "hosts whose last change is not in their history yet (queued again by their next heartbeat)",
        unrecorded,
    );
    gauge(
        out,
        "tern_inventory_series_folded",
        "(group, version) pairs of tern_inventory_agents counted under (other): groups the rollout lacks past the largest 32, versions past the 20 most common of a group",
        folded,
    );
    gauge(
        out,
        "tern_inventory_shared_token_hosts",
        "agents connected to this replica that heartbeat with a token not bound to them: the deprecated shared agent token, or a controller's",
        shared_hosts,
    );
    gauge(
        out,
        "tern_agents_unknown_group",
        "agents connected to this replica presenting a group the rollout lacks (served by its catch-all)",
        unknown,
    );
    // Held only for a moment by its writers (never across a store request).
    let leader = state
        .leadership
        .leader
        .lock()
        .await
        .as_ref()
        .is_some_and(tern_store::LeaseKeeper::is_held);
    gauge(
        out,
        "tern_inventory_agents_total",
        "agents connected to this replica",
        total,
    );
    gauge(
        out,
        "tern_leader",
        "1 while this replica holds the reconcile lease",
        u8::from(leader),
    );
    gauge(
        out,
        "tern_ready",
        "1 once the store is open and the snapshot loaded",
        u8::from(state.health.is_ready()),
    );
    text
}
