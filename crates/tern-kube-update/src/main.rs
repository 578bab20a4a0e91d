//! `tern-kube-update`: the Kubernetes agent updater. Runs in the cluster (or anywhere
//! with a kubeconfig), makes every opted-in Deployment and StatefulSet a member of
//! Tern's fleet, and updates it when find says so. Several replicas may run: the one
//! holding the Lease writes.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::{CommandFactory, Parser, Subcommand};
use tern_cli::LogFormat;
use tern_core::duration::GoDuration;
use tern_kube_rules::Policy;
use tern_kube_update::{
    Controller, DigestFile, DigestSource, Elector, LeaseSettings, SignedDigests, Ternd,
};

#[derive(Parser)]
#[command(
    name = "tern-kube-update",
    version,
    about = "Tern's Kubernetes agent updater: each Deployment or StatefulSet annotated tern.dev/update is a fleet member, updated when ternd's find says so"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Log filter (tracing's EnvFilter syntax).
    #[arg(long, env = "TERN_LOG", default_value = "info", global = true)]
    log: String,
    /// Log lines for people (text) or one JSON object per line (json).
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true)]
    log_format: LogFormat,
}

#[derive(Subcommand)]
enum Command {
    /// Run the controller until stopped (SIGTERM, SIGINT).
    Run(Box<RunArgs>),
    /// Print the shell completion script (see docs/cli.md).
    Completion(tern_cli::CompletionArgs),
}

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("digest_source").required(true).args(["digests", "trust_root"])))]
struct RunArgs {
    /// ternd's URL.
    #[arg(long, env = "TERN_SERVER", value_name = "URL")]
    server: String,
    /// A file holding an agent token (`ternctl tokens create --role agent`): the
    /// controller heartbeats for every workload it manages.
    #[arg(long, env = "TERN_TOKEN_FILE", value_name = "FILE")]
    token_file: PathBuf,
    /// A PEM bundle of the CA(s) to trust for ternd and channels, instead of the public
    /// web PKI (a ternd with a private certificate).
    #[arg(long, env = "TERN_CA_CERT", value_name = "FILE")]
    ca_cert: Option<PathBuf>,
    /// The image digests file: a JSON object of "repository:tag" to "sha256:…"
    /// (updates are written pinned by digest only). Read at each lookup. Give this or
    /// --trust-root.
    #[arg(long, value_name = "FILE")]
    digests: Option<PathBuf>,
    /// Pin images only at digests the release keys signed: the TUF root to start from
    /// (the root.json hosts pin); images are signed with `tern-release add-image`.
    #[arg(long, value_name = "FILE", requires = "trust_url")]
    trust_root: Option<PathBuf>,
    /// Where the signed metadata is: an http(s) URL, file:// URL or directory.
    #[arg(long, value_name = "URL", requires = "trust_root")]
    trust_url: Option<String>,
    /// Where what was trusted is kept between runs (TUF's rollback protection lasts as
    /// long as this file: put it on a persistent volume).
    #[arg(
        long,
        value_name = "FILE",
        default_value = "/var/lib/tern-kube-update/trust.json"
    )]
    trust_state: PathBuf,
    /// A namespace to manage (repeat; default: every namespace the role may read).
    #[arg(long = "namespace", value_name = "NAME")]
    namespaces: Vec<String>,
    /// How often every workload is looked at.
    #[arg(long, default_value = "30s", value_parser = GoDuration::parse_positive_std, value_name = "DURATION")]
    period: Duration,
    /// The Lease replicas elect a writer with: NAMESPACE/NAME.
    #[arg(
        long,
        default_value = "tern-system/tern-kube-update",
        value_name = "NAMESPACE/NAME"
    )]
    lease: String,
    /// How long a Lease write holds it (renewed every third of it).
    #[arg(long, default_value = "15s", value_parser = GoDuration::parse_positive_std, value_name = "DURATION")]
    lease_duration: Duration,
    /// This replica's name in the Lease (default: $POD_NAME, else the host name).
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,
    /// How long an update may take to become available before it is rolled back.
    #[arg(long, default_value = "10m", value_parser = GoDuration::parse_positive_std, value_name = "DURATION")]
    health_timeout: Duration,
}

