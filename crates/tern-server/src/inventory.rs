//! The agents this replica has heard from, in memory. Keyed by updater_id (or host_id
//! for an updater without an id). Timestamps come from the server clock; expiry is by
//! silence measured on the clock's `monotonic` instant: real time on the system clock
//! (a wall-clock step forgets nobody), dev time on the dev clock (advancing it past
//! the silence limit forgets the hosts that did not heartbeat meanwhile).
//!
//! A replica may hold a million agents, so each is kept compact (a 112-byte entry plus
//! its hostname's bytes): ids of the usual shapes in 16 bytes and a tag, alignment 1,
//! so that the two pack into 34 bytes ([`id`]; a rare id of another shape is kept whole
//! in the hostnames' string), group and versions as interned symbols ([`names`]),
//! hostnames end to end in one string ([`hostnames`]), the entry's three flags in one
//! byte, entries in one dense vector found through a hash table of indexes. The report
//! and the canary helpers of `tern_core::inventory` read agents through [`AgentView`],
//! which [`AgentRef`] implements over this form.
//!
//! Facts and the directives' state stay in two boxes (8 bytes each when absent): one
//! box for both would save 8 bytes only on hosts that send no facts, and real updaters
//! send them.

pub mod directed;
mod hostnames;
pub(crate) mod id;
mod names;
mod pending;

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasher;
use std::time::{Duration, Instant};

use hashbrown::HashTable;
use jiff::{SignedDuration, Timestamp};
use tern_core::backpressure::UpdaterNumeral;
use tern_core::directive::instruct::InstallInstruction;
use tern_core::inventory::{AgentView, InventoryAgent, replica_report};
use tern_core::reconcile::Needs;
use tern_core::resource::{ConnectedAgent, ReportSpec};
use tern_core::wire::{Heartbeat, UpdaterStatus};

use hostnames::{HostnameRef, Hostnames, TextRef};
use id::{IdRef, StoredId};
use names::{Names, Sym};

/// Why a heartbeat was not recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// It names neither an updater_id nor a host_id: nothing to key it by.
    #[error("updater_id: the heartbeat names neither an updater_id nor a host_id")]
    Unidentified,
    /// A new agent, and the inventory holds its maximum: one client cannot make a
    /// replica hold unbounded memory. Agents already tracked keep heartbeating.
    #[error(
        "this replica already tracks its maximum of {max} agents (ternd start --max-agents): heartbeats from new hosts are refused until some go silent"
    )]
    Full { max: usize },
    /// A new agent through a shared agent token (one that may speak for any host), and
    /// this replica already holds its maximum of those: one credential cannot invent
    /// hosts without bound (a flood that would swell the report).
    #[error(
        "this replica already tracks its maximum of {max} hosts that heartbeat with a shared agent token (ternd start --max-shared-token-hosts): enroll hosts with a join token, which gives each its own credential"
    )]
    SharedTokenFull { max: usize },
}

/// What [`Inventory::heartbeat`] did.
#[derive(Debug)]
pub struct Recorded {
    /// The install instruction the directives have for the host, if any (given again
    /// with every heartbeat until the host reports a result for it).
    pub install: Option<Box<InstallInstruction>>,
    /// The host is new to this replica, or reports another state than before: its
    /// history may have something to add.
    pub changed: bool,
    /// A host this replica knew reports another version, group or health: what its
    /// report counts may have moved. (A new host counts only once settled.)
    pub moved: bool,
}

#[derive(Debug)]
struct Entry {
    /// Resolved through the inventory's [`Hostnames`] ([`Entry::uid`]).
    updater_id: StoredId<TextRef>,
    host_id: StoredId<TextRef>,
    /// In the inventory's [`Hostnames`].
    hostname: HostnameRef,
    /// `first_seen` and `last_seen` as seconds and nanoseconds, side by side so that the
    /// two halves pack without padding (16 bytes less than two `Timestamp`s).
    first_seen_s: i64,
    last_seen_s: i64,
    first_seen_ns: i32,
    last_seen_ns: i32,
    /// Milliseconds since the inventory's epoch (monotonic).
    heard: u64,
    group: Sym,
    version: Sym,
    updater_version: Option<Sym>,
    failed_version: Option<Sym>,
    updater_status: UpdaterStatus,
    rollback: bool,
    healthy: Option<bool>,
    follows: tern_core::wire::Follows,
    /// What directives select on, and a failed install; `None` (8 bytes) for updaters
    /// that send none.
    facts: Option<Box<Facts>>,
    /// Its install state after the last directive pass; `None` when ungoverned.
    install_state: Option<tern_core::directive::state::InstallState>,
    /// Its last install attempt and the instruction still to deliver; `None` (8 bytes)
    /// for hosts the directives never triggered.
    directed: Option<Box<pending::Directed>>,
    /// [`ATTEMPT_CHECKED`], [`HISTORY_UNRECORDED`], [`SHARED`]: one byte, not three.
    flags: u8,
}

/// The store's attempt record for the host was read since this replica first saw it (a
/// restart, or a host moving from another replica, finds its attempt there).
const ATTEMPT_CHECKED: u8 = 1;
/// Its last change never reached the store (the history queue was full, or the write
/// failed): the next heartbeat counts as a change, so it is queued again.
const HISTORY_UNRECORDED: u8 = 2;
/// It heartbeats with a shared agent token, not a credential of its own.
const SHARED: u8 = 4;

/// A host's labels, build and installer types, as its last heartbeat gave them
/// (bounded by `Heartbeat::check_facts` before they get here).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Facts {
    labels: Box<[(Box<str>, Box<str>)]>,
    arch: Box<str>,
    os: Box<str>,
    os_version: Box<str>,
    fips: bool,
    installers: Box<[Box<str>]>,
    install_result: Option<tern_core::directive::state::AttemptResult>,
    install_failure: Option<tern_core::wire::InstallFailure>,
    /// Cleaned of control characters; boxed, 8 bytes when none (most hosts).
    update_failure: Option<Box<tern_core::wire::UpdateFailure>>,
    trust: Option<tern_core::wire::HostTrust>,
}

