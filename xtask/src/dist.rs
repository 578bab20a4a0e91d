//! `cargo xtask dist`: the release binaries, a `.deb` for each of ternd, ternctl,
//! tern-update and tern-lockstep, a release tarball, the raw tern-update binary that ternd's one-line
//! installer serves, and `SHA256SUMS` over all of them (docs/install.md). With `--sign`,
//! every one of those files is also signed as a target of a TUF repository by
//! `tern-release`, and the signed metadata is copied next to them (`metadata/`).
//!
//! The packages are built here from a staged tree with `dpkg-deb --build
//! --root-owner-group` rather than with cargo-deb: dpkg-deb is on every Debian
//! machine, so CI installs nothing to build them, and the tree is plain files that
//! `check` (the test command's package checks) can reason about.
//!
//! `--debug` packages the debug binaries already built (by CI's test run, with the test
//! features) instead of building release ones: the package checks test the packaging,
//! not the optimiser, and a release build would add most of CI's time. Those packages
//! are for checking only; they are stripped like release binaries so that lintian sees
//! what a release package holds.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::deb::{architecture, deb_version};
use crate::{cargo, root, run as run_cmd};

/// (package, binary, one-line description) of every package.
const PACKAGES: &[(&str, &str, &str)] = &[
    (
        "ternd",
        "ternd",
        "Tern control plane: rollouts, find, heartbeats, admin API",
    ),
    (
        "ternctl",
        "ternctl",
        "Tern admin CLI and offline rollout planner",
    ),
    (
        "tern-update",
        "tern-update",
        "Tern host updater: installs, switches and rolls back an agent",
    ),
    (
        "tern-lockstep",
        "tern-lockstep",
        "Tern lock-step updates of a server cluster, on etcd or SQLite",
    ),
];

/// The cargo packages of the binaries.
const CARGO_PACKAGES: &[&str] = &["tern-server", "tern-ctl", "tern-update", "tern-lockstep"];

/// The features the shipped binaries are built with: the etcd backend of ternd (its
/// replicas share an etcd cluster, docs/ha.md) and of tern-lockstep (docs/lockstep.md).
/// CI's test build has them too, so `--debug` packages carry them as well.
pub(crate) const SHIPPED_FEATURES: &str = "tern-server/etcd,tern-lockstep/etcd";

const USAGE: &str = "usage: cargo xtask dist [--debug] [--out DIR] [--check] [--sign REPO --key KEY...]\n  --debug  package the debug binaries of the test build (for the package checks only)\n  --out    where the packages go (default target/dist)\n  --check  then check them: dpkg-deb, lintian, an install under a temporary root, and\n           with --sign each file against the signed metadata\n  --sign   sign every file as a target of this tern-release repository and copy its\n           metadata to DIR/metadata\n  --key    a key file for --sign: a threshold of the targets, snapshot and timestamp keys";

#[derive(Debug, PartialEq, Eq)]
struct Args {
    debug: bool,
    out: PathBuf,
    check: bool,
    sign: Option<Signing>,
}

/// `--sign REPO --key KEY…`: the tern-release repository and the keys that sign in it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Signing {
    pub(crate) repo: PathBuf,
    pub(crate) keys: Vec<PathBuf>,
}

fn parse(args: &[String]) -> Result<Args, String> {
    let mut a = Args {
        debug: false,
        out: root().join("target").join("dist"),
        check: false,
        sign: None,
    };
    let (mut repo, mut keys) = (None, Vec::new());
    let mut it = args.iter();
    let path = |it: &mut std::slice::Iter<'_, String>| {
        let p = it.next().filter(|d| !d.is_empty()).ok_or(USAGE)?;
        std::path::absolute(p).map_err(|e| format!("{p}: {e}"))
    };
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--debug" => a.debug = true,
            "--check" => a.check = true,
            "--out" => a.out = path(&mut it)?,
            "--sign" => repo = Some(path(&mut it)?),
            "--key" => keys.push(path(&mut it)?),
            _ => return Err(USAGE.to_string()),
        }
    }
    a.sign = match (repo, keys.is_empty()) {
        (Some(repo), false) => Some(Signing { repo, keys }),
        (None, true) => None,
        (Some(_), true) => return Err(format!("--sign needs its keys (--key)\n{USAGE}")),
        (None, false) => return Err(format!("--key is for --sign REPO\n{USAGE}")),
    };
    Ok(a)
}

