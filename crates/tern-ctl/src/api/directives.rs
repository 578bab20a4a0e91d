//! `ternctl version-control …`: the modular upgrade system (version directives). Write
//! installers, the control config and drafts; plan a draft and read what it would do
//! over the live inventory; apply it (with a second approver when the config asks);
//! resume after the fault or churn limit paused the installs.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Args, Subcommand};
use serde_json::{Value, json};
use tern_core::api::Deleted;
use tern_core::directive::report::{
    ApplyBody, ApplyResponse, DirectivesStatus, Evaluation, Pending, PlanBody, PlanResponse,
    ReleasedMove,
};
use tern_core::directive::resource::{Installer, VersionControlConfig, VersionDirective};

use super::client::{Client, encode};
use super::output::structured;
use super::render;
use crate::global::Global;
use crate::text::plural;

#[derive(Args)]
pub struct VersionControlArgs {
    #[command(subcommand)]
    cmd: VcCommand,
}

#[derive(Subcommand)]
pub enum VcCommand {
    /// The directive system at a glance: config, active directive, drafts, the pending
    /// plan, a pause, and the fleet's hosts per install state.
    Status,
    /// Write an installer (kind: installer) from a YAML or JSON file.
    Installer {
        /// The installer file.
        #[arg(short = 'f', long)]
        file: PathBuf,
    },
    /// Delete an installer.
    RmInstaller {
        /// The installer's name.
        name: String,
    },
    /// Write the version_control_config from a file (rate, limits, promotion, timings).
    Config {
        /// The config file.
        #[arg(short = 'f', long)]
        file: PathBuf,
    },
    /// Write a draft directive from a file (the static controller): it changes nothing
    /// until planned and applied (unless promotion is automatic from this draft).
    Draft {
        /// The version_directive file; its metadata.name names the draft.
        #[arg(short = 'f', long)]
        file: PathBuf,
    },
    /// Plan a draft: every replica evaluates it over its hosts, without installing; the
    /// plan shows who would move to what, by which installer, and what the limits allow.
    Plan {
        /// The draft to plan; without it, show the current plan.
        #[arg(long)]
        draft: Option<String>,
        /// How long to wait for every replica to evaluate the plan.
        #[arg(long, default_value = "60s", value_parser = super::interval::parse_interval)]
        wait: tern_core::duration::GoDuration,
        /// With --draft: also send each host that would move a dry run (the installer
        /// checks the target without changing anything), at the control config's rate;
        /// run `plan` again to follow the answers.
        #[arg(long, requires = "draft")]
        dry_run: bool,
    },
    /// Approve the pending plan whose nonce is given; with the approvals the config asks
    /// for (distinct tokens), the draft becomes the active directive.
    Apply {
        /// The nonce the plan printed.
        nonce: String,
        /// Apply even though the plan moves hosts to an older version than they run.
        #[arg(long)]
        yes: bool,
    },
    /// Drop the pending plan.
    Cancel,
    /// Stop the active directive: from the next pass no host is governed by one, and
    /// the hosts follow the rollout again. Says where they go; asks for `--yes` when
    /// that is an older version than some of them run.
    Deactivate {
        /// Deactivate even though hosts will downgrade to the rollout's version.
        #[arg(long)]
        yes: bool,
    },
    /// Lift the pause the fault or churn limit set.
    Resume,
}

/// Whether version `a` is older than `b` (compared as versions; never when either is
/// not one).
fn is_older(a: &str, b: &str) -> bool {
    match (
        tern_core::version::Version::parse(a),
        tern_core::version::Version::parse(b),
    ) {
        (Ok(a), Ok(b)) => a < b,
        _ => false,
    }
}

fn read(file: &PathBuf) -> anyhow::Result<String> {
    std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))
}

