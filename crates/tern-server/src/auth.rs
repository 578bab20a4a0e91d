//! Bearer tokens with a role. A token is `tern_<id>_<secret>`; the store keeps, under
//! `/tern/tokens/<id>`, its role and the SHA-256 of the whole token, never the token.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::HeaderMap;
use axum::http::header::AUTHORIZATION;
use jiff::Timestamp;
use rand_core::{OsRng, TryRngCore};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tern_store::Store;

use crate::error::{ApiError, ApiResult};
use crate::keys;

pub use tern_core::api::Role;

/// What an endpoint needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Anyone, no token: find, channels, health, metrics.
    Public,
    /// Reading resources, status, report, inventory: operator, user, viewer.
    Read,
    /// The config, suspend/resume, start-update/mark-done/rollback: operator, user.
    Write,
    /// The version, new-rollout, tokens, channels, the dev clock: operator.
    Operator,
    /// Heartbeats: agent (and operator, for tests and tooling).
    Agent,
    /// Exchanging a join token for a host credential: join, and the shared agent
    /// tokens of earlier releases (so that their hosts can move to credentials).
    Join,
}

impl Access {
    pub fn allows(self, role: Role) -> bool {
        match self {
            Access::Public => true,
            Access::Read => matches!(role, Role::Operator | Role::User | Role::Viewer),
            Access::Write => matches!(role, Role::Operator | Role::User),
            Access::Operator => role == Role::Operator,
            Access::Agent => matches!(role, Role::Agent | Role::Operator),
            Access::Join => matches!(role, Role::Join | Role::Agent),
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Access::Public => "no token",
            Access::Read => "an operator, user or viewer token",
            Access::Write => "an operator or user token",
            Access::Operator => "an operator token",
            Access::Agent => "an agent token",
            Access::Join => "a join token",
        }
    }
}

/// A token as stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TokenRecord {
    pub(crate) id: String,
    pub(crate) role: Role,
    /// Hex SHA-256 of the whole token.
    pub(crate) sha256: String,
    pub(crate) created: Timestamp,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(crate) description: String,
    /// Refused from this instant on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) expires: Option<Timestamp>,
    /// Joins left (join tokens); spent with a compare-and-swap on the record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) uses_left: Option<u64>,
    /// A host credential: heartbeats only for this updater_id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) updater_id: Option<String>,
    /// The person or system the token is for, set by its minter (no route changes it).
    /// Empty in tokens of earlier releases: see [`TokenRecord::principal`].
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(crate) principal: String,
    /// The tokens that minted it, nearest first (at most [`MAX_LINEAGE`]): for the
    /// views and the words of a refusal; approvals go by [`TokenRecord::speaks_for`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) minted_by: Vec<String>,
    /// Whom the token speaks for when it approves: the principal at the root of its
    /// chain, carried from minter to minted whatever the chain's depth (see
    /// [`speaks_for`]). Empty in tokens minted before it was recorded: resolved from
    /// the chain in the store when such a token is read ([`Authenticator`]).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(crate) speaks_for: String,
    /// An agent token minted for a controller (`tokens create --controller`): shared
    /// by design, accepted even where shared agent tokens are refused.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) controller: bool,
}

/// Minters remembered per token: deeper chains keep their nearest links.
pub(crate) const MAX_LINEAGE: usize = 32;

/// Links of a chain followed up the store to resolve whom a token of an earlier release
/// speaks for; a deeper chain speaks for the token where the walk stopped.
const MAX_CHAIN_WALK: usize = 1024;

/// Whom a token minted by `minter` for `principal` speaks for. A root (a token with no
/// minter: the bootstrap token, or one minted before minters were recorded) names
/// people: what it mints speaks for the principal it was minted for. Any other token
/// hands on whom it speaks for, whatever principal it gives: an operator who mints a
/// token "for someone else", or a chain of them, still speaks alone.
pub(crate) fn speaks_for(minter: &Actor, principal: &str) -> String {
    if minter.minted_by.is_empty() {
        principal.to_string()
    } else {
        minter.speaks_for.clone()
    }
}

impl TokenRecord {
    /// The principal, or `token:<id>` for a token minted before principals existed
    /// (each its own principal, as approvals counted tokens then).
    pub(crate) fn principal(&self) -> String {
        if self.principal.is_empty() {
            format!("token:{}", self.id)
        } else {
            self.principal.clone()
        }
    }
}

