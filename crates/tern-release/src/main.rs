//! `tern-release`: the release owners' tool. It holds no keys of its own: every command
//! names the key files it signs with, so the root and targets keys can live on an
//! offline machine or removable media (see docs/security.md).
//!
//! A separate binary, not `ternctl release`: it links tough and its crypto, which ternctl
//! (run by every operator) has no use for, and it belongs on the signing machine only.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, CommandFactory as _, Parser, Subcommand};
use jiff::SignedDuration;
use tern_trust::release::{self, InitSpec, Lifetimes, NewTarget, RoleSpec, Rotation};

#[derive(Parser, Debug)]
#[command(
    name = "tern-release",
    version,
    about = "Sign Tern agent releases (TUF)"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Args, Debug, Clone)]
struct Life {
    /// Days the root metadata stays valid.
    #[arg(long, default_value_t = 365)]
    root_days: u32,
    /// Days the targets metadata stays valid.
    #[arg(long, default_value_t = 90)]
    targets_days: u32,
    /// Days the snapshot metadata stays valid.
    #[arg(long, default_value_t = 7)]
    snapshot_days: u32,
    /// Hours the timestamp stays valid (hosts refuse the repository after it: run
    /// `refresh` more often than this).
    #[arg(long, default_value_t = 24)]
    timestamp_hours: u32,
}

