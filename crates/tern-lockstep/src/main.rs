//! `tern-lockstep`: lock-step updates of a small server cluster (seed 004).
//!
//! - `updater`: campaigns for the leader lease; the leader watches releases and drives
//!   updates (`updater`).
//! - `worker`: one per server; installs and passes each step with the others (`worker`).
//! - `servers`, `config`, `status`, `stop`, `recover`: the operator's commands (`admin`).
//!
//! The decisions are `tern_core::lockstep`'s; this binary reads and writes the store,
//! runs commands and fetches releases.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod admin;
mod changes;
mod command;
mod identity;
mod install;
mod keys;
mod records;
mod updater;
mod worker;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::{CommandFactory as _, Parser, Subcommand};
use tern_cli::LogFormat;
use tern_core::duration::GoDuration;
use tern_core::lockstep::protocol::ServerId;
use tern_core::lockstep::release::{Environment, TagPrefix};
use tern_outbound::notify::{NotifySettings, parse_notify_url};
use tern_store::Backend;
use tern_store::{SqliteOptions, Store};

/// Lock-step updates of a server cluster: every server reaches each step before any goes
/// on. See docs/lockstep.md.
#[derive(Parser)]
#[command(name = "tern-lockstep", version)]
struct Cli {
    /// The shared store: sqlite:PATH (one machine) or etcd:URL[,URL…].
    #[arg(long, global = true, env = "TERN_LOCKSTEP_STORE", value_parser = Backend::parse, value_name = "BACKEND")]
    store: Option<Backend>,
    /// Key prefix in etcd.
    #[arg(
        long,
        global = true,
        env = "TERN_LOCKSTEP_ETCD_PREFIX",
        default_value = "/tern/"
    )]
    etcd_prefix: String,
    /// etcd user to connect as, once etcd's authentication is on (`root` for the
    /// updater and the operator's commands; a worker takes its own from --credentials).
    #[arg(
        long,
        global = true,
        env = "TERN_LOCKSTEP_ETCD_USER",
        requires = "etcd_password_file"
    )]
    etcd_user: Option<String>,
    /// File holding that user's password.
    #[arg(
        long,
        global = true,
        env = "TERN_LOCKSTEP_ETCD_PASSWORD_FILE",
        value_name = "FILE"
    )]
    etcd_password_file: Option<PathBuf>,
    /// Log filter (tracing's EnvFilter syntax).
    #[arg(long, global = true, env = "TERN_LOCKSTEP_LOG", default_value = "info")]
    log: String,
    /// How logs are written to stderr: text lines (colored on a terminal), or JSON
    /// objects one per line.
    #[arg(
        long,
        global = true,
        env = "TERN_LOCKSTEP_LOG_FORMAT",
        value_enum,
        default_value_t = LogFormat::Text,
        value_name = "FORMAT"
    )]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the updater: the leader polls releases and drives updates (run on 1..N servers).
    Updater(Box<UpdaterArgs>),
    /// Run the worker of this server: install, then pass each step with the others.
    Worker(WorkerArgs),
    /// Register, remove or list servers.
    #[command(subcommand)]
    Servers(ServersCmd),
    /// Set or show the environment.
    #[command(subcommand)]
    Config(ConfigCmd),
    /// Show the current update and where each server is.
    Status,
    /// Stop the current update (everyone holds until `recover`).
    Stop {
        /// Why, for the status and the log.
        #[arg(long, default_value = "no reason given")]
        reason: String,
    },
    /// Remove the update's status records so the leader starts it again with the
    /// servers registered now (after fixing the cause of a stop).
    Recover,
    /// etcd's authentication (per-server users need it on).
    #[command(subcommand)]
    Auth(AuthCmd),
    /// Print the shell completion script (see docs/cli.md), e.g.
    /// `tern-lockstep completion bash > /etc/bash_completion.d/tern-lockstep`.
    Completion(tern_cli::CompletionArgs),
}