pub fn run(a: VersionControlArgs, g: &Global) -> anyhow::Result<ExitCode> {
    let c = g.client()?;
    match a.cmd {
        VcCommand::Status => status(&c, g),
        VcCommand::Installer { file } => {
            let text = read(&file)?;
            // Checked here first, so a typo is named before anything is sent.
            let i = Installer::from_text(&text).with_context(|| file.display().to_string())?;
            let v: Value = c.send_text(
                "PUT",
                &format!("/v1/directives/installers/{}", encode(&i.metadata.name)),
                &text,
            )?;
            if !structured(g.output(), &v)? {
                println!("installer {} written", i.metadata.name);
            }
            Ok(ExitCode::SUCCESS)
        }
        VcCommand::RmInstaller { name } => {
            let v: Deleted = c.delete(&format!("/v1/directives/installers/{}", encode(&name)))?;
            if !structured(g.output(), &v)? {
                println!("installer {name} deleted");
            }
            Ok(ExitCode::SUCCESS)
        }
        VcCommand::Config { file } => {
            let text = read(&file)?;
            let cfg = VersionControlConfig::from_text(&text)
                .with_context(|| file.display().to_string())?;
            let v: Value = c.send_text("PUT", "/v1/directives/config", &text)?;
            // A change of `promotion` under `approvals: 2` waits for a second principal.
            let pending = v.get("applied") == Some(&Value::Bool(false));
            let shown = structured(g.output(), &v)?;
            if !shown && pending {
                println!("{}", v["message"].as_str().unwrap_or_default());
            } else if !shown {
                println!(
                    "version_control_config written: installs {}, rate {}, fault limit {}, churn limit {}",
                    if cfg.spec.enabled {
                        "enabled"
                    } else {
                        "disabled"
                    },
                    cfg.spec.rolling_install.rate,
                    cfg.spec.rolling_install.fault_limit,
                    cfg.spec.rolling_install.churn_limit
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        VcCommand::Draft { file } => {
            let text = read(&file)?;
            let d =
                VersionDirective::from_text(&text).with_context(|| file.display().to_string())?;
            let v: Value = c.send_text(
                "PUT",
                &format!("/v1/directives/drafts/{}", encode(&d.metadata.name)),
                &text,
            )?;
            if !structured(g.output(), &v)? {
                println!(
                    "draft {} written; `ternctl version-control plan --draft {}` shows what it would do",
                    d.metadata.name, d.metadata.name
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        VcCommand::Plan {
            draft,
            wait,
            dry_run,
        } => plan(&c, g, draft, dry_run, Duration::from_secs(wait.as_secs())),
        VcCommand::Apply { nonce, yes } => {
            let plan: PlanResponse = c.get("/v1/directives/plan")?;
            let downgrades: Vec<String> = plan
                .evaluation
                .moves
                .iter()
                .filter(|m| is_older(&m.to, &m.from))
                .map(|m| format!("{} from {} to {}", m.hosts, m.from, m.to))
                .collect();
            if !downgrades.is_empty() && !yes && plan.pending.nonce == nonce {
                anyhow::bail!(
                    "this plan moves hosts to an older version than they run ({}); run `ternctl version-control apply {nonce} --yes` to apply it anyway",
                    downgrades.join(", ")
                );
            }
            let v: ApplyResponse = c.post("/v1/directives/apply", &ApplyBody { nonce })?;
            if !structured(g.output(), &v)? {
                println!("{}", v.message);
            }
            Ok(ExitCode::SUCCESS)
        }
        VcCommand::Cancel => {
            let v: Deleted = c.delete("/v1/directives/plan")?;
            if !structured(g.output(), &v)? {
                println!("plan dropped");
            }
            Ok(ExitCode::SUCCESS)
        }
        VcCommand::Deactivate { yes } => {
            let st: DirectivesStatus = c.get("/v1/directives")?;
            let released = &st.fleet.released;
            let downgrades: Vec<&ReleasedMove> =
                released.iter().filter(|m| m.is_downgrade()).collect();
            let said = |moves: &[&ReleasedMove]| {
                moves
                    .iter()
                    .map(|m| format!("{} from {} to {}", m.hosts, m.from, m.to))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            if !downgrades.is_empty() && !yes {
                let n: u64 = downgrades.iter().map(|m| m.hosts).sum();
                anyhow::bail!(
                    "deactivating hands the hosts back to the rollout, and {n} of them will downgrade ({}) at their group's next turn; run `ternctl version-control deactivate --yes` to deactivate anyway, or activate a directive that keeps them",
                    said(&downgrades)
                );
            }
            let v: Deleted = c.delete("/v1/directives/active")?;
            if !structured(g.output(), &v)? {
                let all: Vec<&ReleasedMove> = released.iter().collect();
                if all.is_empty() {
                    println!("no directive is active any more: the hosts follow the rollout again");
                } else {
                    println!(
                        "no directive is active any more: the hosts follow the rollout again; it moves {} at their group's next turn",
                        said(&all)
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        VcCommand::Resume => {
            let v: Value = c.post("/v1/directives/resume", &json!({}))?;
            if !structured(g.output(), &v)? {
                println!(
                    "installs resumed (they were paused: {})",
                    v["was_paused_for"].as_str().unwrap_or_default()
                );
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn states_table(e: &Evaluation) -> String {
    let rows: Vec<Vec<String>> = e
        .states
        .iter()
        .map(|(s, n)| vec![s.to_string(), n.to_string()])
        .collect();
    render::table(&["Install state", "Hosts"], &rows)
}

fn moves_table(e: &Evaluation) -> String {
    let rows: Vec<Vec<String>> = e
        .moves
        .iter()
        .map(|m| {
            vec![
                m.directive.clone(),
                m.from.clone(),
                m.to.clone(),
                m.installer.clone(),
                m.hosts.to_string(),
            ]
        })
        .collect();
    render::table(&["Directive", "From", "To", "Installer", "Hosts"], &rows)
}

fn status(c: &Client, g: &Global) -> anyhow::Result<ExitCode> {
    let v: DirectivesStatus = c.get("/v1/directives")?;
    if structured(g.output(), &v)? {
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "installs: {}",
        match v.enabled {
            None => "no version_control_config (nothing is installed)",
            Some(true) => "enabled",
            Some(false) => "disabled by the version_control_config",
        }
    );
    match &v.active {
        Some(a) if v.stale => println!(
            "active directive: {} (revision {}), STALE: its controller stopped refreshing it",
            a.name, a.revision
        ),
        Some(a) => println!("active directive: {} (revision {})", a.name, a.revision),
        None => println!("active directive: none"),
    }
    if let Some(t) = &v.timing {
        print!("{}", timing_text(t));
    }
    for c in &v.controllers {
        let targets: Vec<String> = c
            .targets
            .iter()
            .map(|(d, t)| format!("{d} → {t}"))
            .collect();
        println!(
            "controller {}: last run {}, last success {}{}{}",
            c.name,
            c.last_run.map_or("never".into(), render::time),
            c.last_success.map_or("never".into(), render::time),
            if targets.is_empty() {
                String::new()
            } else {
                format!("; drafted {}", targets.join(", "))
            },
            c.error
                .as_ref()
                .map(|e| format!("; FAILING: {e}"))
                .unwrap_or_default()
        );
        for n in &c.notes {
            println!("  note: {n}");
        }
    }
    let drafts: Vec<&str> = v.drafts.iter().map(|d| d.name.as_str()).collect();
    println!(
        "drafts: {}",
        if drafts.is_empty() {
            "none".to_string()
        } else {
            drafts.join(", ")
        }
    );
    println!(
        "installers: {}",
        if v.installers.is_empty() {
            "none".to_string()
        } else {
            v.installers.join(", ")
        }
    );
    if let Some(p) = &v.pending {
        println!(
            "pending: draft {} (nonce {}, {} of {} approvals, expires {})",
            p.draft,
            p.nonce,
            p.approvals.len(),
            p.approvals_needed,
            render::time(p.expires_at)
        );
    }
    if let Some(p) = &v.paused {
        println!(
            "PAUSED since {}: {} (`ternctl version-control resume` lifts it)",
            render::time(p.since),
            p.reason
        );
    }
    println!(
        "{} governed, {} left to the rollout, {} no target fits, over {}",
        plural(v.fleet.governed, "host"),
        v.fleet.unaffected,
        v.fleet.no_fit,
        plural(v.replicas, "replica")
    );
    print!("{}", states_table(&v.fleet));
    if !v.waiting.is_empty() {
        println!("chosen hosts waiting (soonest first):");
        let rows: Vec<Vec<String>> = v
            .waiting
            .iter()
            .map(|w| {
                vec![
                    w.updater_id.clone(),
                    w.group.clone(),
                    w.directive.clone(),
                    w.target.clone(),
                    w.holds.join(", "),
                    w.starts_at
                        .map_or_else(|| "when a person lifts the hold".to_string(), render::time),
                ]
            })
            .collect();
        print!(
            "{}",
            render::table(
                &[
                    "Host",
                    "Group",
                    "Directive",
                    "To",
                    "Held by",
                    "Installs from"
                ],
                &rows
            )
        );
    }
    if !v.notices.is_empty() {
        println!("versioning notices (notification controller):");
        let mut rows = Vec::new();
        for n in &v.notices {
            rows.push(vec![
                n.version.clone(),
                n.kind.as_str().into(),
                n.recommended.clone().unwrap_or_else(|| "-".into()),
                n.hosts.to_string(),
                n.note.clone().unwrap_or_default(),
            ]);
        }
        print!(
            "{}",
            render::table(
                &["Version", "Notice", "Recommended", "Hosts", "Note"],
                &rows
            )
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn plan(
    c: &Client,
    g: &Global,
    draft: Option<String>,
    dry_run: bool,
    wait: Duration,
) -> anyhow::Result<ExitCode> {
    if let Some(draft) = draft {
        let p: Pending = c.post("/v1/directives/plan", &PlanBody { draft, dry_run })?;
        eprintln!(
            "draft {} planned (nonce {}); waiting for the replicas to evaluate it…",
            p.draft, p.nonce
        );
    }
    let deadline = Instant::now() + wait;
    let v = loop {
        let v: PlanResponse = c.get("/v1/directives/plan")?;
        if (v.replicas > 0 && v.evaluated_by >= v.replicas) || Instant::now() >= deadline {
            break v;
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    let partial = v.replicas == 0 || v.evaluated_by < v.replicas;
    if partial && c.get::<serde_json::Value>("/v1/dev/clock").is_ok() {
        // Under the dev clock a replica's directive loop passes only when asked, so
        // waiting longer changes nothing: say what runs the pass.
        eprintln!(
            "hint: ternd runs with --dev-clock, where the directive loop passes only when asked: run `ternctl dev directives` (once per replica, with its --server), then `ternctl version-control plan` to read the plan"
        );
    }
    if structured(g.output(), &v)? {
        return Ok(if partial {
            ExitCode::from(3)
        } else {
            ExitCode::SUCCESS
        });
    }
    let p = &v.pending;
    println!(
        "plan of draft {} (nonce {}), evaluated by {} of {}",
        p.draft,
        p.nonce,
        v.evaluated_by,
        plural(v.replicas, "replica")
    );
    let e = &v.evaluation;
    println!(
        "{} governed, {} left to the rollout, {} would move, {} no target fits",
        plural(e.governed, "host"),
        e.unaffected,
        e.moving(),
        e.no_fit
    );
    print!("{}", moves_table(e));
    for h in &e.no_fit_examples {
        println!(
            "  no fit: {} ({}): {}",
            h.hostname,
            h.updater_id,
            h.reasons.join("; ")
        );
    }
    if let Some(d) = &v.dry_run {
        println!(
            "dry run: {} sent, {} passed, {} failed, {} waiting for an answer",
            plural(d.sent, "check"),
            d.passed,
            d.failed,
            d.waiting()
        );
        for f in &d.failures {
            println!(
                "  dry run failed: {} ({}): {}",
                f.hostname, f.updater_id, f.error
            );
        }
        if d.sent < e.eligible {
            println!(
                "  {} more to check, at the control config's rate; run `ternctl version-control plan` to follow",
                e.eligible - d.sent
            );
        }
    } else if p.dry_run {
        println!("dry run: no replica has sent a check yet");
    }
    println!(
        "limits now: installs {}, rate {}{}; {} could be triggered at once",
        if v.enabled { "enabled" } else { "disabled" },
        v.rate,
        v.paused
            .as_ref()
            .map(|p| format!(", PAUSED ({})", p.reason))
            .unwrap_or_default(),
        plural(e.eligible, "host")
    );
    println!(
        "currently active: {} governed, {} moving",
        v.active.governed,
        v.active.moving()
    );
    println!(
        "apply with: ternctl version-control apply {} (expires {}; {} approval{} needed)",
        p.nonce,
        render::time(p.expires_at),
        p.approvals_needed,
        if p.approvals_needed == 1 { "" } else { "s" }
    );
    if partial {
        eprintln!(
            "warning: only {} of {} evaluated the plan within the wait: the counts are partial",
            v.evaluated_by,
            plural(v.replicas, "replica")
        );
        return Ok(ExitCode::from(3));
    }
    Ok(ExitCode::SUCCESS)
}

/// The active directive's time rules, one line each.
fn timing_text(t: &tern_core::directive::report::TimingView) -> String {
    let mut out = String::new();
    if let Some(id) = &t.config_id {
        out.push_str(&format!("config id: {id}\n"));
    }
    match (t.not_before, t.not_after) {
        (None, None) => {}
        (Some(b), None) => out.push_str(&format!("installs start from {}\n", render::time(b))),
        (None, Some(a)) => out.push_str(&format!("installs start until {}\n", render::time(a))),
        (Some(b), Some(a)) => out.push_str(&format!(
            "installs start from {} until {}\n",
            render::time(b),
            render::time(a)
        )),
    }
    if !t.keep_windows.is_empty() {
        out.push_str(&format!(
            "keep to the hosts' maintenance windows: {}\n",
            t.keep_windows.join(", ")
        ));
    }
    if !t.ignore_windows.is_empty() {
        out.push_str(&format!(
            "install outside the hosts' windows: {}\n",
            t.ignore_windows.join(", ")
        ));
    }
    out
}
