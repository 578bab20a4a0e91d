//! Fleets played twice: with every hole closed (`tests/stops.rs`, which asserts that
//! they hold) and with one hole planted (`tests/planted.rs`, which asserts that the
//! fleet-safety checker convicts it). One scenario, so the two suites cannot drift
//! apart.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context, ensure};
use tern_core::fixtures::halt_on_error;
use tern_core::invariant::{InstallKind, TraceEvent, Via};

use crate::directive::{activate, control_config, record_installer, recorded};
use crate::updater::{self, UpdaterHost};
use crate::{Fleet, FleetOptions, RunOutcome};

/// The updater product, as the agents' ternd's stops name it.
const UPDATER: &str = "updater";

/// What [`script_directive_while_agents_frozen`] left.
pub struct ScriptUnderFreeze {
    /// The agents' ternd; its trace holds the updater's installs too.
    pub agents: Fleet,
    /// The updater's own ternd, whose directive names the script.
    pub upd: Fleet,
    pub host: UpdaterHost,
    /// Each `update` run of the host's updater namespace.
    pub runs: Vec<RunOutcome>,
    /// The versions the script ran for.
    pub ran: Vec<String>,
}

/// Issue 47, hole 2. Two ternds, as in production: the agents' (one host in staging)
/// and the updater's, where the host's `updater` namespace enrolled with the
/// `local-script` installer. The agents' ternd is frozen; then the updater's ternd
/// makes a directive active whose `local-script` installer would move the updater to
/// 1.1.0. The host heartbeats, the directive pass picks it, its timer runs `update`,
/// three times a minute apart. A stop of the agents' ternd holds every update of the
/// host, the updater's included, whatever installer the instruction names: the trace
/// records the agents' state for the updater product and each version the script ran.
pub fn script_directive_while_agents_frozen() -> anyhow::Result<ScriptUnderFreeze> {
    let mut agents = Fleet::start(FleetOptions::default())?;
    agents.apply(&halt_on_error(&[("staging", 10, 0, 0)]))?;
    agents.set_version("1.0.0", "1.0.0", "regular")?;
    agents.add_hosts("staging", 1)?;

    let upd = Fleet::start(FleetOptions {
        releases: Vec::new(),
        ..FleetOptions::default()
    })?;
    let real = std::fs::read(&upd.bins.tern_update)?;
    updater::publish(&upd.artifacts, "1.0.0", &real)?;
    upd.apply(&halt_on_error(&[("staging", 10, 0, 0)]))?;
    upd.set_version("1.0.0", "1.0.0", "regular")?;
    let host = UpdaterHost::beside(&agents.hosts[0], &upd.bins.tern_update);
    let out = host.enable_with(
        &upd.gateway.url,
        &upd.gateway.artifacts_url(),
        &upd.agent_token_file,
        &["--installer", "local-script", "--label", "env=prod"],
    )?;
    ensure!(out.ok(), "{}: enable failed:\n{}", host.name, out.stderr);
    let id = host
        .updater_id()
        .context("the updater namespace has no updater id")?;

    agents.agents(&["freeze", "--reason", "incident 7"])?;
    let log: PathBuf = upd.path().join("script-runs.log");
    let draft = r#"kind: version_directive
version: v1
metadata: {name: fix}
spec:
  directives:
    - name: everyone
      windows: ignore
      selectors: [{labels: {"*": "*"}}]
      targets: [{version: "1.1.0"}]
      installers: [record]
"#;
    activate(
        &upd,
        &record_installer(Some(&log)),
        &control_config("10/m", "1", "12h"),
        "fix",
        draft,
    )?;

    let mut runs = Vec::new();
    for _ in 0..3 {
        let out = host.run(&["heartbeat"])?;
        ensure!(out.ok(), "heartbeat: {}", out.stderr);
        upd.clock_advance("1m")?;
        upd.ctl.json(&["dev", "directives"])?;
        let status = agents.status()?;
        agents.record(status.trace_state(UPDATER, BTreeMap::new()));
        let before = recorded(&log).len();
        let from = host.linked_version();
        let out = host.run(&["update"])?;
        for to in recorded(&log).into_iter().skip(before) {
            agents.record(TraceEvent::Install {
                at: status.now,
                product: UPDATER.into(),
                host: id.clone(),
                group: host.group.clone(),
                labels: BTreeMap::from([("env".to_string(), "prod".to_string())]),
                from: from.clone(),
                to,
                kind: InstallKind::Scheduled,
                via: Via::Directive,
                signed: None,
                pinned_root: false,
            });
        }
        runs.push(out);
    }
    let ran = recorded(&log);
    Ok(ScriptUnderFreeze {
        agents,
        upd,
        host,
        runs,
        ran,
    })
}