pub fn run(args: &[String]) -> Result<(), String> {
    let args = parse(args)?;
    let started = std::time::Instant::now();
    let built = build(&args)?;
    println!(
        "dist: {} files in {} ({:.1}s)",
        built.len(),
        args.out.display(),
        started.elapsed().as_secs_f64()
    );
    for f in &built {
        println!("  {}", f.display());
    }
    if args.check {
        let started = std::time::Instant::now();
        crate::dist_check::run(&args.out)?;
        if args.sign.is_some() {
            crate::dist_check::signatures(&args.out, &built, &tern_release(args.debug))?;
        }
        println!(
            "dist: packages checked ({:.1}s)",
            started.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

/// Builds everything into `args.out` (emptied first); returns the files made.
fn build(args: &Args) -> Result<Vec<PathBuf>, String> {
    let bins = binaries(args.debug, args.sign.is_some())?;
    let arch = architecture()?;
    let version = deb_version();
    let out = &args.out;
    if out.exists() {
        // Only a directory an earlier run made (or an empty one) is emptied: `--out .`
        // must never delete a workspace.
        let empty = std::fs::read_dir(out)
            .map_err(|e| format!("cannot read {}: {e}", out.display()))?
            .next()
            .is_none();
        if !empty && !out.join("SHA256SUMS").is_file() {
            return Err(format!(
                "--out {} holds other files (no SHA256SUMS of an earlier dist): give an empty or new directory",
                out.display()
            ));
        }
        std::fs::remove_dir_all(out).map_err(|e| format!("cannot empty {}: {e}", out.display()))?;
    }
    let go_arch = tern_e2e::release::go_arch();
    let stage = out.join("stage");
    mkdir(&stage)?;
    let mut made = Vec::new();
    for &(package, bin, summary) in PACKAGES {
        let tree = stage.join(package);
        stage_package(&tree, &bins, package, bin, summary, &version, &arch)?;
        let deb = out.join(format!("{package}_{version}_{arch}.deb"));
        let mut cmd = Command::new("dpkg-deb");
        cmd.args(["--build", "--root-owner-group", "-Zxz"])
            .arg(&tree)
            .arg(&deb);
        run_quiet(cmd)?;
        made.push(deb);
    }
    made.push(tarball(out, &stage, &version, go_arch)?);
    // What `ternd --downloads-dir` serves to the one-line installer.
    let downloads = out.join("downloads");
    mkdir(&downloads)?;
    let raw = downloads.join(format!("tern-update-linux-{go_arch}"));
    copy_exe(&stage.join("tern-update/usr/bin/tern-update"), &raw)?;
    made.push(raw);
    std::fs::remove_dir_all(&stage).map_err(|e| format!("{}: {e}", stage.display()))?;
    made.push(checksums(out, &made)?);
    if let Some(s) = &args.sign {
        sign(out, &made, s, &bins.path("tern-release"), go_arch)?;
    }
    Ok(made)
}

/// The tern-release binary `binaries` found or built.
fn tern_release(debug: bool) -> PathBuf {
    let profile = if debug { "debug" } else { "release" };
    crate::target_dir().join(profile).join("tern-release")
}

/// Where the binaries to package are.
struct Binaries {
    dir: PathBuf,
    /// tern-update's directory: the `updater` profile's (small, see the workspace's
    /// Cargo.toml) for release packages.
    updater_dir: PathBuf,
}

impl Binaries {
    /// The directory holding `bin` (its man pages are written by running it there).
    fn dir_of(&self, bin: &str) -> &Path {
        if bin == "tern-update" {
            &self.updater_dir
        } else {
            &self.dir
        }
    }

    fn path(&self, bin: &str) -> PathBuf {
        self.dir_of(bin).join(bin)
    }
}

/// The binaries to package (and tern-release when `signing`): release ones built now,
/// or with `debug` the debug ones as they are (`cargo xtask ci` has just built them,
/// with its features; building here without those features would rebuild the
/// workspace).
fn binaries(debug: bool, signing: bool) -> Result<Binaries, String> {
    let needed = PACKAGES
        .iter()
        .map(|&(_, bin, _)| bin)
        .chain(signing.then_some("tern-release"));
    if debug {
        let dir = crate::target_dir().join("debug");
        for bin in needed {
            if !dir.join(bin).is_file() {
                return Err(format!(
                    "{} lacks {bin}: build the binaries first (cargo build -p tern-server -p tern-ctl -p tern-update -p tern-lockstep --bins --features {SHIPPED_FEATURES}, or let `cargo xtask ci` do it)",
                    dir.display()
                ));
            }
        }
        return Ok(Binaries {
            updater_dir: dir.clone(),
            dir,
        });
    }
    let mut build = cargo();
    build.args(["build", "--quiet", "--release", "--bins"]);
    for p in CARGO_PACKAGES {
        build.args(["-p", p]);
    }
    build.args(["--features", SHIPPED_FEATURES]);
    if signing {
        build.args(["-p", "tern-release"]);
    }
    run_cmd(build)?;
    let mut updater = cargo();
    updater.args([
        "build",
        "--quiet",
        "--profile",
        "updater",
        "-p",
        "tern-update",
        "--bin",
        "tern-update",
    ]);
    run_cmd(updater)?;
    Ok(Binaries {
        dir: crate::target_dir().join("release"),
        updater_dir: crate::target_dir().join("updater"),
    })
}

fn mkdir(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))
}

fn write(path: &Path, content: &[u8], mode: u32) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(dir) = path.parent() {
        mkdir(dir)?;
    }
    std::fs::write(path, content).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| format!("cannot chmod {}: {e}", path.display()))
}

