//! Commands that talk to a running ternd: resources, the rollout, inventory, tokens,
//! channels and the dev clock. How to reach ternd and the output format are the global
//! options (`crate::global`): `--server URL` (env `TERN_SERVER`), `--token-file FILE`
//! (or env `TERN_TOKEN` holding the token), `--ca-cert FILE` and `-o text|json|yaml`.

mod apply;
mod client;
mod directives;
mod interval;
mod output;
mod products;
mod render;
mod resource_file;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::{Args, Subcommand, ValueEnum};
use serde_json::{Value, json};
use tern_core::api::{
    ChangedGroup, Channel, ChannelBody, ClockBody, ClockResponse, Deleted, DevReconcileResponse,
    FreezeBody, FreezeResponse, HostPin, InventoryResponse, ModeResponse, NewRolloutBody,
    NewRolloutResponse, NewTokenResponse, PinBody, PinsResponse, ReportResponse, Role,
    StatusResponse, TokenBody, TokenView, TransitionBody, TransitionResponse,
};
use tern_core::duration::GoDuration;
use tern_core::resource::Mode;
use tern_core::transition::TransitionKind;

use crate::global::{Global, Output};
use crate::text::plural;
use client::{Client, encode, read_token};
use interval::parse_interval;
use output::{print_written, structured, structured_text};
use resource_file::{ResourceFile, read_resource_file};

impl Global {
    fn client(&self) -> anyhow::Result<Client> {
        let token = read_token(self.token_file.as_deref())?;
        Client::new(&self.server, token, self.ca_cert.as_ref())
    }

    /// `path` with `?product=P` (or `&product=P`) when the command is about a product
    /// other than the agent (`--product`, TERN_PRODUCT).
    fn scoped(&self, path: &str) -> anyhow::Result<String> {
        Ok(scoped(path, self.product()?.as_deref()))
    }
}

/// `path` with `product=` added to its query; unchanged for no product or the agent.
fn scoped(path: &str, product: Option<&str>) -> String {
    match product {
        None | Some(tern_core::product::AGENT) => path.to_string(),
        Some(p) => {
            let sep = if path.contains('?') { '&' } else { '?' };
            format!("{path}{sep}product={}", encode(p))
        }
    }
}

#[derive(Subcommand)]
pub enum ApiCommand {
    /// Print a resource: config, version, rollout or reports.
    Get(GetArgs),
    /// Create or update a resource from a YAML or JSON file, at the revision the file
    /// gives (see `apply` to write whatever the current revision is).
    Create(CreateArgs),
    /// Create or update the config or the version from a file: ternctl reads the
    /// current revision and writes with it, retrying if someone writes meanwhile.
    Apply(ApplyArgs),
    /// Edit the config or the version in $EDITOR (else $VISUAL, else vi) and apply the
    /// result, unless someone changed it meanwhile.
    Edit(EditArgs),
    /// Delete the config or the version.
    Rm(RmArgs),
    /// The rollout of the agent, or of the product `--product` names: status, report,
    /// manual transitions, suspend/resume, new rollouts; freezes of every product.
    Agents(AgentsArgs),
    /// The products this ternd serves (the agent, the updater and any other), each with
    /// its rollout, mode and hosts.
    Products,
    /// The agents connected to this ternd replica.
    Inventory(InventoryArgs),
    /// API tokens (operator).
    Tokens(TokensArgs),
    /// The audit trail: admin writes and token changes, done or refused, with the
    /// token (id and role) that sent them. ternd keeps the newest 1000.
    Events(EventsArgs),
    /// cloud-stable style channels served at /v1/channels/NAME/{version,critical}.
    Channels(ChannelsArgs),
    /// Version directives (the modular upgrade system): installers, drafts, plan and
    /// apply, the install loop's pause.
    VersionControl(directives::VersionControlArgs),
    /// Drive a ternd started with --dev-clock (tests and demos).
    Dev(DevArgs),
}

/// The kinds `get` prints, by their short names or Teleport's (`tctl get
/// autoupdate_config` works here too).
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum GetKind {
    /// The autoupdate_config.
    #[value(alias = "autoupdate_config")]
    Config,
    /// The autoupdate_version.
    #[value(alias = "autoupdate_version")]
    Version,
    /// The autoupdate_agent_rollout (written by ternd).
    #[value(alias = "autoupdate_agent_rollout")]
    Rollout,
    /// Every replica's autoupdate_agent_report (written by ternd).
    #[value(
        alias = "report",
        alias = "autoupdate_agent_report",
        alias = "autoupdate_agent_reports"
    )]
    Reports,
}

#[derive(Args)]
pub struct GetArgs {
    /// What to print.
    #[arg(value_enum)]
    kind: GetKind,
}

#[derive(Args)]
pub struct CreateArgs {
    /// The resource file (`-` reads standard input).
    #[arg(short = 'f', long = "filename", value_name = "FILE")]
    file: PathBuf,
    /// Overwrite the resource if it exists, whatever its revision.
    #[arg(long)]
    force: bool,
}

#[derive(Args)]
pub struct ApplyArgs {
    /// The resource file, autoupdate_config or autoupdate_version (`-` reads standard
    /// input); any metadata.revision in it is ignored.
    #[arg(short = 'f', long = "filename", value_name = "FILE")]
    file: PathBuf,
    /// Apply a config even though it removes groups the current one has (without it,
    /// apply names them and writes nothing).
    #[arg(long)]
    yes: bool,
}

