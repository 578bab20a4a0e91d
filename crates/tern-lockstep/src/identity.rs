//! Who a worker is: each server has an Ed25519 key pair; its public key is in the
//! server's registration and its worker signs every status it writes with the private
//! one ([`status_message`](tern_core::lockstep::protocol::status_message) is what it
//! signs). A status not signed by its server's key counts for nothing
//! ([`trusted`](tern_core::lockstep::protocol::trusted)), so a second worker claiming a
//! server's id, or a write by hand, never moves a barrier nor completes an update.
//!
//! Its leader-only results and its claims of locks are signed the same way
//! (`leader_only_message`, `claim_message`). On etcd each server also has its own etcd
//! user, `lockstep-server-<id>`, whose role may write that server's own keys only (its
//! registration, its status, its leader-only results, its worker and claim leases):
//! nothing is shared between servers. `servers add --credentials-out FILE` creates both
//! and writes them to FILE for the operator to copy to the server. On SQLite every process that can open the file
//! can write anything: the workers are trusted, and the signatures only catch a worker
//! started with another server's id by mistake.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use ring::rand::{SecureRandom as _, SystemRandom};
use ring::signature::{ED25519, Ed25519KeyPair, KeyPair as _, UnparsedPublicKey};
use serde::{Deserialize, Serialize};
use tern_core::lockstep::protocol::ServerId;

/// A server's credentials file (JSON, mode 0600).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Credentials {
    pub(crate) server: ServerId,
    /// PKCS#8 of the Ed25519 key pair, hex.
    pub(crate) signing_key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) etcd_user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) etcd_password: Option<String>,
}

/// A server's identity, ready to sign.
pub(crate) struct Identity {
    pub(crate) server: ServerId,
    key: Ed25519KeyPair,
    pub(crate) etcd: Option<(String, String)>,
}

/// The file a worker keeps its own identity in when it registers itself.
pub(crate) const IDENTITY_FILE: &str = "identity.json";

/// The etcd user of a server.
pub(crate) fn etcd_user(id: ServerId) -> String {
    format!("lockstep-server-{id}")
}

pub(crate) use tern_core::text::hex;

fn unhex(s: &str) -> Option<Vec<u8>> {
    let s = s.trim();
    if !s.len().is_multiple_of(2) || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect()
}

/// A random secret (etcd passwords), hex of 24 bytes.
pub(crate) fn random_secret() -> anyhow::Result<String> {
    let mut buf = [0u8; 24];
    SystemRandom::new()
        .fill(&mut buf)
        .map_err(|_| anyhow::anyhow!("the system's random source failed"))?;
    Ok(hex(&buf))
}

impl Identity {
    /// A new key pair for `server`, and the credentials file that carries it.
    pub(crate) fn generate(
        server: ServerId,
        etcd: Option<(String, String)>,
    ) -> anyhow::Result<(Identity, Credentials)> {
        let pkcs8 = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new())
            .map_err(|_| anyhow::anyhow!("generating a signing key failed"))?;
        let creds = Credentials {
            server,
            signing_key: hex(pkcs8.as_ref()),
            etcd_user: etcd.as_ref().map(|(u, _)| u.clone()),
            etcd_password: etcd.as_ref().map(|(_, p)| p.clone()),
        };
        Ok((Identity::from_credentials(&creds)?, creds))
    }

    pub(crate) fn from_credentials(c: &Credentials) -> anyhow::Result<Identity> {
        let pkcs8 = unhex(&c.signing_key).context("signing_key is not hex")?;
        let key = Ed25519KeyPair::from_pkcs8(&pkcs8)
            .map_err(|e| anyhow::anyhow!("signing_key is not an Ed25519 PKCS#8 key: {e}"))?;
        let etcd = match (&c.etcd_user, &c.etcd_password) {
            (Some(u), Some(p)) => Some((u.clone(), p.clone())),
            (None, None) => None,
            _ => bail!("etcd_user and etcd_password go together"),
        };
        Ok(Identity {
            server: c.server,
            key,
            etcd,
        })
    }

    /// Reads a credentials file written by `servers add --credentials-out`.
    pub(crate) fn load(path: &Path) -> anyhow::Result<Identity> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let c: Credentials = serde_json::from_str(&text)
            .with_context(|| format!("{} is not a credentials file", path.display()))?;
        Identity::from_credentials(&c).with_context(|| format!("in {}", path.display()))
    }

    /// `<root>/identity.json`, created with a new key pair on the first start.
    pub(crate) fn load_or_create(root: &Path, server: ServerId) -> anyhow::Result<Identity> {
        let path = root.join(IDENTITY_FILE);
        if path.exists() {
            let id = Identity::load(&path)?;
            if id.server != server {
                bail!(
                    "{} is server {}'s identity, not server {server}'s: this root belongs to another server",
                    path.display(),
                    id.server
                );
            }
            return Ok(id);
        }
        std::fs::create_dir_all(root).with_context(|| format!("creating {}", root.display()))?;
        let (id, creds) = Identity::generate(server, None)?;
        write_credentials(&path, &creds)?;
        tracing::info!(server, file = %path.display(), "created this server's signing key");
        Ok(id)
    }

    pub(crate) fn public_hex(&self) -> String {
        hex(self.key.public_key().as_ref())
    }

    pub(crate) fn sign(&self, message: &[u8]) -> String {
        hex(self.key.sign(message).as_ref())
    }
}

/// True when `sig` (hex) is `public` (hex)'s signature of `message`.
pub(crate) fn verify(public: &str, message: &[u8], sig: &str) -> bool {
    match (unhex(public), unhex(sig)) {
        (Some(p), Some(s)) => UnparsedPublicKey::new(&ED25519, p)
            .verify(message, &s)
            .is_ok(),
        _ => false,
    }
}

/// Writes a credentials file readable by its owner only; never over an existing file.
pub(crate) fn write_credentials(path: &Path, c: &Credentials) -> anyhow::Result<PathBuf> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating {} (it must not exist yet)", path.display()))?;
    let text = serde_json::to_string_pretty(c).context("encoding the credentials")?;
    f.write_all(text.as_bytes())
        .and_then(|()| f.write_all(b"\n"))
        .and_then(|()| f.sync_all())
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(path.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_verifies_only_with_its_key_and_message() {
        let (a, _) = Identity::generate(1, None).unwrap();
        let (b, _) = Identity::generate(2, None).unwrap();
        let sig = a.sign(b"step 3");
        assert!(verify(&a.public_hex(), b"step 3", &sig));
        assert!(!verify(&a.public_hex(), b"step 4", &sig));
        assert!(!verify(&b.public_hex(), b"step 3", &sig));
        assert!(!verify(&a.public_hex(), b"step 3", "zz"));
    }

    #[test]
    fn a_root_keeps_its_identity_and_refuses_another_server() {
        let dir = tempfile::tempdir().unwrap();
        let first = Identity::load_or_create(dir.path(), 2).unwrap();
        let again = Identity::load_or_create(dir.path(), 2).unwrap();
        assert_eq!(first.public_hex(), again.public_hex());
        let e = Identity::load_or_create(dir.path(), 3).err().unwrap();
        assert!(e.to_string().contains("server 2's identity"), "{e}");
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(dir.path().join(IDENTITY_FILE))
                .unwrap()
                .permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
    }
}
