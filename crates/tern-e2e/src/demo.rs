//! The story `cargo xtask demo` tells, on a real local fleet: roll 1.0.0 → 1.1.0
//! through three halt-on-error groups (canaries, windows, `wait_hours`), then roll the
//! broken 1.2.0 and watch it stop at the first canary while every host stays healthy
//! on 1.1.0, then roll back; last, with a real Prometheus when one is installed, hold
//! 1.3.0, healthy but failing twice the requests, at its canary by canary analysis. It
//! checks what it shows and fails loudly if the fleet does not behave.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use anyhow::{Context, bail};

use crate::fleet::{Fleet, FleetOptions, Step};
use crate::render;
use tern_core::resource::GroupState;

/// Groups of the demo config: (name, start hour UTC, canaries, wait_hours).
pub const GROUPS: [(&str, u8, u8, u32); 3] = [
    ("dev", 10, 1, 0),
    ("staging", 12, 2, 0),
    ("prod", 14, 0, 24),
];

/// The demo config with an analysis on dev (chapter 6): its canary's error ratio on the
/// target against every host still on the start version (dev may have no other host).
fn analysis_config() -> anyhow::Result<String> {
    let mut config = tern_core::resource::AutoUpdateConfig::from_text(
        &tern_core::fixtures::halt_on_error(&GROUPS),
    )?;
    let ratio = |hosts: &str, version: &str| {
        format!(
            "sum(rate(tern_demo_errors_total{{{hosts},version=\"{{{{{version}}}}}\"}}[15s])) / sum(rate(tern_demo_requests_total{{{hosts},version=\"{{{{{version}}}}}\"}}[15s]))"
        )
    };
    let dev = config
        .spec
        .agents
        .as_mut()
        .and_then(|a| a.schedules.as_mut())
        .and_then(|s| s.regular.first_mut())
        .context("the demo config has groups")?;
    dev.analysis = Some(tern_core::resource::AnalysisSpec {
        interval: Some(tern_core::duration::GoDuration::from_minutes(1)),
        passes: Some(2),
        queries: vec![tern_core::resource::AnalysisQuery {
            name: "error_ratio_vs_start".into(),
            query: ratio("updater_id=~\"{{canary_updater_ids}}\"", "version"),
            baseline: Some(ratio("job=\"agents\"", "start_version")),
            max_ratio: Some(1.5),
            ..Default::default()
        }],
    });
    config.validate()?;
    Ok(serde_json::to_string(&config)?)
}

/// The request counters dev's analysis reads at `step`: its canaries' on the target,
/// and every host's on the start version (the baseline).
fn analysed_series(step: &Step) -> anyhow::Result<(String, String)> {
    let rollout = step.status.rollout.as_ref().context("no rollout")?;
    let dev = rollout.group("dev").context("no dev group")?;
    let vars = tern_core::reconcile::analysis_vars(rollout, dev);
    let render = |text: &str| {
        tern_core::analysis::render(text, &vars).map_err(|e| anyhow::anyhow!("{text}: {e}"))
    };
    Ok((
        render(
            r#"tern_demo_requests_total{updater_id=~"{{canary_updater_ids}}",version="{{version}}"}"#,
        )?,
        render(r#"tern_demo_requests_total{job="agents",version="{{start_version}}"}"#)?,
    ))
}

/// How many hosts go in each group for a fleet of `n` (at least 3).
pub fn split(n: usize) -> [usize; 3] {
    let n = n.max(3);
    let dev = (n / 4).max(1);
    let staging = (n / 3).max(1);
    [dev, staging, n - dev - staging]
}

pub struct Summary {
    pub hosts: usize,
    pub seconds: f64,
    pub line: String,
}

/// How to run the demo.
#[derive(Clone, Debug, Default)]
pub struct DemoOptions {
    pub hosts: usize,
    /// Where ternd, ternctl and tern-update are (default: found or built by the harness).
    pub bin_dir: Option<PathBuf>,
    /// Set (by a Ctrl-C handler) to stop the story at the next step, cleaning up.
    pub cancel: Option<Arc<AtomicBool>>,
}

struct Show<'a> {
    out: &'a mut dyn Write,
    last_table: String,
    cancel: Option<Arc<AtomicBool>>,
}