/// Issue 47, hole 4 (a revoked start version): dev on 1.0.0 starts a rollout to 1.1.0
/// and is active; the fleet is frozen; the release keys revoke 1.0.0 (line 1's minimum
/// becomes 1.1.0); a replica started with the release root knows it. A host `dev-new`
/// enrolls through that replica. The fleet returned holds it (or, with the hole open,
/// what it installed); its trace carries the signed minimum.
pub fn enrolled_while_known_good_revoked() -> anyhow::Result<Fleet> {
    let (mut f, _) = rolling_out_in_dev(&[("dev", 10, 0, 0)], 1)?;
    let state = f.status()?.state_of("dev");
    ensure!(state == "active", "dev is {state}, not active");
    f.agents(&["freeze", "--reason", "1.1.0 under investigation"])?;
    let root = crate::sign::sign(&f, &["1.0.0", "1.1.0"])?;
    crate::sign::minimum(&f, "1", "1.1.0")?;
    let i = crate::sign::verifying_replica(&mut f, &root)?;
    let server = f.replicas[i].gateway.url.clone();
    f.add_host_via("dev-new", "dev", &server, &[])?;
    Ok(f)
}

/// What [`canary_down_before_it_is_judged`] left.
pub struct CanaryDown {
    pub fleet: Fleet,
    /// The canary's host name.
    pub canary: String,
    /// dev's other hosts.
    pub others: Vec<String>,
}

/// Issue 11's hole (a canary running the target unhealthy passes): dev has three hosts
/// on 1.0.0 and one canary, under halt-on-error. The rollout to 1.1.0 starts in dev's
/// window and picks the canary, which alone runs its timer: it installs 1.1.0, and it
/// comes up healthy. Then, before ternd judges it, its agent goes down and 1.1.0 no
/// longer starts on that host; its heartbeat says it runs 1.1.0, unhealthy. The fleet
/// returned has every host online again; nothing has reconciled since.
pub fn canary_down_before_it_is_judged() -> anyhow::Result<CanaryDown> {
    let (mut f, hosts) = rolling_out_in_dev(&[("dev", 10, 1, 0), ("prod", 14, 0, 0)], 3)?;
    let status = f.status()?;
    let dev = status.group("dev");
    ensure!(
        dev.state.as_str() == "canary" && dev.canaries.len() == 1,
        "dev is {} with {} canaries, not in canary with one",
        dev.state.as_str(),
        dev.canaries.len()
    );
    let canary = f
        .host_by_updater_id(&dev.canaries[0].updater_id)
        .context("the canary is none of dev's hosts")?
        .name
        .clone();
    let others: Vec<String> = hosts.into_iter().filter(|h| *h != canary).collect();
    for o in &others {
        f.set_online(o, false);
    }
    f.update_all();
    let h = f.host(&canary);
    ensure!(
        h.running_version().as_deref() == Some("1.1.0"),
        "the canary does not run 1.1.0: {}",
        f.describe()
    );
    h.crash_on(&["1.1.0"])?;
    h.kill_agent();
    f.heartbeat_all();
    for o in &others {
        f.set_online(o, true);
    }
    Ok(CanaryDown {
        fleet: f,
        canary,
        others,
    })
}

/// A halt-on-error fleet of `groups` (dev opening at 10:00) with `dev_hosts` hosts
/// settled on 1.0.0, whose rollout to 1.1.0 (made at 09:30) has just been reconciled at
/// 10:05, in dev's window. Returns it and dev's host names.
fn rolling_out_in_dev(
    groups: &[(&str, u8, u8, u32)],
    dev_hosts: usize,
) -> anyhow::Result<(Fleet, Vec<String>)> {
    let mut f = Fleet::start(FleetOptions::default())?;
    f.apply(&halt_on_error(groups))?;
    f.set_version("1.0.0", "1.0.0", "regular")?;
    let hosts = f.add_hosts("dev", dev_hosts)?;
    let step = f.tick("2m")?;
    ensure!(step.failures().is_empty(), "{:?}", step.failures());
    f.clock_set("2026-11-23T09:30:00Z")?;
    f.new_rollout("1.1.0")?;
    f.clock_set("2026-11-23T10:05:00Z")?;
    f.reconcile()?;
    Ok((f, hosts))
}
