//! A whole fleet on one machine: ternd (dev clock), the artifact gateway, and hosts
//! with their own `tern-update` and agent process. Dropping it kills everything it
//! started and removes its directory.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::Value;

use crate::bins::Bins;
use crate::gateway::Gateway;
use crate::host::{Host, RunOutcome};
use crate::release::{self, Release};
use crate::status::{InventoryEntry, InventoryResponse, Status};
use crate::ternd::{Ctl, Ternd};

#[derive(Clone, Debug)]
pub struct FleetOptions {
    /// Where ternd's dev clock starts (RFC 3339).
    pub start: String,
    pub releases: Vec<Release>,
    /// Extra `ternd start` flags.
    pub ternd_args: Vec<String>,
    /// Where ternd, ternctl and tern-update are (default: [`Bins::locate`]).
    pub bin_dir: Option<PathBuf>,
}

impl Default for FleetOptions {
    fn default() -> Self {
        Self {
            start: crate::T0.into(),
            releases: release::standard(),
            ternd_args: Vec::new(),
            bin_dir: None,
        }
    }
}

/// What one step did: the instant, each online host's `tern-update update`, and the
/// rollout status after the closing reconcile.
#[derive(Clone, Debug)]
pub struct Step {
    pub now: String,
    pub runs: Vec<(String, RunOutcome)>,
    pub status: Status,
}

impl Step {
    /// Hosts whose run failed (exit code ≠ 0), with tern-update's message.
    pub fn failures(&self) -> Vec<(String, String)> {
        self.runs
            .iter()
            .filter(|(_, o)| !o.ok())
            .map(|(h, o)| (h.clone(), o.message()))
            .collect()
    }
}

/// Another ternd replica of the fleet ([`Fleet::add_replica`]): on the first one's
/// SQLite file, so it shares its resources and dev clock, with its own gateway.
pub struct Replica {
    pub gateway: Gateway,
    pub ternd: Ternd,
    /// ternctl against this replica (the operator token is the fleet's).
    pub ctl: Ctl,
}

pub struct Fleet {
    // Fields drop in order: agents first, then the extra replicas, then the gateway,
    // then ternd, then the dir.
    pub hosts: Vec<Host>,
    /// A Prometheus scraping the agents, when a test or the demo started one for the
    /// fleet's canary analysis (stopped with the fleet).
    pub prometheus: Option<crate::prometheus::Prometheus>,
    /// Replicas besides `ternd` (none unless [`Fleet::add_replica`] started some).
    pub replicas: Vec<Replica>,
    pub gateway: Gateway,
    pub ternd: Ternd,
    pub ctl: Ctl,
    pub bins: Bins,
    /// The join token every host is enrolled with (each exchanges it for its own
    /// credential).
    pub agent_token_file: PathBuf,
    /// More `enable` flags every host of [`Fleet::add_hosts`], [`Fleet::enroll_with`]
    /// and the channel hosts gets (e.g. `--trust-root FILE`).
    pub enable_args: Vec<String>,
    pub artifacts: PathBuf,
    pub releases: Vec<Release>,
    resources: std::sync::atomic::AtomicU32,
    /// What happened, for the fleet-safety invariant checked when the fleet ends
    /// ([`Fleet::check_invariant`]).
    recorder: std::sync::Mutex<Recorder>,
    pub dir: tempfile::TempDir,
}

/// The trace a fleet keeps of what ternd said and what its hosts installed.
#[derive(Default)]
struct Recorder {
    trace: tern_core::invariant::Trace,
    /// A test broke the invariant on purpose and saw it convicted ([`Fleet::conviction`]).
    convicted: bool,
    /// Each host's linked version when last looked at.
    linked: std::collections::HashMap<String, Option<String>>,
    /// How many of each host's agent starts were looked at.
    seen: std::collections::HashMap<String, usize>,
    /// ternd's instant at the last recorded state.
    now: Option<jiff::Timestamp>,
    /// What each host last reported, as recorded: (linked version, healthy).
    reported: std::collections::HashMap<String, (Option<String>, Option<bool>)>,
    /// The minimums the release keys signed ([`crate::sign::minimum`]), by release
    /// line: what the test did, not what a ternd says it knows.
    minimums: std::collections::BTreeMap<String, String>,
}