/// Checks a principal's name: 1 to 64 letters, digits and `. _ - @ +` (an e-mail
/// address, a team, a CI job). No `:`, so that no name is taken for `token:<id>`.
pub(crate) fn check_principal(p: &str) -> ApiResult<()> {
    let ok = !p.is_empty()
        && p.len() <= 64
        && p.bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-' | b'@' | b'+'));
    if ok {
        Ok(())
    } else {
        Err(ApiError::bad_request(format!(
            "principal {p:?}: give a name of 1 to 64 letters, digits and . _ - @ +"
        )))
    }
}

/// A freshly minted token: the clear text is shown once.
pub(crate) struct NewToken {
    pub(crate) token: String,
    pub(crate) record: TokenRecord,
}

pub(crate) use tern_core::text::hex;

fn sha256_hex(s: &str) -> String {
    hex(&Sha256::digest(s.as_bytes()))
}

pub(crate) fn random_hex(n: usize) -> ApiResult<String> {
    let mut buf = vec![0u8; n];
    OsRng
        .try_fill_bytes(&mut buf)
        .map_err(|e| ApiError::internal(format!("the OS random source failed: {e}")))?;
    Ok(hex(&buf))
}

pub(crate) fn mint(role: Role, description: &str, now: Timestamp) -> ApiResult<NewToken> {
    let id = random_hex(6)?;
    let secret = random_hex(32)?;
    let token = format!("tern_{id}_{secret}");
    Ok(NewToken {
        record: TokenRecord {
            id,
            role,
            sha256: sha256_hex(&token),
            created: now,
            description: description.to_string(),
            expires: None,
            uses_left: None,
            updater_id: None,
            principal: String::new(),
            minted_by: Vec::new(),
            speaks_for: String::new(),
            controller: false,
        },
        token,
    })
}

/// The id part of a token, if it has the shape of one.
fn token_id(token: &str) -> Option<&str> {
    let rest = token.strip_prefix("tern_")?;
    let (id, secret) = rest.split_once('_')?;
    let ok = |s: &str| !s.is_empty() && s.bytes().all(|c| c.is_ascii_hexdigit());
    (ok(id) && ok(secret) && id.len() <= 32).then_some(id)
}