impl Facts {
    /// Whether `hb` carries exactly these facts (what [`Facts::of`] would make of it).
    fn same_as(&self, hb: &Heartbeat) -> bool {
        self.labels.len() == hb.labels.len()
            && self
                .labels
                .iter()
                .zip(&hb.labels)
                .all(|((k, v), (hk, hv))| **k == **hk && **v == **hv)
            && *self.arch == *hb.arch
            && *self.os == *hb.os
            && *self.os_version == *hb.os_version
            && self.fips == hb.fips
            && self.installers.len() == hb.installers.len()
            && self
                .installers
                .iter()
                .zip(&hb.installers)
                .all(|(a, b)| **a == **b)
            && self.install_result == hb.install_result
            && self.install_failure == hb.install_failure
            && self.update_failure.as_deref() == hb.update_failure.as_ref()
            && self.trust == hb.trust
    }

    fn of(hb: &Heartbeat) -> Option<Box<Facts>> {
        let none = hb.labels.is_empty()
            && hb.arch.is_empty()
            && hb.os.is_empty()
            && hb.os_version.is_empty()
            && !hb.fips
            && hb.installers.is_empty()
            && hb.install_result.is_none()
            && hb.install_failure.is_none()
            && hb.update_failure.is_none()
            && hb.trust.is_none();
        (!none).then(|| {
            Box::new(Facts {
                labels: hb
                    .labels
                    .iter()
                    .map(|(k, v)| (k.as_str().into(), v.as_str().into()))
                    .collect(),
                arch: hb.arch.as_str().into(),
                os: hb.os.as_str().into(),
                os_version: hb.os_version.as_str().into(),
                fips: hb.fips,
                installers: hb.installers.iter().map(|i| i.as_str().into()).collect(),
                install_result: hb.install_result.clone(),
                install_failure: hb.install_failure.clone(),
                update_failure: hb.update_failure.as_ref().map(|f| Box::new(f.cleaned())),
                trust: hb.trust,
            })
        })
    }
}

/// What an agent is keyed by: its updater_id, or its host_id when it has none.
#[derive(Clone, Copy, Hash, PartialEq, Eq)]
enum Key<'a> {
    Updater(IdRef<'a>),
    Host(IdRef<'a>),
}

impl Entry {
    fn key<'h>(&self, h: &'h Hostnames) -> Key<'h> {
        key_of(self.uid(h), self.hid(h))
    }

    fn uid<'h>(&self, h: &'h Hostnames) -> IdRef<'h> {
        self.updater_id.get(|t| h.text(t))
    }

    fn hid<'h>(&self, h: &'h Hostnames) -> IdRef<'h> {
        self.host_id.get(|t| h.text(t))
    }

    fn flag(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }

    fn set_flag(&mut self, flag: u8, on: bool) {
        if on {
            self.flags |= flag;
        } else {
            self.flags &= !flag;
        }
    }

    fn shared(&self) -> bool {
        self.flag(SHARED)
    }

    fn history_unrecorded(&self) -> bool {
        self.flag(HISTORY_UNRECORDED)
    }

    fn attempt_checked(&self) -> bool {
        self.flag(ATTEMPT_CHECKED)
    }

    fn first_seen(&self) -> Timestamp {
        join(self.first_seen_s, self.first_seen_ns)
    }

    fn last_seen(&self) -> Timestamp {
        join(self.last_seen_s, self.last_seen_ns)
    }
}

fn split(t: Timestamp) -> (i64, i32) {
    (t.as_second(), t.subsec_nanosecond())
}

fn join(second: i64, nanosecond: i32) -> Timestamp {
    // The halves of a valid `Timestamp` (`split`): `new` cannot refuse them.
    Timestamp::new(second, nanosecond).unwrap_or(Timestamp::UNIX_EPOCH)
}

fn key_of<'a>(updater_id: IdRef<'a>, host_id: IdRef<'a>) -> Key<'a> {
    if updater_id.is_empty() {
        Key::Host(host_id)
    } else {
        Key::Updater(updater_id)
    }
}

#[derive(Debug, Default)]
pub struct Inventory {
    entries: Vec<Entry>,
    /// Indexes into `entries`, hashed by [`Entry::key`].
    index: HashTable<u32>,
    hasher: std::hash::RandomState,
    names: Names,
    hostnames: Hostnames,
    /// How many names were live after the last clean-up of `names`.
    names_live: usize,
    /// The instant `Entry::heard` counts from (the first heartbeat's).
    epoch: Option<Instant>,
    /// At most the smallest `Entry::heard` (exact after an [`Inventory::expire`] scan,
    /// lowered by any heartbeat heard earlier): while no agent can have been silent
    /// longer than the limit, `expire` need not walk the agents. Without it every
    /// inventory page and report walked all of them (at 1M agents, a tenth of the
    /// inventory page's time on ternd), holding the lock heartbeats wait for.
    oldest_heard: u64,
    /// At most this many agents (`--max-agents`); `None`: no bound.
    max_agents: Option<usize>,
    /// At most this many agents heartbeating with a shared agent token
    /// (`--max-shared-token-hosts`); `None`: no bound.
    max_shared: Option<usize>,
    /// How many agents heartbeat with a shared agent token.
    shared: usize,
    /// How many agents have a change not in their history yet
    /// ([`Entry::history_unrecorded`]).
    unrecorded: usize,
}

/// Below this many interned names, unused ones are not worth cleaning up.
const NAMES_CLEANUP_MIN: usize = 1024;

impl Inventory {
    /// An inventory that refuses new agents past `max` ([`Refused::Full`]).
    pub fn with_max_agents(max: usize) -> Self {
        Self {
            max_agents: Some(max),
            ..Self::default()
        }
    }

    /// Refuses new agents through a shared agent token past `max`
    /// ([`Refused::SharedTokenFull`]).
    pub(crate) fn with_max_shared(mut self, max: usize) -> Self {
        self.max_shared = Some(max);
        self
    }

    fn hash(&self, key: &Key<'_>) -> u64 {
        self.hasher.hash_one(key)
    }

    fn find(&self, key: &Key<'_>) -> Option<usize> {
        let entries = &self.entries;
        self.index
            .find(self.hash(key), |&i| {
                entries[i as usize].key(&self.hostnames) == *key
            })
            .map(|&i| i as usize)
    }

    fn millis_since_epoch(&mut self, at: Instant) -> u64 {
        let epoch = *self.epoch.get_or_insert(at);
        u64::try_from(at.saturating_duration_since(epoch).as_millis()).unwrap_or(u64::MAX)
    }