impl Fleet {
    /// Builds the releases, starts ternd and the gateway, mints the agent token.
    pub fn start(opts: FleetOptions) -> anyhow::Result<Self> {
        // TERN_E2E_BIN_DIR runs a scenario against other builds (an older release, to
        // show what the invariant checker makes of its behaviour).
        let bins = match (&opts.bin_dir, std::env::var_os("TERN_E2E_BIN_DIR")) {
            (Some(d), _) => Bins::in_dir(d)?,
            (None, Some(d)) => Bins::in_dir(Path::new(&d))?,
            (None, None) => Bins::locate()?,
        };
        let dir = tempfile::Builder::new()
            .prefix("tern-e2e-")
            .tempdir()
            .context("cannot create a temp dir")?;
        let artifacts = dir.path().join("artifacts");
        let cache = release::agent_cache(&bins);
        for r in &opts.releases {
            let agent = release::build_agent(&cache, r)?;
            release::publish(&artifacts, &r.version, &agent)?;
        }
        let extra: Vec<&str> = opts.ternd_args.iter().map(String::as_str).collect();
        let ternd = Ternd::start(&bins.ternd, &dir.path().join("ternd"), &opts.start, &extra)?;
        let gateway = Gateway::start(&artifacts, ternd.addr)?;
        let ctl = Ctl {
            bin: bins.ternctl.clone(),
            server: ternd.url.clone(),
            token_file: ternd.token_file.clone(),
        };
        let token = ctl.run(&[
            "tokens",
            "create",
            "--role",
            "join",
            "--uses",
            "100000",
            "--ttl",
            "8760h",
            "--description",
            "e2e hosts",
        ])?;
        let agent_token_file = dir.path().join("agent.token");
        std::fs::write(&agent_token_file, token.trim())?;
        Ok(Self {
            hosts: Vec::new(),
            prometheus: None,
            replicas: Vec::new(),
            gateway,
            ternd,
            ctl,
            bins,
            agent_token_file,
            artifacts,
            releases: opts.releases,
            resources: std::sync::atomic::AtomicU32::new(0),
            enable_args: Vec::new(),
            recorder: std::sync::Mutex::new(Recorder::default()),
            dir,
        })
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Starts another ternd replica on the first one's SQLite file (`--backend
    /// sqlite:…`, a dev clock too, `ternd_args` as more flags), and a gateway in front
    /// of it; returns its index in [`Fleet::replicas`]. Hosts enrolled through its gateway
    /// ([`Fleet::add_host_via`]) heartbeat to it.
    pub fn add_replica(&mut self, ternd_args: &[&str]) -> anyhow::Result<usize> {
        let n = self.replicas.len() + 2;
        let db = self.ternd.data_dir.join(crate::ternd::DATABASE_FILE);
        let backend = format!("sqlite:{}", db.display());
        let mut extra = vec!["--backend", backend.as_str()];
        extra.extend_from_slice(ternd_args);
        // The shared clock wins over this start value (the first replica created it).
        let now = self.ctl.json(&["dev", "clock"]).ok();
        let start = now
            .as_ref()
            .and_then(|v| v["now"].as_str())
            .unwrap_or(crate::T0)
            .to_string();
        let ternd = Ternd::start(
            &self.bins.ternd,
            &self.path().join(format!("ternd-{n}")),
            &start,
            &extra,
        )?;
        let gateway = Gateway::start(&self.artifacts, ternd.addr)?;
        let ctl = Ctl {
            bin: self.bins.ternctl.clone(),
            server: ternd.url.clone(),
            token_file: self.ternd.token_file.clone(),
        };
        self.replicas.push(Replica {
            gateway,
            ternd,
            ctl,
        });
        Ok(self.replicas.len() - 1)
    }

    /// Creates a host and enrolls it through the gateway at `server` (the fleet's, or a
    /// replica's) with the fleet's [`Fleet::enable_args`] and more `enable` flags
    /// (`--label`, `--installer`, `--channel URL`); an error if its `enable` fails. A
    /// host whose enrolment failed is left out of the fleet, but what it installed (its
    /// agent's log) is evidence all the same, against what ternd said when it enrolled:
    /// it enters the trace as a first install.
    pub fn add_host_via(
        &mut self,
        name: &str,
        group: &str,
        server: &str,
        extra: &[&str],
    ) -> anyhow::Result<&Host> {
        let mut host = self.new_host(name, group)?;
        host.note_enable_args(extra);
        host.follows_channel = extra.contains(&"--channel");
        let mut args: Vec<&str> = self.enable_args.iter().map(String::as_str).collect();
        args.extend_from_slice(extra);
        let out = host.enable_with(
            server,
            &self.gateway.artifacts_url(),
            &self.agent_token_file,
            &args,
        )?;
        if !out.ok() {
            self.record_state();
            self.record_installs_of(
                std::slice::from_ref(&host),
                tern_core::invariant::InstallKind::FirstInstall,
            );
            bail!(
                "{name}: tern-update enable failed: {}\n{}",
                out.message(),
                out.stderr
            );
        }
        self.hosts.push(host);
        self.hosts.last().context("just pushed")
    }

    /// `ternctl create --force -f FILE` with `yaml` written to a file first, then a
    /// reconcile.
    ///
    /// With `--dev-clock`, ternd reconciles only when told to (`dev reconcile`), not
    /// after a write nor every minute; the harness reconciles after each change, as a
    /// real ternd would within a minute, so that a rollout is created when its version
    /// is written, not at the next step's instant.
    pub fn apply(&self, yaml: &str) -> anyhow::Result<()> {
        let n = self
            .resources
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        let file = self.path().join(format!("resource-{n}.yaml"));
        std::fs::write(&file, yaml)?;
        let f = file.display().to_string();
        self.ctl.run(&["create", "--force", "-f", &f])?;
        self.reconcile()?;
        Ok(())
    }

    pub fn set_version(&self, start: &str, target: &str, schedule: &str) -> anyhow::Result<()> {
        self.apply(&tern_core::fixtures::version(start, target, schedule))
    }

    /// `ternctl agents new-rollout VERSION` (from the current target), then a reconcile.
    pub fn new_rollout(&self, version: &str) -> anyhow::Result<String> {
        let out = self.ctl.run(&["agents", "new-rollout", version])?;
        self.reconcile()?;
        Ok(out)
    }

    /// `ternctl agents ARGS…` (suspend, resume, rollback, mark-done, start-update, status).
    pub fn agents(&self, args: &[&str]) -> anyhow::Result<String> {
        let mut a = vec!["agents"];
        a.extend_from_slice(args);
        self.ctl.run(&a)
    }

    /// Creates a host and enrolls it with `tern-update enable` through the fleet's
    /// gateway; it installs and starts the version its group runs now
    /// ([`Fleet::add_host_via`]).
    pub fn add_host(&mut self, name: &str, group: &str) -> anyhow::Result<&Host> {
        let server = self.gateway.url.clone();
        self.add_host_via(name, group, &server, &[])
    }

    /// A new host enrolled with the join token in `token_file`: the host (not added to
    /// the fleet) and how its `enable` went.
    pub fn enroll_with(
        &self,
        name: &str,
        group: &str,
        token_file: &Path,
    ) -> anyhow::Result<(Host, RunOutcome)> {
        let host = self.new_host(name, group)?;
        let out = self.enroll_host(&host, token_file)?;
        Ok((host, out))
    }

    /// Adds `n` hosts named `GROUP-1`… (continuing the numbering), enrolled in parallel.
    pub fn add_hosts(&mut self, group: &str, n: usize) -> anyhow::Result<Vec<String>> {
        self.add_hosts_with(group, n, false, |fleet, h| fleet.enroll(h))
    }

    /// As [`Fleet::add_hosts`], following ternd's channel `channel` (seed 001) instead
    /// of the rollout; ternd still gives them their group's maintenance schedule.
    pub fn add_channel_hosts(
        &mut self,
        group: &str,
        n: usize,
        channel: &str,
    ) -> anyhow::Result<Vec<String>> {
        let url = self.channel_url(channel);
        self.add_hosts_with(group, n, true, |fleet, h| {
            let mut extra: Vec<&str> = vec!["--channel", &url];
            extra.extend(fleet.enable_args.iter().map(String::as_str));
            h.enable_with(
                &fleet.gateway.url,
                &fleet.gateway.artifacts_url(),
                &fleet.agent_token_file,
                &extra,
            )
        })
    }

    /// Adds `n` hosts named `PREFIX-1`… that present no group and heartbeat `labels`
    /// (`KEY=VALUE`): groups with `match_labels` place them (ternd's `rollout::place`).
    pub fn add_labelled_hosts(
        &mut self,
        prefix: &str,
        n: usize,
        labels: &[&str],
    ) -> anyhow::Result<Vec<String>> {
        let mut names = Vec::new();
        for i in 1..=n {
            let name = format!("{prefix}-{i}");
            let mut host = self.new_host(&name, "")?;
            for l in labels {
                host.note_enable_args(&["--label", l]);
            }
            let mut extra: Vec<&str> = self.enable_args.iter().map(String::as_str).collect();
            for l in labels {
                extra.extend(["--label", l]);
            }
            let out = host.enable_with(
                &self.gateway.url,
                &self.gateway.artifacts_url(),
                &self.agent_token_file,
                &extra,
            )?;
            if !out.ok() {
                bail!("{name}: tern-update enable failed:\n{}", out.stderr.trim());
            }
            self.hosts.push(host);
            names.push(name);
        }
        Ok(names)
    }

    /// Where hosts read ternd's channel `name` (through the gateway).
    pub fn channel_url(&self, name: &str) -> String {
        format!("{}/v1/channels/{name}", self.gateway.url)
    }

    fn add_hosts_with(
        &mut self,
        group: &str,
        n: usize,
        channel: bool,
        enroll: impl Fn(&Self, &Host) -> anyhow::Result<RunOutcome> + Sync,
    ) -> anyhow::Result<Vec<String>> {
        let already = self.hosts.iter().filter(|h| h.group == group).count();
        let mut new = Vec::new();
        for i in 0..n {
            let mut host = self.new_host(&format!("{group}-{}", already + i + 1), group)?;
            host.follows_channel = channel;
            new.push(host);
        }
        let results: Vec<anyhow::Result<RunOutcome>> = std::thread::scope(|s| {
            let (enroll, fleet) = (&enroll, &*self);
            let handles: Vec<_> = new
                .iter()
                .map(|h| s.spawn(move || enroll(fleet, h)))
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(anyhow::anyhow!("enroll panicked")))
                })
                .collect()
        });
        let names = new.iter().map(|h| h.name.clone()).collect();
        let mut errors = Vec::new();
        for (h, r) in new.iter().zip(results) {
            match r {
                Ok(o) if o.ok() => {}
                Ok(o) => errors.push(format!(
                    "{}: tern-update enable failed:\n{}",
                    h.name,
                    o.stderr.trim()
                )),
                Err(e) => errors.push(format!("{}: {e:#}", h.name)),
            }
        }
        self.hosts.extend(new);
        if !errors.is_empty() {
            bail!("{}", errors.join("\n"));
        }
        Ok(names)
    }

    fn new_host(&self, name: &str, group: &str) -> anyhow::Result<Host> {
        if self.hosts.iter().any(|h| h.name == name) {
            bail!("there is already a host {name}");
        }
        let mut host = Host::new(
            &self.path().join("hosts").join(name),
            name,
            group,
            &self.bins.tern_update,
        )?;
        let args: Vec<&str> = self.enable_args.iter().map(String::as_str).collect();
        host.note_enable_args(&args);
        Ok(host)
    }

    fn enroll(&self, h: &Host) -> anyhow::Result<RunOutcome> {
        self.enroll_host(h, &self.agent_token_file)
    }

    fn enroll_host(&self, h: &Host, token_file: &Path) -> anyhow::Result<RunOutcome> {
        let extra: Vec<&str> = self.enable_args.iter().map(String::as_str).collect();
        h.enable_with(
            &self.gateway.url,
            &self.gateway.artifacts_url(),
            token_file,
            &extra,
        )
    }

    pub fn host(&self, name: &str) -> &Host {
        match self.hosts.iter().find(|h| h.name == name) {
            Some(h) => h,
            None => panic!("no host {name} in this fleet"),
        }
    }

    pub fn host_mut(&mut self, name: &str) -> &mut Host {
        match self.hosts.iter_mut().find(|h| h.name == name) {
            Some(h) => h,
            None => panic!("no host {name} in this fleet"),
        }
    }

    pub fn set_online(&mut self, name: &str, online: bool) {
        self.host_mut(name).online = online;
    }

    /// The host with this updater id.
    pub fn host_by_updater_id(&self, id: &str) -> Option<&Host> {
        self.hosts
            .iter()
            .find(|h| h.updater_id().as_deref() == Some(id))
    }

    /// Names of the hosts of `group`.
    pub fn group_hosts(&self, group: &str) -> Vec<String> {
        self.hosts
            .iter()
            .filter(|h| h.group == group)
            .map(|h| h.name.clone())
            .collect()
    }

    /// `ternctl dev clock set T`; returns the new instant.
    pub fn clock_set(&self, t: &str) -> anyhow::Result<String> {
        let v = self.ctl.json(&["dev", "clock", "set", t])?;
        self.heartbeat_all();
        Ok(v["now"].as_str().unwrap_or_default().to_string())
    }

    /// `ternctl dev clock advance D` (`10m`, `1h`); returns the new instant.
    pub fn clock_advance(&self, d: &str) -> anyhow::Result<String> {
        let v = self.ctl.json(&["dev", "clock", "advance", d])?;
        self.heartbeat_all();
        Ok(v["now"].as_str().unwrap_or_default().to_string())
    }

    /// `ternctl dev reconcile`: ternd writes its report and reconciles now, as the
    /// leader. A replica that answers it does not lead (its keeper missed a renewal on
    /// a loaded machine, and the store holds the lapsed lease until its TTL ends) is
    /// asked again until it leads, up to twice the default lease TTL: a step whose
    /// reconcile was skipped would move the fleet's timeline by a step, silently. The
    /// leader named by the answer is asked instead when it is one of this fleet's
    /// replicas.
    pub fn reconcile(&self) -> anyhow::Result<Value> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let v = self.ctl.json(&["dev", "reconcile"])?;
            if v["leader"] == true {
                return Ok(v);
            }
            let holder = v["leader_replica"].as_str().unwrap_or_default();
            if let Some(r) = self
                .replicas
                .iter()
                .find(|r| r.ternd.replica_id().as_deref() == Some(holder))
            {
                let v = r.ctl.json(&["dev", "reconcile"])?;
                if v["leader"] == true {
                    return Ok(v);
                }
            }
            let why = v["message"].as_str().unwrap_or("not the leader");
            if std::time::Instant::now() >= deadline {
                anyhow::bail!("dev reconcile: no replica of the fleet led for 30 s: {why}");
            }
            eprintln!("dev reconcile: {why}; asking again");
            std::thread::sleep(std::time::Duration::from_millis(250));
        }
    }

    /// `ternctl agents status -o json`.
    pub fn status(&self) -> anyhow::Result<Status> {
        let v = self.ctl.json(&["agents", "status"])?;
        serde_json::from_value(v).context("agents status: unexpected JSON")
    }

    /// `ternctl inventory ls -o json`: the agents as ternd heard them.
    pub fn inventory(&self) -> anyhow::Result<Vec<InventoryEntry>> {
        let v = self.ctl.json(&["inventory", "ls"])?;
        let inv: InventoryResponse =
            serde_json::from_value(v).context("inventory: unexpected JSON")?;
        Ok(inv.agents)
    }

    /// What ternd knows about one host (by its updater id).
    pub fn inventory_of(&self, name: &str) -> anyhow::Result<Option<InventoryEntry>> {
        let Some(id) = self.host(name).updater_id() else {
            return Ok(None);
        };
        Ok(self.inventory()?.into_iter().find(|a| a.updater_id == id))
    }

    /// Every online host runs `tern-update update` (as its timer would), in parallel.
    /// Every online host heartbeats (`tern-update heartbeat`), in parallel. Called
    /// after every clock move: the dev clock drives ternd's inventory expiry, and real
    /// hosts would have heartbeated all along, so the online ones say they are alive
    /// before ternd next writes its report (an offline one is forgotten, as it would
    /// be). A failure shows in the next step's runs and status.
    pub fn heartbeat_all(&self) {
        std::thread::scope(|s| {
            for h in self.hosts.iter().filter(|h| h.online) {
                s.spawn(|| {
                    // Some tests make heartbeats fail on purpose; said on stderr, which a
                    // failing test shows, because after a clock move a lost heartbeat is
                    // a host ternd forgets.
                    match h.heartbeat() {
                        Ok(o) if o.ok() => {}
                        Ok(o) => eprintln!("{}: heartbeat failed: {}", h.name, o.message()),
                        Err(e) => eprintln!("{}: heartbeat not run: {e:#}", h.name),
                    }
                });
            }
        });
        let mut rec = self.recorder.lock().unwrap_or_else(|p| p.into_inner());
        Self::record_reports(&mut rec, self.hosts.iter().filter(|h| h.online));
    }

    /// Records what each host reports now, where it changed: its linked version, and
    /// whether its agent is alive on it (seen on the host, not asked of ternd), so the
    /// invariant judges a canary by its own report (rule 5), not by the rollout's word.
    fn record_reports<'h>(rec: &mut Recorder, hosts: impl Iterator<Item = &'h Host>) {
        let Some(at) = rec.now else { return };
        for h in hosts {
            let Some(id) = h.updater_id() else { continue };
            let version = h.linked_version();
            let healthy = version
                .as_ref()
                .map(|v| h.running_version().as_ref() == Some(v));
            let said = (version, healthy);
            if rec.reported.get(&h.name) == Some(&said) {
                continue;
            }
            rec.trace
                .events
                .push(tern_core::invariant::TraceEvent::Report {
                    at,
                    product: tern_core::gate::AGENT.into(),
                    host: id,
                    version: said.0.clone(),
                    healthy: said.1,
                });
            rec.reported.insert(h.name.clone(), said);
        }
    }

    pub fn update_all(&self) -> Vec<(String, RunOutcome)> {
        // What ternd says now, and what changed on the hosts since the last look (a
        // host enrolled, or a test's own command on a host): the trace's evidence.
        self.record_state();
        self.record_installs(tern_core::invariant::InstallKind::Forced);
        let runs = self.run_updates();
        self.record_installs(tern_core::invariant::InstallKind::Scheduled);
        runs
    }

    fn run_updates(&self) -> Vec<(String, RunOutcome)> {
        std::thread::scope(|s| {
            let handles: Vec<_> = self
                .hosts
                .iter()
                .filter(|h| h.online)
                .map(|h| (h.name.clone(), s.spawn(|| h.update())))
                .collect();
            handles
                .into_iter()
                .map(|(name, h)| {
                    let out = match h.join() {
                        Ok(Ok(o)) => o,
                        Ok(Err(e)) => RunOutcome {
                            code: None,
                            stdout: String::new(),
                            stderr: format!("{e:#}"),
                        },
                        Err(_) => RunOutcome {
                            code: None,
                            stdout: String::new(),
                            stderr: "the update thread panicked".into(),
                        },
                    };
                    (name, out)
                })
                .collect()
        })
    }

    /// One round at the current instant: reconcile (ternd would have, every minute),
    /// every online host runs `tern-update update`, reconcile again (the hosts'
    /// heartbeats are in the report), then read the status.
    pub fn step(&self) -> anyhow::Result<Step> {
        self.reconcile()?;
        let runs = self.update_all();
        self.reconcile()?;
        let status = self.status()?;
        Ok(Step {
            now: status.now.to_string(),
            runs,
            status,
        })
    }

    /// Moves the clock by `d`, then [`Fleet::step`].
    pub fn tick(&self, d: &str) -> anyhow::Result<Step> {
        self.clock_advance(d)?;
        self.step()
    }

    /// Sets the clock to `t`, then [`Fleet::step`].
    pub fn step_at(&self, t: &str) -> anyhow::Result<Step> {
        self.clock_set(t)?;
        self.step()
    }

    /// Records what ternd says now: the rollout find serves (the mode in force, with a
    /// freeze), and the server pins. A failure to read is left out (the next look
    /// records it), never taken as an empty fleet.
    fn record_state(&self) {
        let Ok(status) = self.status() else { return };
        let pins = self
            .ctl
            .json(&["inventory", "pins"])
            .ok()
            .and_then(|v| v["pins"].as_array().cloned())
            .unwrap_or_default()
            .iter()
            .filter_map(|p| {
                Some((
                    p["updater_id"].as_str()?.to_string(),
                    p["until"].as_str()?.parse().ok()?,
                ))
            })
            .collect();
        let mut rec = self.recorder.lock().unwrap_or_else(|p| p.into_inner());
        rec.now = Some(status.now);
        let mut state = status.trace_state(tern_core::gate::AGENT, pins);
        if let tern_core::invariant::TraceEvent::State { minimums, .. } = &mut state {
            minimums.clone_from(&rec.minimums);
        }
        rec.trace.events.push(state);
    }

    /// Notes that the release keys signed `version` as the minimum of `line`: every
    /// state recorded from now on carries it, so that the invariant judges each later
    /// install against the revocation itself (rule "revoked is never").
    pub(crate) fn signed_minimum(&self, line: &str, version: &str) {
        self.recorder
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .minimums
            .insert(line.to_string(), version.to_string());
    }

    /// Records every install a host started since the last look: each version its
    /// agent started with (from the agent's own log, so an install rolled back within
    /// the same run counts) other than the one it ran before, and a linked version that
    /// changed without its agent saying so. `kind` says why; a host's first version is
    /// its first install. Hosts following a channel install by that path.
    fn record_installs(&self, kind: tern_core::invariant::InstallKind) {
        self.record_installs_of(&self.hosts, kind);
    }

    fn record_installs_of(&self, hosts: &[Host], kind: tern_core::invariant::InstallKind) {
        use tern_core::invariant::{InstallKind, TraceEvent, Via};
        let mut rec = self.recorder.lock().unwrap_or_else(|p| p.into_inner());
        let Some(at) = rec.now else { return };
        for h in hosts {
            let started = h.started_versions();
            let seen = rec.seen.insert(h.name.clone(), started.len()).unwrap_or(0);
            let now = h.linked_version();
            let before = rec.linked.insert(h.name.clone(), now.clone()).flatten();
            let mut new: Vec<String> = Vec::new();
            for v in started.iter().skip(seen).chain(now.iter()) {
                if Some(v) != before.as_ref() && !new.contains(v) {
                    new.push(v.clone());
                }
            }
            for to in new {
                rec.trace.events.push(TraceEvent::Install {
                    at,
                    product: tern_core::gate::AGENT.into(),
                    host: h.updater_id().unwrap_or_default(),
                    group: h.group.clone(),
                    labels: h.labels.clone(),
                    from: before.clone(),
                    to,
                    kind: if before.is_none() {
                        InstallKind::FirstInstall
                    } else {
                        kind
                    },
                    via: if h.follows_channel {
                        Via::Channel
                    } else {
                        Via::Find
                    },
                    signed: None,
                    pinned_root: h.pinned_root,
                });
            }
        }
        // An offline host sends nothing: what it runs is not yet its report.
        Self::record_reports(&mut rec, hosts.iter().filter(|h| h.online));
    }

    /// Adds what this fleet's own recording cannot see to the trace the invariant is
    /// checked over (an install by a path outside its hosts, such as another
    /// namespace's), in the order it happened.
    pub fn record(&self, event: tern_core::invariant::TraceEvent) {
        self.recorder
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .trace
            .events
            .push(event);
    }

    /// The fleet-safety invariant's verdict on a fleet that breaks it on purpose (the
    /// planted-holes suite): the violation, after which the fleet's drop checks no
    /// more; an error when nothing broke it.
    pub fn conviction(&self) -> anyhow::Result<String> {
        match self.check_invariant() {
            Ok(()) => bail!("the fleet-safety invariant holds over everything this fleet did"),
            Err(e) => {
                self.recorder
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .convicted = true;
                Ok(format!("{e:#}"))
            }
        }
    }

    /// The fleet-safety invariant over everything this fleet did so far
    /// (`tern_core::invariant::check`); the trace is written to `trace.json` in the
    /// fleet's directory.
    pub fn check_invariant(&self) -> anyhow::Result<()> {
        let rec = self.recorder.lock().unwrap_or_else(|p| p.into_inner());
        check_trace(&rec.trace, self.path())
    }

    /// (host, version its live agent runs, or None when no agent runs).
    pub fn running(&self) -> Vec<(String, Option<String>)> {
        self.hosts
            .iter()
            .map(|h| (h.name.clone(), h.running_version()))
            .collect()
    }

    /// Waits (briefly) until every host in `names` runs `version`; the laggards.
    pub fn wait_running(&self, names: &[String], version: &str) -> Vec<(String, Option<String>)> {
        names
            .iter()
            .map(|n| self.host(n))
            .filter(|h| !h.wait_running(version, Duration::from_secs(5)))
            .map(|h| (h.name.clone(), h.running_version()))
            .collect()
    }

    /// A summary for failure messages: each host's running and linked version, and
    /// ternd's log tail.
    pub fn describe(&self) -> String {
        let mut s = String::new();
        for h in &self.hosts {
            s.push_str(&format!(
                "  {:<12} group {:<8} running {:<8} linked {:<8} online {}\n",
                h.name,
                h.group,
                h.running_version().unwrap_or_else(|| "-".into()),
                h.linked_version().unwrap_or_else(|| "-".into()),
                h.online
            ));
        }
        s
    }
}