#[derive(Subcommand)]
enum AuthCmd {
    /// Create etcd's root user and turn authentication on: from then on every client
    /// needs credentials (--etcd-user root --etcd-password-file F for the updaters and
    /// these commands; each worker its own, from `servers add --credentials-out`).
    Enable {
        /// File holding the password to give etcd's root user.
        #[arg(long, value_name = "FILE")]
        root_password_file: PathBuf,
    },
    /// Give every registered server's etcd user exactly this release's grants (its own
    /// keys and leases only), keeping its password: run once after an upgrade.
    Refresh,
}

#[derive(Subcommand)]
enum ServersCmd {
    /// Register a server (workers register themselves when they start).
    Add {
        id: ServerId,
        #[arg(long, default_value = "")]
        name: String,
        /// Give the server its own identity, written to this new file (mode 0600): a
        /// signing key and, on etcd, an etcd user that may write this server's keys only.
        /// Copy it to the server and start its worker with --credentials FILE.
        #[arg(long, value_name = "FILE")]
        credentials_out: Option<PathBuf>,
    },
    /// Unregister a server (a dead one, before `recover`). If it comes back, its worker
    /// registers it again and it catches up.
    Rm {
        id: ServerId,
        /// Also delete its etcd user (a server gone for good, or whose credentials leaked).
        #[arg(long)]
        revoke: bool,
    },
    /// List the registered servers.
    Ls,
}

#[derive(Subcommand)]
enum ConfigCmd {
    /// `config set env production|staging`.
    Set {
        #[arg(value_parser = ["env"])]
        key: String,
        /// production: releases only; staging: pre-releases too.
        #[arg(value_parser = parse_env)]
        value: Environment,
    },
    /// `config get env`.
    Get {
        #[arg(value_parser = ["env"])]
        key: String,
    },
}

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("source").required(true).args(["github", "index"])))]
struct UpdaterArgs {
    /// A GitHub-compatible API base URL (with --repo and --asset).
    #[arg(long, value_name = "URL", conflicts_with = "index", requires_all = ["repo", "asset"])]
    github: Option<String>,
    /// owner/name of the repository whose releases to follow.
    #[arg(long)]
    repo: Option<String>,
    /// The release asset to install: a name with {version} and {tag}, e.g. app-{version}.tar.gz.
    #[arg(long)]
    asset: Option<String>,
    /// File with a token for the GitHub API (rate limits, private repositories).
    #[arg(long, value_name = "FILE")]
    github_token_file: Option<PathBuf>,
    /// A JSON index instead: {"releases": [{"tag", "prerelease", "url", "sha256"}]}.
    #[arg(long, value_name = "URL")]
    index: Option<String>,
    /// The tag prefix to strip; default: everything up to the first hyphen (release-1.2.0).
    #[arg(long)]
    tag_prefix: Option<String>,
    /// How often to poll the source.
    #[arg(long, default_value = "60s", value_parser = duration)]
    poll: Duration,
    /// Stop an update when no listed server moves for this long.
    #[arg(long, default_value = "30m", value_parser = duration)]
    stall_timeout: Duration,
    /// Alert `lockstep_stalled` when servers have waited at a barrier this fraction of
    /// their --barrier-timeout, naming the servers that have not arrived.
    #[arg(long, default_value = "0.2", value_parser = fraction, value_name = "FRACTION")]
    stalled_after: f64,
    /// The updater lease's TTL: another updater takes over this long after a leader dies.
    #[arg(long, default_value = "10s", value_parser = duration)]
    lease_ttl: Duration,
    /// This updater's name in the lease (default: host name and pid).
    #[arg(long)]
    holder: Option<String>,
    /// Allow plain http:// for the source and artifacts (labs, tests).
    #[arg(long)]
    insecure_http: bool,
    /// Generic JSON webhook for alerts (repeatable).
    #[arg(long, value_name = "URL", value_parser = parse_notify_url)]
    notify_webhook: Vec<String>,
    /// Slack-compatible incoming webhook for alerts (repeatable).
    #[arg(long, value_name = "URL", value_parser = parse_notify_url)]
    notify_slack: Vec<String>,
    /// File with the bearer token sent to every --notify-webhook.
    #[arg(long, value_name = "FILE", requires = "notify_webhook")]
    notify_token_file: Option<PathBuf>,
    /// The name notices carry (default: the host name).
    #[arg(long)]
    notify_server_name: Option<String>,
}