#[derive(Args)]
pub struct EditArgs {
    /// What to edit.
    #[arg(value_enum)]
    kind: WritableKind,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum WritableKind {
    /// The autoupdate_config.
    #[value(alias = "autoupdate_config")]
    Config,
    /// The autoupdate_version.
    #[value(alias = "autoupdate_version")]
    Version,
}

#[derive(Args)]
pub struct RmArgs {
    /// What to delete.
    #[arg(value_enum)]
    kind: WritableKind,
}

#[derive(Args)]
pub struct AgentsArgs {
    #[command(subcommand)]
    cmd: AgentsCommand,
}

#[derive(Subcommand)]
pub enum AgentsCommand {
    /// The rollout: versions, mode, and each group's state and agents.
    Status {
        /// Print the status again every --interval until interrupted (Ctrl-C): redrawn
        /// in place on a terminal, one snapshot after another in a pipe or file.
        #[arg(short = 'w', long)]
        watch: bool,
        /// How often --watch asks ternd (e.g. 2s, 1m; whole seconds).
        #[arg(
            long,
            value_name = "DURATION",
            default_value = "2s",
            value_parser = parse_interval,
            requires = "watch"
        )]
        interval: GoDuration,
        /// Stop --watch after N snapshots.
        #[arg(long, value_name = "N", requires = "watch")]
        count: Option<u64>,
    },
    /// Agents per version and group, summed over the live reports of every replica.
    Report,
    /// The history of the newest rollouts, newest first (also those `new-rollout`
    /// replaced): group transitions with their reasons, canary results, alerts, who
    /// asked for what, and each group's hosts on the target, failed and pending.
    History {
        /// How many rollouts (ternd keeps the newest 20).
        #[arg(long, value_name = "N", default_value_t = 5)]
        limit: usize,
    },
    /// Start groups now: unstarted or rolled back → canary or active (time-based:
    /// active for one window length from now).
    StartUpdate {
        /// The groups to start.
        #[arg(required = true, value_name = "GROUP")]
        groups: Vec<String>,
        /// Skip the canaries: go straight to active.
        #[arg(long, alias = "no-canary")]
        force: bool,
    },
    /// Mark groups done (default: the groups in canary or active).
    #[command(alias = "force-done")]
    MarkDone {
        /// The groups to mark done (default: those in canary or active).
        #[arg(value_name = "GROUP")]
        groups: Vec<String>,
    },
    /// Roll groups back to the start version (default: every started group).
    Rollback {
        /// The groups to roll back (default: every started group).
        #[arg(value_name = "GROUP")]
        groups: Vec<String>,
    },
    /// Reset groups: a group in canary gets new canaries; an active group counts its
    /// initial agents again from those connected now.
    Reset {
        /// The groups to reset (in canary or active).
        #[arg(required = true, value_name = "GROUP")]
        groups: Vec<String>,
    },
    /// Suspend automatic agent updates (sets the config's mode).
    Suspend,
    /// Stop every update at once, whatever the resources say: find tells every host not
    /// to update, channels give no version, no directive install starts, the rollout
    /// holds. Lifted only by `agents unfreeze` (an operator token); audited.
    Freeze {
        /// Why: shown to everyone who asks (status, the dashboard, channel hosts' logs).
        #[arg(long)]
        reason: String,
    },
    /// Lift the freeze (an operator token): updates go on as the resources say.
    Unfreeze,
    /// Resume automatic agent updates (sets the config's mode).
    Resume,
    /// Roll out VERSION: from the current target (or --current-version) to VERSION.
    NewRollout {
        /// The version to roll out (semver, e.g. 1.1.0): the new target. Hosts install
        /// it group by group, in their windows, canaries first; with a trust root
        /// ternd checks it is signed.
        #[arg(value_name = "VERSION")]
        version: String,
        /// The version agents run now (default: the current target).
        #[arg(long, value_name = "VERSION")]
        current_version: Option<String>,
        /// halt-on-error: once the groups before it are done, a later group starts
        /// within its window open now, rather than waiting for a window that opens
        /// after the rollout began (the first group still waits, or start-update). For
        /// this rollout only; off unless given (`=false` turns it off again).
        #[arg(
            long,
            value_name = "BOOL",
            num_args = 0..=1,
            require_equals = true,
            default_missing_value = "true"
        )]
        follow_in_window: Option<bool>,
    },
}

#[derive(Args)]
pub struct InventoryArgs {
    #[command(subcommand)]
    cmd: InventoryCommand,
}