    /// Records a heartbeat. The first heartbeat of a connection sets `first_seen`; later
    /// ones (even with another group or version) keep it while the agent is still
    /// known, i.e. until [`Inventory::expire`] forgot it for a long silence.
    pub fn heartbeat(
        &mut self,
        hb: &Heartbeat,
        now: Timestamp,
        at: Instant,
    ) -> Result<Recorded, Refused> {
        self.heartbeat_via(hb, now, at, false)
    }

    /// [`Inventory::heartbeat`], saying whether it came with a shared agent token.
    pub(crate) fn heartbeat_via(
        &mut self,
        hb: &Heartbeat,
        now: Timestamp,
        at: Instant,
        shared: bool,
    ) -> Result<Recorded, Refused> {
        let updater_id = IdRef::parse(&hb.updater_id);
        let host_id = IdRef::parse(&hb.host_id);
        if updater_id.is_empty() && host_id.is_empty() {
            return Err(Refused::Unidentified);
        }
        let found = self.find(&key_of(updater_id, host_id));
        if found.is_none()
            && let Some(max) = self.max_agents
            && self.entries.len() >= max
        {
            return Err(Refused::Full { max });
        }
        let was_shared = found.is_some_and(|i| self.entries[i].shared());
        if shared
            && !was_shared
            && let Some(max) = self.max_shared
            && self.shared >= max
        {
            return Err(Refused::SharedTokenFull { max });
        }
        match (was_shared, shared) {
            (false, true) => self.shared += 1,
            (true, false) => self.shared -= 1,
            _ => {}
        }
        let heard = self.millis_since_epoch(at);
        self.oldest_heard = self.oldest_heard.min(heard);
        let first_seen = found.map_or(now, |i| self.entries[i].first_seen());
        let (first_seen_s, first_seen_ns) = split(first_seen);
        let (last_seen_s, last_seen_ns) = split(now);
        // The same hostname as before (nearly always) keeps its place.
        let hostname = match found.map(|i| self.entries[i].hostname) {
            Some(r) if self.hostnames.get(r) == hb.hostname => r,
            Some(r) => {
                self.hostnames.release(r);
                self.hostnames.push(&hb.hostname)
            }
            None => self.hostnames.push(&hb.hostname),
        };
        // The same ids as before (always the key's, nearly always the other) keep
        // their place.
        let (stored_updater_id, stored_host_id) = match found {
            Some(i) => {
                let (old_u, old_h) = (self.entries[i].updater_id, self.entries[i].host_id);
                (
                    self.keep_id(Some(old_u), updater_id),
                    self.keep_id(Some(old_h), host_id),
                )
            }
            None => (self.keep_id(None, updater_id), self.keep_id(None, host_id)),
        };
        let (install_state, mut directed, attempt_checked) = match found {
            Some(i) => (
                self.entries[i].install_state,
                self.entries[i].directed.take(),
                self.entries[i].attempt_checked(),
            ),
            None => (None, None, false),
        };
        let instruction = pending::deliver(&mut directed, hb.install_result.as_ref());
        let moved = found.is_some_and(|i| self.reports_changed(&self.entries[i], hb));
        let was_unrecorded = found.is_some_and(|i| self.entries[i].history_unrecorded());
        let changed = moved || found.is_none() || was_unrecorded;
        if was_unrecorded {
            self.unrecorded -= 1;
        }
        // What the host said before is nearly always what it says again: its symbols and
        // facts are kept without a lookup or an allocation.
        let (old_group, old_version, old_updater_version, old_failed_version, old_facts) =
            match found {
                Some(i) => {
                    let e = &mut self.entries[i];
                    (
                        Some(e.group),
                        Some(e.version),
                        e.updater_version,
                        e.failed_version,
                        e.facts.take(),
                    )
                }
                None => (None, None, None, None, None),
            };
        let facts = match old_facts {
            Some(f) if f.same_as(hb) => Some(f),
            _ => Facts::of(hb),
        };
        let names = &mut self.names;
        let mut entry = Entry {
            updater_id: stored_updater_id,
            host_id: stored_host_id,
            hostname,
            first_seen_s,
            last_seen_s,
            first_seen_ns,
            last_seen_ns,
            heard,
            group: names.intern_as(old_group, &hb.group),
            version: names.intern_as(old_version, &hb.version),
            updater_version: hb
                .updater_version
                .as_deref()
                .map(|v| names.intern_as(old_updater_version, v)),
            failed_version: hb
                .failed_version
                .as_deref()
                .map(|v| names.intern_as(old_failed_version, v)),
            updater_status: hb.updater_status,
            rollback: hb.rollback,
            healthy: hb.healthy,
            follows: hb.follows,
            facts,
            install_state,
            directed,
            flags: 0,
        };
        entry.set_flag(ATTEMPT_CHECKED, attempt_checked);
        entry.set_flag(SHARED, shared);
        match found {
            Some(i) => self.entries[i] = entry,
            None => {
                let i = u32::try_from(self.entries.len()).unwrap_or(u32::MAX);
                let hash = self.hash(&entry.key(&self.hostnames));
                self.entries.push(entry);
                let (entries, hasher, hostnames) = (&self.entries, &self.hasher, &self.hostnames);
                self.index.insert_unique(hash, i, |&j| {
                    hasher.hash_one(entries[j as usize].key(hostnames))
                });
            }
        }
        if self.hostnames.wants_compaction() {
            self.compact_hostnames();
        }
        Ok(Recorded {
            install: instruction,
            changed,
            moved,
        })
    }

    /// `id` as an entry keeps it: `old` when it is the same id (no text pushed again),
    /// else stored anew, `old`'s text (if any) released.
    fn keep_id(&mut self, old: Option<StoredId<TextRef>>, id: IdRef<'_>) -> StoredId<TextRef> {
        if let Some(o) = old {
            if o.get(|t| self.hostnames.text(t)) == id {
                return o;
            }
            if let Some(t) = o.text() {
                self.hostnames.release_text(t);
            }
        }
        StoredId::of(id, |s| self.hostnames.push_text(s))
    }

