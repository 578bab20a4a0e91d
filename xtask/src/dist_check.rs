//! The test command's package checks (`cargo xtask dist --check`, run by `cargo xtask
//! ci`): what `dpkg-deb` says is in each package, `lintian`, `shellcheck` over the
//! maintainer scripts, `systemd-analyze verify` of ternd's unit, and the real `dpkg`
//! installing, upgrading and purging the packages in a temporary root, and the
//! installed ternd and tern-lockstep on a real etcd (their etcd backend is shipped).
//!
//! What is real and what stands in: dpkg, its database, the maintainer scripts and
//! `systemd-sysusers` all run for real, on the temporary root (`dpkg --root=ROOT
//! --force-script-chrootless` runs the scripts with `DPKG_ROOT=ROOT`, and they create
//! the ternd user in ROOT/etc/passwd). This machine's systemd is never told: under
//! `DPKG_ROOT` the scripts skip enabling, starting and stopping units, so those lines
//! are not run here (they are the same calls debhelper-made packages use). The root
//! has no libc6 or adduser package in its database, so dependencies are not checked
//! (`--force-depends`). The unit is checked by systemd's own parser, not started: no
//! systemd runs this test.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::deb::{architecture, deb_version};

pub fn run(out: &Path) -> Result<(), String> {
    let arch = architecture()?;
    let version = deb_version();
    let deb = |p: &str| out.join(format!("{p}_{version}_{arch}.deb"));
    let debs = [
        deb("ternd"),
        deb("ternctl"),
        deb("tern-update"),
        deb("tern-lockstep"),
    ];
    contents(&debs)?;
    shellcheck()?;
    lintian(&debs)?;
    let tmp = tempfile::tempdir().map_err(|e| format!("cannot make a temp dir: {e}"))?;
    install(tmp.path(), &debs, &version)?;
    println!(
        "dist check: dpkg-deb, shellcheck, lintian, systemd-analyze, install/upgrade/purge under a temporary root, etcd: ok"
    );
    Ok(())
}

/// Every file of a signed dist checked against its signed metadata as a client would:
/// `tern-release verify` from the first root in `metadata/`, each file by length and
/// sha256 under its name. Then one file changed by a byte must be refused, so that the
/// check is known to check.
pub fn signatures(out: &Path, made: &[PathBuf], tern_release: &Path) -> Result<(), String> {
    let tmp = tempfile::tempdir().map_err(|e| format!("cannot make a temp dir: {e}"))?;
    let metadata = out.join("metadata");
    let verify = |files: &[PathBuf]| {
        let mut cmd = Command::new(tern_release);
        cmd.arg("verify")
            .arg("--root")
            .arg(metadata.join("1.root.json"))
            .arg("--metadata")
            .arg(&metadata)
            .arg("--state")
            .arg(tmp.path().join("trust.json"));
        for f in files {
            cmd.arg("--file").arg(f);
        }
        output(&mut cmd)
    };
    verify(made)?;
    let tampered = tmp.path().join(
        made.first()
            .and_then(|f| f.file_name())
            .ok_or_else(|| fail("nothing was signed"))?,
    );
    let mut bytes =
        std::fs::read(&made[0]).map_err(|e| fail(format!("{}: {e}", made[0].display())))?;
    if let Some(b) = bytes.last_mut() {
        *b ^= 1;
    }
    std::fs::write(&tampered, bytes).map_err(|e| fail(format!("{}: {e}", tampered.display())))?;
    match verify(&[tampered]) {
        Err(e) if e.contains("is not what was signed") => {}
        Err(e) => {
            return Err(fail(format!(
                "a changed file was refused for another reason: {e}"
            )));
        }
        Ok(_) => {
            return Err(fail(
                "a file changed by one byte passed the signature check",
            ));
        }
    }
    println!(
        "dist check: {} files verified against their signed metadata; a changed one refused",
        made.len()
    );
    Ok(())
}

fn fail(what: impl std::fmt::Display) -> String {
    format!("dist check: {what}")
}

fn output(cmd: &mut Command) -> Result<String, String> {
    let shown = format!("{cmd:?}");
    let out = cmd
        .output()
        .map_err(|e| fail(format!("cannot run {shown}: {e}")))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !out.status.success() {
        return Err(fail(format!("{shown} failed ({}):\n{text}", out.status)));
    }
    Ok(text)
}