/// Copies an executable, stripped (release binaries are stripped already; the debug
/// ones of `--debug` are not).
fn copy_exe(from: &Path, to: &Path) -> Result<(), String> {
    if let Some(dir) = to.parent() {
        mkdir(dir)?;
    }
    let mut strip = Command::new("strip");
    strip
        .args(["--strip-unneeded", "--remove-section=.comment", "-o"])
        .arg(to)
        .arg(from);
    run_quiet(strip)?;
    set_mode(to, 0o755)
}

fn set_mode(path: &Path, mode: u32) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| format!("cannot chmod {}: {e}", path.display()))
}

/// Runs `cmd`; on failure the error carries its output.
fn run_quiet(mut cmd: Command) -> Result<(), String> {
    let shown = format!("{cmd:?}");
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run {shown}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{shown} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

fn output(mut cmd: Command) -> Result<Vec<u8>, String> {
    let shown = format!("{cmd:?}");
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run {shown}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{shown} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(out.stdout)
}

/// The files of `packaging/deb/<package>/`.
fn packaging(package: &str, file: &str) -> PathBuf {
    root().join("packaging/deb").join(package).join(file)
}

fn read(path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

/// Stages one package's tree: binary, man pages, completions, docs, the unit and
/// maintainer scripts of `packaging/deb/<package>/`, and DEBIAN/.
fn stage_package(
    tree: &Path,
    bins: &Binaries,
    package: &str,
    bin: &str,
    summary: &str,
    version: &str,
    arch: &str,
) -> Result<(), String> {
    let exe = tree.join("usr/bin").join(bin);
    copy_exe(&bins.path(bin), &exe)?;

    // Man pages, as the binary itself writes them, compressed as Debian wants.
    let man = tree.join("usr/share/man/man1");
    mkdir(&man)?;
    crate::man::write_pages(bins.dir_of(bin), &[bin], &man)?;
    let mut gzip = Command::new("gzip");
    gzip.args(["-9n", "--"]);
    for page in std::fs::read_dir(&man).map_err(|e| format!("{}: {e}", man.display()))? {
        let page = page.map_err(|e| format!("{}: {e}", man.display()))?.path();
        set_mode(&page, 0o644)?;
        gzip.arg(page);
    }
    run_quiet(gzip)?;

    // Completions where each shell's system-wide loader looks.
    for (shell, path) in [
        (
            "bash",
            format!("usr/share/bash-completion/completions/{bin}"),
        ),
        ("zsh", format!("usr/share/zsh/vendor-completions/_{bin}")),
        (
            "fish",
            format!("usr/share/fish/vendor_completions.d/{bin}.fish"),
        ),
    ] {
        let mut cmd = Command::new(bins.path(bin));
        cmd.args(["completion", shell]);
        write(&tree.join(path), &output(cmd)?, 0o644)?;
    }

    let doc = tree.join("usr/share/doc").join(package);
    write(&doc.join("copyright"), copyright().as_bytes(), 0o644)?;
    write(
        &doc.join("changelog.Debian.gz"),
        &gzipped(&changelog(package, version))?,
        0o644,
    )?;
    let overrides = packaging(package, "lintian-overrides");
    if overrides.exists() {
        write(
            &tree.join("usr/share/lintian/overrides").join(package),
            &read(&overrides)?,
            0o644,
        )?;
    }

    let mut conffiles = Vec::new();
    if package == "ternd" {
        write(
            &tree.join("lib/systemd/system/ternd.service"),
            &read(&packaging(package, "ternd.service"))?,
            0o644,
        )?;
        write(
            &tree.join("usr/lib/sysusers.d/ternd.conf"),
            &read(&packaging(package, "sysusers.conf"))?,
            0o644,
        )?;
        write(
            &tree.join("etc/default/ternd"),
            &read(&packaging(package, "default"))?,
            0o644,
        )?;
        conffiles.push("/etc/default/ternd");
        // The installer's binary for this architecture, so that `--downloads-dir
        // /usr/lib/tern/downloads` serves the one-liner with nothing else to copy.
        copy_exe(
            &bins.path("tern-update"),
            &tree.join(format!(
                "usr/lib/tern/downloads/tern-update-linux-{}",
                tern_e2e::release::go_arch()
            )),
        )?;
    }
    let debian = tree.join("DEBIAN");
    mkdir(&debian)?;
    for script in ["preinst", "postinst", "prerm", "postrm"] {
        let from = packaging(package, script);
        if from.exists() {
            write(&debian.join(script), &read(&from)?, 0o755)?;
        }
    }
    if !conffiles.is_empty() {
        let list: String = conffiles.iter().map(|c| format!("{c}\n")).collect();
        write(&debian.join("conffiles"), list.as_bytes(), 0o644)?;
    }
    let control = control(package, summary, version, arch, &exe, tree)?;
    write(&debian.join("control"), control.as_bytes(), 0o644)?;
    // dpkg-deb takes the modes as they are: every directory 0755.
    dirs_0755(tree)
}

fn dirs_0755(dir: &Path) -> Result<(), String> {
    set_mode(dir, 0o755)?;
    for entry in std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))? {
        let entry = entry.map_err(|e| format!("{}: {e}", dir.display()))?;
        if entry.file_type().map_err(|e| e.to_string())?.is_dir() {
            dirs_0755(&entry.path())?;
        }
    }
    Ok(())
}

