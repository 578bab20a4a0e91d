//! Package mode (`enable --package NAME --package-manager apt|yum`) with real parts:
//! real `.deb` packages built with `dpkg-deb`, installed by the real `dpkg` into a
//! temporary root, read back with the real `dpkg-query`, real agent processes, and the
//! real tern-update binary against a loopback server answering find.
//!
//! apt-get itself would change this machine (its lists, its cache, its dpkg database),
//! so tern-update is given STAND-INS for `apt-get` and `apt-cache` (through
//! `TERN_APT_GET`, `TERN_APT_CACHE`): small shell scripts that answer from the test's
//! local repository directory. The `apt-get` stand-in accepts
//! `install -y --allow-downgrades … NAME=VERSION`, finds `NAME_VERSION_*.deb` in the
//! repository and runs the real `dpkg --root=ROOT -i` on it; its `update` copies the
//! repository's versions into the list its `apt-cache madison` answers from (so a
//! version published after the last `update` is unknown until the next one, as with
//! apt). `TERN_DPKG_QUERY` points at a wrapper running the real `dpkg-query` on ROOT's
//! database. Every stand-in appends its argv to one file, so each test sees exactly
//! which commands tern-update ran. yum and rpm are not on this machine: the yum test
//! uses stand-ins for both, which keep their "database" in a text file.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use support::{Agent, Host, Server, agent_script, write_exe};

const PKG: &str = "tern-test-agent";

/// A host with a temporary dpkg root, a local apt repository and the stand-ins.
struct Debs {
    host: Host,
    server: Server,
    /// The root dpkg installs into (`--root`).
    root: PathBuf,
    /// The repository's `.deb` files.
    pool: PathBuf,
    /// Every command a stand-in ran, one line each (`apt-get install -y …`).
    argv_log: PathBuf,
    /// While this file exists, the apt-get stand-in's `install` exits 100.
    fail_install: PathBuf,
    svc: PathBuf,
}