/// `dpkg-deb --info` and `--contents`: the control fields and the files each package
/// must have.
fn contents(debs: &[PathBuf; 4]) -> Result<(), String> {
    let common = |bin: &str| {
        vec![
            format!("./usr/bin/{bin}"),
            format!("./usr/share/man/man1/{bin}.1.gz"),
            format!("./usr/share/bash-completion/completions/{bin}"),
            format!("./usr/share/zsh/vendor-completions/_{bin}"),
            format!("./usr/share/fish/vendor_completions.d/{bin}.fish"),
        ]
    };
    let mut ternd = common("ternd");
    ternd.extend(
        [
            "./usr/share/man/man1/ternd-start.1.gz",
            "./lib/systemd/system/ternd.service",
            "./etc/default/ternd",
            "./usr/lib/sysusers.d/ternd.conf",
            "./usr/share/doc/ternd/copyright",
        ]
        .map(String::from),
    );
    ternd.push(format!(
        "./usr/lib/tern/downloads/tern-update-linux-{}",
        tern_e2e::release::go_arch()
    ));
    let mut ternctl = common("ternctl");
    ternctl.push("./usr/share/man/man1/ternctl-agents-status.1.gz".into());
    let mut update = common("tern-update");
    update.push("./usr/share/man/man1/tern-update-enable.1.gz".into());
    let mut lockstep = common("tern-lockstep");
    lockstep.push("./usr/share/man/man1/tern-lockstep-worker.1.gz".into());
    for (deb, (package, files)) in debs.iter().zip([
        ("ternd", ternd),
        ("ternctl", ternctl),
        ("tern-update", update),
        ("tern-lockstep", lockstep),
    ]) {
        let info = output(Command::new("dpkg-deb").arg("--info").arg(deb))?;
        for field in [
            format!("Package: {package}"),
            "Depends: libc6 (>= 2.".to_string(),
        ] {
            if !info.contains(&field) {
                return Err(fail(format!("{} lacks {field:?}:\n{info}", deb.display())));
            }
        }
        let scripts: &[&str] = match package {
            "ternd" => &["postinst", "prerm", "postrm", "conffiles"],
            "tern-update" => &["prerm", "postrm"],
            _ => &[],
        };
        for s in scripts {
            if !info.contains(&format!(" {s}")) {
                return Err(fail(format!("{} has no {s}:\n{info}", deb.display())));
            }
        }
        let listing = output(Command::new("dpkg-deb").arg("--contents").arg(deb))?;
        let paths: Vec<&str> = listing
            .lines()
            .filter_map(|l| l.split_whitespace().nth(5))
            .collect();
        for f in &files {
            if !paths.contains(&f.as_str()) {
                return Err(fail(format!("{} lacks {f}:\n{listing}", deb.display())));
            }
        }
        // Owned by root (--root-owner-group), whoever built it.
        if let Some(l) = listing.lines().find(|l| !l.contains(" root/root ")) {
            return Err(fail(format!("{}: not root/root: {l}", deb.display())));
        }
        if package == "tern-update" && paths.iter().any(|p| p.contains("systemd")) {
            return Err(fail(
                "tern-update ships no units (`tern-update setup` writes them)",
            ));
        }
    }
    if !output(
        Command::new("dpkg-deb")
            .args(["--info"])
            .arg(&debs[0])
            .arg("conffiles"),
    )?
    .contains("/etc/default/ternd")
    {
        return Err(fail("ternd's conffiles lack /etc/default/ternd"));
    }
    Ok(())
}

/// shellcheck over the maintainer scripts and the installer ternd serves.
fn shellcheck() -> Result<(), String> {
    let root = crate::root();
    let mut cmd = Command::new("shellcheck");
    cmd.args(["--shell=sh", "--severity=style"]);
    for (package, script) in [
        ("ternd", "postinst"),
        ("ternd", "prerm"),
        ("ternd", "postrm"),
        ("tern-update", "prerm"),
        ("tern-update", "postrm"),
    ] {
        cmd.arg(root.join("packaging/deb").join(package).join(script));
    }
    cmd.arg(root.join("crates/tern-server/src/install.sh"));
    output(&mut cmd).map(drop)
}