fn control(
    package: &str,
    summary: &str,
    version: &str,
    arch: &str,
    exe: &Path,
    tree: &Path,
) -> Result<String, String> {
    let libc = glibc_needed(&read(exe)?);
    let mut depends = vec![match libc {
        Some((major, minor)) => format!("libc6 (>= {major}.{minor})"),
        None => "libc6".to_string(),
    }];
    if package == "ternd" {
        // postinst: systemd-sysusers when there, else adduser; the unit's helpers.
        depends.push("adduser".into());
        depends.push("init-system-helpers (>= 1.52)".into());
    }
    let long = match package {
        "ternd" => {
            " ternd stores the rollout resources, reconciles the rollout, answers every\n host's find, takes heartbeats and serves the admin API and metrics. This\n package runs it as the ternd user under systemd, with its store in\n /var/lib/tern; its flags are in /etc/default/ternd."
        }
        "ternctl" => {
            " ternctl drives ternd's admin API (status, transitions, tokens, inventory)\n and plans rollouts offline with the same logic ternd runs."
        }
        "tern-lockstep" => {
            " tern-lockstep updates a few servers that must pass each step of an update\n together: its updater follows a release source and writes the update, its\n worker on each server installs it and runs each step once every server\n reached it. They share an etcd cluster (with a user per server) or an\n SQLite file."
        }
        _ => {
            " tern-update runs as root on every host: it asks ternd which version to run,\n installs versions side by side, switches atomically, watches the agent and\n rolls back on its own. `tern-update enable` enrolls the host and\n `tern-update setup` writes its systemd timer."
        }
    };
    Ok(format!(
        "Package: {package}\nVersion: {version}\nArchitecture: {arch}\nMaintainer: Tern developers <tern@example.org>\nInstalled-Size: {size}\nDepends: {depends}\nSection: admin\nPriority: optional\nHomepage: https://github.com/tern-updates/tern\nDescription: {summary}\n{long}\n",
        size = installed_size_kib(tree)?,
        depends = depends.join(", "),
    ))
}