impl Debs {
    fn new() -> Self {
        let server = Server::start();
        let host = Host::new();
        let base = host.dir.path().to_path_buf();
        let root = base.join("root");
        let admin = root.join("var/lib/dpkg");
        for d in ["updates", "info"] {
            std::fs::create_dir_all(admin.join(d)).unwrap();
        }
        for f in ["status", "available"] {
            std::fs::write(admin.join(f), "").unwrap();
        }
        std::fs::create_dir_all(root.join("var/log")).unwrap();
        let pool = base.join("pool");
        std::fs::create_dir_all(&pool).unwrap();
        let tools = base.join("tools");
        std::fs::create_dir_all(&tools).unwrap();
        let argv_log = base.join("argv.log");
        std::fs::write(&argv_log, "").unwrap();
        let fail_install = base.join("fail-install");
        let lists = base.join("apt-lists");
        let (r, p, log, fail, l) = (
            root.display().to_string(),
            pool.display().to_string(),
            argv_log.display().to_string(),
            fail_install.display().to_string(),
            lists.display().to_string(),
        );
        write_exe(
            &tools.join("apt-get"),
            &format!(
                r#"#!/bin/sh
# Stand-in for apt-get: answers from the test's repository, installs with the real dpkg.
printf '%s\n' "apt-get $*" >> '{log}'
if [ "$DEBIAN_FRONTEND" != noninteractive ]; then
    echo "E: stand-in: DEBIAN_FRONTEND is not noninteractive" >&2; exit 100
fi
case "$1" in
update)
    : > '{l}.tmp'
    for f in '{p}'/*.deb; do
        [ -e "$f" ] || continue
        b=${{f##*/}}; b=${{b%_*.deb}}
        echo "${{b%%_*}} ${{b#*_}}" >> '{l}.tmp'
    done
    mv '{l}.tmp' '{l}'
    ;;
install)
    if [ -e '{fail}.hang' ]; then sleep 600; fi
    if [ -e '{fail}' ]; then
        echo "Reading package lists..."
        echo "E: stand-in: could not reach the repository (test)" >&2; exit 100
    fi
    case " $* " in *" -y "*) ;; *) echo "E: stand-in: no -y" >&2; exit 100;; esac
    case " $* " in *" --allow-downgrades "*) ;; *) echo "E: stand-in: no --allow-downgrades" >&2; exit 100;; esac
    for a in "$@"; do last=$a; done
    name=${{last%%=*}}; ver=${{last#*=}}
    set -- '{p}'/"${{name}}_${{ver}}"_*.deb
    if [ ! -f "$1" ]; then echo "E: Version '$ver' for '$name' was not found" >&2; exit 100; fi
    exec dpkg --root='{r}' --log='{r}/var/log/dpkg.log' --force-not-root --force-script-chrootless -i "$1"
    ;;
*) echo "E: stand-in: unknown command $1" >&2; exit 100;;
esac
"#
            ),
        );
        write_exe(
            &tools.join("apt-cache"),
            &format!(
                r#"#!/bin/sh
# Stand-in for apt-cache madison: the versions the last `apt-get update` saw, newest first.
printf '%s\n' "apt-cache $*" >> '{log}'
[ "$1" = madison ] || exit 100
[ -f '{l}' ] || exit 0
grep "^$2 " '{l}' | sort -k2,2Vr | while read -r n v; do
    echo " $n | $v | file:{p} ./ Packages"
done
"#
            ),
        );
        write_exe(
            &tools.join("dpkg-query"),
            &format!(
                "#!/bin/sh\n# The real dpkg-query, on the test root's database.\nprintf '%s\\n' \"dpkg-query $*\" >> '{log}'\nexec dpkg-query --admindir='{r}/var/lib/dpkg' \"$@\"\n"
            ),
        );
        let mut host = host;
        for (var, tool) in [
            ("TERN_APT_GET", "apt-get"),
            ("TERN_APT_CACHE", "apt-cache"),
            ("TERN_DPKG_QUERY", "dpkg-query"),
        ] {
            host.env
                .push((var.into(), tools.join(tool).display().to_string()));
        }
        let svc = agent_service(&host, &root.join("usr/bin").join(PKG));
        Self {
            host,
            server,
            root,
            pool,
            argv_log,
            fail_install,
            svc,
        }
    }

    /// Builds `tern-test-agent_{version}_all.deb` into the repository with dpkg-deb:
    /// `usr/bin/tern-test-agent`, an agent announcing the upstream version.
    fn publish(&self, version: &str, kind: Agent) {
        let upstream = version.rsplit_once('-').map_or(version, |(u, _)| u);
        let dir = self.host.dir.path().join("build").join(version);
        std::fs::create_dir_all(dir.join("DEBIAN")).unwrap();
        std::fs::create_dir_all(dir.join("usr/bin")).unwrap();
        std::fs::write(
            dir.join("DEBIAN/control"),
            format!(
                "Package: {PKG}\nVersion: {version}\nArchitecture: all\nMaintainer: Tern tests <tests@example.invalid>\nDescription: tern-update's package-mode test agent\n"
            ),
        )
        .unwrap();
        write_exe(
            &dir.join("usr/bin").join(PKG),
            &agent_script(upstream, kind),
        );
        let deb = self.pool.join(format!("{PKG}_{version}_all.deb"));
        let out = Command::new("dpkg-deb")
            .arg("--root-owner-group")
            .arg("--build")
            .arg(&dir)
            .arg(&deb)
            .output()
            .unwrap();
        assert!(out.status.success(), "dpkg-deb: {out:?}");
    }

    /// What the real dpkg database of the test root says is installed.
    fn dpkg_version(&self) -> Option<String> {
        let out = Command::new("dpkg-query")
            .arg(format!(
                "--admindir={}",
                self.root.join("var/lib/dpkg").display()
            ))
            .args(["-W", "-f=${Version}", PKG])
            .output()
            .unwrap();
        let v = String::from_utf8_lossy(&out.stdout).trim().to_string();
        (out.status.success() && !v.is_empty()).then_some(v)
    }

    fn commands(&self) -> Vec<String> {
        std::fs::read_to_string(&self.argv_log)
            .unwrap()
            .lines()
            .map(String::from)
            .collect()
    }

    fn installs(&self) -> Vec<String> {
        self.commands()
            .into_iter()
            .filter(|c| c.starts_with("apt-get install"))
            .collect()
    }

    fn enable(&self, extra: &[&str]) -> std::process::Output {
        let svc = self.svc.display().to_string();
        let mut args = vec![
            "enable",
            "--server",
            self.server.url.as_str(),
            "--service-config",
            svc.as_str(),
            "--package",
            PKG,
            "--package-manager",
            "apt",
        ];
        args.extend_from_slice(extra);
        self.host.run(&args)
    }

    fn status(&self) -> serde_json::Value {
        serde_json::from_slice(&self.host.run(&["status", "-o", "json"]).stdout).unwrap()
    }
}