/// lintian: no error or warning; overrides are shipped in the packages, each with its
/// reason (`packaging/deb/*/lintian-overrides`).
fn lintian(debs: &[PathBuf; 4]) -> Result<(), String> {
    let text = output(
        Command::new("lintian")
            .args(["--fail-on", "error,warning", "--tag-display-limit", "0"])
            .args(debs),
    )?;
    if !text.trim().is_empty() {
        println!("lintian (info and below):\n{text}");
    }
    Ok(())
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d).map_err(|e| fail(format!("{}: {e}", d.display())))?;
    }
    std::fs::write(path, text).map_err(|e| fail(format!("{}: {e}", path.display())))
}

fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| fail(format!("{}: {e}", path.display())))
}

fn ensure(ok: bool, what: impl FnOnce() -> String) -> Result<(), String> {
    if ok { Ok(()) } else { Err(fail(what())) }
}

/// Install, reinstall, upgrade with a changed conffile, and purge, with the real dpkg on
/// a temporary root.
fn install(tmp: &Path, debs: &[PathBuf; 4], version: &str) -> Result<(), String> {
    let root = tmp.join("root");
    let admin = root.join("var/lib/dpkg");
    for d in ["updates", "info"] {
        std::fs::create_dir_all(admin.join(d)).map_err(|e| fail(e.to_string()))?;
    }
    for f in ["status", "available"] {
        write(&admin.join(f), "")?;
    }
    std::fs::create_dir_all(root.join("var/log")).map_err(|e| fail(e.to_string()))?;
    // The root's account files, as a fresh Debian system has them (root only).
    write(
        &root.join("etc/passwd"),
        "root:x:0:0:root:/root:/bin/bash\n",
    )?;
    write(&root.join("etc/group"), "root:x:0:\n")?;
    write(&root.join("etc/shadow"), "root:*:20000:0:99999:7:::\n")?;
    write(&root.join("etc/gshadow"), "root:*::\n")?;
    let dpkg = |args: &[&str]| {
        let mut cmd = Command::new("dpkg");
        cmd.arg(format!("--root={}", root.display()))
            .arg(format!("--log={}", root.join("var/log/dpkg.log").display()))
            .args([
                "--force-not-root",
                "--force-script-chrootless",
                // The root's database has no libc6 or adduser (see the module doc).
                "--force-depends",
                // As an operator answering "keep your version" to dpkg's question.
                "--force-confold",
            ])
            .args(args)
            // dpkg wants ldconfig and start-stop-daemon on PATH.
            .env(
                "PATH",
                format!(
                    "/usr/local/sbin:/usr/sbin:/sbin:{}",
                    std::env::var("PATH").unwrap_or_default()
                ),
            );
        output(&mut cmd)
    };
    let status = |package: &str| {
        output(
            Command::new("dpkg-query")
                .arg(format!("--admindir={}", admin.display()))
                .args(["-W", "-f=${db:Status-Status} ${Version}", package]),
        )
        .unwrap_or_default()
    };
    let ternd_users = |root: &Path| -> Result<Vec<String>, String> {
        Ok(read(&root.join("etc/passwd"))?
            .lines()
            .filter(|l| l.starts_with("ternd:"))
            .map(String::from)
            .collect())
    };

    // 1. A first install: the files, the user, the conffile.
    let all: Vec<&str> = debs.iter().filter_map(|d| d.to_str()).collect();
    let mut args = vec!["-i"];
    args.extend(&all);
    dpkg(&args)?;
    for p in ["ternd", "ternctl", "tern-update", "tern-lockstep"] {
        let s = status(p);
        ensure(s == format!("installed {version}"), || {
            format!("{p} is {s:?} after dpkg -i")
        })?;
    }
    for f in [
        "usr/bin/ternd",
        "usr/bin/ternctl",
        "usr/bin/tern-update",
        "usr/bin/tern-lockstep",
        "lib/systemd/system/ternd.service",
        "etc/default/ternd",
    ] {
        ensure(root.join(f).is_file(), || format!("{f} was not installed"))?;
    }
    let users = ternd_users(&root)?;
    ensure(
        users.len() == 1
            && users[0].ends_with(":/var/lib/tern:/usr/sbin/nologin")
            && !users[0].starts_with("ternd:x:0:"),
        || format!("postinst should create one ternd system user: {users:?}"),
    )?;
    ensure(
        read(&root.join("etc/group"))?
            .lines()
            .any(|l| l.starts_with("ternd:")),
        || "postinst should create the ternd group".into(),
    )?;
    let out = output(Command::new(root.join("usr/bin/ternctl")).arg("--version"))?;
    ensure(out.contains(env!("CARGO_PKG_VERSION")), || {
        format!("the installed ternctl says {out:?}")
    })?;

    // 2. The unit, through systemd's own parser. The installed unit names
    //    /usr/bin/ternd, which verify wants to find executable: the copy checked names
    //    the installed binary in the temporary root instead (that line only). verify
    //    exits 0 on a bad value (it warns and ignores it), so any output fails.
    let unit = root.join("lib/systemd/system/ternd.service");
    let unit_text = read(&unit)?;
    let checked = tmp.join("verify/ternd.service");
    write(
        &checked,
        &unit_text.replace(
            "ExecStart=/usr/bin/ternd ",
            &format!("ExecStart={} ", root.join("usr/bin/ternd").display()),
        ),
    )?;
    let said = output(
        Command::new("systemd-analyze")
            .args(["verify", "--man=no"])
            .arg(&checked),
    )?;
    ensure(said.trim().is_empty(), || {
        format!("systemd-analyze verify ternd.service:\n{said}")
    })?;
    for line in [
        "User=ternd",
        "StateDirectory=tern",
        "ProtectSystem=strict",
        "NoNewPrivileges=yes",
        "PrivateTmp=yes",
        "ProtectHome=yes",
        "ExecStart=/usr/bin/ternd start --data-dir /var/lib/tern $TERND_OPTS",
    ] {
        ensure(unit_text.lines().any(|l| l == line), || {
            format!("ternd.service lacks {line}")
        })?;
    }

    // 2b. The unit's command line with the packaged /etc/default/ternd, as systemd would
    //     run it (TERND_OPTS split on whitespace), from the installed binary and with
    //     the state dir in the temporary root: ternd starts and serves. Stand-ins: no
    //     ternd user or sandbox (no systemd here), and port 0 instead of 3025 (the
    //     machine's port may be taken).
    started(&root, &unit_text)?;

    // 2c. The installed ternd and tern-lockstep have their etcd backend: both run on a
    //     real etcd member (one, on loopback ports picked now).
    on_etcd(tmp, &root)?;

    // 3. The operator edits the conffile; a reinstall keeps it and makes no second user.
    let default = root.join("etc/default/ternd");
    let operator = "TERND_OPTS=\"--listen 0.0.0.0:3025 --tls-cert /etc/tern/c.pem --tls-key /etc/tern/k.pem\"\n";
    write(&default, operator)?;
    dpkg(&["-i", all[0]])?;
    ensure(read(&default)? == operator, || {
        "a reinstall changed the operator's /etc/default/ternd".into()
    })?;
    ensure(ternd_users(&root)?.len() == 1, || {
        "postinst run again made a second ternd user".into()
    })?;

    // 4. An upgrade whose conffile changed: the operator's stays, the package's new one
    //    is put beside it.
    let unpacked = tmp.join("next");
    output(
        Command::new("dpkg-deb")
            .arg("-R")
            .arg(all[0])
            .arg(&unpacked),
    )?;
    let next = format!("{}-2", env!("CARGO_PKG_VERSION"));
    let control = unpacked.join("DEBIAN/control");
    write(
        &control,
        &read(&control)?.replace(&format!("Version: {version}"), &format!("Version: {next}")),
    )?;
    let shipped = unpacked.join("etc/default/ternd");
    write(
        &shipped,
        &format!("{}# changed in {next}\n", read(&shipped)?),
    )?;
    let next_deb = tmp.join("ternd-next.deb");
    output(
        Command::new("dpkg-deb")
            .args(["--build", "--root-owner-group"])
            .arg(&unpacked)
            .arg(&next_deb),
    )?;
    dpkg(&["-i", &next_deb.display().to_string()])?;
    ensure(status("ternd") == format!("installed {next}"), || {
        format!("the upgrade left ternd {}", status("ternd"))
    })?;
    ensure(read(&default)? == operator, || {
        "an upgrade overwrote the operator's /etc/default/ternd".into()
    })?;
    let dist = root.join("etc/default/ternd.dpkg-dist");
    ensure(
        read(&dist).is_ok_and(|t| t.contains(&format!("# changed in {next}"))),
        || "the upgrade's new /etc/default/ternd should be kept as .dpkg-dist".into(),
    )?;

    // 5. tern-update's purge deletes the units `tern-update setup` wrote, and nothing
    //    else. They are written by the installed binary itself (systemctl stands in:
    //    this machine's systemd is not told).
    let systemd = root.join("etc/systemd/system");
    let mut setup = Command::new(root.join("usr/bin/tern-update"));
    setup
        .arg("--install-dir")
        .arg(root.join("opt/tern"))
        .arg("--systemd-dir")
        .arg(&systemd)
        .arg("--link-dir")
        .arg(root.join("usr/local/bin"))
        .arg("--unit-dir")
        .arg(root.join("usr/local/lib/systemd/system"))
        .args(["setup", "--agent-unit", "agent", "--watch"])
        .env("TERN_SYSTEMCTL", "true");
    output(&mut setup)?;
    let ours = [
        systemd.join("tern-update.service"),
        systemd.join("tern-update.timer"),
        systemd.join("tern-update-watch.service"),
        systemd.join("agent.service.d/tern-update.conf"),
    ];
    for f in &ours {
        ensure(f.is_file(), || {
            format!("setup did not write {}", f.display())
        })?;
    }
    let theirs = systemd.join("tern-update-notes.timer");
    write(
        &theirs,
        "# the operator's own unit\n[Timer]\nOnCalendar=daily\n",
    )?;
    dpkg(&["--purge", "tern-update"])?;
    ensure(!root.join("usr/bin/tern-update").exists(), || {
        "purge left /usr/bin/tern-update".into()
    })?;
    for f in &ours {
        ensure(!f.exists(), || {
            format!("the purge left {} (setup wrote it)", f.display())
        })?;
    }
    ensure(theirs.is_file(), || {
        "the purge removed an operator's own unit".into()
    })?;

    // 6. ternd's purge: the conffile goes, the fleet's store and the user stay.
    let store = root.join("var/lib/tern/tern.db");
    write(&store, "the fleet")?;
    dpkg(&["--purge", "ternd"])?;
    ensure(
        status("ternd").is_empty() || status("ternd").starts_with("not-installed"),
        || format!("ternd after purge: {}", status("ternd")),
    )?;
    ensure(!default.exists() && !unit.exists(), || {
        "the purge left /etc/default/ternd or the unit".into()
    })?;
    ensure(store.is_file() && ternd_users(&root)?.len() == 1, || {
        "the purge removed /var/lib/tern or the ternd user".into()
    })?;
    dpkg(&["--remove", "ternctl", "tern-lockstep"])?;
    ensure(!root.join("usr/bin/tern-lockstep").exists(), || {
        "remove left /usr/bin/tern-lockstep".into()
    })?;
    ensure(!root.join("usr/bin/ternctl").exists(), || {
        "remove left /usr/bin/ternctl".into()
    })?;
    Ok(())
}

