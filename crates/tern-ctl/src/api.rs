//! Commands that talk to a running ternd: resources, the rollout, inventory, tokens,
//! channels and the dev clock. Every command takes `--server URL` (env `TERN_SERVER`),
//! `--token-file FILE` (or env `TERN_TOKEN` holding the token), `--ca-cert FILE` and
//! `-o text|json|yaml`.

mod client;
mod render;

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::{Args, Subcommand, ValueEnum};
use serde::Deserialize;
use serde_json::{Value, json};
use tern_core::resource::Mode;
use tern_core::transition::TransitionKind;

use client::{Client, encode, read_token};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Output {
    #[default]
    Text,
    Json,
    Yaml,
}

/// How to reach ternd (valid on every API command).
#[derive(Args, Clone, Debug)]
pub struct Conn {
    /// ternd's URL.
    #[arg(
        long,
        env = "TERN_SERVER",
        global = true,
        default_value = "https://127.0.0.1:3025",
        value_name = "URL"
    )]
    server: String,
    /// File holding the API token (otherwise env TERN_TOKEN holds the token itself).
    #[arg(long, env = "TERN_TOKEN_FILE", global = true, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// PEM CA certificate to trust for ternd's TLS certificate.
    #[arg(long, env = "TERN_CA_CERT", global = true, value_name = "FILE")]
    ca_cert: Option<PathBuf>,
    /// Output format.
    #[arg(short = 'o', long, global = true, value_enum, default_value_t = Output::Text)]
    output: Output,
}

impl Conn {
    fn client(&self) -> anyhow::Result<Client> {
        let token = read_token(self.token_file.as_deref())?;
        Client::new(&self.server, token, self.ca_cert.as_ref())
    }
}