/// A command-manager service running the packaged agent from `binary`.
fn agent_service(host: &Host, binary: &Path) -> PathBuf {
    let s = host.state.display();
    let b = binary.display();
    let yaml = format!(
        "manager: command\nname: {PKG}\n\
         start: \"setsid {b} {s} </dev/null >/dev/null 2>&1 & echo $! > {s}/agent.pgid\"\n\
         stop: \"p=$(cat {s}/agent.pgid 2>/dev/null); case $p in ''|*[!0-9]*|0|1) ;; *) kill -s KILL -- -$p 2>/dev/null;; esac; rm -f {s}/agent.pid; true\"\n\
         pid_file: {s}/agent.pid\nhealth_timeout: 3\nhealth_interval: 0.1\nstable_ticks: 4\nmax_restarts: 3\n"
    );
    let path = host.dir.path().join("service-package.yaml");
    std::fs::write(&path, yaml).unwrap();
    path
}

/// A host enabled in package mode on 1.0.0-1 (the only version published yet).
fn enabled_on_1_0_0() -> Debs {
    let debs = Debs::new();
    debs.publish("1.0.0-1", Agent::Good);
    debs.server.set_target("1.0.0", true);
    let out = debs.enable(&[]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(debs.dpkg_version().as_deref(), Some("1.0.0-1"));
    assert!(debs.host.wait_running("1.0.0"));
    assert_eq!(debs.host.active().as_deref(), Some("1.0.0"));
    debs
}

fn requests(server: &Server) -> Vec<String> {
    server.state.lock().unwrap().requests.clone()
}

#[test]
fn enable_update_and_rollback_through_apt_with_real_dpkg() {
    // 1. enable in package mode installs what find names: the real dpkg database has
    // 1.0.0-1 and the agent from the package runs.
    let debs = enabled_on_1_0_0();
    let host = &debs.host;
    assert_eq!(
        debs.commands()
            .iter()
            .filter(|c| c.starts_with("apt-get"))
            .cloned()
            .collect::<Vec<_>>(),
        [
            // apt's lists did not know 1.0.0 yet: refreshed once.
            "apt-get update",
            "apt-get install -y --allow-downgrades -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold tern-test-agent=1.0.0-1",
        ]
    );
    let st = debs.status();
    assert_eq!(st["spec"]["package"]["name"], PKG);
    assert_eq!(st["spec"]["package"]["manager"], "apt");
    // No tarball machinery: no versions dir, no links, no download.
    assert!(host.versions().is_empty());
    assert!(!host.link.join("tern-agent").exists());
    assert!(
        !requests(&debs.server)
            .iter()
            .any(|r| r.contains("/artifacts/"))
    );

    // 2. find says 1.1.0: installed through the (stand-in) apt-get, the real dpkg
    // database says 1.1.0-1, the agent runs 1.1.0.
    debs.publish("1.1.0-1", Agent::Good);
    debs.publish("1.2.0-1", Agent::ExitsAtOnce);
    debs.server.set_target("1.1.0", true);
    host.ok(&["update"]);
    assert_eq!(debs.dpkg_version().as_deref(), Some("1.1.0-1"));
    assert!(host.wait_running("1.1.0"));
    let st = host.update_yaml().status;
    assert_eq!(st.active.as_deref(), Some("1.1.0"));
    assert_eq!(st.backup.as_deref(), Some("1.0.0"));
    assert!(st.last_update.as_ref().unwrap().success);
    assert!(st.in_progress.is_none());
    assert!(
        debs.installs()
            .last()
            .unwrap()
            .ends_with(" tern-test-agent=1.1.0-1")
    );

    // 3. find says 1.2.0, whose agent exits at once: health fails, 1.1.0 is reinstalled
    // through the same manager, 1.2.0 is skipped, the agent runs 1.1.0.
    debs.server.set_target("1.2.0", true);
    let err = host.fails(&["update"]);
    assert!(err.contains("update to 1.2.0 failed"), "{err}");
    assert!(err.contains("not running"), "{err}");
    assert!(
        err.contains("rolled back: the host runs 1.1.0 (reinstalled with apt) and it is healthy"),
        "{err}"
    );
    assert_eq!(debs.dpkg_version().as_deref(), Some("1.1.0-1"));
    assert!(host.wait_running("1.1.0"));
    let installs = debs.installs();
    assert!(installs[installs.len() - 2].ends_with(" tern-test-agent=1.2.0-1"));
    assert!(installs[installs.len() - 1].ends_with(" tern-test-agent=1.1.0-1"));
    let st = host.update_yaml().status;
    assert_eq!(st.active.as_deref(), Some("1.1.0"));
    assert_eq!(st.skip.as_deref(), Some("1.2.0"));
    assert!(st.rollback);
    let last = st.last_update.unwrap();
    assert_eq!((last.target.as_str(), last.success), ("1.2.0", false));
    assert!(st.environment_failure.is_none());
    assert!(st.in_progress.is_none());
    let (_, hb) = debs.server.heartbeats().pop().unwrap();
    assert_eq!(hb.version, "1.1.0");
    assert_eq!(hb.failed_version.as_deref(), Some("1.2.0"));
    assert!(hb.rollback);

    // The skipped version is not retried: nothing runs.
    let before = debs.installs().len();
    let out = host.ok(&["update"]);
    assert!(out.contains("skipped"), "{out}");
    assert_eq!(debs.installs().len(), before);

    // Never a download, whatever happened.
    assert!(
        !requests(&debs.server)
            .iter()
            .any(|r| r.contains("/artifacts/"))
    );
}

#[test]
fn hostile_versions_from_the_server_never_reach_a_command() {
    let debs = enabled_on_1_0_0();
    let host = &debs.host;
    let ran_before = debs.commands();
    let marker = host.dir.path().join("pwned");
    let touch = format!("$(touch {})", marker.display());
    for hostile in [
        "1.0.0 --force-all",
        "$(touch /tmp/x)",
        touch.as_str(),
        "-o",
        "1.0.0;rm",
        "--allow-unauthenticated",
        "1.0.0`id`",
        "1.0.0|sh",
    ] {
        debs.server.set_target(hostile, true);
        let err = host.fails(&["update", "--now"]);
        assert!(
            err.contains("invalid version") || err.contains("refusing version"),
            "{hostile}: {err}"
        );
        assert!(err.contains(&format!("{hostile:?}")), "{hostile}: {err}");
        assert_eq!(debs.commands(), ran_before, "{hostile}: a command ran");
    }
    assert!(!marker.exists());
    let err = {
        debs.server.set_target("-o", true);
        host.fails(&["update", "--now"])
    };
    assert!(err.contains("would be read as an option"), "{err}");
    assert!(err.contains("nothing was run"), "{err}");
    // The host is as it was.
    assert_eq!(debs.dpkg_version().as_deref(), Some("1.0.0-1"));
    assert_eq!(host.running_version().as_deref(), Some("1.0.0"));
    let st = host.update_yaml().status;
    assert_eq!(st.active.as_deref(), Some("1.0.0"));
    assert!(st.skip.is_none() && st.in_progress.is_none());

    // A hostile package name is refused by enable before anything runs.
    for name in ["-o", "Tern", "a;b", "x y", "$(id)"] {
        let svc = debs.svc.display().to_string();
        let out = host.run(&[
            "enable",
            "--server",
            &debs.server.url,
            "--service-config",
            &svc,
            "--package",
            name,
            "--package-manager",
            "apt",
        ]);
        assert_ne!(out.status.code(), Some(0), "{name}");
        assert_eq!(debs.commands(), ran_before, "{name}: a command ran");
    }
    assert_eq!(host.update_yaml().spec.package.unwrap().name, PKG);
}

#[test]
fn a_failing_package_manager_changes_nothing_and_nothing_else_is_tried() {
    let debs = enabled_on_1_0_0();
    let host = &debs.host;
    debs.publish("1.1.0-1", Agent::Good);
    debs.server.set_target("1.1.0", true);
    std::fs::write(&debs.fail_install, "").unwrap();
    let err = host.fails(&["update", "--now"]);
    assert!(err.contains("installing 1.1.0 failed"), "{err}");
    assert!(
        err.contains("apt-get install -y --allow-downgrades"),
        "the command is named: {err}"
    );
    assert!(err.contains("tern-test-agent=1.1.0-1"), "{err}");
    assert!(err.contains("exit status 100"), "{err}");
    assert!(
        err.contains("E: stand-in: could not reach the repository (test)"),
        "{err}"
    );
    assert!(
        err.contains("nothing was changed: the host runs 1.0.0"),
        "{err}"
    );
    // Nothing switched: the database, the agent and the state are as they were.
    assert_eq!(debs.dpkg_version().as_deref(), Some("1.0.0-1"));
    assert_eq!(host.running_version().as_deref(), Some("1.0.0"));
    let st = host.update_yaml().status;
    assert_eq!(st.active.as_deref(), Some("1.0.0"));
    assert!(st.skip.is_none() && st.in_progress.is_none() && !st.rollback);
    // No fallback: no download, no other manager.
    assert!(
        !requests(&debs.server)
            .iter()
            .any(|r| r.contains("/artifacts/"))
    );
    assert!(host.versions().is_empty());
    assert!(debs.commands().iter().all(|c| c.starts_with("apt-get")
        || c.starts_with("apt-cache")
        || c.starts_with("dpkg-query")));

    // Once the manager works again, the next run installs.
    std::fs::remove_file(&debs.fail_install).unwrap();
    host.ok(&["update", "--now"]);
    assert_eq!(debs.dpkg_version().as_deref(), Some("1.1.0-1"));
    assert!(host.wait_running("1.1.0"));
}

/// A manager that never returns (a dead mirror, a lock held elsewhere) is killed with
/// its whole process group after the command timeout (20 minutes; 2 s here through
/// the test hook), and the run fails naming it, the host unchanged.
#[test]
fn a_hung_package_manager_is_killed_and_nothing_changes() {
    let debs = enabled_on_1_0_0();
    let host = &debs.host;
    debs.publish("1.1.0-1", Agent::Good);
    debs.server.set_target("1.1.0", true);
    let hang = debs.fail_install.with_extension("hang");
    std::fs::write(&hang, "").unwrap();
    let out = host
        .cmd(&["update", "--now"])
        .env("TERN_PACKAGE_TIMEOUT_SECS", "2")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("no end after 2s: killed"), "{err}");
    assert!(err.contains("apt-get install"), "{err}");
    assert_eq!(debs.dpkg_version().as_deref(), Some("1.0.0-1"));
    assert_eq!(host.running_version().as_deref(), Some("1.0.0"));
    // The stand-in's `sleep 600` went with its group.
    let tools = hang.parent().unwrap().join("tools");
    let left = std::process::Command::new("pgrep")
        .args(["-f", &format!("{}/apt-get install", tools.display())])
        .output()
        .unwrap();
    assert!(
        left.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&left.stdout)
    );
    std::fs::remove_file(&hang).unwrap();
    host.ok(&["update", "--now"]);
    assert_eq!(debs.dpkg_version().as_deref(), Some("1.1.0-1"));
}

