//! ternd: Tern's control plane.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, CommandFactory as _, Parser, Subcommand};
use jiff::Timestamp;
use tern_cli::LogFormat;
use tern_core::duration::GoDuration;
use tern_server::{Backend, NotifySettings, ServeOptions, Settings};

#[derive(Parser)]
#[command(name = "ternd", version, about = "Tern's control plane")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the API, take heartbeats and reconcile the rollout.
    Start(Box<StartArgs>),
    /// Print the shell completion script (see docs/cli.md), e.g.
    /// `ternd completion bash > /etc/bash_completion.d/ternd`.
    Completion(tern_cli::CompletionArgs),
}

fn parse_duration(s: &str) -> Result<GoDuration, String> {
    GoDuration::parse_positive(s).map_err(|e| e.to_string())
}

/// A duration that may be zero (`0`, `0s`: none).
fn parse_duration_or_zero(s: &str) -> Result<GoDuration, String> {
    GoDuration::parse(s).map_err(|e| e.to_string())
}

fn parse_time(s: &str) -> Result<Timestamp, String> {
    s.parse::<Timestamp>()
        .map_err(|e| format!("{s:?} is not an RFC 3339 instant (e.g. 2026-11-23T11:00:00Z): {e}"))
}

#[derive(Args)]
struct StartArgs {
    /// Where the local files live (created if absent): the SQLite database by default,
    /// the operator token (written by the replica that initialises the store) and the
    /// replica id.
    #[arg(long, env = "TERN_DATA_DIR", value_name = "DIR")]
    data_dir: PathBuf,
    /// The store: `sqlite:PATH` (default: DIR/tern.db; several ternd on one machine may
    /// share the file) or `etcd:URL[,URL…]` (several replicas on an etcd cluster; needs a
    /// ternd built with the cargo feature `etcd`).
    #[arg(long, env = "TERN_BACKEND", value_name = "BACKEND", value_parser = Backend::parse)]
    backend: Option<Backend>,
    /// Key prefix of this installation in etcd (several installations may share one etcd).
    #[arg(long, default_value = "/tern/", value_name = "PREFIX")]
    etcd_prefix: String,
    /// etcd: host-history records (kept 90 days) share one etcd lease per this much time
    /// instead of one lease each, so a first deploy on N hosts grants a lease per hour,
    /// not N (a record may then expire up to this much late, never early). 0s: a lease per
    /// write. Turn it on only once every replica runs a ternd that knows shared leases
    /// (this release or later): an older replica revokes the lease of each record it
    /// rewrites, and with it every record sharing that lease. 1h is a good value
    #[arg(long, default_value = "0s", value_name = "DURATION", value_parser = parse_duration_or_zero)]
    etcd_lease_bucket: GoDuration,
    /// Address to listen on (port 0: any free port; the address is printed).
    #[arg(long, default_value = "127.0.0.1:3025", value_name = "ADDR")]
    listen: SocketAddr,
    /// PEM certificate chain for HTTPS.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// PEM private key for HTTPS.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Serve plain HTTP (only behind a TLS-terminating proxy, or for local tests).
    #[arg(long)]
    insecure_http: bool,
    /// Run on a clock that moves only via POST /v1/dev/clock (tests, demos); reconciles
    /// then run only on POST /v1/dev/reconcile.
    #[arg(long, value_name = "RFC3339", value_parser = parse_time)]
    dev_clock: Option<Timestamp>,
    /// How often this replica writes its report and reconciles.
    #[arg(long, default_value = "1m", value_name = "DURATION", value_parser = parse_duration)]
    report_period: GoDuration,
    /// How often this replica writes its report and reconciles while a group tests
    /// canaries or is active, so that the group moves on soon after its hosts finish
    /// (0: --report-period throughout).
    #[arg(long, default_value = "10s", value_name = "DURATION", value_parser = parse_duration_or_zero)]
    active_report_period: GoDuration,
    /// While a group tests canaries or is active, report (and reconcile) this long after
    /// a host of this replica finishes an update, rolls back or changes its health, at most once per
    /// this long, so that the group moves on within seconds (0: only every
    /// --active-report-period).
    #[arg(long, default_value = "2s", value_name = "DURATION", value_parser = parse_duration_or_zero)]
    report_after_change: GoDuration,
    /// The heartbeat interval updaters are told; silent for three, an agent is forgotten.
    #[arg(long, default_value = "60s", value_name = "DURATION", value_parser = parse_duration)]
    heartbeat_interval: GoDuration,
    /// This replica's name in reports and the leader lease (default: kept in DIR/replica.id).
    #[arg(long)]
    replica_id: Option<String>,
    /// Public requests (find, channels) per second per client address (0: no limit).
    #[arg(long, default_value_t = 100.0)]
    find_rate: f64,
    /// Public requests a client address may make at once before --find-rate applies.
    #[arg(long, default_value_t = 500)]
    find_burst: u32,
    /// Heartbeats per second per client address (0: no limit).
    #[arg(long, default_value_t = 50.0)]
    heartbeat_rate: f64,
    /// Heartbeats a client address may send at once before --heartbeat-rate applies.
    #[arg(long, default_value_t = 500)]
    heartbeat_burst: u32,
    /// TTL of the reconcile leader lease: after a leader dies another replica leads
    /// within about this long.
    #[arg(long, default_value = "15s", value_name = "DURATION", value_parser = parse_duration)]
    leader_ttl: GoDuration,
    /// The `edition` field of find responses.
    #[arg(long, default_value = "community")]
    edition: String,
    /// POST alert notices as JSON to this URL (http or https; repeatable; in the
    /// environment, URLs separated by spaces). See docs/alerts.md.
    #[arg(long, env = "TERN_NOTIFY_WEBHOOK", value_name = "URL", value_delimiter = ' ', value_parser = tern_server::parse_notify_url)]
    notify_webhook: Vec<String>,
    /// Post alert notices to this Slack-compatible incoming webhook (repeatable). The URL
    /// is a secret: prefer TERN_NOTIFY_SLACK (URLs separated by spaces) to the command line.
    #[arg(long, env = "TERN_NOTIFY_SLACK", value_name = "URL", value_delimiter = ' ', value_parser = tern_server::parse_notify_url)]
    notify_slack: Vec<String>,
    /// File holding the bearer token sent to every --notify-webhook receiver (read once
    /// at startup).
    #[arg(
        long,
        env = "TERN_NOTIFY_TOKEN_FILE",
        value_name = "FILE",
        requires = "notify_webhook"
    )]
    notify_token_file: Option<PathBuf>,
    /// How alert notices name this installation (their `server` field; default: the
    /// host name). Give every replica the same.
    #[arg(long, env = "TERN_NOTIFY_SERVER_NAME", value_name = "NAME")]
    notify_server_name: Option<String>,
    /// Prometheus' base URL (http or https): the leader runs groups' canary analyses
    /// there (docs/analysis.md). Without it, a group with an analysis holds at its
    /// canaries.
    #[arg(long, env = "TERN_PROMETHEUS_URL", value_name = "URL", value_parser = tern_server::parse_notify_url)]
    prometheus_url: Option<String>,
    /// How long one Prometheus query may take before the analysis holds the group.
    #[arg(long, default_value = "10s", value_name = "DURATION", value_parser = parse_duration)]
    prometheus_timeout: GoDuration,
    /// The release repository's root.json (from the release owners): a target_version
    /// that its targets do not sign is refused (new-rollout, version resources). The
    /// hosts verify on their own (`tern-update enable --trust-root`).
    #[arg(long, value_name = "ROOT_JSON", requires = "trust_url")]
    trust_root: Option<PathBuf>,
    /// Where the release repository's metadata is: an http(s) URL (the hosts' one), a
    /// file:// URL or a directory.
    #[arg(long, value_name = "URL", requires = "trust_root")]
    trust_url: Option<String>,
    /// How often a running replica reads the release metadata again for the signed
    /// minimums (`tern-release minimum`): a revoked version is held on every path of
    /// this replica within this of its signing. At least 1s.
    #[arg(long, default_value = "1m", value_name = "DURATION", value_parser = parse_duration, requires = "trust_root")]
    trust_refresh: GoDuration,
    /// Connections open at once (default: what the descriptor limit allows, raised to
    /// its hard limit at start, less 256). At the cap, the connection idle the longest
    /// is closed to make room; if every one is serving a request, the new one is.
    #[arg(long, value_name = "N")]
    max_connections: Option<usize>,
    /// Connections open at once from one client address; past it new ones are closed
    /// on arrival. Raise it when many hosts share one address (NAT).
    #[arg(long, default_value_t = 256, value_name = "N")]
    max_connections_per_ip: usize,
    /// A client must send a request's headers (and finish the TLS handshake) within
    /// this long, or the connection is closed.
    #[arg(long, default_value = "10s", value_name = "DURATION", value_parser = parse_duration)]
    header_read_timeout: GoDuration,
    /// A connection with no request in flight and no byte moved for this long is closed.
    #[arg(long, default_value = "60s", value_name = "DURATION", value_parser = parse_duration)]
    idle_timeout: GoDuration,
    /// A request, its body included, gets this long; then it is answered 408.
    #[arg(long, default_value = "60s", value_name = "DURATION", value_parser = parse_duration)]
    request_timeout: GoDuration,
    /// Agents this replica tracks in memory (about 150 bytes each). Past it, heartbeats
    /// from new hosts are refused (503 inventory_full) until some go silent; hosts
    /// already tracked go on.
    #[arg(long, default_value_t = 2_000_000, value_name = "N")]
    max_agents: usize,
    /// Hosts this replica tracks that heartbeat with a shared agent token (a token of
    /// role agent, which may speak for any host) rather than a credential of their
    /// own. Past it, new such hosts are refused (503 shared_token_full): one leaked
    /// token cannot invent hosts without bound. Enroll hosts with a join token.
    #[arg(long, default_value_t = 10_000, value_name = "N")]
    max_shared_token_hosts: usize,
    /// The shared agent token of earlier releases (an agent token that may speak for
    /// any host): `refuse` answers its heartbeats and joins 403 shared_token_refused;
    /// `allow` accepts them (deprecated; a warning at start). Default: refuse on a
    /// store this release initialised (a new data dir), allow on older ones. Tokens
    /// minted with `tokens create --role agent --controller` are always accepted.
    #[arg(long, value_enum, value_name = "MODE")]
    shared_agent_token: Option<SharedTokenArg>,
    /// How long this replica may go without reaching its store (etcd, the SQLite file)
    /// and still tell hosts to update. Past it, find tells every host to hold
    /// (`agent_hold: replica_cut_off`): a freeze, a suspend or a pin written meanwhile
    /// by the other replicas would not be in its answers. `0s`: never hold.
    #[arg(long, default_value = "30s", value_name = "DURATION", value_parser = parse_duration)]
    store_contact_bound: GoDuration,
    /// How long a host must have been heard from (by this replica) before it may be
    /// picked as a canary: a host that just appeared, for instance one invented with a
    /// leaked token, never proves a version. At least one report period.
    #[arg(long, default_value = "10m", value_name = "DURATION", value_parser = parse_duration)]
    canary_tenure: GoDuration,
    /// How often this replica's directive loop passes over the hosts it holds (the
    /// modular upgrade system; it triggers nothing without a version_control_config
    /// that enables it).
    #[arg(long, default_value = "10s", value_name = "DURATION", value_parser = parse_duration)]
    directive_period: GoDuration,
    /// Where the hosts download a version, as their `--url-template` (with
    /// {{.Version}} {{.OS}} {{.Arch}} {{.Edition}}; {{.BaseURL}} is not known here):
    /// `new-rollout` then checks that the tarball and its `.sha256` are there for every
    /// platform the fleet's hosts run, and warns naming what is missing. Unset: not
    /// checked.
    #[arg(long, value_name = "TEMPLATE")]
    artifact_url_template: Option<String>,
    /// The CA bundle (PEM) the artifact check trusts for the server of
    /// --artifact-url-template, instead of the public web PKI: the `--ca-cert` the
    /// hosts are given when the artifacts are served under a private CA. Without it a
    /// certificate from a private CA cannot be checked, and new-rollout says so
    /// ("artifact not checked"), never that the artifact is missing.
    #[arg(long, value_name = "FILE", requires = "artifact_url_template")]
    artifact_ca_cert: Option<PathBuf>,
    /// Long-poll find: the longest a find with `wait=` is held waiting for the host's
    /// answer to change, whatever the host asks. Held finds are answered within
    /// --request-timeout: with --long-poll-jitter and a second to spare, a longer hold
    /// is shortened to fit.
    #[arg(long, default_value = "50s", value_name = "DURATION", value_parser = parse_duration)]
    long_poll_max_hold: GoDuration,
    /// Long-poll finds this replica holds at once; past it they are answered at once,
    /// like a plain find (`tern_find_long_poll_refused_total`). 0: never hold.
    #[arg(long, default_value_t = 10_000, value_name = "N")]
    long_poll_max_held: usize,
    /// A held find released by a change waits a random time up to this first, so that
    /// the hosts one change releases do not all download at once (0: no wait; none
    /// under --dev-clock).
    #[arg(long, default_value = "3s", value_name = "DURATION", value_parser = parse_duration_or_zero)]
    long_poll_jitter: GoDuration,
    /// Log filter (RUST_LOG syntax).
    #[arg(long, env = "TERN_LOG", default_value = "info")]
    log: String,
    /// How logs are written to stderr: text lines (colored on a terminal), or JSON
    /// objects one per line.
    #[arg(
        long,
        env = "TERN_LOG_FORMAT",
        value_enum,
        default_value_t = LogFormat::Text,
        value_name = "FORMAT"
    )]
    log_format: LogFormat,
    /// Serve the one-line installer (`GET /install.sh`) and the tern-update binaries
    /// of this dir: files named `tern-update-linux-ARCH` (amd64, arm64, arm, 386,
    /// riscv64), as `cargo xtask dist` makes them. Read once at start.
    #[arg(long, env = "TERN_DOWNLOADS_DIR", value_name = "DIR")]
    downloads_dir: Option<PathBuf>,
    /// The address written into /install.sh for hosts to reach ternd (e.g. the load
    /// balancer's); by default the scheme and Host of the request for the script.
    #[arg(long, value_name = "URL")]
    public_url: Option<String>,
    /// An environment variable of ternd that a controller's configuration may name as a
    /// secret to send (e.g. the releases controller's `github.token_env`); repeatable.
    /// No other variable of ternd's environment can be named through the API.
    #[arg(long, value_name = "NAME", value_parser = parse_secret_env)]
    controller_secret_env: Vec<String>,
    /// Admin API requests (reads and writes) per second per bearer token (0: no
    /// limit); past it 429. Bounds what one leaked token can write to the audit trail.
    #[arg(long, default_value_t = 50.0)]
    admin_rate: f64,
    /// Admin requests one token may make at once before --admin-rate applies.
    #[arg(long, default_value_t = 500)]
    admin_burst: u32,
    /// Refused authentications (401) per second per client address on admin routes (0:
    /// no limit); past it, that address's admin requests get 429 before their token is
    /// looked up, except with a token this replica accepted in the last 30 s.
    #[arg(long, default_value_t = 1.0)]
    auth_failure_rate: f64,
    /// Refused authentications an address may have at once before --auth-failure-rate
    /// applies.
    #[arg(long, default_value_t = 100)]
    auth_failure_burst: u32,
    /// Serve only hosts that pin the release root (`tern-update enable --trust-root`):
    /// heartbeats and find of hosts that do not (or whose tern-update does not say)
    /// are refused with 403 trust_required. What a host says of itself: this catches
    /// hosts enrolled without the root, not a compromised host.
    #[arg(long)]
    require_trust: bool,
}