/// Compares two digests without an early exit.
fn same_digest(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The digest a record's `sha256` spells: exactly 64 lower-case hex digits (the form
/// [`hex`] writes; any other spelling never matched a token, and still does not).
fn digest_of(sha256: &str) -> Option<[u8; 32]> {
    let b = sha256.as_bytes();
    if b.len() != 64 {
        return None;
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let mut out = [0u8; 32];
    for (o, pair) in out.iter_mut().zip(b.chunks_exact(2)) {
        *o = (digit(pair[0])? << 4) | digit(pair[1])?;
    }
    Some(out)
}

/// A token record as cached: shared, not copied, by the requests that use it (a
/// heartbeat's hot path), with its digest decoded once.
struct Cached {
    record: TokenRecord,
    digest: Option<[u8; 32]>,
    /// The sender its token makes of a request, built once per record read: every
    /// request shares it (a heartbeat allocates no `Actor` of its own).
    actor: Arc<Actor>,
    at: Instant,
}

impl Cached {
    /// `speaks_for`: the record's own, or as resolved from its chain.
    fn new(record: TokenRecord, speaks_for: String) -> Arc<Self> {
        Arc::new(Self {
            digest: digest_of(&record.sha256),
            actor: Arc::new(Actor {
                principal: record.principal(),
                token_id: record.id.clone(),
                role: record.role,
                bound_to: record.updater_id.clone(),
                minted_by: record.minted_by.clone(),
                speaks_for,
                controller: record.controller,
            }),
            record,
            at: Instant::now(),
        })
    }

    fn matches(&self, sent: &[u8; 32]) -> bool {
        self.digest.as_ref().is_some_and(|d| same_digest(d, sent))
    }
}

/// Checks bearer tokens, caching the records it has read for a short while so that
/// heartbeats do not read the store each time (a revoked token stops working on other
/// replicas within [`CACHE_TTL`]), and the tokens it refused, so that a probe sent again
/// costs no store read either.
pub(crate) struct Authenticator {
    cache: Mutex<HashMap<String, Arc<Cached>>>,
    /// The SHA-256 of each token refused lately (unknown, revoked, a wrong secret,
    /// expired), and when: refused again without a store read for [`CACHE_TTL`].
    /// A refused token never becomes valid: ids and secrets are random.
    refused: Mutex<HashMap<[u8; 32], Instant>>,
}

pub(crate) const CACHE_TTL: Duration = Duration::from_secs(30);

/// Refused tokens remembered at most; past it the stale ones go, then all.
const MAX_REFUSED: usize = 10_000;

impl Default for Authenticator {
    fn default() -> Self {
        Self::new()
    }
}

/// The bearer token a request presents: `Err` says what is wrong with the header.
fn bearer(headers: &HeaderMap) -> ApiResult<&str> {
    let Some(value) = headers.get(AUTHORIZATION) else {
        return Err(ApiError::unauthenticated(
            "missing Authorization header: send `Authorization: Bearer <token>`",
        ));
    };
    value
        .to_str()
        .ok()
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim)
        .ok_or_else(|| {
            ApiError::unauthenticated("the Authorization header is not `Bearer <token>`")
        })
}

/// The id of the token a request presents, when it has the shape of one (for logs).
pub(crate) fn presented_id(headers: &HeaderMap) -> Option<String> {
    bearer(headers).ok().and_then(token_id).map(str::to_string)
}

impl Authenticator {
    pub(crate) fn new() -> Self {
        Self {
            cache: Mutex::new(HashMap::new()),
            refused: Mutex::new(HashMap::new()),
        }
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Cached>>> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn refused(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], Instant>> {
        self.refused.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn forget(&self, id: &str) {
        self.cache().remove(id);
    }

    /// Remembers that the token of digest `sent` was refused.
    fn refuse(&self, sent: [u8; 32]) {
        let mut refused = self.refused();
        if refused.len() >= MAX_REFUSED {
            refused.retain(|_, at| at.elapsed() < CACHE_TTL);
            if refused.len() >= MAX_REFUSED {
                refused.clear();
            }
        }
        refused.insert(sent, Instant::now());
    }

    fn refused_lately(&self, sent: &[u8; 32]) -> bool {
        self.refused()
            .get(sent)
            .is_some_and(|at| at.elapsed() < CACHE_TTL)
    }

    /// Who sent the request when its token is one this replica accepted within
    /// [`CACHE_TTL`] (and not expired): no store read, no limit to wait for. `None`
    /// otherwise, for [`Authenticator::authenticate`] to decide.
    pub(crate) fn known(&self, headers: &HeaderMap, now: Timestamp) -> Option<Arc<Actor>> {
        let token = bearer(headers).ok()?;
        let id = token_id(token)?;
        let entry = self
            .cache()
            .get(id)
            .filter(|c| c.at.elapsed() < CACHE_TTL)
            .map(Arc::clone)?;
        let sent: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let live = entry.record.expires.is_none_or(|e| now < e);
        (entry.matches(&sent) && live).then(|| Arc::clone(&entry.actor))
    }

    /// Who sent the request (its bearer token's id and role), or 401.
    pub(crate) async fn authenticate(
        &self,
        store: &dyn Store,
        headers: &HeaderMap,
        now: Timestamp,
    ) -> ApiResult<Arc<Actor>> {
        let token = bearer(headers)?;
        let bad = || ApiError::unauthenticated("invalid or revoked token");
        let id = token_id(token).ok_or_else(bad)?;
        let sent: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let cached = self.cache().get(id).cloned();
        let fresh = cached
            .as_ref()
            .filter(|c| c.at.elapsed() < CACHE_TTL)
            .map(Arc::clone);
        let entry = match fresh {
            Some(c) => c,
            None if self.refused_lately(&sent) => return Err(bad()),
            None => match store.get(&keys::token(id)).await {
                Ok(Some(kv)) => {
                    let record: TokenRecord = serde_json::from_slice(&kv.value)
                        .map_err(|e| ApiError::internal(format!("token record {id}: {e}")))?;
                    let speaks_for = resolve_speaks_for(store, &record).await?;
                    let c = Cached::new(record, speaks_for);
                    self.cache().insert(id.to_string(), Arc::clone(&c));
                    c
                }
                Ok(None) => {
                    self.forget(id);
                    self.refuse(sent);
                    return Err(bad());
                }
                // The store is down: a token this replica has already checked keeps
                // working (heartbeats go on into memory; revoking needs the store
                // anyway). A token never seen here gets the 503.
                // Re-dated, so the next requests do not each wait for the store to time out.
                Err(tern_store::Error::Unavailable(_)) if cached.is_some() => {
                    let old = cached.ok_or_else(bad)?;
                    let c = Cached::new(old.record.clone(), old.actor.speaks_for.clone());
                    self.cache().insert(id.to_string(), Arc::clone(&c));
                    c
                }
                Err(e) => return Err(e.into()),
            },
        };
        if !entry.matches(&sent) {
            self.refuse(sent);
            return Err(bad());
        }
        let record = &entry.record;
        if let Some(expires) = record.expires
            && expires <= now
        {
            self.refuse(sent);
            return Err(ApiError::unauthenticated(format!(
                "token {} expired at {expires}",
                record.id
            )));
        }
        Ok(Arc::clone(&entry.actor))
    }
}

/// Whom `record` speaks for: its own `speaks_for`, or for a token minted before that
/// was recorded, what its chain says, walked up the store minter by minter ([`speaks_for`]
/// at each link). A minter gone from the store (revoked) ends the walk: the token then
/// speaks for that minter (`token:<id>`), never for the principal it was given.
async fn resolve_speaks_for(store: &dyn Store, record: &TokenRecord) -> ApiResult<String> {
    if !record.speaks_for.is_empty() {
        return Ok(record.speaks_for.clone());
    }
    if record.minted_by.is_empty() {
        return Ok(record.principal());
    }
    // The chain from `record` up: each link's principal, until a link that says whom
    // it speaks for, or a root.
    let mut principals = vec![record.principal()];
    let mut minter = record.minted_by[0].clone();
    let root_says = loop {
        if principals.len() > MAX_CHAIN_WALK {
            break format!("token:{minter}");
        }
        let Some(kv) = store.get(&keys::token(&minter)).await? else {
            break format!("token:{minter}");
        };
        let m: TokenRecord = serde_json::from_slice(&kv.value)
            .map_err(|e| ApiError::internal(format!("token record {minter}: {e}")))?;
        if !m.speaks_for.is_empty() && !m.minted_by.is_empty() {
            break m.speaks_for;
        }
        match m.minted_by.first() {
            // A root: the link below it speaks for the principal it was minted for.
            None => break principals.pop().unwrap_or_default(),
            Some(next) => {
                principals.push(m.principal());
                minter = next.clone();
            }
        }
    };
    Ok(if root_says.is_empty() {
        record.principal()
    } else {
        root_says
    })
}

/// The sender of an authenticated request: for checks and the audit trail.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Actor {
    pub(crate) token_id: String,
    pub(crate) role: Role,
    /// A host credential's updater_id.
    pub(crate) bound_to: Option<String>,
    /// Who the token is for ([`TokenRecord::principal`]).
    pub(crate) principal: String,
    /// The tokens that minted it, nearest first.
    pub(crate) minted_by: Vec<String>,
    /// Whom it speaks for when it approves ([`TokenRecord::speaks_for`]).
    pub(crate) speaks_for: String,
    /// A controller's agent token.
    pub(crate) controller: bool,
}

impl Actor {
    /// The shared agent token of earlier releases: an agent token bound to no host
    /// and not minted for a controller. It may speak for any host.
    pub(crate) fn is_legacy_shared_agent(&self) -> bool {
        self.role == Role::Agent && self.bound_to.is_none() && !self.controller
    }
}

impl Access {
    /// 403 unless `role` may do what this access level guards.
    pub(crate) fn check(self, role: Role) -> ApiResult<()> {
        if self.allows(role) {
            return Ok(());
        }
        // "an agent token", "an operator token", "a user token".
        let article = match role {
            Role::Agent | Role::Operator => "an",
            Role::User | Role::Viewer | Role::Join => "a",
        };
        Err(ApiError::forbidden(format!(
            "{article} {role} token may not do this: it needs {}",
            self.describe()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_is_lower_case_two_digits_per_byte() {
        assert_eq!(hex(&[0x00, 0x0f, 0xab, 0xff]), "000fabff");
        assert_eq!(
            sha256_hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn minted_tokens_parse_and_hash() {
        let t = mint(Role::User, "", Timestamp::UNIX_EPOCH).unwrap();
        assert_eq!(token_id(&t.token), Some(t.record.id.as_str()));
        assert!(!t.record.sha256.contains(&t.token));
        let cached = Cached::new(t.record.clone(), String::new());
        let digest = |s: &str| -> [u8; 32] { Sha256::digest(s.as_bytes()).into() };
        assert!(cached.matches(&digest(&t.token)));
        assert!(!cached.matches(&digest(&format!("{}0", t.token))));
        assert!(token_id("nope").is_none());
        assert!(token_id("tern_zz_00").is_none());
    }

    #[test]
    fn only_the_digest_as_written_matches() {
        let good = sha256_hex("abc");
        assert_eq!(digest_of(&good).map(|d| hex(&d)), Some(good.clone()));
        assert_eq!(
            digest_of(&good.to_uppercase()),
            None,
            "never matched before either"
        );
        assert_eq!(digest_of(&good[..62]), None);
        assert_eq!(digest_of(&format!("{good}00")), None);
        assert_eq!(digest_of(&format!("{}zz", &good[..62])), None);
    }

    /// Tokens of the release before `speaks_for` was recorded: whom they speak for is
    /// read from their chain in the store, however deep.
    #[tokio::test]
    async fn earlier_tokens_speak_for_the_principal_at_the_root_of_their_chain() {
        let store = tern_store::MemoryStore::new();
        let rec = |id: &str, principal: &str, minted_by: &[&str]| TokenRecord {
            id: id.into(),
            role: Role::Operator,
            sha256: String::new(),
            created: Timestamp::UNIX_EPOCH,
            description: String::new(),
            expires: None,
            uses_left: None,
            updater_id: None,
            principal: principal.into(),
            minted_by: minted_by.iter().map(|s| s.to_string()).collect(),
            speaks_for: String::new(),
            controller: false,
        };
        let put = |r: &TokenRecord| {
            let store = &store;
            let r = r.clone();
            async move {
                store
                    .put(&keys::token(&r.id), serde_json::to_vec(&r).unwrap(), None)
                    .await
                    .unwrap();
            }
        };
        let root = rec("root", "bootstrap", &[]);
        put(&root).await;
        let alice = rec("a0", "alice", &["root"]);
        put(&alice).await;
        // A chain of 40 from alice, the first named for mallory: each keeps its 32
        // nearest minters, as the release before did.
        let mut chain = vec!["a0".to_string()];
        for i in 1..=40 {
            let id = format!("a{i}");
            let minted_by: Vec<&str> = chain
                .iter()
                .rev()
                .take(MAX_LINEAGE)
                .map(String::as_str)
                .collect();
            put(&rec(&id, "mallory", &minted_by)).await;
            chain.push(id);
        }
        let last: TokenRecord =
            serde_json::from_slice(&store.get(&keys::token("a40")).await.unwrap().unwrap().value)
                .unwrap();
        assert_eq!(resolve_speaks_for(&store, &last).await.unwrap(), "alice");
        assert_eq!(resolve_speaks_for(&store, &alice).await.unwrap(), "alice");
        assert_eq!(
            resolve_speaks_for(&store, &root).await.unwrap(),
            "bootstrap"
        );
        // A token that records it is taken at its word.
        let mut told = rec("x", "mallory", &["a3"]);
        told.speaks_for = "alice".into();
        assert_eq!(resolve_speaks_for(&store, &told).await.unwrap(), "alice");
        // A minter revoked since: the token speaks for that minter, not for itself.
        let orphan = rec("o", "mallory", &["gone"]);
        assert_eq!(
            resolve_speaks_for(&store, &orphan).await.unwrap(),
            "token:gone"
        );
    }

    #[test]
    fn a_root_names_people_any_other_token_hands_on_whom_it_speaks_for() {
        let actor = |minted_by: &[&str], speaks_for: &str| Actor {
            token_id: "t".into(),
            role: Role::Operator,
            bound_to: None,
            principal: "p".into(),
            minted_by: minted_by.iter().map(|s| s.to_string()).collect(),
            speaks_for: speaks_for.into(),
            controller: false,
        };
        assert_eq!(speaks_for(&actor(&[], "bootstrap"), "alice"), "alice");
        assert_eq!(speaks_for(&actor(&["root"], "alice"), "mallory"), "alice");
    }

    #[test]
    fn role_matrix() {
        use Access::*;
        assert!(Read.allows(Role::Viewer) && !Read.allows(Role::Agent));
        assert!(Write.allows(Role::User) && !Write.allows(Role::Viewer));
        assert!(Operator.allows(Role::Operator) && !Operator.allows(Role::User));
        assert!(Agent.allows(Role::Agent) && !Agent.allows(Role::Viewer));
    }
}