/// Runs ternd as the unit's `ExecStart=` would with the packaged defaults; waits for it
/// to listen, then stops it.
fn started(root: &Path, unit: &str) -> Result<(), String> {
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .ok_or_else(|| fail("ternd.service has no ExecStart="))?;
    let opts = output(Command::new("sh").arg("-c").arg(format!(
        ". '{}'; printf '%s' \"$TERND_OPTS\"",
        root.join("etc/default/ternd").display()
    )))?;
    let line = exec.replace("$TERND_OPTS", &opts);
    let mut words = line.split_whitespace().map(|w| match w {
        "/usr/bin/ternd" => root.join("usr/bin/ternd").display().to_string(),
        "/var/lib/tern" => root.join("var/lib/tern").display().to_string(),
        "127.0.0.1:3025" => "127.0.0.1:0".to_string(),
        w => w.to_string(),
    });
    let program = words.next().ok_or_else(|| fail("ExecStart= is empty"))?;
    // Also serving the installer from the packaged binaries: a file named for another
    // architecture than install.sh asks for makes ternd refuse to start.
    let mut cmd = Command::new(&program);
    cmd.args(words)
        .arg("--downloads-dir")
        .arg(root.join("usr/lib/tern/downloads"));
    let addr = listening(cmd)?.ok_or_else(|| {
        fail(format!(
            "ternd started as the unit says ({line}) did not listen"
        ))
    })?;
    ensure(addr.starts_with("http://127.0.0.1:"), || {
        format!("the packaged default should listen on loopback only, not {addr}")
    })?;
    for f in ["tern.db", "operator.token"] {
        ensure(root.join("var/lib/tern").join(f).is_file(), || {
            format!("ternd did not write /var/lib/tern/{f}")
        })?;
    }
    Ok(())
}