impl Show<'_> {
    fn say(&mut self, s: &str) -> anyhow::Result<()> {
        if self
            .cancel
            .as_ref()
            .is_some_and(|c| c.load(Ordering::SeqCst))
        {
            bail!("interrupted");
        }
        writeln!(self.out, "{s}")?;
        self.out.flush()?;
        Ok(())
    }

    /// Prints what the hosts did and the table, whatever changed.
    fn full(&mut self, fleet: &Fleet, step: &Step) -> anyhow::Result<()> {
        self.last_table.clear();
        self.step(fleet, step)
    }

    /// Prints what the hosts did and the table; a step that changed nothing is one line.
    fn step(&mut self, fleet: &Fleet, step: &Step) -> anyhow::Result<()> {
        let table = render::table(fleet, &step.status);
        let actions = render::actions(step);
        // The first line holds the instant; compare the rest.
        let body = table
            .split_once('\n')
            .map(|(_, b)| b)
            .unwrap_or_default()
            .to_string();
        if actions.is_empty() && body == self.last_table {
            let g = step
                .status
                .groups
                .iter()
                .find(|g| !matches!(g.state, GroupState::Done | GroupState::Unstarted))
                .or(step.status.groups.first());
            let what = g
                .map(|g| {
                    format!(
                        "{} {} ({})",
                        g.name,
                        render::state_cell(g),
                        g.last_update_reason
                    )
                })
                .unwrap_or_default();
            return self.say(&format!(
                "── {} ── no change: {what}",
                render::when(&step.now)
            ));
        }
        self.last_table = body;
        write!(self.out, "{table}{actions}")?;
        self.say("")
    }
}

/// The fleet and the screen the story is told on.
struct Story<'a> {
    fleet: Fleet,
    show: Show<'a>,
}

/// Starts a fleet of `hosts` and plays the story, writing to `out`. Returns the fleet
/// (still running) and the summary.
pub fn run(opts: DemoOptions, out: &mut dyn Write) -> anyhow::Result<(Fleet, Summary)> {
    let started = Instant::now();
    let show = Show {
        out,
        last_table: String::new(),
        cancel: opts.cancel,
    };
    // Chapter 6 needs a Prometheus; without one it is skipped with a note.
    let prometheus_port = match crate::prometheus::binary() {
        Some(_) => Some(crate::prometheus::free_port()?),
        None => None,
    };
    let mut releases = crate::release::standard();
    releases.push(crate::release::Release::erroring("1.3.0", 20));
    let fleet = Fleet::start(FleetOptions {
        bin_dir: opts.bin_dir,
        releases,
        ternd_args: prometheus_port
            .map(|p| vec!["--prometheus-url".into(), format!("http://127.0.0.1:{p}")])
            .unwrap_or_default(),
        ..FleetOptions::default()
    })
    .context("starting the fleet")?;
    let mut story = Story { fleet, show };
    let sizes = split(opts.hosts);
    story.sign_releases()?;
    story.introduce(sizes)?;
    story.enroll(sizes)?;
    story.roll_good_release()?;
    let canaries = story.roll_broken_release()?;
    story.roll_back()?;
    let channel_hosts = story.critical_through_a_channel()?;
    story.tampered_artifact()?;
    let analysed = story.canary_analysis(prometheus_port)?;
    let summary = story.summary(
        started.elapsed().as_secs_f64(),
        &canaries,
        channel_hosts,
        analysed.as_deref(),
    );
    Ok((story.fleet, summary))
}