#[test]
fn a_run_killed_after_the_install_is_reverted_by_the_next() {
    let debs = enabled_on_1_0_0();
    let host = &debs.host;
    debs.publish("1.1.0-1", Agent::Good);
    debs.server.set_target("1.1.0", true);
    let out = host
        .cmd(&["update", "--now"])
        .env("TERN_UPDATE_KILL_AT", "package_installed")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), None, "killed by the test hook");
    assert_eq!(debs.dpkg_version().as_deref(), Some("1.1.0-1"));
    assert!(host.update_yaml().status.in_progress.is_some());
    let installs = debs.installs().len();

    // The next run reverts to 1.0.0 through apt first, then updates again.
    host.ok(&["update"]);
    let after: Vec<String> = debs.installs()[installs..].to_vec();
    assert_eq!(after.len(), 2, "{after:?}");
    assert!(after[0].ends_with(" tern-test-agent=1.0.0-1"), "{after:?}");
    assert!(after[1].ends_with(" tern-test-agent=1.1.0-1"), "{after:?}");
    assert_eq!(debs.dpkg_version().as_deref(), Some("1.1.0-1"));
    assert!(host.wait_running("1.1.0"));
    let st = host.update_yaml().status;
    assert_eq!(st.active.as_deref(), Some("1.1.0"));
    assert!(st.in_progress.is_none());
}