    /// Whether `hb` reports another state than `e` holds in what a host's history
    /// follows (`tern_core::history::HostState`).
    fn reports_changed(&self, e: &Entry, hb: &Heartbeat) -> bool {
        let name = |s: Sym| self.names.get(s);
        name(e.group) != hb.group
            || name(e.version) != hb.version
            || e.updater_version.map(name) != hb.updater_version.as_deref()
            || e.failed_version.map(name) != hb.failed_version.as_deref()
            || e.updater_status != hb.updater_status
            || e.rollback != hb.rollback
            || e.healthy != hb.healthy
            || e.follows != hb.follows
            || e.facts.as_ref().and_then(|f| f.install_failure.as_ref())
                != hb.install_failure.as_ref()
    }

    /// Forgets agents silent for longer than `max_silence`; returns how many.
    pub(crate) fn expire(&mut self, at: Instant, max_silence: Duration) -> usize {
        let now = self.millis_since_epoch(at);
        let silence = u64::try_from(max_silence.as_millis()).unwrap_or(u64::MAX);
        if now.saturating_sub(self.oldest_heard) <= silence {
            return 0;
        }
        let mut removed = 0;
        let mut oldest = now;
        // From the end: the entry swapped into a freed slot has been checked already.
        for i in (0..self.entries.len()).rev() {
            let heard = self.entries[i].heard;
            if now.saturating_sub(heard) <= silence {
                oldest = oldest.min(heard);
                continue;
            }
            self.remove(i);
            removed += 1;
        }
        self.oldest_heard = oldest;
        if removed > 0 {
            self.clean_up_names();
            if self.hostnames.wants_compaction() {
                self.compact_hostnames();
            }
        }
        removed
    }

    /// Marks the agent's last change as not in its history yet, so that its next
    /// heartbeat queues it again (`history`).
    pub(crate) fn mark_history_unrecorded(&mut self, updater_id: &str) {
        let id = IdRef::parse(updater_id);
        if let Some(i) = self.find(&Key::Updater(id))
            && !self.entries[i].history_unrecorded()
        {
            self.entries[i].set_flag(HISTORY_UNRECORDED, true);
            self.unrecorded += 1;
        }
    }

    /// How many agents have a change their history does not hold yet.
    pub(crate) fn history_unrecorded(&self) -> usize {
        self.unrecorded
    }

    /// Forgets the agent with this updater_id (its credential was revoked); whether it
    /// was here.
    pub(crate) fn forget_updater(&mut self, updater_id: &str) -> bool {
        let id = IdRef::parse(updater_id);
        match self.find(&Key::Updater(id)) {
            Some(i) => {
                self.remove(i);
                true
            }
            None => false,
        }
    }

    /// Removes entry `i`, moving the last entry into its place.
    fn remove(&mut self, i: usize) {
        if self.entries[i].shared() {
            self.shared -= 1;
        }
        if self.entries[i].history_unrecorded() {
            self.unrecorded -= 1;
        }
        let hash = self.hash(&self.entries[i].key(&self.hostnames));
        let e = &self.entries[i];
        let (hostname, texts) = (e.hostname, [e.updater_id.text(), e.host_id.text()]);
        self.hostnames.release(hostname);
        for t in texts.into_iter().flatten() {
            self.hostnames.release_text(t);
        }
        if let Ok(slot) = self.index.find_entry(hash, |&j| j as usize == i) {
            slot.remove();
        }
        let last = self.entries.len() - 1;
        self.entries.swap_remove(i);
        if i != last {
            let hash = self.hash(&self.entries[i].key(&self.hostnames));
            if let Some(slot) = self.index.find_mut(hash, |&j| j as usize == last) {
                *slot = u32::try_from(i).unwrap_or(u32::MAX);
            }
        }
    }

    /// Writes the live hostnames into a fresh store, leaving the garbage behind.
    fn compact_hostnames(&mut self) {
        let mut fresh = self.hostnames.compacted();
        for e in &mut self.entries {
            e.hostname = fresh.push(self.hostnames.get(e.hostname));
            // Where a text id is moves; what it reads, and so its key's hash, does not.
            for id in [&mut e.updater_id, &mut e.host_id] {
                if let Some(t) = id.text() {
                    *id = StoredId::Text(fresh.push_text(self.hostnames.text(t)));
                }
            }
        }
        self.hostnames = fresh;
    }

    /// Interned names are never freed one by one; once most are unused (agents with
    /// one-off versions came and went), they are interned again from the live agents.
    fn clean_up_names(&mut self) {
        if self.names.len() < NAMES_CLEANUP_MIN.max(2 * self.names_live) {
            return;
        }
        let old = std::mem::take(&mut self.names);
        let names = &mut self.names;
        for e in &mut self.entries {
            e.group = names.intern(old.get(e.group));
            e.version = names.intern(old.get(e.version));
            e.updater_version = e.updater_version.map(|s| names.intern(old.get(s)));
            e.failed_version = e.failed_version.map(|s| names.intern(old.get(s)));
        }
        self.names_live = self.names.len();
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Agents that heartbeat with a token not bound to them (a shared agent token, or a
    /// controller's).
    pub(crate) fn shared_token_hosts(&self) -> usize {
        self.shared
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn view<'a>(&'a self, e: &'a Entry) -> AgentRef<'a> {
        AgentRef {
            entry: e,
            names: &self.names,
            hostnames: &self.hostnames,
        }
    }

    pub fn agents(&self) -> impl Iterator<Item = AgentRef<'_>> + Clone {
        self.entries.iter().map(|e| self.view(e))
    }

    /// The agent whose updater_id is `updater_id`.
    pub(crate) fn by_updater_id(&self, updater_id: &str) -> Option<AgentRef<'_>> {
        let id = IdRef::parse(updater_id);
        if id.is_empty() {
            return None;
        }
        self.find(&Key::Updater(id))
            .map(|i| self.view(&self.entries[i]))
    }

    /// How many agents run each (group, version), for `/metrics`.
    pub(crate) fn counts_by_group_and_version(&self) -> BTreeMap<(&str, &str), u64> {
        let mut by_sym: HashMap<(Sym, Sym), u64> = HashMap::new();
        for e in &self.entries {
            *by_sym.entry((e.group, e.version)).or_default() += 1;
        }
        by_sym
            .into_iter()
            .map(|((g, v), n)| ((self.names.get(g), self.names.get(v)), n))
            .collect()
    }

    /// This replica's report: counts, and what the coming reconciles need of it
    /// ([`tern_core::inventory::replica_report`]). Without a need for candidates no
    /// agent is scanned for them, only the canaries are looked up.
    pub(crate) fn report<R: rand_core::RngCore + ?Sized>(
        &self,
        now: Timestamp,
        period: SignedDuration,
        pinned: impl Fn(&str) -> bool,
        needs: Option<&Needs>,
        canary_tenure: SignedDuration,
        rng: &mut R,
    ) -> ReportSpec {
        replica_report(
            now,
            self.agents(),
            |id| self.by_updater_id(id),
            pinned,
            needs,
            period,
            canary_tenure,
            rng,
        )
    }

    /// [`Inventory::report`] bounded in size whatever the agents present
    /// ([`tern_core::inventory::bound_report`]): the groups `known` to the rollout
    /// keep their entries. Returns how many entries were folded.
    // The inputs of `tern_core::inventory::replica_report`, plus `known`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn bounded_report<R: rand_core::RngCore + ?Sized>(
        &self,
        now: Timestamp,
        period: SignedDuration,
        pinned: impl Fn(&str) -> bool,
        needs: Option<&Needs>,
        canary_tenure: SignedDuration,
        known: impl Fn(&str) -> bool,
        rng: &mut R,
    ) -> (ReportSpec, usize) {
        let mut spec = self.report(now, period, pinned, needs, canary_tenure, rng);
        let folded = tern_core::inventory::bound_report(&mut spec, known);
        (spec, folded)
    }
}

