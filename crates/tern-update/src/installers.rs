//! The installer types this host takes from version directives: what `enable
//! --installer` may opt in to, and what find and heartbeats advertise. A leaf below
//! `host_facts` (which sends them) and `directive` (which checks instructions against them).

use tern_core::directive::resource::InstallerType;

use crate::error::{Error, Result};
use crate::state::Spec;

/// The installer type a host opts in to.
pub(crate) const LOCAL_SCRIPT: &str = "local-script";

/// Checks `enable --installer` values: only `local-script` is opted in to.
pub(crate) fn checked_opt_ins(list: Vec<String>) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for given in list {
        if given != LOCAL_SCRIPT {
            return Err(Error::UnknownInstallerType { given });
        }
        if !out.contains(&given) {
            out.push(given);
        }
    }
    Ok(out)
}

/// The installer types heartbeats advertise: the host's own, then those opted in to.
pub(crate) fn advertised(spec: &Spec) -> Vec<String> {
    let native = if spec.package.is_some() {
        InstallerType::Package
    } else {
        InstallerType::TernUpdate
    };
    let mut out = vec![native.as_str().to_string()];
    for t in &spec.installers {
        if t == LOCAL_SCRIPT && !out.contains(t) {
            out.push(t.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_local_script_is_opted_in_and_the_native_type_comes_first() {
        assert_eq!(
            checked_opt_ins(vec![LOCAL_SCRIPT.into(), LOCAL_SCRIPT.into()]).unwrap(),
            [LOCAL_SCRIPT]
        );
        assert!(checked_opt_ins(vec!["package".into()]).is_err());
        let mut spec = Spec::default();
        assert_eq!(advertised(&spec), ["tern-update"]);
        spec.installers = vec![LOCAL_SCRIPT.into()];
        assert_eq!(advertised(&spec), ["tern-update", "local-script"]);
        spec.package = Some(crate::state::PackageSpec {
            name: "tern-agent".into(),
            manager: crate::state::Manager::Apt,
        });
        assert_eq!(advertised(&spec), ["package", "local-script"]);
    }
}