impl Life {
    fn lifetimes(&self) -> Lifetimes {
        let hours = |h: u32| SignedDuration::from_hours(i64::from(h));
        Lifetimes {
            root: hours(self.root_days * 24),
            targets: hours(self.targets_days * 24),
            snapshot: hours(self.snapshot_days * 24),
            timestamp: hours(self.timestamp_hours),
        }
    }
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Create ed25519 key files (PKCS#8, mode 0600); prints each key id.
    Keygen {
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Print the key id of key files.
    KeyId {
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Create a repository: root version 1 and empty signed targets, snapshot and
    /// timestamp in <repo>/metadata.
    Init {
        #[arg(long)]
        repo: PathBuf,
        #[arg(long = "root-key", required = true)]
        root_keys: Vec<PathBuf>,
        #[arg(long, default_value_t = 1)]
        root_threshold: u64,
        #[arg(long = "targets-key", required = true)]
        targets_keys: Vec<PathBuf>,
        #[arg(long, default_value_t = 1)]
        targets_threshold: u64,
        #[arg(long = "snapshot-key", required = true)]
        snapshot_keys: Vec<PathBuf>,
        #[arg(long = "timestamp-key", required = true)]
        timestamp_keys: Vec<PathBuf>,
        #[command(flatten)]
        life: Life,
    },
    /// Sign an agent tarball as a target (its size and sha256, with version, OS, arch
    /// and edition); signs new targets, snapshot and timestamp.
    Add {
        #[arg(long)]
        repo: PathBuf,
        #[arg(long, required_unless_present = "manifest", requires_all = ["version", "arch"])]
        file: Option<PathBuf>,
        #[arg(long)]
        version: Option<String>,
        /// Go's name, as in artifact URLs: amd64, arm64.
        #[arg(long)]
        arch: Option<String>,
        /// Many tarballs signed at once: one per line, `FILE VERSION ARCH [EDITION]`
        /// (OS from --os).
        #[arg(long, conflicts_with = "file")]
        manifest: Option<PathBuf>,
        #[arg(long, default_value = "linux")]
        os: String,
        #[arg(long)]
        edition: Option<String>,
        /// A threshold of the targets, snapshot and timestamp keys.
        #[arg(long = "key", required = true)]
        keys: Vec<PathBuf>,
        #[command(flatten)]
        life: Life,
    },
    /// Sign a container image of the agent (for tern-kube-update): its manifest, whose
    /// sha256 is the image's digest, under `images/REPOSITORY:TAG`; signs as `add`.
    /// Get the manifest with `crane manifest IMAGE` or `docker buildx imagetools
    /// inspect --raw IMAGE`: the bytes the registry serves, unchanged.
    AddImage {
        #[arg(long)]
        repo: PathBuf,
        /// The image's reference, `REPOSITORY:TAG` (e.g. ghcr.io/acme/agent:1.4.0).
        #[arg(long)]
        image: String,
        /// The manifest (or image index) file.
        #[arg(long = "manifest-file")]
        manifest_file: PathBuf,
        /// The agent version the image runs.
        #[arg(long)]
        version: String,
        /// A threshold of the targets, snapshot and timestamp keys.
        #[arg(long = "key", required = true)]
        keys: Vec<PathBuf>,
        #[command(flatten)]
        life: Life,
    },
    /// Remove a target by name; signs as `add`.
    Remove {
        #[arg(long)]
        repo: PathBuf,
        #[arg(long)]
        name: String,
        #[arg(long = "key", required = true)]
        keys: Vec<PathBuf>,
        #[command(flatten)]
        life: Life,
    },
    /// Set or clear the signed minimum version of a release line: hosts with a pinned
    /// root refuse every version of the line below it, whatever ternd names (revoke
    /// known-bad builds). Signs as `add` (targets, snapshot and timestamp keys).
    #[command(group(clap::ArgGroup::new("what").required(true).args(["version", "clear"])))]
    Minimum {
        #[arg(long)]
        repo: PathBuf,
        /// The release line: MAJOR (e.g. 1: every 1.x.y) or MAJOR.MINOR (e.g. 1.4).
        #[arg(long)]
        line: String,
        /// The lowest version of the line hosts may install (it must be of the line).
        #[arg(long)]
        version: Option<String>,
        /// Remove the line's minimum.
        #[arg(long)]
        clear: bool,
        /// A threshold of the targets, snapshot and timestamp keys.
        #[arg(long = "key", required = true)]
        keys: Vec<PathBuf>,
        #[command(flatten)]
        life: Life,
    },
    /// Re-sign snapshot and timestamp with new versions and expiry (the online keys'
    /// routine job; run it well within --timestamp-hours).
    Refresh {
        #[arg(long)]
        repo: PathBuf,
        /// The snapshot and timestamp keys.
        #[arg(long = "key", required = true)]
        keys: Vec<PathBuf>,
        #[command(flatten)]
        life: Life,
    },
    /// Replace keys: writes root version N+1 signed by a threshold of the old and of the
    /// new root keys; when other roles change, re-signs their metadata with the new keys.
    Rotate {
        #[arg(long)]
        repo: PathBuf,
        #[arg(long = "root-key")]
        root_keys: Vec<PathBuf>,
        #[arg(long)]
        root_threshold: Option<u64>,
        #[arg(long = "targets-key")]
        targets_keys: Vec<PathBuf>,
        #[arg(long)]
        targets_threshold: Option<u64>,
        #[arg(long = "snapshot-key")]
        snapshot_keys: Vec<PathBuf>,
        #[arg(long = "timestamp-key")]
        timestamp_keys: Vec<PathBuf>,
        /// Every key the new metadata must be signed with (old and new root keys; new
        /// targets, snapshot and timestamp keys when those change).
        #[arg(long = "sign-key", required = true)]
        sign_keys: Vec<PathBuf>,
        #[command(flatten)]
        life: Life,
    },
    /// Verify a repository as a host would, from a root: prints what it signs and how
    /// long the refresh took (`state` keeps what was trusted between runs, as on a host).
    Verify {
        /// The root to start from (what hosts pin).
        #[arg(long)]
        root: PathBuf,
        /// The metadata directory: a path, file:// or http(s) URL.
        #[arg(long)]
        metadata: String,
        /// The trust state file (created from --root when missing).
        #[arg(long)]
        state: PathBuf,
        /// One JSON line: {"refresh_ms":…,"targets":…,…}.
        #[arg(long)]
        json: bool,
        /// Also check these files against the targets signed under their names (length
        /// and sha256): a downloaded release, e.g. `--file tern_*.deb`. Any file not
        /// signed, or not what was signed, fails the command.
        #[arg(long = "file", value_name = "FILE")]
        files: Vec<PathBuf>,
    },
    /// List the signed targets (what hosts may install).
    List {
        #[arg(long)]
        repo: PathBuf,
    },
    /// Print the shell completion script (see docs/cli.md).
    Completion(tern_cli::CompletionArgs),
}

fn role(keys: Vec<PathBuf>, threshold: Option<u64>) -> Option<RoleSpec> {
    (!keys.is_empty()).then(|| RoleSpec {
        keys,
        threshold: threshold.unwrap_or(1),
    })
}

fn main() -> std::process::ExitCode {
    if let Some(code) = tern_cli::man_pages_if_asked(Cli::command) {
        return code;
    }
    match run(Cli::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tern-release: error: {e:#}");
            std::process::ExitCode::from(1)
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Cmd::Completion(a) => {
            tern_cli::print_completion(Cli::command(), a.shell)
                .context("printing the completion script")?;
        }
        Cmd::Keygen { files } => {
            for f in files {
                let id = release::generate_key(&f)
                    .with_context(|| format!("cannot create the key {}", f.display()))?;
                println!("{id}  {}", f.display());
            }
        }
        Cmd::KeyId { files } => {
            for f in files {
                println!("{}  {}", release::key_id(&f)?, f.display());
            }
        }
        Cmd::Init {
            repo,
            root_keys,
            root_threshold,
            targets_keys,
            targets_threshold,
            snapshot_keys,
            timestamp_keys,
            life,
        } => {
            let spec = InitSpec {
                root: RoleSpec {
                    keys: root_keys,
                    threshold: root_threshold,
                },
                targets: RoleSpec {
                    keys: targets_keys,
                    threshold: targets_threshold,
                },
                snapshot: RoleSpec {
                    keys: snapshot_keys,
                    threshold: 1,
                },
                timestamp: RoleSpec {
                    keys: timestamp_keys,
                    threshold: 1,
                },
                lifetimes: life.lifetimes(),
            };
            let root = release::init(&repo, &spec)
                .with_context(|| format!("cannot create the repository {}", repo.display()))?;
            println!(
                "created {}; give hosts this root: tern-update enable --trust-root {}",
                repo.display(),
                root.display()
            );
        }
        Cmd::Add {
            repo,
            file,
            version,
            arch,
            os,
            edition,
            manifest,
            keys,
            life,
        } => {
            let targets = match (manifest, file, version, arch) {
                (Some(m), ..) => read_manifest(&m, &os)?,
                (None, Some(file), Some(version), Some(arch)) => vec![NewTarget {
                    file,
                    version,
                    os,
                    arch,
                    edition,
                }],
                _ => anyhow::bail!("give --file with --version and --arch, or --manifest"),
            };
            let v = release::add_targets(&repo, &targets, &keys, &life.lifetimes())
                .with_context(|| format!("cannot sign into {}", repo.display()))?;
            for t in &targets {
                println!(
                    "signed {} as {} ({}/{})",
                    t.file.display(),
                    t.version,
                    t.os,
                    t.arch
                );
            }
            println!("targets version {v}");
        }
        Cmd::AddImage {
            repo,
            image,
            manifest_file,
            version,
            keys,
            life,
        } => {
            let new = release::NewImage {
                manifest: manifest_file,
                image,
                version,
            };
            let v =
                release::add_images(&repo, std::slice::from_ref(&new), &keys, &life.lifetimes())
                    .with_context(|| format!("cannot sign into {}", repo.display()))?;
            let name = release::image_target_name(&new.image);
            let digest = release::list(&repo)?
                .into_iter()
                .find(|t| t.name == name)
                .map(|t| t.sha256)
                .context("the signed image is not listed")?;
            println!(
                "signed {} as {} (version {}, digest sha256:{digest})",
                new.manifest.display(),
                new.image,
                new.version
            );
            println!("targets version {v}");
        }
        Cmd::Verify {
            root,
            metadata,
            state,
            json,
            files,
        } => {
            if !state.exists() {
                tern_trust::pin_root(&state, &root)?;
            }
            let url = tern_trust::metadata_url(&metadata)?;
            // file:// is read from disk; http(s) goes over ureq, as ternd fetches it.
            let fetch: Option<std::sync::Arc<dyn tern_trust::Fetch>> =
                if url.starts_with("http://") || url.starts_with("https://") {
                    let agent: ureq::Agent = ureq::Agent::config_builder()
                        .timeout_global(Some(std::time::Duration::from_secs(30)))
                        // 404 must reach tough as a response: it ends the root chain.
                        .http_status_as_error(false)
                        .build()
                        .into();
                    Some(std::sync::Arc::new(tern_trust::UreqFetch(agent)))
                } else {
                    None
                };
            let client = tern_trust::Client::new(&state, &url, fetch)?;
            let start = std::time::Instant::now();
            let v = client.refresh()?;
            let ms = start.elapsed().as_secs_f64() * 1000.0;
            if json {
                // Lines are digits and dots, versions semver: nothing to escape.
                let minimums: Vec<String> = v
                    .minimums
                    .iter()
                    .map(|m| format!("\"{}\":\"{}\"", m.line, m.version))
                    .collect();
                println!(
                    "{{\"refresh_ms\":{ms:.3},\"targets\":{},\"root_version\":{},\"targets_version\":{},\"minimums\":{{{}}}}}",
                    v.targets.len(),
                    v.root_version,
                    v.targets_version,
                    minimums.join(",")
                );
            } else {
                println!(
                    "verified in {ms:.1} ms: root v{}, timestamp v{}, snapshot v{}, targets v{} ({} targets)",
                    v.root_version,
                    v.timestamp_version,
                    v.snapshot_version,
                    v.targets_version,
                    v.targets.len()
                );
                for m in &v.minimums {
                    println!(
                        "release line {}: versions below {} are refused",
                        m.line, m.version
                    );
                }
            }
            for f in &files {
                let t = v.check_file(f)?;
                if !json {
                    println!("{}: signed as {} ({} bytes)", f.display(), t.name, t.length);
                }
            }
        }
        Cmd::Remove {
            repo,
            name,
            keys,
            life,
        } => {
            let v = release::remove_target(&repo, &name, &keys, &life.lifetimes())?;
            println!("removed {name}; targets version {v}");
        }
        Cmd::Minimum {
            repo,
            line,
            version,
            clear: _,
            keys,
            life,
        } => {
            // The group makes --version and --clear exclusive, one required.
            let v =
                release::set_minimum(&repo, &line, version.as_deref(), &keys, &life.lifetimes())
                    .with_context(|| format!("cannot sign into {}", repo.display()))?;
            match version {
                Some(min) => println!(
                    "release line {line}: minimum {min}; hosts with a pinned root refuse older versions of the line"
                ),
                None => println!("release line {line}: minimum cleared"),
            }
            println!("targets version {v}");
        }
        Cmd::Refresh { repo, keys, life } => {
            let v = release::refresh(&repo, &keys, &life.lifetimes())
                .with_context(|| format!("cannot refresh {}", repo.display()))?;
            println!("timestamp version {v}");
        }
        Cmd::Rotate {
            repo,
            root_keys,
            root_threshold,
            targets_keys,
            targets_threshold,
            snapshot_keys,
            timestamp_keys,
            sign_keys,
            life,
        } => {
            let rotation = Rotation {
                root: role(root_keys, root_threshold),
                targets: role(targets_keys, targets_threshold),
                snapshot: role(snapshot_keys, None),
                timestamp: role(timestamp_keys, None),
            };
            let r = release::rotate(&repo, &rotation, &sign_keys, &life.lifetimes())
                .with_context(|| format!("cannot rotate the keys of {}", repo.display()))?;
            println!(
                "root version {} (root keys {})",
                r.root_version,
                r.root_keys.join(", ")
            );
        }
        Cmd::List { repo } => {
            for m in release::minimums(&repo)? {
                println!("minimum\tline {}\t{}", m.line, m.version);
            }
            for t in release::list(&repo)? {
                if let Some(image) = &t.image {
                    println!(
                        "{}\t{}\timage {image}\t{} bytes\tdigest sha256:{}",
                        t.name,
                        t.version.as_deref().unwrap_or("-"),
                        t.length,
                        t.sha256
                    );
                    continue;
                }
                println!(
                    "{}\t{}\t{}/{}\t{}\t{} bytes\tsha256 {}",
                    t.name,
                    t.version.as_deref().unwrap_or("-"),
                    t.os.as_deref().unwrap_or("-"),
                    t.arch.as_deref().unwrap_or("-"),
                    t.edition.as_deref().unwrap_or("-"),
                    t.length,
                    t.sha256
                );
            }
        }
    }
    Ok(())
}

/// `FILE VERSION ARCH [EDITION]` per line; `#` comments and blank lines skipped.
fn read_manifest(path: &std::path::Path, os: &str) -> Result<Vec<NewTarget>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the manifest {}", path.display()))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let w: Vec<&str> = line.split_whitespace().collect();
        let (file, version, arch) = match w.as_slice() {
            [f, v, a] | [f, v, a, _] => (*f, *v, *a),
            _ => anyhow::bail!(
                "{}:{}: expected FILE VERSION ARCH [EDITION], got {line:?}",
                path.display(),
                i + 1
            ),
        };
        out.push(NewTarget {
            file: file.into(),
            version: version.into(),
            os: os.into(),
            arch: arch.into(),
            edition: w.get(3).map(|e| e.to_string()),
        });
    }
    Ok(out)
}