/// The newest `GLIBC_x.y` symbol version a binary names: what its libc6 must provide.
fn glibc_needed(bytes: &[u8]) -> Option<(u32, u32)> {
    let needle = b"GLIBC_";
    let mut best: Option<(u32, u32)> = None;
    let mut i = 0;
    while let Some(pos) = bytes[i..].windows(needle.len()).position(|w| w == needle) {
        let start = i + pos + needle.len();
        let digits = |from: usize| {
            let end = bytes[from..]
                .iter()
                .position(|b| !b.is_ascii_digit())
                .map_or(bytes.len(), |n| from + n);
            let n = std::str::from_utf8(&bytes[from..end])
                .ok()
                .and_then(|s| s.parse::<u32>().ok());
            (n, end)
        };
        if let (Some(major), end) = digits(start)
            && bytes.get(end) == Some(&b'.')
            && let (Some(minor), _) = digits(end + 1)
        {
            best = best.max(Some((major, minor)));
        }
        i = start;
    }
    best
}

fn installed_size_kib(tree: &Path) -> Result<u64, String> {
    fn walk(dir: &Path, total: &mut u64) -> Result<(), String> {
        for entry in std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))? {
            let entry = entry.map_err(|e| e.to_string())?;
            let meta = entry.metadata().map_err(|e| e.to_string())?;
            if meta.is_dir() {
                if entry.file_name() != "DEBIAN" {
                    walk(&entry.path(), total)?;
                }
            } else {
                *total += meta.len().div_ceil(1024);
            }
        }
        Ok(())
    }
    let mut total = 0;
    walk(tree, &mut total)?;
    Ok(total)
}

fn copyright() -> String {
    "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\nUpstream-Name: tern\n\nFiles: *\nCopyright: 2026 Tern developers\nLicense: Apache-2.0\n\nLicense: Apache-2.0\n On Debian systems, the full text of the Apache License, Version 2.0 can be\n found in /usr/share/common-licenses/Apache-2.0.\n".to_string()
}

fn changelog(package: &str, version: &str) -> String {
    format!(
        "{package} ({version}) unstable; urgency=medium\n\n  * Built by `cargo xtask dist` from the Tern workspace.\n\n -- Tern developers <tern@example.org>  Mon, 23 Nov 2026 00:00:00 +0000\n"
    )
}