#[test]
fn enable_adopts_what_the_package_database_has_and_refuses_a_tarball_host() {
    // The package is already installed (by hand, or by an image): enable takes the
    // database's version as active and does not reinstall it.
    let debs = Debs::new();
    debs.publish("1.1.0-1", Agent::Good);
    let out = Command::new("dpkg")
        .arg(format!("--root={}", debs.root.display()))
        .arg(format!("--log={}/var/log/dpkg.log", debs.root.display()))
        .args(["--force-not-root", "--force-script-chrootless", "-i"])
        .arg(debs.pool.join(format!("{PKG}_1.1.0-1_all.deb")))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    debs.server.set_target("1.1.0", true);
    let out = debs.enable(&[]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(debs.host.active().as_deref(), Some("1.1.0"));
    assert!(debs.installs().is_empty());

    // A later enable without --package keeps package mode.
    let svc = debs.svc.display().to_string();
    debs.host.ok(&[
        "enable",
        "--server",
        &debs.server.url,
        "--service-config",
        &svc,
    ]);
    let package = debs.host.update_yaml().spec.package.unwrap();
    assert_eq!(package.name, PKG);
    assert_eq!(package.manager, tern_update::Manager::Apt);
    assert!(debs.installs().is_empty());

    // uninstall only stops managing the host: the package stays.
    let out = debs.host.ok(&["uninstall"]);
    assert!(out.contains("stays installed"), "{out}");
    assert!(!debs.host.ns().join("update.yaml").exists());
    assert_eq!(debs.dpkg_version().as_deref(), Some("1.1.0-1"));

    // Package mode needs a service config.
    let host = Host::new();
    let out = host.run(&[
        "enable",
        "--server",
        &debs.server.url,
        "--package",
        PKG,
        "--package-manager",
        "apt",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--service-config"));

    // --package and --package-manager go together; tarball flags do not mix with them.
    for args in [
        &["enable", "--server", "http://x", "--package", PKG][..],
        &["enable", "--server", "http://x", "--package-manager", "apt"],
        &[
            "enable",
            "--server",
            "http://x",
            "--package",
            PKG,
            "--package-manager",
            "apt",
            "--base-url",
            "http://y",
        ],
        &[
            "enable",
            "--server",
            "http://x",
            "--package",
            PKG,
            "--package-manager",
            "dnf",
        ],
    ] {
        assert_eq!(host.run(args).status.code(), Some(2), "{args:?}");
    }

    // A host whose agent tern-update installed from a tarball is not moved silently.
    let tarball = Host::new();
    let server = Server::start();
    server.publish(
        "1.0.0",
        &support::tarball(&support::release_files("1.0.0", Agent::Good)),
    );
    server.set_target("1.0.0", true);
    let svc = tarball.service_config("");
    assert_eq!(tarball.enable(&server, &svc, &[]).status.code(), Some(0));
    let svc = svc.display().to_string();
    let err = tarball.fails(&[
        "enable",
        "--server",
        &server.url,
        "--service-config",
        &svc,
        "--package",
        PKG,
        "--package-manager",
        "apt",
    ]);
    assert!(err.contains("installed from a tarball"), "{err}");
    assert!(err.contains("uninstall"), "{err}");
    assert!(tarball.update_yaml().spec.package.is_none());
}

#[test]
fn yum_installs_and_downgrades_with_its_own_pinning() {
    // Stand-ins for yum and rpm: yum "installs" NAME-VERSION by writing the agent and
    // recording the version in a text database that the rpm stand-in reads back.
    let server = Server::start();
    let mut host = Host::new();
    let base = host.dir.path().to_path_buf();
    let (bin, db, log, agents) = (
        base.join("yumroot/usr/bin"),
        base.join("rpmdb"),
        base.join("argv.log"),
        base.join("agents"),
    );
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(&agents).unwrap();
    std::fs::write(&log, "").unwrap();
    for v in ["1.0.0", "1.1.0"] {
        std::fs::write(
            agents.join(format!("{PKG}-{v}")),
            agent_script(v, Agent::Good),
        )
        .unwrap();
    }
    let (b, d, l, a) = (bin.display(), db.display(), log.display(), agents.display());
    write_exe(
        &base.join("yum"),
        &format!(
            r#"#!/bin/sh
printf '%s\n' "yum $*" >> '{l}'
for x in "$@"; do last=$x; done
if [ ! -f '{a}'/"$last" ]; then echo "No package $last available."; echo "Error: Nothing to do" >&2; exit 1; fi
cp '{a}'/"$last" '{b}/{PKG}.new' && chmod 755 '{b}/{PKG}.new' && mv '{b}/{PKG}.new' '{b}/{PKG}'
echo "${{last##*-}}" > '{d}'
"#
        ),
    );
    write_exe(
        &base.join("rpm"),
        &format!(
            "#!/bin/sh\nprintf '%s\\n' \"rpm $*\" >> '{l}'\nif [ -f '{d}' ]; then cat '{d}'; else echo \"package {PKG} is not installed\"; exit 1; fi\n"
        ),
    );
    host.env
        .push(("TERN_YUM".into(), base.join("yum").display().to_string()));
    host.env
        .push(("TERN_RPM".into(), base.join("rpm").display().to_string()));
    let svc = agent_service(&host, &bin.join(PKG)).display().to_string();
    let installs = || -> Vec<String> {
        std::fs::read_to_string(&log)
            .unwrap()
            .lines()
            .filter(|c| c.starts_with("yum "))
            .map(String::from)
            .collect()
    };

    server.set_target("1.1.0", true);
    host.ok(&[
        "enable",
        "--server",
        &server.url,
        "--service-config",
        &svc,
        "--package",
        PKG,
        "--package-manager",
        "yum",
    ]);
    assert!(host.wait_running("1.1.0"));
    assert_eq!(installs(), [format!("yum install -y {PKG}-1.1.0")]);
    assert!(
        std::fs::read_to_string(&log)
            .unwrap()
            .contains(&format!("rpm -q --qf %{{VERSION}}\\n {PKG}"))
    );

    // A lower version is a `yum downgrade`.
    server.set_target("1.0.0", true);
    host.ok(&["update"]);
    assert!(host.wait_running("1.0.0"));
    assert_eq!(installs()[1], format!("yum downgrade -y {PKG}-1.0.0"));
    assert_eq!(host.active().as_deref(), Some("1.0.0"));

    // A version yum cannot take (RPM versions hold no '-') is refused before yum runs.
    server.set_target("2.0.0-rc.1", true);
    let err = host.fails(&["update", "--now"]);
    assert!(err.contains("RPM versions cannot hold '-'"), "{err}");
    assert_eq!(installs().len(), 2);

    // yum failing: the error names it and its output; nothing changes.
    server.set_target("1.2.0", true);
    let err = host.fails(&["update", "--now"]);
    assert!(
        err.contains(&format!("install -y {PKG}-1.2.0 failed with exit status 1")),
        "{err}"
    );
    assert!(err.contains("Error: Nothing to do"), "{err}");
    assert_eq!(host.running_version().as_deref(), Some("1.0.0"));
    assert_eq!(host.active().as_deref(), Some("1.0.0"));
    assert!(!requests(&server).iter().any(|r| r.contains("/artifacts/")));
}

/// A version directive's instruction for the package installer.
fn package_instruction(
    id: &str,
    name: &str,
    version: &str,
) -> tern_core::directive::instruct::InstallInstruction {
    use tern_core::directive::resource::{
        InstallerSpec, InstallerType, PackageInstaller, PackageManager, Target,
    };
    tern_core::directive::instruct::InstallInstruction {
        attempt_id: id.into(),
        installer_name: "apt".into(),
        installer: InstallerSpec {
            installer_type: InstallerType::Package,
            enabled: true,
            local_script: None,
            package: Some(PackageInstaller {
                name: name.into(),
                manager: PackageManager::Apt,
            }),
        },
        target: Target {
            version: version.into(),
            arch: None,
            fips: None,
            size: None,
            sha256: None,
        },
        dry_run: false,
        directive: String::new(),
    }
}

#[test]
fn a_directive_installs_through_the_package_installer_in_package_mode() {
    let debs = enabled_on_1_0_0();
    let host = &debs.host;
    let (_, hb) = debs.server.heartbeats().pop().unwrap();
    assert_eq!(hb.installers, ["package"]);
    debs.publish("1.1.0-1", Agent::Good);

    // Another package than the host's: refused, nothing runs.
    let before = debs.installs().len();
    debs.server
        .queue_install(package_instruction("attempt-other", "other-agent", "1.1.0"));
    host.ok(&["update"]);
    let (_, hb) = debs.server.heartbeats().pop().unwrap();
    let r = hb.install_result.unwrap();
    assert_eq!(r.attempt_id, "attempt-other");
    assert!(!r.success);
    assert!(r.error.contains("other-agent (apt)"), "{}", r.error);
    assert_eq!(debs.installs().len(), before);

    // Its own package: installed through the manager, the agent runs the target.
    debs.server
        .queue_install(package_instruction("attempt-pkg", PKG, "1.1.0"));
    host.ok(&["update"]);
    let (_, hb) = debs.server.heartbeats().pop().unwrap();
    let r = hb.install_result.unwrap();
    assert_eq!(
        (r.attempt_id.as_str(), r.success),
        ("attempt-pkg", true),
        "{}",
        r.error
    );
    assert_eq!(hb.version, "1.1.0");
    assert_eq!(debs.dpkg_version().as_deref(), Some("1.1.0-1"));
    assert!(host.wait_running("1.1.0"));
}