/// Every fleet ends by checking the fleet-safety invariant over what it did: a test
/// that passed its own assertions still fails if a host installed what the rules
/// forbid. (Not while a test is already failing: its own message says more.)
impl Drop for Fleet {
    fn drop(&mut self) {
        let convicted = self
            .recorder
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .convicted;
        if std::thread::panicking() || convicted {
            return;
        }
        if let Err(e) = self.check_invariant() {
            panic!("{e:#}");
        }
    }
}

/// The fleet-safety invariant (`tern_core::invariant::check`) over `trace`, written to
/// `trace.json` in `dir`; a violation names the event that broke it and where the
/// trace is kept (beside the temp dir, as `dir` goes with its fleet).
pub fn check_trace(trace: &tern_core::invariant::Trace, dir: &Path) -> anyhow::Result<()> {
    let text = serde_json::to_vec_pretty(trace)?;
    std::fs::write(dir.join("trace.json"), &text)?;
    tern_core::invariant::check(trace).map_err(|v| {
        let file = std::env::temp_dir().join(format!(
            "{}-trace.json",
            dir.file_name()
                .map_or_else(|| "tern-e2e".into(), |n| n.to_string_lossy())
        ));
        let _ = std::fs::write(&file, &text);
        anyhow::anyhow!(
            "{v}\nevent: {}\n(trace of {} events in {})",
            serde_json::to_string(&trace.events[v.index]).unwrap_or_default(),
            trace.events.len(),
            file.display()
        )
    })
}