/// One agent of an [`Inventory`], read in place.
#[derive(Clone, Copy)]
pub struct AgentRef<'a> {
    entry: &'a Entry,
    names: &'a Names,
    hostnames: &'a Hostnames,
}

impl<'a> AgentRef<'a> {
    /// Its hostname, for listing and filtering without building the whole entry.
    pub(crate) fn hostname(&self) -> &'a str {
        self.hostnames.get(self.entry.hostname)
    }

    /// Its group, version and updater_id for as long as the inventory is borrowed
    /// (`AgentView`'s borrow only as long as this reference).
    pub(crate) fn group_name(&self) -> &'a str {
        self.names.get(self.entry.group)
    }

    pub(crate) fn version_name(&self) -> &'a str {
        self.names.get(self.entry.version)
    }

    /// Its updater_id as kept (ordered, compared and cloned without a string).
    pub(crate) fn updater_id_key(&self) -> IdRef<'a> {
        self.entry.uid(self.hostnames)
    }

    /// The (os, arch) its last heartbeat reported, when it sent its facts.
    pub(crate) fn platform(&self) -> Option<(&'a str, &'a str)> {
        let f = self.entry.facts.as_deref()?;
        (!f.os.is_empty() && !f.arch.is_empty()).then_some((&*f.os, &*f.arch))
    }

    /// Its last heartbeat said it runs unhealthy or rolled back.
    pub(crate) fn is_failed(&self) -> bool {
        self.entry.rollback || self.entry.healthy == Some(false)
    }

    /// The agent in its plain form: its last heartbeat as sent, and when it was seen.
    pub(crate) fn to_inventory_agent(self) -> InventoryAgent {
        let e = self.entry;
        InventoryAgent {
            heartbeat: Heartbeat {
                updater_id: e.uid(self.hostnames).to_string(),
                host_id: e.hid(self.hostnames).to_string(),
                hostname: self.hostname().to_string(),
                group: self.names.get(e.group).to_owned(),
                version: self.names.get(e.version).to_owned(),
                updater_version: e.updater_version.map(|s| self.names.get(s).to_owned()),
                updater_status: e.updater_status,
                rollback: e.rollback,
                failed_version: e.failed_version.map(|s| self.names.get(s).to_owned()),
                healthy: e.healthy,
                follows: e.follows,
                ..facts_heartbeat(e.facts.as_deref())
            },
            first_seen: e.first_seen(),
            last_seen: e.last_seen(),
        }
    }
}

/// A heartbeat holding only `facts` (the rest default).
fn facts_heartbeat(facts: Option<&Facts>) -> Heartbeat {
    let Some(f) = facts else {
        return Heartbeat::default();
    };
    Heartbeat {
        labels: f
            .labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        arch: f.arch.to_string(),
        os: f.os.to_string(),
        os_version: f.os_version.to_string(),
        fips: f.fips,
        installers: f.installers.iter().map(ToString::to_string).collect(),
        install_result: f.install_result.clone(),
        install_failure: f.install_failure.clone(),
        update_failure: f.update_failure.as_deref().cloned(),
        trust: f.trust,
        ..Heartbeat::default()
    }
}

