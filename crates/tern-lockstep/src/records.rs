//! The cluster's records, read from the store in one listing and parsed. A record that
//! does not parse is reported by key and treated as absent: a worker then waits (and
//! times out naming the server), it never acts on a value it cannot read. A status, a
//! leader-only result and a claim of a lock count only when their server's registered
//! key signed them for the current update (`identity`).

use std::collections::BTreeMap;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use tern_core::lockstep::protocol::{
    Artifact, Claim, LeaderOnlyRecord, LeaderOnlyResult, ServerId, ServerStatus, StatusRecord,
    UpdateRequest, claim_message, leader_only_message, status_message, trusted,
};
use tern_core::lockstep::release::{Environment, ReleaseVersion};
use tern_core::resource::Alert;
use tern_store::{Revision, Store};

use crate::identity;
use crate::keys;

/// `lockstep/servers/<id>`: a registered server.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Registration {
    pub(crate) id: ServerId,
    #[serde(default)]
    pub(crate) name: String,
    pub(crate) registered_at: Timestamp,
    /// The server's Ed25519 public key (hex); set by `servers add --credentials-out`, or
    /// by the first worker that starts as this server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) key: Option<String>,
}

/// `lockstep/status/servers/<id>`: a status and its server's signature of it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SignedStatus {
    #[serde(flatten)]
    pub(crate) status: ServerStatus,
    /// Hex Ed25519 signature of `status_message(server, request, status)`.
    #[serde(default)]
    pub(crate) sig: String,
}

/// `lockstep/contents/<id>/<component>`: a leader-only result and its server's
/// signature of it for the update it answers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SignedLeaderOnly {
    #[serde(flatten)]
    pub(crate) record: LeaderOnlyRecord,
    /// Hex Ed25519 signature of `leader_only_message(server, request, component, record)`.
    #[serde(default)]
    pub(crate) sig: String,
}

/// `lockstep/completed`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Completed {
    pub(crate) version: String,
    pub(crate) at: Timestamp,
    /// The servers that finished it (a registered server not among them catches up).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) servers: Option<Vec<ServerId>>,
    /// What they installed: a catch-up installs the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) artifact: Option<Artifact>,
}

/// Everything under `lockstep/` at one store revision.
#[derive(Clone, Debug, Default)]
pub(crate) struct Snapshot {
    pub(crate) env: Environment,
    pub(crate) servers: BTreeMap<ServerId, Registration>,
    /// The request and its `mod_revision` (what a guarded write compares).
    pub(crate) request: Option<(UpdateRequest, Revision)>,
    /// The statuses signed by their server.
    pub(crate) statuses: BTreeMap<ServerId, ServerStatus>,
    /// Servers whose status record is not signed by their registered key.
    pub(crate) untrusted: Vec<ServerId>,
    /// Leader-only results by component, each with whether its server signed it for
    /// the current update.
    pub(crate) contents: BTreeMap<String, Vec<LeaderOnlyResult>>,
    pub(crate) completed: Option<(Completed, Revision)>,
    pub(crate) alert: Option<(Alert, Revision)>,
    /// Records that did not parse: (key, why).
    pub(crate) unreadable: Vec<(String, String)>,
}

impl Snapshot {
    pub(crate) fn request(&self) -> Option<&UpdateRequest> {
        self.request.as_ref().map(|(r, _)| r)
    }

    pub(crate) fn completed_version(&self) -> Option<ReleaseVersion> {
        self.completed
            .as_ref()
            .and_then(|(c, _)| ReleaseVersion::parse(&c.version).ok())
    }

    pub(crate) fn registered(&self) -> Vec<ServerId> {
        self.servers.keys().copied().collect()
    }

    pub(crate) fn completed_servers(&self) -> Option<&[ServerId]> {
        self.completed
            .as_ref()
            .and_then(|(c, _)| c.servers.as_deref())
    }
}

fn parse<T: for<'de> Deserialize<'de>>(
    key: &str,
    value: &[u8],
    unreadable: &mut Vec<(String, String)>,
) -> Option<T> {
    match serde_json::from_slice(value) {
        Ok(v) => Some(v),
        Err(e) => {
            tracing::warn!(key, error = %e, "a lock-step record does not parse; ignoring it");
            unreadable.push((key.to_string(), e.to_string()));
            None
        }
    }
}

fn id_of(key: &str, prefix: &str) -> Option<ServerId> {
    key.strip_prefix(prefix)?.parse().ok()
}