fn main() -> ExitCode {
    if let Some(code) = tern_cli::man_pages_if_asked(Cli::command) {
        return code;
    }
    let cli = Cli::parse();
    let args = match cli.command {
        Command::Completion(a) => {
            return match tern_cli::print_completion(Cli::command(), a.shell) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("tern-kube-update: error: printing the completion script: {e}");
                    ExitCode::FAILURE
                }
            };
        }
        Command::Run(a) => a,
    };
    if let Err(e) = tern_cli::init_logs(&cli.log, cli.log_format) {
        eprintln!("tern-kube-update: error: {e}");
        return ExitCode::from(2);
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("tern-kube-update: error: starting the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(*args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tern-kube-update: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(a: RunArgs) -> anyhow::Result<()> {
    let token = std::fs::read_to_string(&a.token_file)
        .with_context(|| format!("reading the token file {}", a.token_file.display()))?;
    let token = token.trim().to_string();
    anyhow::ensure!(
        !token.is_empty(),
        "the token file {} is empty",
        a.token_file.display()
    );
    let roots = a
        .ca_cert
        .as_deref()
        .map(tern_kube_update::roots_from_pem)
        .transpose()
        .map_err(anyhow::Error::msg)?;
    let digests: Arc<dyn DigestSource> = match (&a.digests, &a.trust_root, &a.trust_url) {
        (Some(path), ..) => Arc::new(DigestFile { path: path.clone() }),
        (None, Some(root), Some(url)) => {
            if let Some(dir) = a.trust_state.parent() {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("creating {}", dir.display()))?;
            }
            let signed = SignedDigests::pin(&a.trust_state, root, url, roots.clone())
                .with_context(|| format!("pinning the TUF root {}", root.display()))?;
            // A first look now, so a wrong URL shows at start; not fatal (the
            // repository may be down for a moment), every update looks again.
            let check = signed.clone();
            match tokio::task::spawn_blocking(move || check.check()).await {
                Ok(Ok(images)) => tracing::info!(url = %url, images, "signed metadata verified"),
                Ok(Err(e)) => tracing::warn!("the signed metadata cannot be verified yet: {e}"),
                Err(e) => tracing::warn!("the signed metadata check did not finish: {e}"),
            }
            Arc::new(signed)
        }
        _ => anyhow::bail!("give --digests FILE, or --trust-root FILE with --trust-url URL"),
    };
    let (lease_ns, lease_name) = a
        .lease
        .split_once('/')
        .filter(|(ns, name)| !ns.is_empty() && !name.is_empty())
        .with_context(|| format!("--lease {:?}: expected NAMESPACE/NAME", a.lease))?;
    let config = kube::Config::infer()
        .await
        .context("finding the cluster (in-cluster service account, or KUBECONFIG)")?;
    let client = tern_kube_update::client(config).context("making the Kubernetes client")?;
    let identity = a
        .identity
        .unwrap_or_else(|| tern_cli::host_name("localhost"));
    let mut elector = Elector::new(
        client.clone(),
        LeaseSettings {
            namespace: lease_ns.into(),
            name: lease_name.into(),
            identity: identity.clone(),
            duration: a.lease_duration,
        },
    );
    let policy = Policy {
        health_timeout: jiff::SignedDuration::try_from(a.health_timeout)
            .context("--health-timeout is too long")?,
        ..Policy::default()
    };
    let controller = Controller {
        client,
        namespaces: a.namespaces,
        fleet: Arc::new(Ternd::new(&a.server, Some(token), roots)),
        digests,
        policy,
        version: env!("CARGO_PKG_VERSION").to_string(),
    };
    tracing::info!(%identity, server = %a.server, "tern-kube-update running");
    let renew = (a.lease_duration / 3).max(Duration::from_secs(1));
    let mut lease_tick = tokio::time::interval(renew);
    let mut pass_tick = tokio::time::interval(a.period);
    let mut was_leader = false;
    let mut stop = std::pin::pin!(shutdown());
    loop {
        tokio::select! {
            () = &mut stop => break,
            _ = lease_tick.tick() => {
                match elector.round().await {
                    Ok(leader) if leader != was_leader => {
                        tracing::info!(leader, "the Lease {} {}", a.lease, if leader { "is ours" } else { "is another replica's" });
                        was_leader = leader;
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(error = %format!("{:#}", anyhow::Error::from(e)), "leader election");
                        was_leader = false;
                    }
                }
            }
            _ = pass_tick.tick() => {
                let leader = || elector.is_leader();
                for o in controller.pass(jiff::Timestamp::now(), &leader).await {
                    log_outcome(&o);
                }
            }
        }
    }
    tracing::info!("stopping");
    Ok(())
}

fn log_outcome(o: &tern_kube_update::Outcome) {
    match &o.decision {
        Ok(d) => {
            tracing::info!(workload = %o.workload, decision = ?d, written = ?o.written, "pass")
        }
        Err(e) => tracing::warn!(workload = %o.workload, error = %e, "left alone this pass"),
    }
    if let Some(e) = &o.write_error {
        tracing::warn!(workload = %o.workload, error = %e, "not written");
    }
    if let Some(e) = &o.heartbeat_error {
        tracing::warn!(workload = %o.workload, error = %e, "heartbeat");
    }
}

async fn shutdown() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = term => {}
    }
}