impl AgentView for AgentRef<'_> {
    fn updater_id(&self) -> Cow<'_, str> {
        match self.entry.uid(self.hostnames) {
            IdRef::Text(s) => Cow::Borrowed(s),
            id => Cow::Owned(id.to_string()),
        }
    }
    fn updater_numeral(&self) -> UpdaterNumeral {
        self.entry.uid(self.hostnames).numeral()
    }
    fn has_updater_id(&self) -> bool {
        !self.entry.updater_id.is_empty()
    }
    fn group(&self) -> &str {
        self.names.get(self.entry.group)
    }
    fn version(&self) -> &str {
        self.names.get(self.entry.version)
    }
    fn updater_status(&self) -> UpdaterStatus {
        self.entry.updater_status
    }
    fn failed(&self) -> bool {
        self.entry.rollback || self.entry.healthy == Some(false)
    }
    fn model(&self) -> tern_core::inventory::Model {
        // The install state is kept only while a directive is active.
        tern_core::inventory::Model::of(self.entry.follows, self.entry.install_state.is_some())
    }
    fn install_failure(&self) -> Option<(&str, &str)> {
        let f = self.entry.facts.as_deref()?.install_failure.as_ref()?;
        Some((f.version.as_str(), f.kind.as_str()))
    }
    fn failure_reason(&self, target: &str) -> Option<String> {
        let f = self.entry.facts.as_deref()?;
        tern_core::inventory::failure_reason(
            f.update_failure.as_deref(),
            f.install_failure.as_ref(),
            target,
        )
    }
    fn first_seen(&self) -> Timestamp {
        self.entry.first_seen()
    }
    fn connected(&self) -> ConnectedAgent {
        let e = self.entry;
        ConnectedAgent {
            updater_id: e.uid(self.hostnames).to_string(),
            host_id: e.hid(self.hostnames).to_string(),
            hostname: self.hostname().to_string(),
            group: self.group().to_owned(),
            version: self.version().to_owned(),
            updater_status: e.updater_status,
            healthy: e.healthy,
            failed_version: e.failed_version.map(|s| self.names.get(s).to_owned()),
            refused_version: self.install_failure().map(|(v, _)| v.to_owned()),
            attributes: Default::default(),
        }
    }
    fn fact(&self, attribute: &tern_core::canary::Attribute<'_>) -> Option<&str> {
        use tern_core::canary::Attribute;
        let facts = self.entry.facts.as_deref()?;
        let v: &str = match attribute {
            Attribute::Arch => &facts.arch,
            Attribute::Os => &facts.os,
            Attribute::OsVersion => &facts.os_version,
            Attribute::Label(key) => return self.label(key),
        };
        (!v.is_empty()).then_some(v)
    }
    fn label(&self, key: &str) -> Option<&str> {
        let facts = self.entry.facts.as_deref()?;
        facts
            .labels
            .iter()
            .find(|(k, _)| &**k == key)
            .map(|(_, v)| &**v)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn hb(id: &str, group: &str, version: &str) -> Heartbeat {
        Heartbeat {
            updater_id: id.into(),
            group: group.into(),
            version: version.into(),
            ..Heartbeat::default()
        }
    }

    #[test]
    fn first_seen_survives_changes_but_not_forgetting() {
        let mut inv = Inventory::default();
        let t0: Timestamp = "2026-11-23T10:00:00Z".parse().unwrap();
        let t1: Timestamp = "2026-11-23T10:01:00Z".parse().unwrap();
        let at = Instant::now();
        let silence = Duration::from_secs(180);
        inv.heartbeat(&hb("a", "dev", "1.0.0"), t0, at).unwrap();
        inv.heartbeat(&hb("a", "prod", "1.1.0"), t1, at + Duration::from_secs(60))
            .unwrap();
        let a = inv.agents().next().unwrap().to_inventory_agent();
        assert_eq!(a.first_seen, t0);
        assert_eq!(a.last_seen, t1);
        assert_eq!(a.heartbeat.group, "prod");
        // Silent long, but heard again before any expiry: the same connection.
        let t2: Timestamp = "2026-11-23T10:10:00Z".parse().unwrap();
        inv.heartbeat(&hb("a", "prod", "1.1.0"), t2, at + Duration::from_secs(600))
            .unwrap();
        assert_eq!(inv.agents().next().unwrap().first_seen(), t0);
        assert_eq!(inv.expire(at + Duration::from_secs(600), silence), 0);
        assert_eq!(inv.expire(at + Duration::from_secs(900), silence), 1);
        assert!(inv.is_empty());
        // Forgotten, then heard: a new connection.
        inv.heartbeat(&hb("a", "prod", "1.1.0"), t2, at + Duration::from_secs(901))
            .unwrap();
        assert_eq!(inv.agents().next().unwrap().first_seen(), t2);
    }

    #[test]
    fn expire_skips_no_agent_heard_before_its_last_scan() {
        let mut inv = Inventory::default();
        let t: Timestamp = "2026-11-23T10:00:00Z".parse().unwrap();
        let at = Instant::now();
        let silence = Duration::from_secs(180);
        // The first heartbeat sets the epoch; "a" is heard 1000 s after it.
        inv.heartbeat(&hb("first", "dev", "1.0.0"), t, at).unwrap();
        inv.heartbeat(&hb("a", "dev", "1.0.0"), t, at + Duration::from_secs(1000))
            .unwrap();
        inv.heartbeat(
            &hb("first", "dev", "1.0.0"),
            t,
            at + Duration::from_secs(1000),
        )
        .unwrap();
        // A scan: nobody silent, and the oldest now heard at 1000 s.
        assert_eq!(inv.expire(at + Duration::from_secs(1000), silence), 0);
        // A heartbeat given an earlier instant than that (a dev clock set back): its
        // agent must still be forgotten once silent past the limit, although nobody
        // else is.
        inv.heartbeat(&hb("b", "dev", "1.0.0"), t, at + Duration::from_secs(10))
            .unwrap();
        assert_eq!(inv.expire(at + Duration::from_secs(1100), silence), 1);
        assert_eq!(inv.len(), 2);
        assert!(inv.by_updater_id("b").is_none());
        // And the bound is exact again: at the limit of "a" and "first", nothing goes;
        // past it, both.
        assert_eq!(inv.expire(at + Duration::from_secs(1180), silence), 0);
        assert_eq!(inv.expire(at + Duration::from_secs(1181), silence), 2);
    }

    #[test]
    fn timestamps_are_kept_exactly() {
        for t in [
            Timestamp::UNIX_EPOCH,
            Timestamp::MIN,
            Timestamp::MAX,
            "2026-11-23T12:00:00.123456789Z".parse().unwrap(),
            Timestamp::new(-1, -5).unwrap(),
        ] {
            let (s, ns) = split(t);
            assert_eq!(join(s, ns), t);
        }
    }

    #[test]
    fn hostnames_survive_renames_forgetting_and_compaction() {
        let mut inv = Inventory::default();
        let now: Timestamp = "2026-11-23T10:00:00Z".parse().unwrap();
        let at = Instant::now();
        let name = |i: usize, round: usize| format!("{round}-{i:04}-{}", "x".repeat(90));
        for round in 0..4 {
            for i in 0..1000 {
                let mut h = hb(&format!("u{i}"), "dev", "1.0.0");
                h.hostname = name(i, round);
                inv.heartbeat(&h, now, at).unwrap();
            }
        }
        assert!(inv.forget_updater("u7"));
        let live: usize = (0..1000)
            .filter(|&i| i != 7)
            .map(|i| name(i, 3).len())
            .sum();
        assert!(
            inv.hostnames.garbage() <= live,
            "renames leave garbage, and compaction bounds it: {} garbage for {live} live",
            inv.hostnames.garbage()
        );
        let mut seen: Vec<String> = inv.agents().map(|a| a.hostname().to_string()).collect();
        seen.sort();
        let mut want: Vec<String> = (0..1000).filter(|&i| i != 7).map(|i| name(i, 3)).collect();
        want.sort();
        assert_eq!(seen, want);
        let a = inv.by_updater_id("u8").unwrap().to_inventory_agent();
        assert_eq!(a.heartbeat.hostname, name(8, 3));
    }

    #[test]
    fn text_ids_are_kept_whole_through_changes_compaction_and_removal() {
        let now: Timestamp = "2026-11-23T10:00:00Z".parse().unwrap();
        let at = Instant::now();
        let mut inv = Inventory::default();
        let beat = |i: usize, round: usize| Heartbeat {
            // Every other agent has no updater id: keyed by its text host id.
            updater_id: if i.is_multiple_of(2) {
                format!("updater-{i}")
            } else {
                String::new()
            },
            host_id: if i.is_multiple_of(2) {
                format!("machine-{i}-{round}")
            } else {
                format!("machine-{i}")
            },
            hostname: format!("host-{i}-{round}-{}", "x".repeat(24)),
            ..Heartbeat::default()
        };
        let n = 2_000;
        let mut compacted = false;
        for round in 0..4 {
            for i in 0..n {
                let before = inv.hostnames.garbage();
                inv.heartbeat(&beat(i, round), now, at).unwrap();
                compacted |= inv.hostnames.garbage() < before;
            }
        }
        assert!(compacted, "the rounds' garbage should have been compacted");
        assert_eq!(inv.len(), n);
        let mut seen = 0;
        for a in inv.agents() {
            let a = a.to_inventory_agent();
            let want = beat(
                a.heartbeat.hostname["host-".len()..]
                    .split('-')
                    .next()
                    .unwrap()
                    .parse()
                    .unwrap(),
                3,
            );
            assert_eq!(a.heartbeat.updater_id, want.updater_id);
            assert_eq!(a.heartbeat.host_id, want.host_id);
            assert_eq!(a.heartbeat.hostname, want.hostname);
            seen += 1;
        }
        assert_eq!(seen, n);
        let a = inv
            .by_updater_id("updater-10")
            .unwrap()
            .to_inventory_agent();
        assert_eq!(a.heartbeat.host_id, "machine-10-3");
        // Forgetting agents releases their ids' bytes with their hostnames'.
        let before = inv.hostnames.garbage();
        assert!(inv.forget_updater("updater-10"));
        assert_eq!(
            inv.hostnames.garbage() - before,
            "updater-10".len() + "machine-10-3".len() + beat(10, 3).hostname.len()
        );
        assert!(inv.by_updater_id("updater-10").is_none());
        assert_eq!(inv.len(), n - 1);
    }

    #[test]
    fn an_agent_entry_stays_small() {
        // What a million agents cost (docs/benchmarks.md): raise it only knowingly.
        assert!(
            std::mem::size_of::<Entry>() <= 112,
            "{}",
            std::mem::size_of::<Entry>()
        );
    }

    #[test]
    fn a_heartbeat_without_ids_is_refused() {
        let mut inv = Inventory::default();
        let now: Timestamp = "2026-11-23T10:00:00Z".parse().unwrap();
        let r = inv.heartbeat(&hb("", "dev", "1.0.0"), now, Instant::now());
        assert!(matches!(r, Err(Refused::Unidentified)), "{r:?}");
        assert!(inv.is_empty());
    }

    #[test]
    fn a_heartbeat_says_whether_the_hosts_state_changed() {
        let mut inv = Inventory::default();
        let now: Timestamp = "2026-11-23T10:00:00Z".parse().unwrap();
        let at = Instant::now();
        let mut beat = |h: &Heartbeat| inv.heartbeat(h, now, at).unwrap().changed;
        let h = hb("a", "dev", "1.0.0");
        assert!(beat(&h), "new to this replica");
        assert!(!beat(&h), "the same again");
        let mut back = hb("a", "dev", "1.0.0");
        back.rollback = true;
        back.failed_version = Some("1.1.0".into());
        assert!(beat(&back));
        assert!(!beat(&back));
        let mut sick = back.clone();
        sick.healthy = Some(false);
        assert!(beat(&sick));
        let mut newer_updater = sick.clone();
        newer_updater.updater_version = Some("0.2.0".into());
        assert!(beat(&newer_updater));
        // Facts and the hostname are not what history follows.
        let mut renamed = newer_updater.clone();
        renamed.hostname = "other".into();
        renamed.arch = "arm64".into();
        assert!(!beat(&renamed));
        assert!(beat(&hb("a", "prod", "1.0.0")));
        // A change that never reached the history is queued again by the next
        // heartbeat, once.
        inv.mark_history_unrecorded("a");
        let mut beat = |h: &Heartbeat| inv.heartbeat(h, now, at).unwrap().changed;
        assert!(beat(&hb("a", "prod", "1.0.0")));
        assert!(!beat(&hb("a", "prod", "1.0.0")));
    }

    /// What brings a report forward: a known host's counted state moving, not a new
    /// host (counted once settled) nor a re-queued history entry.
    #[test]
    fn a_heartbeat_says_whether_what_the_report_counts_moved() {
        let mut inv = Inventory::default();
        let now: Timestamp = "2026-11-23T10:00:00Z".parse().unwrap();
        let at = Instant::now();
        let mut beat = |h: &Heartbeat| inv.heartbeat(h, now, at).unwrap().moved;
        assert!(!beat(&hb("a", "dev", "1.0.0")), "new: not counted yet");
        assert!(!beat(&hb("a", "dev", "1.0.0")));
        assert!(beat(&hb("a", "dev", "1.1.0")), "updated");
        let mut back = hb("a", "dev", "1.0.0");
        back.rollback = true;
        assert!(beat(&back), "rolled back");
        let mut facts = back.clone();
        facts.arch = "arm64".into();
        assert!(!beat(&facts), "facts are not counted");
        inv.mark_history_unrecorded("a");
        assert!(!inv.heartbeat(&facts, now, at).unwrap().moved);
    }

    #[test]
    fn unused_names_are_cleaned_up() {
        let mut inv = Inventory::default();
        let now: Timestamp = "2026-11-23T10:00:00Z".parse().unwrap();
        let at = Instant::now();
        let silence = Duration::from_secs(1);
        for i in 0..3 * NAMES_CLEANUP_MIN {
            let h = hb(&format!("old-{i}"), "dev", &format!("1.0.{i}"));
            inv.heartbeat(&h, now, at).unwrap();
        }
        let later = at + Duration::from_secs(10);
        inv.heartbeat(&hb("new", "prod", "2.0.0"), now, later)
            .unwrap();
        assert_eq!(inv.expire(later, silence), 3 * NAMES_CLEANUP_MIN);
        assert_eq!(inv.names.len(), 2, "only prod and 2.0.0 are live");
        let a = inv.by_updater_id("new").unwrap().to_inventory_agent();
        assert_eq!(
            (a.heartbeat.group.as_str(), a.heartbeat.version.as_str()),
            ("prod", "2.0.0")
        );
    }

    /// One step of the model test: a heartbeat from agent `agent` of a small pool, or time
    /// passing (in seconds) followed by an expiry.
    #[derive(Clone, Debug)]
    enum Step {
        Beat {
            agent: usize,
            group: usize,
            version: usize,
            status: UpdaterStatus,
            healthy: Option<bool>,
            rollback: bool,
            failed_version: Option<usize>,
        },
        Wait(u64),
    }

    /// Ids of every shape the compact form distinguishes; some agents have no updater id.
    const IDS: &[(&str, &str)] = &[
        (
            "0f8fad5b-d9cb-469f-a165-70867728950e",
            "4c4c4544003957108052b4c04f384833",
        ),
        ("7c9e6679-7425-40de-944b-e07fc1f90ae7", ""),
        ("host-3", "machine-3"),
        ("", "4c4c4544003957108052b4c04f384834"),
        ("", "machine-5"),
        ("ffffffff-ffff-ffff-ffff-ffffffffffff", "MACHINE-6"),
        (
            "00000000-0000-0000-0000-000000000001",
            "4c4c4544003957108052b4c04f384833",
        ),
    ];
    const GROUPS: &[&str] = &["", "dev", "staging", "prod"];
    const VERSIONS: &[&str] = &["1.0.0", "v1.0.0", "1.1.0", "2.0.0-rc.1", ""];

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            4 => (
                0..IDS.len(),
                0..GROUPS.len(),
                0..VERSIONS.len(),
                prop_oneof![
                    Just(UpdaterStatus::Enabled),
                    Just(UpdaterStatus::Disabled),
                    Just(UpdaterStatus::Pinned)
                ],
                proptest::option::of(any::<bool>()),
                any::<bool>(),
                proptest::option::of(0..VERSIONS.len()),
            )
                .prop_map(|(agent, group, version, status, healthy, rollback, failed_version)| {
                    Step::Beat { agent, group, version, status, healthy, rollback, failed_version }
                }),
            1 => (0u64..200).prop_map(Step::Wait),
        ]
    }

    proptest! {
        /// The compact inventory holds exactly what a plain map of heartbeats would, and
        /// reports the same: against a model keyed by id text holding `InventoryAgent`s.
        #[test]
        fn agrees_with_a_plain_model(steps in proptest::collection::vec(step(), 1..60)) {
            let silence = Duration::from_secs(180);
            let period = SignedDuration::from_secs(60);
            let at0 = Instant::now();
            let t0: Timestamp = "2026-11-23T10:00:00Z".parse().unwrap();
            let mut elapsed = 0u64;
            let mut inv = Inventory::default();
            let mut model: HashMap<String, (InventoryAgent, u64)> = HashMap::new();
            for s in steps {
                let at = at0 + Duration::from_secs(elapsed);
                let now = t0 + SignedDuration::from_secs(elapsed as i64);
                match s {
                    Step::Beat { agent, group, version, status, healthy, rollback, failed_version } => {
                        let (uid, hid) = IDS[agent];
                        let h = Heartbeat {
                            updater_id: uid.into(),
                            host_id: hid.into(),
                            hostname: format!("host-{agent}"),
                            group: GROUPS[group].into(),
                            version: VERSIONS[version].into(),
                            updater_version: (agent % 2 == 0).then(|| "0.1.0".into()),
                            updater_status: status,
                            rollback,
                            failed_version: failed_version.map(|v| VERSIONS[v].into()),
                            healthy,
                            // Facts on some agents, none on others: both kept exactly.
                            labels: if agent % 3 == 0 {
                                [("env".to_string(), GROUPS[group].to_string())].into()
                            } else {
                                Default::default()
                            },
                            arch: if agent % 2 == 0 { "arm64".into() } else { String::new() },
                            fips: agent == 1,
                            installers: if agent % 3 == 0 { vec!["tern-update".into()] } else { vec![] },
                            ..Heartbeat::default()
                        };
                        inv.heartbeat(&h, now, at).unwrap();
                        let key = if uid.is_empty() { format!("h:{hid}") } else { format!("u:{uid}") };
                        let first_seen = match model.get(&key) {
                            Some((a, _)) => a.first_seen,
                            None => now,
                        };
                        model.insert(key, (InventoryAgent { heartbeat: h, first_seen, last_seen: now }, elapsed));
                    }
                    Step::Wait(secs) => {
                        elapsed += secs;
                        let at = at0 + Duration::from_secs(elapsed);
                        let before = model.len();
                        model.retain(|_, (_, heard)| elapsed - *heard <= silence.as_secs());
                        prop_assert_eq!(inv.expire(at, silence), before - model.len());
                    }
                }
                let mut got: Vec<InventoryAgent> = inv.agents().map(|a| a.to_inventory_agent()).collect();
                let mut want: Vec<InventoryAgent> = model.values().map(|(a, _)| a.clone()).collect();
                let order = |a: &InventoryAgent, b: &InventoryAgent| {
                    (&a.heartbeat.updater_id, &a.heartbeat.host_id).cmp(&(&b.heartbeat.updater_id, &b.heartbeat.host_id))
                };
                got.sort_by(order);
                want.sort_by(order);
                prop_assert_eq!(&got, &want);
                let now = t0 + SignedDuration::from_secs(elapsed as i64);
                let mut rng = <rand_chacha::ChaCha8Rng as rand_core::SeedableRng>::seed_from_u64(0);
                prop_assert_eq!(inv.report(now, period, |_| false, None, period, &mut rng), tern_core::inventory::build_report(now, &want, period));
                for (uid, _) in IDS {
                    let got = inv.by_updater_id(uid).map(|a| a.to_inventory_agent());
                    let want = model.get(&format!("u:{uid}")).filter(|_| !uid.is_empty()).map(|(a, _)| a.clone());
                    prop_assert_eq!(got, want);
                }
            }
        }
    }
}