/// Runs ternd as `cmd` says until it prints the address it listens on (within a
/// minute), then stops it; the address, or `None` when it did not listen.
fn listening(mut cmd: Command) -> Result<Option<String>, String> {
    use std::io::BufRead;
    let mut child = cmd
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| fail(format!("cannot run {cmd:?}: {e}")))?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| fail("ternd has no stdout"))?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(l);
        }
    });
    let mut listening = None;
    while let Ok(l) = rx.recv_timeout(std::time::Duration::from_secs(60)) {
        if let Some(addr) = l.strip_prefix("ternd listening on ") {
            listening = Some(addr.to_string());
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    Ok(listening)
}

/// One etcd member on free loopback ports, killed on drop.
struct Etcd {
    child: std::process::Child,
    url: String,
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Etcd {
    /// Starts a member with its data in `dir`; returns once `/health` says so (within
    /// 30 s).
    fn start(dir: &Path) -> Result<Self, String> {
        let ports: Vec<std::net::TcpListener> = (0..2)
            .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
            .collect::<Result<_, _>>()
            .map_err(|e| fail(format!("cannot pick loopback ports: {e}")))?;
        let port = |i: usize| ports[i].local_addr().map(|a| a.port()).unwrap_or(0);
        let (client, peer) = (
            format!("http://127.0.0.1:{}", port(0)),
            format!("http://127.0.0.1:{}", port(1)),
        );
        drop(ports);
        let log = std::fs::File::create(dir.join("etcd.log"))
            .map_err(|e| fail(format!("{}: {e}", dir.display())))?;
        let child = Command::new("etcd")
            .arg("--data-dir")
            .arg(dir.join("etcd"))
            .args([
                "--listen-client-urls",
                &client,
                "--advertise-client-urls",
                &client,
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
            ])
            .args(["--initial-cluster", &format!("default={peer}")])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| {
                fail(format!(
                    "cannot run etcd (apt-get install etcd-server): {e}"
                ))
            })?;
        let etcd = Etcd { child, url: client };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let health = Command::new("curl")
                .args(["-fsS", "--max-time", "2", &format!("{}/health", etcd.url)])
                .output();
            if health.is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("\"true\"")) {
                return Ok(etcd);
            }
            if std::time::Instant::now() > deadline {
                return Err(fail(format!(
                    "etcd did not answer at {} within 30 s: {}",
                    etcd.url,
                    read(&dir.join("etcd.log")).unwrap_or_default()
                )));
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
}

/// The installed tern-lockstep registers a server with its own etcd user on a real
/// etcd (and lists it back), and the installed ternd serves from it: a build without
/// the etcd backend refuses `etcd:` at once, saying so.
fn on_etcd(tmp: &Path, root: &Path) -> Result<(), String> {
    let dir = tmp.join("etcd-check");
    std::fs::create_dir_all(&dir).map_err(|e| fail(format!("{}: {e}", dir.display())))?;
    let etcd = Etcd::start(&dir)?;
    let store = format!("etcd:{}", etcd.url);
    let lockstep = |args: &[&str]| {
        // It waits for an etcd that does not answer: a minute at most.
        let mut cmd = Command::new("timeout");
        cmd.arg("60")
            .arg(root.join("usr/bin/tern-lockstep"))
            .args(["--store", &store])
            .args(args);
        output(&mut cmd)
    };
    let credentials = dir.join("server-1.json");
    lockstep(&[
        "servers",
        "add",
        "1",
        "--credentials-out",
        &credentials.display().to_string(),
    ])?;
    let listed = lockstep(&["servers", "ls"])?;
    ensure(
        listed.lines().any(|l| l.split('\t').next() == Some("1")),
        || format!("the installed tern-lockstep on etcd lists no server 1: {listed}"),
    )?;
    ensure(read(&credentials)?.contains("lockstep-server-1"), || {
        "servers add on etcd gave server 1 no etcd user in its credentials".into()
    })?;
    let mut ternd = Command::new(root.join("usr/bin/ternd"));
    ternd
        .args(["start", "--listen", "127.0.0.1:0", "--insecure-http"])
        .args(["--backend", &store, "--data-dir"])
        .arg(dir.join("ternd"));
    ensure(listening(ternd)?.is_some(), || {
        format!(
            "the installed ternd did not serve from etcd at {}",
            etcd.url
        )
    })?;
    Ok(())
}