fn gzipped(text: &str) -> Result<Vec<u8>, String> {
    use std::io::Write;
    let mut child = Command::new("gzip")
        .args(["-9nc"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run gzip: {e}"))?;
    child
        .stdin
        .take()
        .ok_or("gzip has no stdin")?
        .write_all(text.as_bytes())
        .map_err(|e| format!("gzip: {e}"))?;
    let out = child.wait_with_output().map_err(|e| format!("gzip: {e}"))?;
    if !out.status.success() {
        return Err(format!("gzip failed ({})", out.status));
    }
    Ok(out.stdout)
}

/// `tern-VERSION-linux-ARCH.tar.gz`: the four binaries, their man pages and
/// completions, for hosts without dpkg.
fn tarball(out: &Path, stage: &Path, version: &str, arch: &str) -> Result<PathBuf, String> {
    let upstream = env!("CARGO_PKG_VERSION");
    let name = format!("tern-{upstream}-linux-{arch}");
    let top = stage.join(&name);
    for &(package, bin, _) in PACKAGES {
        let tree = stage.join(package);
        copy_exe(&tree.join("usr/bin").join(bin), &top.join("bin").join(bin))?;
        for sub in [
            "usr/share/man/man1",
            "usr/share/bash-completion/completions",
        ] {
            let from = tree.join(sub);
            let to = top.join(sub.strip_prefix("usr/").unwrap_or(sub));
            mkdir(&to)?;
            for f in std::fs::read_dir(&from).map_err(|e| format!("{}: {e}", from.display()))? {
                let f = f.map_err(|e| e.to_string())?;
                std::fs::copy(f.path(), to.join(f.file_name())).map_err(|e| e.to_string())?;
            }
        }
    }
    write(
        &top.join("VERSION"),
        format!("{version}\n").as_bytes(),
        0o644,
    )?;
    let tar = out.join(format!("{name}.tar.gz"));
    let mut cmd = Command::new("tar");
    cmd.args([
        "--sort=name",
        "--owner=0",
        "--group=0",
        "--numeric-owner",
        "-czf",
    ])
    .arg(&tar)
    .arg("-C")
    .arg(stage)
    .arg(&name);
    run_quiet(cmd)?;
    Ok(tar)
}

/// `SHA256SUMS` over `files` (`sha256sum -c SHA256SUMS` in the dist dir checks them).
fn checksums(out: &Path, files: &[PathBuf]) -> Result<PathBuf, String> {
    let mut cmd = Command::new("sha256sum");
    cmd.current_dir(out);
    for f in files {
        cmd.arg(f.strip_prefix(out).unwrap_or(f));
    }
    let sums = output(cmd)?;
    let path = out.join("SHA256SUMS");
    write(&path, &sums, 0o644)?;
    Ok(path)
}

/// Signs every file made (the packages, the tarball, the installer's binary and
/// `SHA256SUMS`) as a target of the repository, in one new targets version, with
/// `tern-release add --manifest`; then copies the repository's metadata to
/// `out/metadata`, what is published with the files (docs/install.md).
fn sign(
    out: &Path,
    made: &[PathBuf],
    s: &Signing,
    tern_release: &Path,
    go_arch: &str,
) -> Result<(), String> {
    let version = env!("CARGO_PKG_VERSION");
    let manifest: String = made
        .iter()
        .map(|f| {
            let rel = f.strip_prefix(out).unwrap_or(f);
            format!("{} {version} {go_arch} tern\n", rel.display())
        })
        .collect();
    let list = out.join(".sign-manifest");
    write(&list, manifest.as_bytes(), 0o644)?;
    let mut cmd = Command::new(tern_release);
    cmd.current_dir(out)
        .arg("add")
        .arg("--repo")
        .arg(&s.repo)
        .arg("--manifest")
        .arg(&list);
    for k in &s.keys {
        cmd.arg("--key").arg(k);
    }
    let signed = run_quiet(cmd);
    std::fs::remove_file(&list).map_err(|e| format!("{}: {e}", list.display()))?;
    signed?;
    let from = s.repo.join("metadata");
    let to = out.join("metadata");
    mkdir(&to)?;
    for entry in std::fs::read_dir(&from).map_err(|e| format!("{}: {e}", from.display()))? {
        let entry = entry.map_err(|e| format!("{}: {e}", from.display()))?;
        let name = entry.file_name();
        if name.to_string_lossy().ends_with(".json") {
            std::fs::copy(entry.path(), to.join(&name))
                .map_err(|e| format!("copying {}: {e}", entry.path().display()))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments() {
        let a = parse(&[]).unwrap();
        assert!(!a.debug && !a.check && a.out.ends_with("target/dist"));
        let a = parse(&[
            "--debug".into(),
            "--out".into(),
            "x/y".into(),
            "--check".into(),
        ])
        .unwrap();
        assert!(a.debug && a.check && a.out.is_absolute() && a.out.ends_with("x/y"));
        for bad in [
            &["--out"][..],
            &["--release"],
            &["--out", ""],
            &["--sign", "repo"],
            &["--key", "k.pk8"],
            &["--sign"],
        ] {
            let bad: Vec<String> = bad.iter().map(ToString::to_string).collect();
            assert!(parse(&bad).unwrap_err().contains("usage"), "{bad:?}");
        }
        let a = parse(&[
            "--sign".into(),
            "repo".into(),
            "--key".into(),
            "t.pk8".into(),
            "--key".into(),
            "s.pk8".into(),
        ])
        .unwrap();
        let s = a.sign.unwrap();
        assert!(s.repo.is_absolute() && s.repo.ends_with("repo"));
        assert_eq!(s.keys.len(), 2);
    }

    #[test]
    fn the_newest_glibc_symbol_version() {
        let bin = b"\0GLIBC_2.2.5\0GLIBC_2.34\0GLIBC_2.17\0GLIBC_PRIVATE\0GLIBC_\0";
        assert_eq!(glibc_needed(bin), Some((2, 34)));
        assert_eq!(glibc_needed(b"no libc here"), None);
    }
}
