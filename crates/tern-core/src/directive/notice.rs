//! The notification-only controller's view: which hosts a directive would move (they
//! are outdated) and which run a version an advisory flags (insecure, end of life),
//! grouped by version. Nothing is installed; the server turns these into alerts.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::pass::PassOutcome;
use super::resource::{DirectiveSpec, NoticeKind, Notification};
use crate::domain::alert::kind;
use crate::domain::resource::Alert;
use crate::domain::version::Version;

/// Hosts on one version that the notification controller flags, and why.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct VersionNotice {
    pub version: String,
    pub kind: NoticeKind,
    /// The version the directive recommends for them, if it recommends one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recommended: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    pub hosts: u64,
}

/// The notices of one pass of `spec` over a replica's hosts.
pub fn notices(spec: &DirectiveSpec, out: &PassOutcome<'_>) -> Vec<VersionNotice> {
    let mut found: Vec<VersionNotice> = Vec::new();
    let recommended = |version: &str| {
        out.behind
            .keys()
            .find(|(from, _)| *from == version)
            .map(|(_, to)| to.to_string())
    };
    for ((from, to), n) in &out.behind {
        push(
            &mut found,
            VersionNotice {
                version: from.to_string(),
                kind: NoticeKind::Outdated,
                recommended: Some(to.to_string()),
                note: None,
                hosts: *n,
            },
        );
    }
    let reqs: Vec<_> = spec
        .advisories
        .iter()
        .filter_map(|a| semver::VersionReq::parse(&a.versions).ok().map(|r| (a, r)))
        .collect();
    for (version, n) in &out.versions {
        let Ok(v) = Version::parse(version) else {
            continue;
        };
        // The first advisory that flags the version speaks for it.
        if let Some((a, _)) = reqs.iter().find(|(_, r)| r.matches(&v.0)) {
            push(
                &mut found,
                VersionNotice {
                    version: version.to_string(),
                    kind: a.kind.into(),
                    recommended: recommended(version),
                    note: a.note.clone(),
                    hosts: *n,
                },
            );
        }
    }
    found.sort();
    found
}

/// Adds `n` to `all`, merged with the notice of the same version, kind and recommendation.
pub fn push(all: &mut Vec<VersionNotice>, n: VersionNotice) {
    match all
        .iter_mut()
        .find(|x| (&x.version, x.kind, &x.recommended) == (&n.version, n.kind, &n.recommended))
    {
        Some(x) => x.hosts += n.hosts,
        None => all.push(n),
    }
}

/// The alert kind of a notice kind.
pub(crate) fn alert_kind(k: NoticeKind) -> &'static str {
    match k {
        NoticeKind::Outdated => kind::DIRECTIVE_VERSIONS_OUTDATED,
        NoticeKind::Security => kind::DIRECTIVE_VERSIONS_SECURITY,
        NoticeKind::EndOfLife => kind::DIRECTIVE_VERSIONS_END_OF_LIFE,
    }
}

/// The directive alerts that hold at `now`: one per kind `notification.alert_on` names
/// that flags a host of the fleet (`fleet`: every replica's notices), and
/// `directive_stale` once the active directive's `stale_after` has passed. Each keeps
/// the `since` of the same alert in `previous`.
pub fn alerts(
    notification: Option<&Notification>,
    fleet: &[VersionNotice],
    active_stale_after: Option<Timestamp>,
    previous: &[Alert],
    now: Timestamp,
) -> Vec<Alert> {
    let mut held: Vec<(&str, String)> = Vec::new();
    for k in notification.map_or(&[][..], |n| &n.alert_on[..]) {
        if let Some(message) = summary(fleet, *k) {
            held.push((alert_kind(*k), message));
        }
    }
    if let Some(at) = active_stale_after
        && at <= now
    {
        held.push((
            kind::DIRECTIVE_STALE,
            format!(
                "the active directive went stale at {at}: its controller has not refreshed it; hosts still follow it"
            ),
        ));
    }
    held.sort();
    held.dedup_by(|a, b| a.0 == b.0);
    held.into_iter()
        .map(|(k, message)| Alert {
            kind: k.to_string(),
            group: None,
            since: previous
                .iter()
                .find(|a| a.kind == k)
                .map_or(now, |a| a.since),
            message,
        })
        .collect()
}

/// One line for an alert: how many hosts, on which versions.
pub fn summary(notices: &[VersionNotice], kind: NoticeKind) -> Option<String> {
    let of: Vec<&VersionNotice> = notices.iter().filter(|n| n.kind == kind).collect();
    let total: u64 = of.iter().map(|n| n.hosts).sum();
    if total == 0 {
        return None;
    }
    let what = match kind {
        NoticeKind::Outdated => "are not on the version recommended for them",
        NoticeKind::Security => "run versions with a security advisory",
        NoticeKind::EndOfLife => "run versions at their end of life",
    };
    let detail: Vec<String> = of
        .iter()
        .take(5)
        .map(|n| {
            let mut s = format!(
                "{} ({} host{}",
                n.version,
                n.hosts,
                if n.hosts == 1 { "" } else { "s" }
            );
            if let Some(r) = &n.recommended {
                s.push_str(&format!(", recommended {r}"));
            }
            if let Some(note) = &n.note {
                s.push_str(&format!(": {note}"));
            }
            s.push(')');
            s
        })
        .collect();
    let more = if of.len() > 5 { ", …" } else { "" };
    Some(format!(
        "{total} host{} {what}: {}{more}",
        if total == 1 { "" } else { "s" },
        detail.join(", ")
    ))
}