/// Reads every record in one listing.
pub(crate) async fn read(store: &dyn Store) -> tern_store::Result<Snapshot> {
    let listing = store.list(keys::ROOT).await?;
    let mut s = Snapshot::default();
    let mut bad = Vec::new();
    let mut signed: BTreeMap<ServerId, SignedStatus> = BTreeMap::new();
    let mut results: Vec<(ServerId, String, SignedLeaderOnly)> = Vec::new();
    for kv in &listing.kvs {
        let key = kv.key.as_str();
        let v = kv.value.as_slice();
        if key == keys::ENV {
            match std::str::from_utf8(v)
                .ok()
                .map(|t| t.trim().parse::<Environment>())
            {
                Some(Ok(env)) => s.env = env,
                _ => bad.push((key.to_string(), "not production or staging".to_string())),
            }
        } else if key == keys::CURRENT {
            s.request = parse(key, v, &mut bad).map(|r| (r, kv.mod_revision));
        } else if key == keys::COMPLETED {
            s.completed = parse(key, v, &mut bad).map(|c| (c, kv.mod_revision));
        } else if key == keys::ALERT {
            s.alert = parse(key, v, &mut bad).map(|a| (a, kv.mod_revision));
        } else if let Some(id) = id_of(key, keys::SERVER_STATUS)
            && let Some(st) = parse(key, v, &mut bad)
        {
            signed.insert(id, st);
        } else if let Some(id) = id_of(key, keys::SERVERS)
            && let Some(r) = parse(key, v, &mut bad)
        {
            s.servers.insert(id, r);
        } else if let Some((id, name)) = key
            .strip_prefix(keys::CONTENTS)
            .and_then(|rest| rest.split_once('/'))
            .and_then(|(id, name)| Some((id.parse::<ServerId>().ok()?, name)))
            && let Some(r) = parse::<SignedLeaderOnly>(key, v, &mut bad)
        {
            results.push((id, name.to_string(), r));
        }
    }
    s.unreadable = bad;
    for (id, name, r) in results {
        let signed = match (
            s.request(),
            s.servers.get(&id).and_then(|reg| reg.key.as_deref()),
        ) {
            (Some(req), Some(public)) => identity::verify(
                public,
                &leader_only_message(id, req, &name, &r.record),
                &r.sig,
            ),
            _ => false,
        };
        s.contents.entry(name).or_default().push(LeaderOnlyResult {
            server: id,
            record: r.record,
            signed,
        });
    }
    let records = signed
        .into_iter()
        .map(|(id, st)| {
            let by = match (
                s.request(),
                s.servers.get(&id).and_then(|r| r.key.as_deref()),
            ) {
                (Some(req), Some(public)) => {
                    identity::verify(public, &status_message(id, req, &st.status), &st.sig)
                        .then_some(id)
                }
                _ => None,
            };
            let rec = StatusRecord {
                status: st.status,
                signed_by: by,
            };
            (id, rec)
        })
        .collect();
    (s.statuses, s.untrusted) = trusted(&records);
    Ok(s)
}

/// The holder text of a claim lease: the lock and the server's signature of its claim.
pub(crate) fn claim_holder(lock: &str, sig: &str) -> String {
    format!("claim {lock} {sig}")
}

/// The claims of the servers `request` lists, each read from its claim lease and checked
/// against the server's registered key in `snap`. A claim lease that cannot be read
/// counts as no claim (the lock waits, it is never taken on it).
pub(crate) async fn claims(
    store: &dyn Store,
    snap: &Snapshot,
    request: &UpdateRequest,
) -> Vec<Claim> {
    let mut out = Vec::new();
    for &id in &request.servers {
        let info = match store.lease_info(&keys::claim_lease(id)).await {
            Ok(Some(info)) => info,
            Ok(None) => continue,
            Err(e) => {
                tracing::warn!(server = id, error = %e, "cannot read a server's claim");
                continue;
            }
        };
        let mut words = info.holder.split(' ');
        let (Some("claim"), Some(lock), Some(sig), None) =
            (words.next(), words.next(), words.next(), words.next())
        else {
            continue;
        };
        let signed = snap
            .servers
            .get(&id)
            .and_then(|r| r.key.as_deref())
            .is_some_and(|public| identity::verify(public, &claim_message(id, request, lock), sig));
        out.push(Claim {
            server: id,
            lock: lock.to_string(),
            token: info.token,
            signed,
        });
    }
    out
}

pub(crate) fn to_json<T: Serialize>(value: &T) -> Vec<u8> {
    // Serializing these plain structs cannot fail (no maps with non-string keys).
    serde_json::to_vec(value).unwrap_or_default()
}
