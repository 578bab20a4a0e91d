//! The stand-in's kubelet when the test gives it a registry: every container runs as a
//! real child process, the program its image names. The registry maps `repository:tag`
//! to a program (in Tern's tests, the demo agent release of that version), and a pull
//! checks what Kubernetes checks: the image exists, and an image pinned by digest
//! (`repository:tag@sha256:…`) has that digest (here, the sha256 of the program file).
//!
//! A container is started with its own state directory as argument (the demo agent's
//! `STATE_DIR`) and counts as Ready once it has written `running_version` there and
//! runs; one that exited is restarted at the next pass and counted in `restartCount`,
//! and one that is not running after a start is reported in `CrashLoopBackOff`.
//! Processes of pods that no longer exist are killed; so is every process when the
//! stand-in goes away (and, should a test die without cleaning up, each agent exits on
//! its own once the test process is gone: `TERN_DEMO_AGENT_EXIT_WITH`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sha2::Digest as _;

/// (namespace, pod, container).
type ContainerKey = (String, String, String);

struct Running {
    child: Child,
    state: PathBuf,
    image: String,
    restarts: i64,
    last_exit: Option<i32>,
}

/// What the kubelet saw of one container.
pub(crate) enum Seen {
    /// Started, and up.
    Up,
    /// Not running after its latest start.
    Crashing { restarts: i64, exit: Option<i32> },
    /// The image could not be pulled.
    PullFailed { why: String },
}

pub(crate) struct Kubelet {
    /// `repository:tag` → program.
    images: BTreeMap<String, PathBuf>,
    /// `repository:tag` → `sha256:…` of its program, computed at the first pull.
    digests: BTreeMap<String, String>,
    running: BTreeMap<ContainerKey, Running>,
    dir: tempfile::TempDir,
}

/// How long a start may take to show whether the program comes up.
const START_WAIT: Duration = Duration::from_secs(10);

impl Kubelet {
    pub(crate) fn new(images: BTreeMap<String, PathBuf>) -> Self {
        Self {
            images,
            digests: BTreeMap::new(),
            running: BTreeMap::new(),
            dir: tempfile::Builder::new()
                .prefix("tern-fake-kubelet-")
                .tempdir()
                .unwrap(),
        }
    }

    /// The state directory of a container (the agent's `STATE_DIR`).
    pub(crate) fn state_dir(&self, ns: &str, pod: &str, container: &str) -> PathBuf {
        self.dir.path().join(ns).join(pod).join(container)
    }

    /// Kills the processes of containers not in `live` (pods deleted or replaced).
    pub(crate) fn keep_only(&mut self, live: &[ContainerKey]) {
        let gone: Vec<ContainerKey> = self
            .running
            .keys()
            .filter(|k| !live.contains(k))
            .cloned()
            .collect();
        for k in gone {
            if let Some(mut r) = self.running.remove(&k) {
                stop(&mut r);
            }
        }
    }

    /// Runs the container `key` with `image` (pulling and starting it if needed,
    /// restarting it if it exited) and says how it is.
    pub(crate) fn sync(&mut self, key: ContainerKey, image: &str) -> Seen {
        if let Some(r) = self.running.get_mut(&key) {
            if r.image == image {
                match r.child.try_wait() {
                    Ok(None) if r.state.join("running_version").is_file() => return Seen::Up,
                    Ok(None) => {
                        return Seen::Crashing {
                            restarts: r.restarts,
                            exit: None,
                        };
                    }
                    Ok(Some(status)) => {
                        r.last_exit = status.code();
                        r.restarts += 1;
                    }
                    Err(_) => r.restarts += 1,
                }
            } else {
                stop(r);
                self.running.remove(&key);
            }
        }
        let program = match self.pull(image) {
            Ok(p) => p,
            Err(why) => return Seen::PullFailed { why },
        };
        let state = self.state_dir(&key.0, &key.1, &key.2);
        let (restarts, last_exit) = self
            .running
            .get(&key)
            .map_or((0, None), |r| (r.restarts, r.last_exit));
        let _ = std::fs::remove_file(state.join("running_version"));
        std::fs::create_dir_all(&state).unwrap();
        let child = Command::new(&program)
            .arg(&state)
            .env("TERN_DEMO_AGENT_EXIT_WITH", std::process::id().to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", program.display()));
        let mut r = Running {
            child,
            state,
            image: image.to_string(),
            restarts,
            last_exit,
        };
        let seen = wait_started(&mut r);
        self.running.insert(key, r);
        seen
    }

    /// The program of `image`, when the registry has it and its digest (if pinned)
    /// matches; else why not, as a kubelet's pull error would say.
    fn pull(&mut self, image: &str) -> Result<PathBuf, String> {
        let (named, pinned) = match image.split_once('@') {
            Some((n, d)) => (n, Some(d)),
            None => (image, None),
        };
        let program = self
            .images
            .get(named)
            .cloned()
            .ok_or_else(|| format!("failed to pull image \"{image}\": {named}: not found"))?;
        if let Some(pinned) = pinned {
            let actual = match self.digests.get(named) {
                Some(d) => d.clone(),
                None => {
                    let d = file_digest(&program);
                    self.digests.insert(named.to_string(), d.clone());
                    d
                }
            };
            if actual != pinned {
                return Err(format!(
                    "failed to pull image \"{image}\": manifest digest {actual} does not match {pinned}"
                ));
            }
        }
        Ok(program)
    }
}

/// Waits until the started program shows it is up (`running_version` written) or
/// exits.
fn wait_started(r: &mut Running) -> Seen {
    let until = Instant::now() + START_WAIT;
    loop {
        match r.child.try_wait() {
            Ok(Some(status)) => {
                r.last_exit = status.code();
                return Seen::Crashing {
                    restarts: r.restarts,
                    exit: r.last_exit,
                };
            }
            Ok(None) if r.state.join("running_version").is_file() => return Seen::Up,
            _ if Instant::now() >= until => {
                // Neither up nor gone: not Ready, as a slow start is.
                return Seen::Crashing {
                    restarts: r.restarts,
                    exit: None,
                };
            }
            _ => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

fn stop(r: &mut Running) {
    let _ = r.child.kill();
    let _ = r.child.wait();
    let _ = std::fs::remove_dir_all(&r.state);
}

fn file_digest(path: &Path) -> String {
    let bytes =
        std::fs::read(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let hash = sha2::Sha256::digest(&bytes);
    let hex: String = hash.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        for r in self.running.values_mut() {
            stop(r);
        }
    }
}
