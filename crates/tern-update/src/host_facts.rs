//! What this host tells ternd about itself, with find and with its heartbeats alike
//! (`host_facts`), and its OS version as heartbeats carry it (`host_os_version`).

use crate::layout::Layout;
use crate::state::{self, Spec};

/// What this host tells ternd about itself, with find and with its heartbeats alike:
/// the version it runs (what tern-update installed, else what a local-script install
/// put in place), its labels, build and installer types.
pub(crate) fn host_facts(
    layout: &Layout,
    spec: &Spec,
    status: &state::Status,
) -> tern_core::wire::FindFacts {
    tern_core::wire::FindFacts {
        trust_root: crate::trust::pinned_root(layout, spec).unwrap_or(0),
        version: status
            .active
            .clone()
            .or_else(|| status.script_version.clone())
            .unwrap_or_default(),
        labels: spec.labels.clone(),
        arch: crate::artifact::go_arch(std::env::consts::ARCH).to_string(),
        os: std::env::consts::OS.to_string(),
        fips: spec.fips,
        installers: crate::installers::advertised(spec),
        product: spec.product.clone().unwrap_or_default(),
    }
}

/// The host's OS version, read from its os-release file ([`os_version`]); empty when
/// it has none.
pub(crate) fn host_os_version() -> String {
    ["/etc/os-release", "/usr/lib/os-release"]
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok())
        .map(|text| os_version(&text))
        .unwrap_or_default()
}

/// `ID-VERSION_ID` of an os-release file (`debian-13`, `ubuntu-24.04`; `ID` alone
/// without a version, as on a rolling release), kept to what a heartbeat accepts:
/// letters, digits, '.', '-', '_', at most 64. Empty when the file names no ID.
fn os_version(os_release: &str) -> String {
    let field = |name: &str| {
        os_release.lines().find_map(|l| {
            let v = l.trim().strip_prefix(name)?.strip_prefix('=')?;
            let v = v.trim().trim_matches(|c| c == '"' || c == '\'');
            Some(
                v.chars()
                    .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
                    .collect::<String>(),
            )
        })
    };
    let Some(id) = field("ID").filter(|id| !id.is_empty()) else {
        return String::new();
    };
    let mut out = match field("VERSION_ID").filter(|v| !v.is_empty()) {
        Some(v) => format!("{id}-{v}"),
        None => id,
    };
    out.truncate(64);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_version_reads_id_and_version_id_and_keeps_them_safe() {
        let debian =
            "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nVERSION_ID=\"12\"\nID=debian\n";
        assert_eq!(os_version(debian), "debian-12");
        assert_eq!(
            os_version("ID=ubuntu\nVERSION_ID='24.04'\nID_LIKE=debian\n"),
            "ubuntu-24.04"
        );
        // A rolling release has no VERSION_ID; ID_LIKE is not ID.
        assert_eq!(os_version("ID_LIKE=arch\nID=arch\n"), "arch");
        assert_eq!(os_version("NAME=nothing\n"), "");
        // Hostile content is cut down to what a heartbeat accepts.
        let hostile = format!("ID=\"a b;$(x)\"\nVERSION_ID={}\n", "9".repeat(100));
        let v = os_version(&hostile);
        assert!(v.starts_with("abx-999"), "{v}");
        assert_eq!(v.len(), 64);
        let hb = tern_core::wire::Heartbeat {
            os_version: v,
            ..tern_core::wire::Heartbeat::default()
        };
        assert_eq!(hb.check_facts(), Ok(()));
    }
}