#[derive(clap::Args)]
struct WorkerArgs {
    /// This server's id (the seed's LRN).
    #[arg(long)]
    id: ServerId,
    /// A name for it in `servers ls` (default: the host name).
    #[arg(long)]
    name: Option<String>,
    /// Where releases are unpacked (<root>/versions/<version>).
    #[arg(long, value_name = "DIR")]
    root: PathBuf,
    /// Fail a step when the other servers have not reached it within this long.
    #[arg(long, default_value = "30m", value_parser = duration)]
    barrier_timeout: Duration,
    /// TTL of the rolling and leader-only leases (kept alive while a step runs).
    #[arg(long, default_value = "15s", value_parser = duration)]
    lease_ttl: Duration,
    /// Allow plain http:// for artifacts (labs, tests).
    #[arg(long)]
    insecure_http: bool,
    /// This server's credentials file (`servers add --credentials-out`): its signing key
    /// and, on etcd, its etcd user. Without it the worker keeps a key of its own in
    /// <root>/identity.json and registers it when it first starts.
    #[arg(long, value_name = "FILE")]
    credentials: Option<PathBuf>,
}

fn fraction(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(f) if f > 0.0 && f <= 1.0 => Ok(f),
        _ => Err(format!(
            "{s:?} is not a fraction in (0, 1], e.g. 0.2 for a fifth of the barrier timeout"
        )),
    }
}

fn parse_env(s: &str) -> Result<Environment, String> {
    s.parse()
}

fn duration(s: &str) -> Result<Duration, String> {
    GoDuration::parse_positive_std(s)
}

fn host_name() -> String {
    tern_cli::host_name("localhost")
}