#[derive(Subcommand)]
pub enum InventoryCommand {
    /// List the connected agents.
    Ls,
    /// One host: what it runs, and when it will update (the dashboard's host page):
    /// what holds it, its group's window, its place in the order, and, for a host a
    /// version directive governs, when the directive installs on it.
    Show {
        /// The host's updater id, as `inventory ls` shows it.
        updater_id: String,
    },
    /// Revoke a host's credential (from `tern-update enable` with a join token) and
    /// forget the host: its heartbeats are refused from then on.
    Revoke {
        /// The host's updater id, as `inventory ls` shows it.
        updater_id: String,
    },
    /// Hold one host on its version until a time: find never tells it to update before
    /// then; afterwards it rejoins its group's rollout by itself.
    Pin {
        /// The host's updater id, as `inventory ls` shows it.
        updater_id: String,
        /// When the pin lifts: a date (2026-12-01, its start in UTC) or an RFC 3339
        /// instant (2026-12-01T08:00:00Z).
        #[arg(long)]
        until: String,
        /// Why (shown by `inventory pins`).
        #[arg(long, default_value = "")]
        reason: String,
    },
    /// Lift a host's pin now.
    Unpin {
        /// The host's updater id, as `inventory pins` shows it.
        updater_id: String,
    },
    /// List the hosts the server pins.
    Pins,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum RoleArg {
    /// Everything, including the version, tokens and channels.
    Operator,
    /// The config, suspend/resume and the manual transitions.
    User,
    /// Read only.
    Viewer,
    /// Shared by every host (earlier releases): heartbeats for any host. Prefer join.
    Agent,
    /// For `tern-update enable`: exchanged once per host for that host's own
    /// credential; limited by --uses and --ttl.
    Join,
}

#[derive(Args)]
pub struct EventsArgs {
    /// How many of the newest records to show (at most 1000).
    #[arg(long, default_value_t = 50)]
    limit: usize,
}

#[derive(Args)]
pub struct TokensArgs {
    #[command(subcommand)]
    cmd: TokensCommand,
}

#[derive(Subcommand)]
pub enum TokensCommand {
    /// Mint a token; it is printed once (ternd keeps only its hash).
    Create {
        /// What the token may do.
        #[arg(long, value_enum)]
        role: RoleArg,
        /// A note shown by `tokens ls` (who or what holds the token).
        #[arg(long, default_value = "")]
        description: String,
        /// How many hosts may join with it (join tokens; default 1).
        #[arg(long, value_name = "N")]
        uses: Option<u64>,
        /// How long it is valid, e.g. 2h or 7d… in Go duration form (join tokens:
        /// default 24h; other tokens: until revoked).
        #[arg(long, value_name = "DURATION")]
        ttl: Option<String>,
        /// Who the token is for: a person or system (default: the principal of the
        /// token minting it). Two approvals of a plan need two principals, and a token
        /// never counts as a second approver of what its minter approved.
        #[arg(long, value_name = "NAME")]
        principal: Option<String>,
        /// An agent token for a controller that heartbeats for many workloads (the
        /// Kubernetes controller): accepted where ternd refuses shared agent tokens.
        /// Hosts get their own credentials from a join token instead.
        #[arg(long)]
        controller: bool,
    },
    /// List the tokens: id, role, expiry, joins left.
    Ls {
        /// Also list every host's credential.
        #[arg(long)]
        hosts: bool,
    },
    /// Revoke a token by id.
    Rm {
        /// The token's id, as `tokens ls` shows it.
        id: String,
    },
}

#[derive(Args)]
pub struct ChannelsArgs {
    #[command(subcommand)]
    cmd: ChannelsCommand,
}

#[derive(Subcommand)]
pub enum ChannelsCommand {
    /// Set a channel's version (and whether it is a critical update).
    Set {
        /// The channel (letters, digits, '-', '_', '.').
        name: String,
        /// The version the channel serves.
        version: String,
        /// Mark the update critical (served at /v1/channels/NAME/critical).
        #[arg(long)]
        critical: bool,
    },
    /// List the channels.
    Ls,
    /// Delete a channel.
    Rm {
        /// The channel to delete.
        name: String,
    },
}

#[derive(Args)]
pub struct DevArgs {
    #[command(subcommand)]
    cmd: DevCommand,
}

#[derive(Subcommand)]
pub enum DevCommand {
    /// Show, set or advance the dev clock.
    Clock {
        #[command(subcommand)]
        cmd: Option<ClockCommand>,
    },
    /// Write this replica's report and reconcile now; prints the rollout.
    Reconcile,
    /// Run one pass of this replica's directive loop now; prints the hosts triggered.
    Directives,
    /// Run the built-in version controllers now (on the leader); prints what they did.
    Controllers,
}

#[derive(Subcommand)]
pub enum ClockCommand {
    /// Set the clock (RFC 3339, e.g. 2026-11-23T11:00:00Z).
    Set {
        /// The new time (RFC 3339).
        time: String,
    },
    /// Move the clock forward (e.g. 20s, 90m, 1h30m).
    Advance {
        /// How far to move (e.g. 20s, 90m, 1h30m).
        duration: String,
    },
}

pub fn run(cmd: ApiCommand, g: &Global) -> anyhow::Result<ExitCode> {
    match cmd {
        ApiCommand::Get(a) => get(a, g),
        ApiCommand::Create(a) => create(a, g),
        ApiCommand::Apply(a) => apply::apply(&a.file, a.yes, g),
        ApiCommand::Edit(a) => match a.kind {
            WritableKind::Config => apply::edit("autoupdate_config", "/v1/resources/config", g),
            WritableKind::Version => apply::edit("autoupdate_version", "/v1/resources/version", g),
        },
        ApiCommand::Rm(a) => rm(a, g),
        ApiCommand::Agents(a) => agents(a, g),
        ApiCommand::Products => products::run(g),
        ApiCommand::Inventory(a) => inventory(a, g),
        ApiCommand::Tokens(a) => tokens(a, g),
        ApiCommand::Events(a) => events(&a, g),
        ApiCommand::Channels(a) => channels(a, g),
        ApiCommand::VersionControl(a) => directives::run(a, g),
        ApiCommand::Dev(a) => dev(a, g),
    }
}

/// Clears a terminal and puts the cursor top left.
const CLEAR_SCREEN: &str = "\x1b[H\x1b[2J";

/// `agents status --watch`: a snapshot every `interval`, `count` of them or until
/// interrupted. On a terminal each snapshot replaces the last; elsewhere (a pipe, a
/// file) they follow one another: in text, a blank line and a header with the time
/// before each; in YAML, `---` documents; in JSON, one document after another (as jq
/// reads them). A failure after the first snapshot is shown and the watch goes on
/// (ternd may be restarting); a failure of the first one ends it.
fn watch_status(
    c: &Client,
    out: Output,
    interval: GoDuration,
    count: Option<u64>,
    product: Option<&str>,
) -> anyhow::Result<()> {
    use std::io::{IsTerminal, Write as _};

    let tty = std::io::stdout().is_terminal();
    let pause = std::time::Duration::from_secs(interval.as_secs());
    let mut shown: u64 = 0;
    loop {
        let at = jiff::Timestamp::now().strftime("%Y-%m-%d %H:%M:%S UTC");
        let body = match c.get::<StatusResponse>(&scoped("/v1/agents/status", product)) {
            Ok(s) => match structured_text(out, &s)? {
                Some(text) => text,
                None => status_text(c, &s, product),
            },
            Err(e) if shown == 0 => return Err(e),
            Err(e) if out == Output::Text => format!("error: {e:#}\n"),
            Err(e) => {
                eprintln!("{at}: error: {e:#}");
                String::new()
            }
        };
        let header = format!("Every {interval}: ternctl agents status   {at}\n");
        let frame = match (tty, out) {
            (true, Output::Text) => format!("{CLEAR_SCREEN}{header}\n{body}"),
            (true, _) => format!("{CLEAR_SCREEN}{body}"),
            (false, Output::Text) if shown == 0 => format!("{header}\n{body}"),
            (false, Output::Text) => format!("\n{header}\n{body}"),
            (false, Output::Yaml) => format!("---\n{body}"),
            (false, Output::Json) => body,
        };
        print!("{frame}");
        // A reader waits for each snapshot as it comes.
        let _ = std::io::stdout().flush();
        shown += 1;
        if count.is_some_and(|n| shown >= n) {
            return Ok(());
        }
        std::thread::sleep(pause);
    }
}

fn get(a: GetArgs, g: &Global) -> anyhow::Result<ExitCode> {
    let c = g.client()?;
    let path = match a.kind {
        GetKind::Config => "config",
        GetKind::Version => "version",
        GetKind::Rollout => "rollout",
        GetKind::Reports => "reports",
    };
    let v: Value = c.get(&g.scoped(&format!("/v1/resources/{path}"))?)?;
    if g.output() == Output::Json {
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else if let (GetKind::Reports, Some(items)) = (a.kind, v.as_array()) {
        // One YAML document per report.
        for item in items {
            print!("---\n{}", serde_yaml_ng::to_string(item)?);
        }
    } else {
        print!("{}", serde_yaml_ng::to_string(&v)?);
    }
    Ok(ExitCode::SUCCESS)
}

/// `create -f FILE`: each resource of the file in turn, as `tctl create` does. A
/// resource with ternd's revision (a number) is updated at it; one without, or with a
/// Teleport revision (a UUID, as `tctl get` writes it, which names no revision of this
/// ternd), is created (409 if it exists: `--force` overwrites, as `tctl create -f`).
fn create(a: CreateArgs, g: &Global) -> anyhow::Result<ExitCode> {
    let files = read_resource_file(&a.file)?;
    let c = g.client()?;
    for ResourceFile {
        text,
        doc,
        kind,
        path,
        name,
    } in files
    {
        let revision = &doc["metadata"]["revision"];
        let teleport_revision = revision
            .as_str()
            .filter(|r| tern_core::ids::is_uuid(r.trim()));
        if let Some(r) = teleport_revision {
            eprintln!(
                "note: {name}: metadata.revision {r:?} is a Teleport revision, not ternd's: ignored, as tctl create ignores it"
            );
        }
        let has_revision =
            teleport_revision.is_none() && (revision.is_string() || revision.is_number());
        let (method, url, verb) = if a.force {
            ("POST", format!("{path}?force=true"), "written")
        } else if has_revision {
            ("PUT", path.to_string(), "updated")
        } else {
            ("POST", path.to_string(), "created")
        };
        let v: Value = c
            .send_text(method, &g.scoped(&url)?, &text)
            .with_context(|| format!("{name}: {kind} not {verb}"))?;
        print_written(g.output(), kind, verb, v)?;
    }
    Ok(ExitCode::SUCCESS)
}

fn rm(a: RmArgs, g: &Global) -> anyhow::Result<ExitCode> {
    let c = g.client()?;
    let (path, kind) = match a.kind {
        WritableKind::Config => ("config", "autoupdate_config"),
        WritableKind::Version => ("version", "autoupdate_version"),
    };
    let v: Deleted = c.delete(&g.scoped(&format!("/v1/resources/{path}"))?)?;
    if !structured(g.output(), &v)? {
        println!("{kind} deleted");
    }
    Ok(ExitCode::SUCCESS)
}

fn names(groups: &[ChangedGroup]) -> String {
    format!(
        "[{}]",
        groups
            .iter()
            .map(|g| g.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    )
}

fn suspended_warning(mode: Mode, what: &str) -> String {
    format!(
        "Warning: the automatic agent updates are {}.\nAgents will not {what} until you run:\n$> ternctl agents resume",
        mode.as_str()
    )
}

fn agents(a: AgentsArgs, g: &Global) -> anyhow::Result<ExitCode> {
    let c = g.client()?;
    let out = g.output();
    // A freeze takes every `--product` given (its own list), and an unfreeze lifts the
    // whole freeze: neither is about one product.
    let product = match a.cmd {
        AgentsCommand::Freeze { .. } | AgentsCommand::Unfreeze => None,
        _ => g.product()?,
    };
    let at = |path: &str| scoped(path, product.as_deref());
    match a.cmd {
        AgentsCommand::Status { watch: false, .. } => {
            let s: StatusResponse = c.get(&at("/v1/agents/status"))?;
            if !structured(out, &s)? {
                print!("{}", status_text(&c, &s, product.as_deref()));
            }
        }
        AgentsCommand::Status {
            watch: true,
            interval,
            count,
        } => watch_status(&c, out, interval, count, product.as_deref())?,
        AgentsCommand::Report => {
            let r: ReportResponse = c.get(&at("/v1/agents/report"))?;
            if !structured(out, &r)? {
                print!("{}", render::report(&r));
            }
        }
        AgentsCommand::History { limit } => {
            let h: tern_core::rollout_history::HistoryResponse =
                c.get(&format!("/v1/agents/history?limit={limit}"))?;
            if !structured(out, &h)? {
                print!("{}", render::history(&h));
            }
        }
        AgentsCommand::StartUpdate { groups, force } => {
            let t = transition(&c, &at, TransitionKind::StartUpdate, groups, force)?;
            if !structured(out, &t)? {
                for g in &t.groups {
                    println!("Group {} update triggered ({})", g.name, g.to.as_str());
                }
                if t.modes.mode != Mode::Enabled {
                    println!("{}", suspended_warning(t.modes.mode, "update"));
                }
            }
        }
        AgentsCommand::MarkDone { groups } => {
            let t = transition(&c, &at, TransitionKind::MarkDone, groups, false)?;
            if !structured(out, &t)? {
                println!("Groups marked done: {}", names(&t.groups));
            }
        }
        AgentsCommand::Rollback { groups } => {
            let t = transition(&c, &at, TransitionKind::Rollback, groups, false)?;
            if !structured(out, &t)? {
                println!("Rolledback groups: {}", names(&t.groups));
                if t.modes.mode != Mode::Enabled {
                    println!("{}", suspended_warning(t.modes.mode, "rollback"));
                }
            }
        }
        AgentsCommand::Reset { groups } => {
            let t = transition(&c, &at, TransitionKind::Reset, groups, false)?;
            if !structured(out, &t)? {
                for g in &t.groups {
                    let what = if g.from == tern_core::resource::GroupState::Canary {
                        "new canaries are picked at the next reconcile"
                    } else {
                        "initial agents counted again"
                    };
                    println!("Group {} reset: {what}", g.name);
                }
            }
        }
        AgentsCommand::Suspend => {
            let m: ModeResponse = c.post(&at("/v1/agents/suspend"), &json!({}))?;
            if !structured(out, &m)? {
                print!("{}", suspended_text(&m));
            }
        }
        AgentsCommand::Freeze { reason } => {
            // Only the products named on the command line (TERN_PRODUCT never narrows a
            // freeze): none, every product.
            let body = FreezeBody {
                reason,
                products: g.products.clone(),
            };
            let f: FreezeResponse = c.put("/v1/freeze", &body)?;
            if !structured(out, &f)? {
                match (&f.freeze, f.changed) {
                    (Some(z), true) => println!(
                        "{} frozen since {} by token {}: {}\nLift with `ternctl agents unfreeze`.",
                        products::frozen(z),
                        z.since,
                        z.by,
                        z.reason
                    ),
                    (Some(z), false) => println!(
                        "{} were already frozen, since {} by token {}: {}",
                        products::frozen(z),
                        z.since,
                        z.by,
                        z.reason
                    ),
                    (None, _) => bail!("ternd answered the freeze without a freeze"),
                }
            }
        }
        AgentsCommand::Unfreeze => {
            let f: FreezeResponse = c.delete("/v1/freeze")?;
            if !structured(out, &f)? {
                if f.changed {
                    println!("Freeze lifted: updates go on as the resources say.");
                } else {
                    println!("No freeze was in force: nothing changed.");
                }
            }
        }
        AgentsCommand::Resume => {
            let m: ModeResponse = c.post(&at("/v1/agents/resume"), &json!({}))?;
            if !structured(out, &m)? {
                println!("{}", resumed_text(&m));
            }
        }
        AgentsCommand::NewRollout {
            version,
            current_version,
            follow_in_window,
        } => {
            // The release check is advisory here: ternd refuses an unsigned version
            // itself when it verifies; when it does not, the operator is told so.
            let q: String = form_urlencoded_version(&version);
            match c.get::<tern_core::api::ReleaseSignedResponse>(&format!(
                "/v1/releases/signed?version={q}"
            )) {
                Ok(r) if r.revoked => eprintln!(
                    "warning: {version} is revoked by the release keys ({}): hosts with a pinned release root will refuse it",
                    r.detail
                ),
                Ok(r) if r.signed == Some(false) => eprintln!(
                    "warning: {version} is not in the signed release repository ({}): hosts with a pinned release root will refuse it",
                    r.detail
                ),
                Ok(r) if !r.verified => eprintln!(
                    "warning: {}: nothing checked that {version} is signed; hosts with a pinned release root refuse it if it is not",
                    r.detail
                ),
                Ok(r) if r.signed.is_none() => eprintln!("warning: {}", r.detail),
                Ok(_) => {}
                Err(e) => eprintln!("warning: cannot ask ternd whether {version} is signed: {e:#}"),
            }
            let body = NewRolloutBody {
                version,
                current_version,
                follow_in_window,
            };
            let v: NewRolloutResponse = c.post(&at("/v1/agents/new-rollout"), &body)?;
            for w in &v.warnings {
                eprintln!("warning: {w}");
            }
            if !structured(out, &v)? {
                let (from, to) = (&v.start_version, &v.target_version);
                if v.changed {
                    println!("created new rollout from {from} to {to}");
                } else {
                    println!("the rollout from {from} to {to} already exists: nothing changed");
                }
                if let Some(note) = v.note.as_deref().filter(|_| v.changed) {
                    println!("note: {note}");
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `agents status` in text: the rollout of the product asked for; after the agent's,
/// one line per other product.
fn status_text(c: &Client, s: &StatusResponse, product: Option<&str>) -> String {
    let mut text = render::status(s);
    if product.is_none_or(|p| p == tern_core::product::AGENT) {
        text.push_str(&products::status_lines(c));
    }
    text
}

/// What `agents suspend` says.
fn suspended_text(m: &ModeResponse) -> String {
    let done = if m.changed {
        "Automatic updates suspended"
    } else {
        "Automatic updates were already suspended"
    };
    format!(
        "{done}\nNo existing agent will get updated. New agents might install the new version\ndepending on their group.\n"
    )
}

/// What `agents resume` says: resumed, or why updates stay off (the version's mode).
fn resumed_text(m: &ModeResponse) -> String {
    let modes = &m.modes;
    if modes.mode == Mode::Enabled {
        let how = if m.changed {
            "resumed"
        } else {
            "were already enabled"
        };
        format!("Automatic updates {how}")
    } else {
        format!(
            "The autoupdate_config's mode is {}, but {}.",
            modes.config_mode.map_or("unset", |m| m.as_str()),
            modes.why_stopped.as_deref().unwrap_or("updates stay off")
        )
    }
}

/// `POST /v1/agents/{kind}` on `groups`, the path scoped by `at` to the product.
fn transition(
    c: &Client,
    at: &dyn Fn(&str) -> String,
    kind: TransitionKind,
    groups: Vec<String>,
    force: bool,
) -> anyhow::Result<TransitionResponse> {
    c.post(
        &at(&format!("/v1/agents/{kind}")),
        &TransitionBody { groups, force },
    )
}

/// `inventory show`'s text: the host, then its forecast.
fn print_host(h: &tern_core::api::HostResponse) {
    let a = &h.agent;
    let f = &h.forecast;
    println!(
        "host {} ({}), group {}, runs {}",
        a.updater_id,
        if a.hostname.is_empty() {
            "?"
        } else {
            &a.hostname
        },
        if a.group.is_empty() {
            "(none)"
        } else {
            &a.group
        },
        a.version
    );
    println!("when will it update: {}", f.summary);
    if let Some(hold) = &f.hold {
        println!("  hold: {hold}");
    }
    if let Some(d) = &f.directed {
        let when = match (d.when, d.starts_at) {
            (tern_core::forecast::DirectedWhen::At, Some(t)) => format!("from {t}"),
            (w, _) => serde_json::to_value(w)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default(),
        };
        println!(
            "  directive {}: to {}, {when}{}",
            d.directive,
            d.target.as_deref().unwrap_or("no target"),
            if d.holds.is_empty() {
                String::new()
            } else {
                format!(" (held by {})", d.holds.join(", "))
            }
        );
    }
    if let Some(g) = &f.serving_group {
        println!(
            "  group {g}: {}, window {}",
            f.group_state
                .map_or("-", tern_core::resource::GroupState::as_str),
            if f.window_open { "open" } else { "closed" }
        );
    }
}

fn inventory(a: InventoryArgs, g: &Global) -> anyhow::Result<ExitCode> {
    let c = g.client()?;
    match &a.cmd {
        InventoryCommand::Pin {
            updater_id,
            until,
            reason,
        } => {
            // Only the products named on the command line: none, every product.
            let body = PinBody {
                until: until.clone(),
                reason: reason.clone(),
                products: g.products.clone(),
            };
            let p: HostPin = c.put(&format!("/v1/inventory/{}/pin", encode(updater_id)), &body)?;
            if !structured(g.output(), &p)? {
                let what = if p.products.is_empty() {
                    "every product".to_string()
                } else {
                    p.products.join(", ")
                };
                println!(
                    "host {updater_id}: pinned until {} ({what}); find tells it not to update until then",
                    p.until
                );
            }
            return Ok(ExitCode::SUCCESS);
        }
        InventoryCommand::Unpin { updater_id } => {
            let v: Deleted = c.delete(&format!("/v1/inventory/{}/pin", encode(updater_id)))?;
            if !structured(g.output(), &v)? {
                println!("host {updater_id}: unpinned; it follows its group's rollout again");
            }
            return Ok(ExitCode::SUCCESS);
        }
        InventoryCommand::Pins => {
            let v: PinsResponse = c.get("/v1/pins")?;
            if !structured(g.output(), &v)? {
                if v.pins.is_empty() {
                    println!("No host is pinned.");
                }
                for p in &v.pins {
                    let state = if p.until > v.now { "pinned" } else { "lifted" };
                    let what = if p.products.is_empty() {
                        "every product".to_string()
                    } else {
                        p.products.join(",")
                    };
                    println!(
                        "{}\t{state} until {}\t{what}\tby {}\t{}",
                        p.updater_id, p.until, p.by, p.reason
                    );
                }
            }
            return Ok(ExitCode::SUCCESS);
        }
        InventoryCommand::Show { updater_id } => {
            let h: tern_core::api::HostResponse =
                c.get(&format!("/v1/inventory/{}", encode(updater_id)))?;
            if !structured(g.output(), &h)? {
                print_host(&h);
            }
            return Ok(ExitCode::SUCCESS);
        }
        InventoryCommand::Ls | InventoryCommand::Revoke { .. } => {}
    }
    if let InventoryCommand::Revoke { updater_id } = &a.cmd {
        let v: Deleted = c.delete(&format!("/v1/inventory/{}", encode(updater_id)))?;
        if !structured(g.output(), &v)? {
            println!(
                "host {updater_id}: credential revoked; its heartbeats are refused from now on"
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    let v: InventoryResponse = c.get(&g.scoped("/v1/inventory")?)?;
    if structured(g.output(), &v)? {
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<Vec<String>> = v
        .agents
        .iter()
        .map(|a| {
            let health = match (a.rollback, a.healthy) {
                (true, _) => "rolled back".to_string(),
                (false, Some(false)) => "unhealthy".to_string(),
                (false, Some(true)) => "healthy".to_string(),
                (false, None) => "unknown".to_string(),
            };
            let health = match &a.install_failure {
                Some(f) => format!("{health}; {} failed: {}", f.version, f.kind),
                None => health,
            };
            let group = match v.unknown_groups.get(&a.group) {
                Some(served_by) => format!("{} (unknown → {served_by})", a.group),
                None => a.group.clone(),
            };
            vec![
                a.updater_id.clone(),
                a.hostname.clone(),
                group,
                a.version.clone(),
                a.updater_status.as_str().to_string(),
                match a.trust {
                    Some(t) if t.pinned => format!("root v{}", t.root_version),
                    Some(_) => "unpinned".to_string(),
                    None => "unknown".to_string(),
                },
                a.model.as_str().to_string(),
                health,
                if a.counted { "yes" } else { "no" }.to_string(),
                a.install_state
                    .map_or_else(|| "-".to_string(), |s| s.to_string()),
                render::time(a.last_seen),
            ]
        })
        .collect();
    println!(
        "{} connected to replica {}",
        plural(rows.len() as u64, "agent"),
        v.replica
    );
    print!(
        "{}",
        render::table(
            &[
                "Updater ID",
                "Hostname",
                "Group",
                "Version",
                "Updater",
                "Trust",
                "Follows",
                "Health",
                "Counted",
                "Install state",
                "Last seen (UTC)"
            ],
            &rows
        )
    );
    print!("{}", render::unknown_groups(&v.unknown_groups));
    print!("{}", render::update_failures(&v.agents));
    Ok(ExitCode::SUCCESS)
}

fn events(a: &EventsArgs, g: &Global) -> anyhow::Result<ExitCode> {
    let c = g.client()?;
    let v: Vec<tern_core::api::AuditRecord> = c.get(&format!("/v1/audit?limit={}", a.limit))?;
    if !structured(g.output(), &v)? {
        if v.is_empty() {
            println!("no admin writes recorded yet");
            return Ok(ExitCode::SUCCESS);
        }
        let rows: Vec<Vec<String>> = v
            .iter()
            .map(|r| {
                vec![
                    r.time.to_string(),
                    format!("{} ({})", r.token_id, r.role),
                    format!("{} {}", r.method, r.path),
                    r.status.to_string(),
                    r.replica.clone(),
                ]
            })
            .collect();
        print!(
            "{}",
            render::table(&["Time", "Token", "Request", "Status", "Replica"], &rows)
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn tokens(a: TokensArgs, g: &Global) -> anyhow::Result<ExitCode> {
    let c = g.client()?;
    match a.cmd {
        TokensCommand::Create {
            role,
            description,
            uses,
            ttl,
            principal,
            controller,
        } => {
            let role = match role {
                RoleArg::Operator => Role::Operator,
                RoleArg::User => Role::User,
                RoleArg::Viewer => Role::Viewer,
                RoleArg::Agent => Role::Agent,
                RoleArg::Join => Role::Join,
            };
            let body = TokenBody {
                role: role.to_string(),
                description,
                uses,
                ttl,
                principal,
                controller,
            };
            let v: NewTokenResponse = c.post("/v1/tokens", &body)?;
            if !structured(g.output(), &v)? {
                // The token alone on stdout, so `TOKEN=$(ternctl tokens create …)` works.
                println!("{}", v.token);
                eprintln!(
                    "created {role} token {} (shown only once: ternd keeps only its hash)",
                    v.view.id
                );
            }
        }
        TokensCommand::Ls { hosts } => {
            let path = if hosts {
                "/v1/tokens?hosts=true"
            } else {
                "/v1/tokens"
            };
            let v: Vec<TokenView> = c.get(path)?;
            if !structured(g.output(), &v)? {
                let rows: Vec<Vec<String>> = v
                    .iter()
                    .map(|t| {
                        vec![
                            t.id.clone(),
                            match &t.updater_id {
                                Some(u) => format!("{} (host {u})", t.role),
                                None => t.role.to_string(),
                            },
                            t.created.to_string(),
                            t.expires
                                .map_or_else(|| "never".to_string(), |e| e.to_string()),
                            t.uses_left
                                .map_or_else(|| "-".to_string(), |n| n.to_string()),
                            t.description.clone(),
                        ]
                    })
                    .collect();
                print!(
                    "{}",
                    render::table(
                        &[
                            "ID",
                            "Role",
                            "Created",
                            "Expires",
                            "Joins left",
                            "Description"
                        ],
                        &rows
                    )
                );
            }
        }
        TokensCommand::Rm { id } => {
            let v: Deleted = c.delete(&format!("/v1/tokens/{}", encode(&id)))?;
            if !structured(g.output(), &v)? {
                println!("token {id} revoked");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn channels(a: ChannelsArgs, g: &Global) -> anyhow::Result<ExitCode> {
    let c = g.client()?;
    match a.cmd {
        ChannelsCommand::Set {
            name,
            version,
            critical,
        } => {
            let v: Channel = c.put(
                &format!("/v1/channels/{}", encode(&name)),
                &ChannelBody { version, critical },
            )?;
            if !structured(g.output(), &v)? {
                println!(
                    "channel {name} set to {}{}",
                    v.version,
                    if critical { " (critical)" } else { "" }
                );
            }
        }
        ChannelsCommand::Ls => {
            let v: Vec<Channel> = c.get("/v1/channels")?;
            if !structured(g.output(), &v)? {
                let rows: Vec<Vec<String>> = v
                    .iter()
                    .map(|ch| {
                        vec![
                            ch.name.clone(),
                            ch.version.clone(),
                            if ch.critical { "yes" } else { "no" }.to_string(),
                        ]
                    })
                    .collect();
                print!(
                    "{}",
                    render::table(&["Channel", "Version", "Critical"], &rows)
                );
            }
        }
        ChannelsCommand::Rm { name } => {
            let v: Deleted = c.delete(&format!("/v1/channels/{}", encode(&name)))?;
            if !structured(g.output(), &v)? {
                println!("channel {name} deleted");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn dev(a: DevArgs, g: &Global) -> anyhow::Result<ExitCode> {
    let c = g.client()?;
    match a.cmd {
        DevCommand::Clock { cmd } => {
            let v: ClockResponse = match cmd {
                None => c.get("/v1/dev/clock")?,
                Some(ClockCommand::Set { time }) => c.post(
                    "/v1/dev/clock",
                    &ClockBody {
                        set: Some(time),
                        advance: None,
                    },
                )?,
                Some(ClockCommand::Advance { duration }) => c.post(
                    "/v1/dev/clock",
                    &ClockBody {
                        set: None,
                        advance: Some(duration),
                    },
                )?,
            };
            if !structured(g.output(), &v)? {
                println!("{}", v.now);
            }
        }
        DevCommand::Reconcile => {
            let v: DevReconcileResponse = c.post("/v1/dev/reconcile", &json!({}))?;
            if !structured(g.output(), &v)? {
                let r = &v.result;
                for e in &r.events {
                    eprintln!("{}", e.message);
                }
                if !r.leader {
                    // The server names the replica holding the lease (send it there).
                    match &r.message {
                        Some(m) => eprintln!("{m}"),
                        None => eprintln!(
                            "another replica holds the leader lease: nothing reconciled here"
                        ),
                    }
                }
                match &r.rollout {
                    None => println!(
                        "no rollout: {}",
                        r.no_rollout_reason.as_deref().unwrap_or_default()
                    ),
                    Some(rollout) => print!("{}", serde_yaml_ng::to_string(rollout)?),
                }
            }
        }
        cmd @ (DevCommand::Directives | DevCommand::Controllers) => {
            let path = if matches!(cmd, DevCommand::Directives) {
                "/v1/dev/directives"
            } else {
                "/v1/dev/controllers"
            };
            let v: Value = c.post(path, &json!({}))?;
            if !structured(g.output(), &v)? {
                print!("{}", serde_yaml_ng::to_string(&v)?);
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A version in a query string: the characters a version may hold are safe but `+`.
fn form_urlencoded_version(v: &str) -> String {
    v.replace('%', "%25")
        .replace('+', "%2B")
        .replace('&', "%26")
        .replace('#', "%23")
}
