//! The products one ternd serves (`ternctl products`, and the line per product that
//! `agents status` prints after the agent's rollout).

use std::fmt::Write;
use std::process::ExitCode;

use tern_core::api::{Freeze, ProductSummary, ProductsResponse};
use tern_core::resource::GroupState;

use super::client::{ApiFailure, Client};
use super::{render, structured};
use crate::global::Global;

/// `ternctl products`: every product, its rollout, mode, groups and hosts.
pub fn run(g: &Global) -> anyhow::Result<ExitCode> {
    let c = g.client()?;
    let v: ProductsResponse = c.get("/v1/products")?;
    if !structured(g.output(), &v)? {
        print!("{}", table(&v));
    }
    Ok(ExitCode::SUCCESS)
}

fn table(v: &ProductsResponse) -> String {
    let rows: Vec<Vec<String>> = v
        .products
        .iter()
        .map(|p| {
            let config = if p.own_config { "own" } else { "shared" };
            vec![
                p.name.clone(),
                versions(p),
                state(p),
                p.mode.as_str().to_string(),
                config.to_string(),
                format!("{}/{}", p.up_to_date, p.present),
                groups(p),
            ]
        })
        .collect();
    let mut out = render::table(
        &[
            "Product",
            "Rollout",
            "State",
            "Mode",
            "Config",
            "On target",
            "Groups",
        ],
        &rows,
    );
    let _ = writeln!(
        out,
        "{} of at most {} products",
        v.products.len(),
        v.max_products
    );
    out
}

fn versions(p: &ProductSummary) -> String {
    match (&p.start_version, &p.target_version) {
        (Some(from), Some(to)) => format!("{from} → {to}"),
        _ => "no rollout".to_string(),
    }
}

fn state(p: &ProductSummary) -> String {
    p.state.map_or("-", |s| s.as_str()).to_string()
}

/// Each group and its state, in the words of `agents status`.
fn groups(p: &ProductSummary) -> String {
    p.groups
        .iter()
        .map(|g| {
            let state = match g.state {
                GroupState::Unstarted => "not started",
                GroupState::Canary => "canary",
                GroupState::Active => "in progress",
                GroupState::Done => "complete",
                GroupState::Rolledback => "rolledback",
            };
            format!("{} {state}", g.name)
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// One line for a product, e.g. `updater: 1.0.0 → 1.1.0, active (dev complete, staging
/// canary, prod not started), 3/5 hosts on the target`, then why it does not move.
fn line(p: &ProductSummary) -> String {
    let mut out = format!("{}: ", p.name);
    if p.state.is_some() {
        let _ = write!(out, "{}, {}", versions(p), state(p));
        if !p.groups.is_empty() {
            let _ = write!(out, " ({})", groups(p));
        }
        let _ = write!(out, ", {}/{} hosts on the target", p.up_to_date, p.present);
        if p.failed > 0 {
            let _ = write!(out, ", {} failed", p.failed);
        }
    } else {
        let why = p.no_rollout_reason.as_deref().unwrap_or("no rollout");
        let _ = write!(out, "no rollout ({why})");
    }
    if !p.alerts.is_empty() {
        let _ = write!(out, "; alerts: {}", p.alerts.join(", "));
    }
    if let Some(why) = &p.why_stopped {
        let _ = write!(out, "\n  {why}");
    }
    out
}

/// What `agents status` prints after the agent's rollout: one line per other product
/// (`ternctl --product P agents status` for its whole status). Nothing from a ternd
/// that predates products; a failure to list them is said, not fatal.
pub fn status_lines(c: &Client) -> String {
    let v = match c.get::<ProductsResponse>("/v1/products") {
        Ok(v) => v,
        Err(e)
            if e.downcast_ref::<ApiFailure>()
                .is_some_and(|f| f.status == 404) =>
        {
            return String::new();
        }
        Err(e) => return format!("\nOther products: cannot be listed: {e:#}\n"),
    };
    // The built-in updater says nothing until it has a rollout: a fleet that does not
    // roll tern-update out through ternd has no line for it.
    let others: Vec<&ProductSummary> = v
        .products
        .iter()
        .filter(|p| p.name != tern_core::product::AGENT && (p.state.is_some() || !p.builtin))
        .collect();
    if others.is_empty() {
        return String::new();
    }
    let mut out = String::from("\nOther products (ternctl --product NAME agents status):\n");
    for p in others {
        for l in line(p).lines() {
            let _ = writeln!(out, "  {l}");
        }
    }
    out
}

/// What a freeze holds, for people: `Updates of every product` or `Updates of updater`.
pub fn frozen(f: &Freeze) -> String {
    if f.products.is_empty() {
        "Updates of every product".to_string()
    } else {
        format!("Updates of {}", f.products.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tern_core::api::ProductGroup;
    use tern_core::resource::{Mode, RolloutState};

    fn summary() -> ProductSummary {
        ProductSummary {
            name: "updater".into(),
            builtin: true,
            own_config: false,
            mode: Mode::Enabled,
            why_stopped: None,
            start_version: Some("1.0.0".into()),
            target_version: Some("1.1.0".into()),
            state: Some(RolloutState::Active),
            no_rollout_reason: None,
            groups: vec![
                ProductGroup {
                    name: "dev".into(),
                    state: GroupState::Done,
                    present: 2,
                    up_to_date: 2,
                    failed: 0,
                },
                ProductGroup {
                    name: "prod".into(),
                    state: GroupState::Unstarted,
                    present: 3,
                    up_to_date: 0,
                    failed: 0,
                },
            ],
            present: 5,
            up_to_date: 2,
            failed: 0,
            alerts: Vec::new(),
        }
    }

    #[test]
    fn a_product_line_says_its_rollout_groups_and_hosts() {
        assert_eq!(
            line(&summary()),
            "updater: 1.0.0 → 1.1.0, active (dev complete, prod not started), 2/5 hosts on the target"
        );
        let none = ProductSummary {
            state: None,
            start_version: None,
            target_version: None,
            groups: Vec::new(),
            no_rollout_reason: Some("no autoupdate_version exists".into()),
            why_stopped: Some("updates of updater are frozen".into()),
            ..summary()
        };
        assert_eq!(
            line(&none),
            "updater: no rollout (no autoupdate_version exists)\n  updates of updater are frozen"
        );
    }
}