#[derive(Subcommand)]
pub enum ApiCommand {
    /// Print a resource: config, version, rollout or reports.
    Get(GetArgs),
    /// Create or update a resource from a YAML or JSON file.
    Create(CreateArgs),
    /// Delete the config or the version.
    Rm(RmArgs),
    /// The agent rollout: status, report, manual transitions, suspend/resume, new rollouts.
    Agents(AgentsArgs),
    /// The agents connected to this ternd replica.
    Inventory(InventoryArgs),
    /// API tokens (operator).
    Tokens(TokensArgs),
    /// cloud-stable style channels served at /v1/channels/NAME/{version,critical}.
    Channels(ChannelsArgs),
    /// Drive a ternd started with --dev-clock (tests and demos).
    Dev(DevArgs),
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum GetKind {
    Config,
    Version,
    Rollout,
    Reports,
}

#[derive(Args)]
pub struct GetArgs {
    #[arg(value_enum)]
    kind: GetKind,
    #[command(flatten)]
    conn: Conn,
}

#[derive(Args)]
pub struct CreateArgs {
    /// The resource file (`-` reads standard input).
    #[arg(short = 'f', long = "filename", value_name = "FILE")]
    file: PathBuf,
    /// Overwrite the resource if it exists, whatever its revision.
    #[arg(long)]
    force: bool,
    #[command(flatten)]
    conn: Conn,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum RmKind {
    Config,
    Version,
}

#[derive(Args)]
pub struct RmArgs {
    #[arg(value_enum)]
    kind: RmKind,
    #[command(flatten)]
    conn: Conn,
}

#[derive(Args)]
pub struct AgentsArgs {
    #[command(subcommand)]
    cmd: AgentsCommand,
    #[command(flatten)]
    conn: Conn,
}

#[derive(Subcommand)]
pub enum AgentsCommand {
    /// The rollout: versions, mode, and each group's state and agents.
    Status,
    /// Agents per version and group, summed over the live reports of every replica.
    Report,
    /// Start groups now (halt-on-error): unstarted or rolled back → canary or active.
    StartUpdate {
        #[arg(required = true, value_name = "GROUP")]
        groups: Vec<String>,
        /// Skip the canaries: go straight to active.
        #[arg(long, alias = "no-canary")]
        force: bool,
    },
    /// Mark groups done (default: the groups in canary or active).
    #[command(alias = "force-done")]
    MarkDone {
        #[arg(value_name = "GROUP")]
        groups: Vec<String>,
    },
    /// Roll groups back to the start version (default: every started group).
    Rollback {
        #[arg(value_name = "GROUP")]
        groups: Vec<String>,
    },
    /// Suspend automatic agent updates (sets the config's mode).
    Suspend,
    /// Resume automatic agent updates (sets the config's mode).
    Resume,
    /// Roll out VERSION: from the current target (or --current-version) to VERSION.
    NewRollout {
        #[arg(value_name = "VERSION")]
        version: String,
        /// The version agents run now (default: the current target).
        #[arg(long, value_name = "VERSION")]
        current_version: Option<String>,
    },
}

#[derive(Args)]
pub struct InventoryArgs {
    #[command(subcommand)]
    cmd: InventoryCommand,
    #[command(flatten)]
    conn: Conn,
}

#[derive(Subcommand)]
pub enum InventoryCommand {
    /// List the connected agents.
    Ls,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum RoleArg {
    Operator,
    User,
    Viewer,
    Agent,
}

#[derive(Args)]
pub struct TokensArgs {
    #[command(subcommand)]
    cmd: TokensCommand,
    #[command(flatten)]
    conn: Conn,
}

#[derive(Subcommand)]
pub enum TokensCommand {
    /// Mint a token; it is printed once (ternd keeps only its hash).
    Create {
        #[arg(long, value_enum)]
        role: RoleArg,
        #[arg(long, default_value = "")]
        description: String,
    },
    /// List the tokens (ids and roles).
    Ls,
    /// Revoke a token by id.
    Rm { id: String },
}

#[derive(Args)]
pub struct ChannelsArgs {
    #[command(subcommand)]
    cmd: ChannelsCommand,
    #[command(flatten)]
    conn: Conn,
}

#[derive(Subcommand)]
pub enum ChannelsCommand {
    /// Set a channel's version (and whether it is a critical update).
    Set {
        name: String,
        version: String,
        #[arg(long)]
        critical: bool,
    },
    /// List the channels.
    Ls,
    /// Delete a channel.
    Rm { name: String },
}

#[derive(Args)]
pub struct DevArgs {
    #[command(subcommand)]
    cmd: DevCommand,
    #[command(flatten)]
    conn: Conn,
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
}

#[derive(Subcommand)]
pub enum ClockCommand {
    /// Set the clock (RFC 3339, e.g. 2026-11-23T11:00:00Z).
    Set { time: String },
    /// Move the clock forward (e.g. 20s, 90m, 1h30m).
    Advance { duration: String },
}

pub fn run(cmd: ApiCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        ApiCommand::Get(a) => get(a),
        ApiCommand::Create(a) => create(a),
        ApiCommand::Rm(a) => rm(a),
        ApiCommand::Agents(a) => agents(a),
        ApiCommand::Inventory(a) => inventory(a),
        ApiCommand::Tokens(a) => tokens(a),
        ApiCommand::Channels(a) => channels(a),
        ApiCommand::Dev(a) => dev(a),
    }
}

/// Prints `v` as JSON or YAML; returns false in text mode (the caller renders).
fn structured(output: Output, v: &Value) -> anyhow::Result<bool> {
    match output {
        Output::Json => {
            println!("{}", serde_json::to_string_pretty(v)?);
            Ok(true)
        }
        Output::Yaml => {
            print!("{}", serde_yaml_ng::to_string(v)?);
            Ok(true)
        }
        Output::Text => Ok(false),
    }
}

fn get(a: GetArgs) -> anyhow::Result<ExitCode> {
    let c = a.conn.client()?;
    let path = match a.kind {
        GetKind::Config => "config",
        GetKind::Version => "version",
        GetKind::Rollout => "rollout",
        GetKind::Reports => "reports",
    };
    let v: Value = c.get(&format!("/v1/resources/{path}"))?;
    if a.conn.output == Output::Json {
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

fn create(a: CreateArgs) -> anyhow::Result<ExitCode> {
    let text = if a.file.as_os_str() == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .context("reading standard input")?;
        s
    } else {
        std::fs::read_to_string(&a.file)
            .with_context(|| format!("cannot read {}", a.file.display()))?
    };
    let doc: Value = serde_yaml_ng::from_str(&text)
        .with_context(|| format!("{}: not YAML or JSON", a.file.display()))?;
    let kind = doc["kind"].as_str().unwrap_or_default();
    let path = match kind {
        "autoupdate_config" => "config",
        "autoupdate_version" => "version",
        "autoupdate_agent_rollout" | "autoupdate_agent_report" => {
            bail!("{kind} is written only by ternd")
        }
        "" => bail!(
            "{}: kind: missing (autoupdate_config or autoupdate_version)",
            a.file.display()
        ),
        other => bail!(
            "{}: kind: {other:?} is not autoupdate_config or autoupdate_version",
            a.file.display()
        ),
    };
    let has_revision =
        doc["metadata"]["revision"].is_string() || doc["metadata"]["revision"].is_number();
    let c = a.conn.client()?;
    let (method, url, verb) = if a.force {
        (
            "POST",
            format!("/v1/resources/{path}?force=true"),
            "written",
        )
    } else if has_revision {
        ("PUT", format!("/v1/resources/{path}"), "updated")
    } else {
        ("POST", format!("/v1/resources/{path}"), "created")
    };
    let v: Value = c.send_text(method, &url, &text)?;
    if !structured(a.conn.output, &v)? {
        println!(
            "{kind} {verb} (revision {})",
            v["metadata"]["revision"].as_str().unwrap_or("?")
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn rm(a: RmArgs) -> anyhow::Result<ExitCode> {
    let c = a.conn.client()?;
    let (path, kind) = match a.kind {
        RmKind::Config => ("config", "autoupdate_config"),
        RmKind::Version => ("version", "autoupdate_version"),
    };
    let v: Value = c.delete(&format!("/v1/resources/{path}"))?;
    if !structured(a.conn.output, &v)? {
        println!("{kind} deleted");
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Deserialize)]
struct Changed {
    name: String,
    to: String,
}

#[derive(Deserialize)]
struct TransitionAnswer {
    groups: Vec<Changed>,
    mode: Mode,
}

#[derive(Deserialize)]
struct ModeAnswer {
    mode: Mode,
    config_mode: Mode,
    version_mode: Mode,
    changed: bool,
}

fn names(groups: &[Changed]) -> String {
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

fn agents(a: AgentsArgs) -> anyhow::Result<ExitCode> {
    let c = a.conn.client()?;
    let out = a.conn.output;
    match a.cmd {
        AgentsCommand::Status => {
            let v: Value = c.get("/v1/agents/status")?;
            if !structured(out, &v)? {
                let s: render::Status = serde_json::from_value(v)?;
                print!("{}", render::status(&s));
            }
        }
        AgentsCommand::Report => {
            let v: Value = c.get("/v1/agents/report")?;
            if !structured(out, &v)? {
                let r: render::Report = serde_json::from_value(v)?;
                print!("{}", render::report(&r));
            }
        }
        AgentsCommand::StartUpdate { groups, force } => {
            transition(&c, out, TransitionKind::StartUpdate, &groups, force)?;
        }
        AgentsCommand::MarkDone { groups } => {
            transition(&c, out, TransitionKind::MarkDone, &groups, false)?;
        }
        AgentsCommand::Rollback { groups } => {
            transition(&c, out, TransitionKind::Rollback, &groups, false)?;
        }
        AgentsCommand::Suspend => {
            let v: Value = c.post("/v1/agents/suspend", &json!({}))?;
            if !structured(out, &v)? {
                let m: ModeAnswer = serde_json::from_value(v)?;
                if m.changed {
                    println!("Automatic updates suspended");
                } else {
                    println!("Automatic updates were already suspended");
                }
                println!(
                    "No existing agent will get updated. New agents might install the new version\ndepending on their group."
                );
            }
        }
        AgentsCommand::Resume => {
            let v: Value = c.post("/v1/agents/resume", &json!({}))?;
            if !structured(out, &v)? {
                let m: ModeAnswer = serde_json::from_value(v)?;
                if m.mode == Mode::Enabled {
                    println!(
                        "Automatic updates {}",
                        if m.changed {
                            "resumed"
                        } else {
                            "were already enabled"
                        }
                    );
                } else {
                    println!(
                        "The autoupdate_config's mode is {}, but updates stay {}: the autoupdate_version's mode is {}.",
                        m.config_mode.as_str(),
                        m.mode.as_str(),
                        m.version_mode.as_str()
                    );
                }
            }
        }
        AgentsCommand::NewRollout {
            version,
            current_version,
        } => {
            let v: Value = c.post(
                "/v1/agents/new-rollout",
                &json!({"version": version, "current_version": current_version}),
            )?;
            if !structured(out, &v)? {
                let from = v["start_version"].as_str().unwrap_or("?");
                let to = v["target_version"].as_str().unwrap_or("?");
                if v["changed"].as_bool() == Some(false) {
                    println!("the rollout from {from} to {to} already exists: nothing changed");
                } else {
                    println!("created new rollout from {from} to {to}");
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `agents start-update|mark-done|rollback`: ternd serves each kind at its name.
fn transition(
    c: &Client,
    out: Output,
    kind: TransitionKind,
    groups: &[String],
    force: bool,
) -> anyhow::Result<()> {
    let body = match kind {
        TransitionKind::StartUpdate => json!({"groups": groups, "force": force}),
        TransitionKind::MarkDone | TransitionKind::Rollback => json!({"groups": groups}),
    };
    let v: Value = c.post(&format!("/v1/agents/{kind}"), &body)?;
    if structured(out, &v)? {
        return Ok(());
    }
    let t: TransitionAnswer = serde_json::from_value(v)?;
    // What agents will not do while updates are suspended; marking done moves none.
    let held_back = match kind {
        TransitionKind::StartUpdate => {
            for g in &t.groups {
                println!("Group {} update triggered ({})", g.name, g.to);
            }
            Some("update")
        }
        TransitionKind::MarkDone => {
            println!("Groups marked done: {}", names(&t.groups));
            None
        }
        TransitionKind::Rollback => {
            println!("Rolledback groups: {}", names(&t.groups));
            Some("rollback")
        }
    };
    if let Some(what) = held_back
        && t.mode != Mode::Enabled
    {
        println!("{}", suspended_warning(t.mode, what));
    }
    Ok(())
}

fn inventory(a: InventoryArgs) -> anyhow::Result<ExitCode> {
    let c = a.conn.client()?;
    let InventoryCommand::Ls = a.cmd;
    let v: Value = c.get("/v1/inventory")?;
    if structured(a.conn.output, &v)? {
        return Ok(ExitCode::SUCCESS);
    }
    let s = |x: &Value| x.as_str().unwrap_or_default().to_string();
    let rows: Vec<Vec<String>> = v["agents"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|a| {
            let health = if a["rollback"].as_bool() == Some(true) {
                "rolled back"
            } else if a["healthy"].as_bool() == Some(false) {
                "unhealthy"
            } else {
                "healthy"
            };
            vec![
                s(&a["updater_id"]),
                s(&a["hostname"]),
                s(&a["group"]),
                s(&a["version"]),
                s(&a["updater_status"]),
                health.to_string(),
                if a["counted"].as_bool() == Some(true) {
                    "yes"
                } else {
                    "no"
                }
                .to_string(),
                a["last_seen"]
                    .as_str()
                    .and_then(|t| t.parse().ok())
                    .map(render::time)
                    .unwrap_or_default(),
            ]
        })
        .collect();
    println!(
        "{} agents connected to replica {}",
        rows.len(),
        s(&v["replica"])
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
                "Health",
                "Counted",
                "Last seen (UTC)"
            ],
            &rows
        )
    );
    Ok(ExitCode::SUCCESS)
}

fn tokens(a: TokensArgs) -> anyhow::Result<ExitCode> {
    let c = a.conn.client()?;
    match a.cmd {
        TokensCommand::Create { role, description } => {
            let role = match role {
                RoleArg::Operator => "operator",
                RoleArg::User => "user",
                RoleArg::Viewer => "viewer",
                RoleArg::Agent => "agent",
            };
            let v: Value = c.post(
                "/v1/tokens",
                &json!({"role": role, "description": description}),
            )?;
            if !structured(a.conn.output, &v)? {
                // The token alone on stdout, so `TOKEN=$(ternctl tokens create …)` works.
                println!("{}", v["token"].as_str().unwrap_or_default());
                eprintln!(
                    "created {role} token {} (shown only once: ternd keeps only its hash)",
                    v["id"].as_str().unwrap_or_default()
                );
            }
        }
        TokensCommand::Ls => {
            let v: Value = c.get("/v1/tokens")?;
            if !structured(a.conn.output, &v)? {
                let rows: Vec<Vec<String>> = v
                    .as_array()
                    .map(Vec::as_slice)
                    .unwrap_or_default()
                    .iter()
                    .map(|t| {
                        ["id", "role", "created", "description"]
                            .iter()
                            .map(|k| t[*k].as_str().unwrap_or_default().to_string())
                            .collect()
                    })
                    .collect();
                print!(
                    "{}",
                    render::table(&["ID", "Role", "Created", "Description"], &rows)
                );
            }
        }
        TokensCommand::Rm { id } => {
            let v: Value = c.delete(&format!("/v1/tokens/{}", encode(&id)))?;
            if !structured(a.conn.output, &v)? {
                println!("token {id} revoked");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn channels(a: ChannelsArgs) -> anyhow::Result<ExitCode> {
    let c = a.conn.client()?;
    match a.cmd {
        ChannelsCommand::Set {
            name,
            version,
            critical,
        } => {
            let v: Value = c.put(
                &format!("/v1/channels/{}", encode(&name)),
                &json!({"version": version, "critical": critical}),
            )?;
            if !structured(a.conn.output, &v)? {
                println!(
                    "channel {name} set to {}{}",
                    v["version"].as_str().unwrap_or_default(),
                    if critical { " (critical)" } else { "" }
                );
            }
        }
        ChannelsCommand::Ls => {
            let v: Value = c.get("/v1/channels")?;
            if !structured(a.conn.output, &v)? {
                let rows: Vec<Vec<String>> = v
                    .as_array()
                    .map(Vec::as_slice)
                    .unwrap_or_default()
                    .iter()
                    .map(|ch| {
                        vec![
                            ch["name"].as_str().unwrap_or_default().to_string(),
                            ch["version"].as_str().unwrap_or_default().to_string(),
                            if ch["critical"].as_bool() == Some(true) {
                                "yes"
                            } else {
                                "no"
                            }
                            .to_string(),
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
            let v: Value = c.delete(&format!("/v1/channels/{}", encode(&name)))?;
            if !structured(a.conn.output, &v)? {
                println!("channel {name} deleted");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn dev(a: DevArgs) -> anyhow::Result<ExitCode> {
    let c = a.conn.client()?;
    match a.cmd {
        DevCommand::Clock { cmd } => {
            let v: Value = match cmd {
                None => c.get("/v1/dev/clock")?,
                Some(ClockCommand::Set { time }) => {
                    c.post("/v1/dev/clock", &json!({"set": time}))?
                }
                Some(ClockCommand::Advance { duration }) => {
                    c.post("/v1/dev/clock", &json!({"advance": duration}))?
                }
            };
            if !structured(a.conn.output, &v)? {
                println!("{}", v["now"].as_str().unwrap_or_default());
            }
        }
        DevCommand::Reconcile => {
            let v: Value = c.post("/v1/dev/reconcile", &json!({}))?;
            if !structured(a.conn.output, &v)? {
                for e in v["events"]
                    .as_array()
                    .map(Vec::as_slice)
                    .unwrap_or_default()
                {
                    eprintln!("{}", e["message"].as_str().unwrap_or_default());
                }
                if v["leader"].as_bool() == Some(false) {
                    // The server names the replica holding the lease (send it there).
                    match v["message"].as_str() {
                        Some(m) => eprintln!("{m}"),
                        None => eprintln!(
                            "another replica holds the leader lease: nothing reconciled here"
                        ),
                    }
                }
                match &v["rollout"] {
                    Value::Null => println!(
                        "no rollout: {}",
                        v["no_rollout_reason"].as_str().unwrap_or_default()
                    ),
                    r => print!("{}", serde_yaml_ng::to_string(r)?),
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
