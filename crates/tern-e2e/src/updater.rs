//! The updater rolled out by Tern (docs/updater.md, "The updater's own rollout"):
//! tern-update releases as tarballs, and hosts whose `updater` namespace manages
//! tern-update itself, each in its own directories, run by whichever tern-update its
//! link names (as a host's timer would).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::Context;

use crate::host::RunOutcome;
use crate::release::go_arch;

/// The tarball name of an updater release, as the hosts' URL template asks for it.
pub fn artifact_name(version: &str) -> String {
    format!(
        "tern-update-v{version}-{}-{}-bin.tar.gz",
        std::env::consts::OS,
        go_arch()
    )
}

/// The URL template hosts are enrolled with: the releases under `artifacts_url`.
pub fn url_template(artifacts_url: &str) -> String {
    format!("{artifacts_url}/tern-update-v{{{{.Version}}}}-{{{{.OS}}}}-{{{{.Arch}}}}-bin.tar.gz")
}

/// Packs `program` as `tern-update-<v>/bin/tern-update` into `dir/<artifact_name>`
/// and writes its `.sha256` beside it.
pub fn publish(dir: &Path, version: &str, program: &[u8]) -> anyhow::Result<PathBuf> {
    crate::release::pack(
        dir,
        &artifact_name(version),
        &[(
            format!("tern-update-{version}/bin/tern-update"),
            program,
            0o755,
        )],
    )
}

/// A release that exits at start, whatever it is asked: it stands in for a tern-update
/// build that panics or cannot load before doing anything (a shell script, since
/// building a second, broken tern-update would cost minutes of compilation).
pub fn broken_program() -> Vec<u8> {
    b"#!/bin/sh\necho 'tern-update: panicked at start (a broken build)' >&2\nexit 101\n".to_vec()
}

/// A hollow release: it answers its self-check as tern-update does and exits 0 for
/// anything else, doing nothing (no heartbeat, no find, no install).
pub fn hollow_program(version: &str) -> Vec<u8> {
    format!(
        "#!/bin/sh\nfor a in \"$@\"; do\n  if [ \"$a\" = self-check ]; then echo 'tern-update {version} self-check ok'; exit 0; fi\ndone\nexit 0\n"
    )
    .into_bytes()
}

/// A release that passes its self-check and fails every other command with an error
/// (exit 1), as a build whose update path panics would.
pub fn failing_program(version: &str) -> Vec<u8> {
    format!(
        "#!/bin/sh\nfor a in \"$@\"; do\n  if [ \"$a\" = self-check ]; then echo 'tern-update {version} self-check ok'; exit 0; fi\ndone\necho 'tern-update: panicked in update (a broken build)' >&2\nexit 1\n"
    )
    .into_bytes()
}

/// A release that passes its self-check and never finishes any other command (a
/// build that hangs on its first request).
pub fn hanging_program(version: &str) -> Vec<u8> {
    format!(
        "#!/bin/sh\nfor a in \"$@\"; do\n  if [ \"$a\" = self-check ]; then echo 'tern-update {version} self-check ok'; exit 0; fi\ndone\nexec sleep 3600\n"
    )
    .into_bytes()
}

/// One host whose `updater` namespace manages tern-update.
pub struct UpdaterHost {
    pub name: String,
    pub group: String,
    pub install: PathBuf,
    /// Where the managed release is linked (`<link>/tern-update`, what the timer runs).
    pub link: PathBuf,
    /// The tern-update the host was given to start with (the package's, an image's).
    pub bootstrap: PathBuf,
}

impl UpdaterHost {
    pub fn new(root: &Path, name: &str, group: &str, bootstrap: &Path) -> anyhow::Result<Self> {
        let dir = root.join(name);
        std::fs::create_dir_all(&dir)?;
        Ok(Self {
            name: name.into(),
            group: group.into(),
            install: dir.join("opt"),
            link: dir.join("sbin"),
            bootstrap: bootstrap.to_path_buf(),
        })
    }

    /// The updater namespace of a host of an agent fleet: the same install dir (its
    /// `default` namespace is the agent's), the updater linked in `<root>/sbin`.
    pub fn beside(host: &crate::host::Host, bootstrap: &Path) -> Self {
        Self {
            name: host.name.clone(),
            group: host.group.clone(),
            install: host.install.clone(),
            link: host.root.join("sbin"),
            bootstrap: bootstrap.to_path_buf(),
        }
    }

    /// What the host's timer runs: the linked release, else the bootstrap binary.
    pub fn program(&self) -> PathBuf {
        let linked = self.link.join("tern-update");
        if linked.exists() {
            linked
        } else {
            self.bootstrap.clone()
        }
    }

    /// `<program> --install-dir … --install-suffix updater --link-dir … ARGS`.
    pub fn run(&self, args: &[&str]) -> anyhow::Result<RunOutcome> {
        self.run_program(&self.program(), args)
    }

    /// The same, run by `program` (e.g. the bootstrap binary, which hands the command
    /// to the managed release).
    pub fn run_program(&self, program: &Path, args: &[&str]) -> anyhow::Result<RunOutcome> {
        let out = Command::new(program)
            .arg("--install-dir")
            .arg(&self.install)
            .args(["--install-suffix", "updater"])
            .arg("--link-dir")
            .arg(&self.link)
            .args(["--insecure", "--http-timeout", "60"])
            .args(args)
            .env_remove("TERN_UPDATE_KILL_AT")
            .env_remove("TERN_UPDATE_REEXECED")
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("{}: cannot run {}", self.name, program.display()))?;
        Ok(RunOutcome {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }

    /// `enable --self-update`: enrolls the namespace and installs its group's release.
    pub fn enable(
        &self,
        server: &str,
        artifacts_url: &str,
        token_file: &Path,
    ) -> anyhow::Result<RunOutcome> {
        self.enable_with(server, artifacts_url, token_file, &[])
    }

    /// [`Self::enable`] with more of `enable`'s flags (e.g. `--trust-root FILE`).
    pub fn enable_with(
        &self,
        server: &str,
        artifacts_url: &str,
        token_file: &Path,
        extra: &[&str],
    ) -> anyhow::Result<RunOutcome> {
        let template = url_template(artifacts_url);
        let token = token_file.display().to_string();
        let mut args = vec![
            "enable",
            "--self-update",
            "--server",
            server,
            "--group",
            &self.group,
            "--url-template",
            &template,
            "--join-token-file",
            &token,
        ];
        args.extend_from_slice(extra);
        self.run(&args)
    }

    /// The release the link names (`…/versions/<v>/bin/tern-update`).
    pub fn linked_version(&self) -> Option<String> {
        let target = std::fs::read_link(self.link.join("tern-update")).ok()?;
        let vdir = target.parent()?.parent()?;
        Some(vdir.file_name()?.to_string_lossy().into_owned())
    }

    /// Whether `version` was ever unpacked here and is still there.
    pub fn has_version_dir(&self, version: &str) -> bool {
        self.install
            .join("updater")
            .join("versions")
            .join(version)
            .exists()
    }

    pub fn updater_id(&self) -> Option<String> {
        std::fs::read_to_string(self.install.join("updater").join("updater_id"))
            .ok()
            .map(|s| s.trim().to_string())
    }
}