impl Story<'_> {
    /// Chapter 0: the release owners sign 1.0.0 to 1.3.0 (TUF, with
    /// tern-release); every host enrolls with the root pinned and installs only those.
    fn sign_releases(&mut self) -> anyhow::Result<()> {
        let root = crate::sign::sign_all(&self.fleet)?;
        self.show.say(&format!(
            "0. Signing the releases: tern-release keygen, init, add 1.0.0 1.1.0 1.2.0 1.3.0 (keys in {}; metadata at {}/tuf/metadata/)\n   \
             every host enrolls with --trust-root {} and installs only what those keys signed\n",
            self.fleet.path().join("keys").display(),
            self.fleet.gateway.artifacts_url(),
            root.display()
        ))?;
        self.fleet.enable_args = vec!["--trust-root".into(), root.display().to_string()];
        Ok(())
    }

    /// Chapter 5: whoever controls the artifact server replaces 1.1.0's tarball (and
    /// its .sha256 to match); a new host refuses it, because the signed sha256 differs.
    fn tampered_artifact(&mut self) -> anyhow::Result<()> {
        self.show.say(
            "5. A tampered artifact: 1.1.0's tarball is replaced on the artifact server, its .sha256 rewritten to match",
        )?;
        let restore = crate::sign::tamper(&self.fleet, "1.1.0")?;
        let result = self
            .fleet
            .enroll_with("tampered-1", "dev", &self.fleet.agent_token_file);
        restore.undo()?;
        let (_host, out) = result?;
        let msg = out.message();
        self.expect(
            !out.ok() && msg.contains("does not match the signed release metadata"),
            &format!("the tampered 1.1.0 to be refused (got: {msg})"),
        )?;
        self.show.say(&format!(
            "   a new host enrolling now: refused: {}\n   nothing was installed; the artifact is restored\n",
            msg.lines().last().unwrap_or_default().trim()
        ))
    }

    /// The fleet, the artifacts and the config: applied before any host enrolls.
    fn introduce(&mut self, [nd, ns, np]: [usize; 3]) -> anyhow::Result<()> {
        let fleet = &self.fleet;
        let staging_canaries = GROUPS[1].2.min(ns as u8);
        let groups = [GROUPS[0], ("staging", 12, staging_canaries, 0), GROUPS[2]];
        self.show.say(&format!(
            "Tern demo: {} hosts, each with its own tern-update and a real tern-demo-agent process\n\
             \x20 ternd       {}  (dev clock at {}; the demo moves it)\n\
             \x20 artifacts   {}  tern-demo-agent 1.0.0, 1.1.0, 1.2.0 which panics on start, and 1.3.0 which fails 2% of its requests instead of 1%\n\
             \x20 config      halt-on-error: dev {}:00 ({} canary) → staging {}:00 ({} canaries) → prod {}:00 (waits {}h after staging)\n",
            nd + ns + np,
            fleet.ternd.url,
            render::when(crate::T0),
            fleet.gateway.artifacts_url(),
            groups[0].1,
            groups[0].2,
            groups[1].1,
            groups[1].2,
            groups[2].1,
            groups[2].3,
        ))?;
        fleet.apply(&tern_core::fixtures::halt_on_error(&groups))?;
        fleet.set_version("1.0.0", "1.0.0", "regular")
    }

    /// Chapter 1: every host enrolls in its group and runs 1.0.0.
    fn enroll(&mut self, [nd, ns, np]: [usize; 3]) -> anyhow::Result<()> {
        self.show.say(&format!(
            "1. Enrolling {} hosts: tern-update enable --server … --group G (dev {nd}, staging {ns}, prod {np})",
            nd + ns + np
        ))?;
        for (g, n) in [("dev", nd), ("staging", ns), ("prod", np)] {
            self.fleet.add_hosts(g, n)?;
        }
        self.expect_all_on("1.0.0")?;
        let step = self.fleet.tick("2m")?;
        self.show.step(&self.fleet, &step)
    }

    /// Chapter 2, 1.0.0 → 1.1.0: dev and staging in their windows, prod a day later
    /// (`wait_hours`).
    fn roll_good_release(&mut self) -> anyhow::Result<()> {
        self.show
            .say("2. Rolling 1.0.0 → 1.1.0\n   $ ternctl agents new-rollout 1.1.0")?;
        self.new_rollout("2026-11-23T09:30:00Z", "1.1.0")?;
        let s = self.window("2026-11-23T10:00:00Z", "dev")?;
        self.expect(
            s.status.state_of("dev") == "done",
            "dev done after its window",
        )?;
        let s = self.window("2026-11-23T12:00:00Z", "staging")?;
        self.expect(
            s.status.state_of("staging") == "done",
            "staging done after its window",
        )?;
        self.stays_unstarted(
            "   prod's window opens at 14:00, but prod waits 24h after staging started:",
            "2026-11-23T14:00:00Z",
            "prod",
            "prod to wait for wait_hours",
        )?;
        self.show.say("   The next day at 14:00:")?;
        let s = self.window("2026-11-24T14:00:00Z", "prod")?;
        self.expect(s.status.state_of("prod") == "done", "prod done")?;
        self.expect_all_on("1.1.0")?;
        self.show.say(&format!(
            "   1.1.0 runs on all {} hosts.\n",
            self.fleet.hosts.len()
        ))
    }

    /// Chapter 3: the broken 1.2.0 stops at dev's canary and halts the rollout; every
    /// host stays healthy on 1.1.0. Returns the canaries' host names.
    fn roll_broken_release(&mut self) -> anyhow::Result<Vec<String>> {
        self.show.say("3. Rolling 1.1.0 → 1.2.0, a release that panics on start\n   $ ternctl agents new-rollout 1.2.0")?;
        self.new_rollout("2026-11-24T15:30:00Z", "1.2.0")?;
        let s = self.window("2026-11-25T10:00:00Z", "dev")?;
        let dev = s.status.group("dev");
        self.expect(
            dev.state == GroupState::Canary && dev.canaries.iter().all(|c| !c.success),
            "dev to stop at its canary",
        )?;
        let canaries: Vec<String> = dev
            .canaries
            .iter()
            .filter_map(|c| {
                self.fleet
                    .host_by_updater_id(&c.updater_id)
                    .map(|h| h.name.clone())
            })
            .collect();
        self.stays_unstarted(
            "   staging's window at 12:00 stays shut: the rollout is halted.",
            "2026-11-25T12:00:00Z",
            "staging",
            "staging not to start",
        )?;
        self.expect_all_on("1.1.0")?;
        let unhealthy: Vec<String> = self
            .fleet
            .inventory()?
            .into_iter()
            .filter(|a| a.healthy == Some(false))
            .map(|a| a.updater_id)
            .collect();
        self.expect(unhealthy.is_empty(), "every agent healthy")?;
        Ok(canaries)
    }

    /// The operator rolls the halted rollout back; dev returns to the start version.
    fn roll_back(&mut self) -> anyhow::Result<()> {
        self.show.say("   $ ternctl agents rollback")?;
        let said = self.fleet.agents(&["rollback"])?;
        self.show.say(&format!("   {}", said.trim()))?;
        let s = self.fleet.tick("10m")?;
        self.show.step(&self.fleet, &s)?;
        self.expect(s.status.state_of("dev") == "rolledback", "dev rolled back")?;
        self.expect_all_on("1.1.0")
    }

    /// Chapter 4: hosts that follow a channel instead of the rollout hold a new version
    /// outside their window, and take it at once when it is published as critical.
    /// Their window is checked on the real clock (prod's, 14:00 UTC for an hour), so
    /// the story says whether it is open now. Returns how many hosts followed it.
    fn critical_through_a_channel(&mut self) -> anyhow::Result<usize> {
        const N: usize = 2;
        self.show.say(
            "4. A critical fix through a channel: hosts that follow a published version, not the rollout
   $ ternctl channels set edge 1.0.0",
        )?;
        self.fleet.ctl.run(&["channels", "set", "edge", "1.0.0"])?;
        let url = self.fleet.channel_url("edge");
        self.show.say(&format!(
            "   {N} hosts enroll: tern-update enable --channel {url} --group prod"
        ))?;
        let names = self.fleet.add_channel_hosts("prod", N, "edge")?;
        let now = jiff::Timestamp::now().to_zoned(jiff::tz::TimeZone::UTC);
        let in_window = now.hour() == 14;
        self.show.say(&format!(
            "   Their maintenance window is prod's, 14:00-15:00 UTC; it is {:02}:{:02} UTC now (real time): {}.",
            now.hour(),
            now.minute(),
            if in_window { "open" } else { "closed" }
        ))?;
        self.show.say("   $ ternctl channels set edge 1.1.0")?;
        self.fleet.ctl.run(&["channels", "set", "edge", "1.1.0"])?;
        self.run_channel_hosts(&names)?;
        if !in_window {
            let held = names
                .iter()
                .all(|n| self.fleet.host(n).running_version().as_deref() == Some("1.0.0"));
            self.expect(held, "the channel hosts to hold 1.0.0 outside their window")?;
        }
        self.show
            .say("   $ ternctl channels set edge 1.1.0 --critical")?;
        self.fleet
            .ctl
            .run(&["channels", "set", "edge", "1.1.0", "--critical"])?;
        self.run_channel_hosts(&names)?;
        let late = self.fleet.wait_running(&names, "1.1.0");
        self.expect(
            late.is_empty(),
            &format!("the critical 1.1.0 on every channel host ({late:?})"),
        )?;
        self.show.say(&format!(
            "   1.1.0 runs on the {N} channel hosts{}.\n",
            if in_window {
                ""
            } else {
                ", outside their window"
            }
        ))?;
        Ok(N)
    }

    /// Chapter 6: 1.3.0 runs and is healthy, but fails twice the requests 1.1.0 does.
    /// dev now judges its canary by its error ratio against the hosts still on the start
    /// version (a real Prometheus scraping every agent's `/metrics`): the analysis fails
    /// at the canary and nobody else gets 1.3.0. Returns the canary's name, or `None`
    /// when there is no Prometheus to run it with (the chapter is skipped).
    fn canary_analysis(&mut self, port: Option<u16>) -> anyhow::Result<Option<String>> {
        let Some(port) = port else {
            self.show.say(
                "6. Canary analysis: skipped, Prometheus is not installed (Debian: apt-get install prometheus)\n",
            )?;
            return Ok(None);
        };
        self.show.say(
            "6. A release that runs, is healthy, and fails twice as many requests: 1.3.0 (2% of requests instead of 1%)\n   \
             every agent serves /metrics; a real Prometheus scrapes them every second; dev gains an analysis:\n   \
             its canary's error ratio on 1.3.0 at most 1.5 times that of the hosts still on the start version",
        )?;
        let mut targets = Vec::new();
        for h in &self.fleet.hosts {
            let metrics = crate::prometheus::free_port()?;
            std::fs::write(h.state.join("metrics-port"), metrics.to_string())?;
            targets.push(crate::prometheus::Target {
                port: metrics,
                labels: [
                    ("host".to_string(), h.name.clone()),
                    ("group".to_string(), h.group.clone()),
                    ("updater_id".to_string(), h.updater_id().unwrap_or_default()),
                ]
                .into(),
            });
        }
        let prometheus = crate::prometheus::Prometheus::start(port, &targets)?;
        self.show.say(&format!(
            "   Prometheus at {} scrapes {} agents",
            prometheus.url,
            targets.len()
        ))?;
        self.fleet.prometheus = Some(prometheus);
        self.fleet.apply(&analysis_config()?)?;
        self.new_rollout("2026-11-25T15:30:00Z", "1.3.0")?;
        let step = self.fleet.step_at("2026-11-26T10:00:00Z")?;
        self.show.step(&self.fleet, &step)?;
        self.show.say(
            "   The canary runs 1.3.0, healthy. Prometheus needs a few scrapes of it before the analysis can judge:",
        )?;
        // The canary's and the baseline's counters over a full window of the rate (15
        // scrapes a second apart, 14 at least in any 15 s).
        let (canary, baseline) = analysed_series(&step)?;
        let prom = self
            .fleet
            .prometheus
            .as_ref()
            .context("Prometheus was just started")?;
        for series in [&canary, &baseline] {
            self.expect(
                prom.wait_samples(series, "15s", 14, std::time::Duration::from_secs(90)),
                &format!("Prometheus to hold 15 s of {series}"),
            )?;
        }
        let mut step = self.fleet.tick("1m")?;
        for _ in 0..6 {
            if step.status.group("dev").last_update_reason == "analysis_failed" {
                break;
            }
            self.show.step(&self.fleet, &step)?;
            // The next analysis reads three more scrapes of the canary.
            let prom = self
                .fleet
                .prometheus
                .as_ref()
                .context("Prometheus was just started")?;
            self.expect(
                prom.wait_scrapes(&canary, 3, std::time::Duration::from_secs(60)),
                &format!("Prometheus to scrape {canary} again"),
            )?;
            step = self.fleet.tick("1m")?;
        }
        self.show.full(&self.fleet, &step)?;
        let dev = step.status.group("dev");
        self.expect(
            dev.state == GroupState::Canary && dev.last_update_reason == "analysis_failed",
            "the analysis to fail at dev's canary",
        )?;
        let canary = dev
            .canaries
            .iter()
            .filter_map(|c| self.fleet.host_by_updater_id(&c.updater_id))
            .map(|h| h.name.clone())
            .collect::<Vec<_>>()
            .join(", ");
        let on_target = self
            .fleet
            .running()
            .iter()
            .filter(|(_, v)| v.as_deref() == Some("1.3.0"))
            .count();
        self.expect(
            on_target == dev.canaries.len(),
            &format!("1.3.0 on the canary alone ({on_target} hosts run it)"),
        )?;
        self.show.say(&format!(
            "   1.3.0 reached {on_target} of {} hosts (without an analysis its healthy canary would pass: docs/benchmarks.md).\n   \
             $ ternctl agents rollback",
            self.fleet.hosts.len()
        ))?;
        self.fleet.agents(&["rollback"])?;
        let s = self.fleet.tick("10m")?;
        self.show.step(&self.fleet, &s)?;
        self.expect_all_on("1.1.0")?;
        self.show.say("")?;
        Ok(Some(canary))
    }

    /// One timer run on each of `names`, with what each decided.
    fn run_channel_hosts(&mut self, names: &[String]) -> anyhow::Result<()> {
        for name in names {
            let out = self.fleet.host(name).update()?;
            self.show.say(&format!("   {name}: {}", out.message()))?;
        }
        Ok(())
    }

    fn summary(
        &self,
        seconds: f64,
        canaries: &[String],
        channel_hosts: usize,
        analysed: Option<&str>,
    ) -> Summary {
        let n = self.fleet.hosts.len();
        let analysis = match analysed {
            Some(canary) => format!(
                "1.3.0, healthy but failing twice the requests, was held by the canary analysis at its canary ({canary}) and rolled back; "
            ),
            None => "the canary-analysis chapter was skipped (no Prometheus); ".into(),
        };
        let line = format!(
            "demo: OK in {seconds:.0}s: {} real hosts went 1.0.0 → 1.1.0 through dev, staging (canaries) and prod (24h later); \
             1.2.0 crashed on its canary ({}), was rolled back there, and halted the rollout; \
             {channel_hosts} hosts following a channel took 1.1.0 when it was published as critical; {analysis}all {n} hosts run 1.1.0, healthy; \
             every release was signed and a tampered 1.1.0 tarball was refused",
            n - channel_hosts,
            canaries.join(", ")
        );
        Summary {
            hosts: n,
            seconds,
            line,
        }
    }

    /// `ternctl agents new-rollout VERSION` with the dev clock at `at`.
    fn new_rollout(&mut self, at: &str, version: &str) -> anyhow::Result<()> {
        self.fleet.clock_set(at)?;
        let said = self.fleet.new_rollout(version)?;
        self.show.say(&format!("   {}", said.trim()))
    }

    /// Opens `group`'s window at `at` and steps every 10 minutes until the group is
    /// done, rolled back, or stuck (two steps that change nothing).
    fn window(&mut self, at: &str, group: &str) -> anyhow::Result<Step> {
        let fleet = &self.fleet;
        let mut step = fleet.step_at(at)?;
        self.show.step(fleet, &step)?;
        let mut quiet = 0;
        for _ in 0..6 {
            if matches!(step.status.state_of(group), "done" | "rolledback") || quiet >= 2 {
                break;
            }
            let before = render::table(fleet, &step.status);
            step = fleet.tick("10m")?;
            let after = render::table(fleet, &step.status);
            let same = before.split_once('\n').map(|x| x.1) == after.split_once('\n').map(|x| x.1);
            quiet = if same && step.runs.iter().all(|(_, o)| o.ok()) {
                quiet + 1
            } else {
                0
            };
            self.show.step(fleet, &step)?;
        }
        Ok(step)
    }

    /// Says `why`, then shows the whole fleet at `at`, where `group` must not start.
    fn stays_unstarted(
        &mut self,
        why: &str,
        at: &str,
        group: &str,
        what: &str,
    ) -> anyhow::Result<()> {
        self.show.say(why)?;
        let s = self.fleet.step_at(at)?;
        self.show.full(&self.fleet, &s)?;
        self.expect(s.status.state_of(group) == "unstarted", what)
    }

    fn expect_all_on(&self, version: &str) -> anyhow::Result<()> {
        let names: Vec<String> = self.fleet.hosts.iter().map(|h| h.name.clone()).collect();
        let bad: Vec<String> = self
            .fleet
            .wait_running(&names, version)
            .into_iter()
            .map(|(n, v)| format!("{n} runs {}", v.unwrap_or_else(|| "nothing".into())))
            .collect();
        self.expect(
            bad.is_empty(),
            &format!("every host on {version} ({bad:?})"),
        )
    }

    fn expect(&self, cond: bool, what: &str) -> anyhow::Result<()> {
        if !cond {
            bail!(
                "the demo expected {what}, but it did not happen:\n{}",
                self.fleet.describe()
            );
        }
        Ok(())
    }
}