fn parse_secret_env(s: &str) -> Result<String, String> {
    let ok = !s.is_empty()
        && s.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_')
        && !s.as_bytes()[0].is_ascii_digit();
    if !ok {
        return Err(format!(
            "{s:?} is not an environment variable's name (letters, digits and _)"
        ));
    }
    if s.starts_with("TERN_") {
        return Err(format!(
            "{s}: ternd's own TERN_ variables (its Slack URL, data dir, …) are never handed to a controller"
        ));
    }
    Ok(s.to_string())
}

fn main() -> ExitCode {
    if let Some(code) = tern_cli::man_pages_if_asked(Cli::command) {
        return code;
    }
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Start(a) => run(*a),
        Command::Completion(a) => {
            tern_cli::print_completion(Cli::command(), a.shell).map_err(anyhow::Error::from)
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ternd: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `--shared-agent-token`.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum SharedTokenArg {
    Allow,
    Refuse,
}

fn run(a: StartArgs) -> anyhow::Result<()> {
    tern_cli::init_logs(&a.log, a.log_format).map_err(anyhow::Error::msg)?;
    // Every flag and file is checked, and the port taken, before anything is created:
    // a bad start leaves no data dir, store or operator token behind.
    let transport = tern_server::transport(a.tls_cert, a.tls_key, a.insecure_http)?;
    let notify = NotifySettings::from_flags(
        &a.notify_webhook,
        &a.notify_slack,
        a.notify_token_file.as_deref(),
        a.notify_server_name,
    )?;
    for (flag, rate) in [
        ("--find-rate", a.find_rate),
        ("--heartbeat-rate", a.heartbeat_rate),
        ("--admin-rate", a.admin_rate),
        ("--auth-failure-rate", a.auth_failure_rate),
    ] {
        if !rate.is_finite() || rate < 0.0 {
            anyhow::bail!("{flag} {rate}: give a number of requests per second, 0 or more");
        }
    }
    if a.max_connections == Some(0) || a.max_connections_per_ip == 0 || a.max_agents == 0 {
        anyhow::bail!(
            "--max-connections, --max-connections-per-ip and --max-agents must be at least 1"
        );
    }
    // A held find must be answered before --request-timeout cuts it off with a 408:
    // a shorter request timeout shortens the holds (0: none held).
    let hold_room = a
        .request_timeout
        .as_secs()
        .saturating_sub(a.long_poll_jitter.as_secs())
        .saturating_sub(1);
    let long_poll_max_hold = a.long_poll_max_hold.as_secs().min(hold_room);
    if long_poll_max_hold < a.long_poll_max_hold.as_secs() {
        tracing::warn!(
            "--long-poll-max-hold {}s plus --long-poll-jitter {}s does not fit in --request-timeout {}s: finds are held at most {long_poll_max_hold}s",
            a.long_poll_max_hold.as_secs(),
            a.long_poll_jitter.as_secs(),
            a.request_timeout.as_secs()
        );
    }
    let budget = tern_server::descriptor_budget();
    let max_connections = match (a.max_connections, budget) {
        (Some(n), Some(b)) if n > b => {
            tracing::warn!(
                asked = n,
                budget = b,
                "--max-connections is above what the descriptor limit allows; using the limit"
            );
            b
        }
        (Some(n), _) => n,
        (None, Some(b)) => b,
        (None, None) => 65_536,
    };
    let limits = tern_server::Limits {
        max_connections,
        max_per_address: a.max_connections_per_ip,
        header_read_timeout: Duration::from_secs(a.header_read_timeout.as_secs()),
        idle_timeout: Duration::from_secs(a.idle_timeout.as_secs()),
        request_timeout: Duration::from_secs(a.request_timeout.as_secs()),
    };
    let downloads = match &a.downloads_dir {
        Some(dir) => Some(tern_server::Downloads::load(dir, a.public_url)?),
        None if a.public_url.is_some() => {
            anyhow::bail!("--public-url is the installer's address: give --downloads-dir too")
        }
        None => None,
    };
    let listener = std::net::TcpListener::bind(a.listen)
        .map_err(|e| anyhow::anyhow!("listening on {}: {e}", a.listen))?;
    tern_server::create_data_dir(&a.data_dir)?;
    let artifact_check = a
        .artifact_url_template
        .map(|t| tern_server::ArtifactCheck::new(t, a.artifact_ca_cert.as_deref()))
        .transpose()?;
    let release_trust = match (&a.trust_root, &a.trust_url) {
        (Some(root), Some(url)) => Some(
            tern_server::ReleaseTrust::pin(&a.data_dir, root, url)
                .with_context(|| format!("--trust-root {}", root.display()))?
                .refreshed_every(Duration::from_secs(a.trust_refresh.as_secs())),
        ),
        _ => None,
    };
    let replica_id = tern_server::replica_id(&a.data_dir, a.replica_id)?;
    let backend = a
        .backend
        .unwrap_or_else(|| Backend::Sqlite(a.data_dir.join(tern_server::DATABASE_FILE)));
    let settings = Settings {
        data_dir: a.data_dir,
        replica_id,
        report_period: a.report_period.as_signed(),
        active_report_period: (a.active_report_period.as_secs() > 0)
            .then(|| Duration::from_secs(a.active_report_period.as_secs())),
        report_after_change: (a.report_after_change.as_secs() > 0)
            .then(|| Duration::from_secs(a.report_after_change.as_secs())),
        heartbeat_interval: Duration::from_secs(a.heartbeat_interval.as_secs()),
        find_rate: a.find_rate,
        find_burst: a.find_burst,
        heartbeat_rate: a.heartbeat_rate,
        heartbeat_burst: a.heartbeat_burst,
        leader_ttl: Duration::from_secs(a.leader_ttl.as_secs()),
        edition: a.edition,
        public_max_age: 5,
        max_agents: a.max_agents,
        max_shared_token_hosts: a.max_shared_token_hosts,
        store_contact_bound: Duration::from_secs(a.store_contact_bound.as_secs()),
        canary_tenure: a.canary_tenure.as_signed(),
        directive_period: std::time::Duration::from_secs(a.directive_period.as_secs())
            .max(std::time::Duration::from_millis(100)),
        release_trust,
        long_poll: tern_server::LongPollSettings {
            max_hold: Duration::from_secs(long_poll_max_hold),
            max_held: a.long_poll_max_held,
            release_jitter: Duration::from_secs(a.long_poll_jitter.as_secs()),
        },
        prometheus: a.prometheus_url.as_deref().map(|url| {
            std::sync::Arc::new(tern_server::Prometheus::new(
                url,
                Duration::from_secs(a.prometheus_timeout.as_secs().max(1)),
            ))
        }),
        security: tern_server::SecuritySettings {
            controller_secret_env: a.controller_secret_env,
            admin_rate: a.admin_rate,
            admin_burst: a.admin_burst,
            auth_failure_rate: a.auth_failure_rate,
            auth_failure_burst: a.auth_failure_burst,
            require_trust: a.require_trust,
            shared_agent_token: a.shared_agent_token.map(|m| match m {
                SharedTokenArg::Allow => tern_server::SharedAgentToken::Allow,
                SharedTokenArg::Refuse => tern_server::SharedAgentToken::Refuse,
            }),
        },
        artifact_check,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(tern_server::serve(ServeOptions {
        settings,
        listener,
        transport,
        limits,
        dev_clock: a.dev_clock,
        backend,
        etcd_prefix: a.etcd_prefix,
        etcd_lease_bucket: a.etcd_lease_bucket.as_std(),
        notify,
        downloads,
    }))
}