fn main() -> ExitCode {
    if let Some(code) = tern_cli::man_pages_if_asked(Cli::command) {
        return code;
    }
    let cli = Cli::parse();
    // From the definitions alone, before the store is asked for.
    if let Command::Completion(a) = &cli.command {
        return match tern_cli::print_completion(Cli::command(), a.shell) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("tern-lockstep: error: printing the completion script: {e}");
                ExitCode::FAILURE
            }
        };
    }
    // A filter that does not parse falls back to `info` rather than stopping a worker.
    if tern_cli::init_logs(&cli.log, cli.log_format).is_err() {
        let _ = tern_cli::init_logs("info", cli.log_format);
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("tern-lockstep: error: starting the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(out) => {
            if !out.is_empty() {
                println!("{}", out.trim_end());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("tern-lockstep: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The store, and on etcd the handle `servers add`/`rm --revoke` and `auth enable` use.
async fn open(
    cli: &Cli,
    login: Option<(String, String)>,
) -> anyhow::Result<(Arc<dyn Store>, Option<admin::EtcdAdmin>)> {
    let Some(backend) = &cli.store else {
        anyhow::bail!(
            "give the store: --store sqlite:PATH or --store etcd:URL[,URL…] (or TERN_LOCKSTEP_STORE)"
        );
    };
    match backend {
        // A barrier waits for other processes' writes: on SQLite they are seen by
        // polling, so poll often (a small indexed query); etcd pushes them.
        Backend::Sqlite(_) => {
            if login.is_some() {
                anyhow::bail!(
                    "etcd credentials were given but the store is SQLite: there every process that can open the file is trusted"
                );
            }
            let sqlite = SqliteOptions {
                poll_interval: Duration::from_millis(20),
                ..SqliteOptions::default()
            };
            Ok((backend.open_with(&cli.etcd_prefix, sqlite).await?, None))
        }
        Backend::Etcd(urls) => open_etcd(urls, &cli.etcd_prefix, login).await,
    }
}

#[cfg(feature = "etcd")]
async fn open_etcd(
    urls: &[String],
    prefix: &str,
    login: Option<(String, String)>,
) -> anyhow::Result<(Arc<dyn Store>, Option<admin::EtcdAdmin>)> {
    use tern_store::{EtcdOptions, EtcdStore};
    if prefix.is_empty() {
        anyhow::bail!("--etcd-prefix must not be empty (e.g. /tern/)");
    }
    let opts = EtcdOptions {
        credentials: login,
        ..EtcdOptions::default()
    };
    let backoff =
        tern_core::backoff::Backoff::new(Duration::from_millis(200), Duration::from_secs(5));
    let mut failures = 0;
    loop {
        match EtcdStore::connect(urls, prefix, opts.clone()).await {
            Ok(store) => {
                tracing::info!(endpoints = ?urls, prefix, "connected to etcd");
                let admin = admin::EtcdAdmin(store.clone());
                return Ok((Arc::new(store), Some(admin)));
            }
            Err(tern_store::Error::Unavailable(e)) => {
                tracing::warn!(endpoints = ?urls, error = %e, "etcd does not answer yet; retrying");
                failures += 1;
                tokio::time::sleep(backoff.after(failures)).await;
            }
            Err(e) => anyhow::bail!("connecting to etcd at {urls:?}: {e}"),
        }
    }
}

#[cfg(not(feature = "etcd"))]
async fn open_etcd(
    _: &[String],
    _: &str,
    _: Option<(String, String)>,
) -> anyhow::Result<(Arc<dyn Store>, Option<admin::EtcdAdmin>)> {
    anyhow::bail!("this tern-lockstep was built without etcd support (cargo feature `etcd`)")
}

fn read_secret(path: &std::path::Path) -> anyhow::Result<String> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let secret = text.trim().to_string();
    if secret.is_empty() {
        anyhow::bail!("{} is empty", path.display());
    }
    Ok(secret)
}

async fn run(cli: Cli) -> anyhow::Result<String> {
    let mut login = match (&cli.etcd_user, &cli.etcd_password_file) {
        (Some(u), Some(p)) => Some((u.clone(), read_secret(p)?)),
        _ => None,
    };
    // A worker is who its credentials say; it logs in to etcd as that server.
    let identity = match &cli.command {
        Command::Worker(a) => {
            let id = match &a.credentials {
                Some(path) => identity::Identity::load(path)?,
                None => identity::Identity::load_or_create(&a.root, a.id)?,
            };
            if id.server != a.id {
                anyhow::bail!(
                    "the credentials are server {}'s, not server {}'s: a worker acts only as the server its credentials name",
                    id.server,
                    a.id
                );
            }
            if let Some(own) = &id.etcd {
                if login.as_ref().is_some_and(|(u, _)| *u != own.0) {
                    anyhow::bail!(
                        "--etcd-user {} differs from the credentials' etcd user {}: a worker logs in as its own server",
                        login.as_ref().map_or("", |(u, _)| u.as_str()),
                        own.0
                    );
                }
                login = Some(own.clone());
            }
            Some(id)
        }
        _ => None,
    };
    let (store, etcd) = open(&cli, login).await?;
    match cli.command {
        Command::Updater(a) => {
            let a = *a;
            let source = match (&a.github, &a.index) {
                (Some(api), _) => tern_outbound::release_source::Source::GitHub {
                    api: api.clone(),
                    repo: a.repo.clone().unwrap_or_default(),
                    token: match &a.github_token_file {
                        None => None,
                        Some(p) => Some(
                            std::fs::read_to_string(p)
                                .with_context(|| format!("reading {}", p.display()))?
                                .trim()
                                .to_string(),
                        ),
                    },
                    asset: a.asset.clone().unwrap_or_default(),
                },
                (None, Some(url)) => {
                    tern_outbound::release_source::Source::Index { url: url.clone() }
                }
                (None, None) => anyhow::bail!(
                    "give --github URL --repo OWNER/NAME --asset NAME, or --index URL"
                ),
            };
            let notify = NotifySettings::from_flags(
                &a.notify_webhook,
                &a.notify_slack,
                a.notify_token_file.as_deref(),
                a.notify_server_name.clone(),
            )?;
            let cfg = updater::UpdaterConfig {
                holder: a
                    .holder
                    .unwrap_or_else(|| format!("{}-{}", host_name(), std::process::id())),
                source,
                prefix: a
                    .tag_prefix
                    .map_or(TagPrefix::FirstHyphen, TagPrefix::Exact),
                poll: a.poll,
                stall_timeout: a.stall_timeout,
                stalled_after: a.stalled_after,
                lease_ttl: a.lease_ttl,
                insecure: a.insecure_http,
                notify,
            };
            tokio::select! {
                r = updater::run(store, cfg) => r.map(|()| String::new()),
                _ = tokio::signal::ctrl_c() => Ok(String::new()),
            }
        }
        Command::Worker(a) => {
            let cfg = worker::WorkerConfig {
                id: a.id,
                name: a.name.unwrap_or_else(host_name),
                root: a.root,
                barrier_timeout: a.barrier_timeout,
                insecure: a.insecure_http,
                lease_ttl: a.lease_ttl,
                identity: identity.context("the worker's identity")?,
            };
            tokio::select! {
                r = worker::run(store, cfg) => r.map(|()| String::new()),
                _ = tokio::signal::ctrl_c() => Ok(String::new()),
            }
        }
        Command::Servers(ServersCmd::Add {
            id,
            name,
            credentials_out,
        }) => {
            admin::server_add(
                &*store,
                etcd.as_ref(),
                id,
                &name,
                credentials_out.as_deref(),
            )
            .await
        }
        Command::Servers(ServersCmd::Rm { id, revoke }) => {
            admin::server_rm(&*store, etcd.as_ref(), id, revoke).await
        }
        Command::Auth(AuthCmd::Enable { root_password_file }) => {
            let password = read_secret(&root_password_file)?;
            match &etcd {
                Some(admin) => {
                    admin.enable_auth(&password).await?;
                    Ok("etcd's authentication is on: connect with --etcd-user root --etcd-password-file FILE; workers with their --credentials".into())
                }
                None => anyhow::bail!(
                    "the store is SQLite: it has no users; every process that can open the file is trusted"
                ),
            }
        }
        Command::Auth(AuthCmd::Refresh) => match &etcd {
            Some(admin) => admin::auth_refresh(&*store, admin).await,
            None => anyhow::bail!(
                "the store is SQLite: it has no users; every process that can open the file is trusted"
            ),
        },
        Command::Servers(ServersCmd::Ls) => {
            let snap = records::read(&*store).await?;
            let mut out = String::new();
            for r in snap.servers.values() {
                out.push_str(&format!("{}\t{}\t{}\n", r.id, r.name, r.registered_at));
            }
            Ok(out)
        }
        Command::Config(ConfigCmd::Set { value, .. }) => admin::env_set(&*store, value).await,
        Command::Config(ConfigCmd::Get { .. }) => Ok(records::read(&*store).await?.env.to_string()),
        Command::Status => {
            let snap = records::read(&*store).await?;
            let leader = store
                .lease_info(keys::UPDATER_LEASE)
                .await?
                .map(|i| i.holder);
            Ok(admin::render_status(&snap, leader.as_deref()))
        }
        Command::Stop { reason } => admin::stop(&*store, &reason).await,
        Command::Recover => admin::recover(&*store).await,
        // main answers it before the store is opened.
        Command::Completion(_) => Ok(String::new()),
    }
}
