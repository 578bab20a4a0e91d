//! The modular upgrade system's resources, selection rules and install states (RFD 90).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use tern_core::directive::resource::*;
use tern_core::directive::select::*;
use tern_core::directive::state::*;
use tern_core::host_update::instruction_waits_for_agents;

const DIRECTIVE: &str = r#"
kind: version_directive
version: v1
metadata:
  name: version-directive
spec:
  stale_after: 2026-12-01T00:00:00Z
  directives:
    - name: staging
      selectors:
        - labels: {env: staging}
      targets:
        - version: 1.2.0
          arch: amd64
          fips: false
          size: 1000
          sha256: "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
        - version: 1.2.0
          arch: arm64
      installers: [native, apt]
    - name: everyone-else
      selectors:
        - labels: {"*": "*"}
          current_version: ">=1.0.0"
      targets:
        - version: 1.1.0
      installers: [script]
"#;

fn installers() -> BTreeMap<String, Installer> {
    let texts = [
        "kind: installer\nmetadata: {name: native}\nspec: {type: tern-update}\n",
        "kind: installer\nmetadata: {name: apt}\nspec: {type: package, package: {name: myagent, manager: apt}}\n",
        "kind: installer\nmetadata: {name: script}\nspec:\n  type: local-script\n  local_script:\n    env: {VERSION: \"{target.version}\", CHANNEL: stable}\n    shell: /bin/bash\n    script: |\n      apt-get install -y \"myagent=${VERSION:?}\"\n",
    ];
    texts
        .iter()
        .map(|t| {
            let i = Installer::from_text(t).unwrap();
            (i.metadata.name.clone(), i)
        })
        .collect()
}

fn host<'a>(
    labels: &'a BTreeMap<String, String>,
    version: &'a str,
    arch: &'a str,
    installers: &'a [String],
) -> HostFacts<'a> {
    HostFacts {
        labels: Labels::Map(labels),
        group: "default",
        version,
        arch,
        os: "linux",
        fips: false,
        installers: Names::Strings(installers),
    }
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn selection_follows_the_rfd_rules() {
    let d = VersionDirective::from_text(DIRECTIVE).unwrap();
    let inst = installers();
    let staging = labels(&[("env", "staging")]);
    let prod = labels(&[("env", "prod")]);
    let all: Vec<String> = ["tern-update", "package", "local-script"]
        .map(String::from)
        .to_vec();
    let pkg_only: Vec<String> = vec!["package".into()];
    let none: Vec<String> = vec![];

    // First directive, first target that fits, first installer the host supports.
    match select(&d.spec, &inst, &host(&staging, "1.1.0", "amd64", &all)) {
        Selection::Install {
            directive,
            target,
            installer,
        } => {
            assert_eq!(
                (
                    directive.name.as_str(),
                    target.arch.as_deref(),
                    installer.metadata.name.as_str()
                ),
                ("staging", Some("amd64"), "native")
            );
        }
        other => panic!("{other:?}"),
    }
    match select(&d.spec, &inst, &host(&staging, "1.1.0", "amd64", &pkg_only)) {
        Selection::Install { installer, .. } => assert_eq!(installer.metadata.name, "apt"),
        other => panic!("{other:?}"),
    }
    // The arm64 host gets the arm64 target; tern-update refuses it (no size, no digest),
    // so the package installer is used.
    match select(&d.spec, &inst, &host(&staging, "1.1.0", "arm64", &all)) {
        Selection::Install {
            target, installer, ..
        } => {
            assert_eq!(target.arch.as_deref(), Some("arm64"));
            assert_eq!(installer.metadata.name, "apt");
        }
        other => panic!("{other:?}"),
    }
    // A host of another arch: no target fits; reasons say why, arch never changes.
    match select(&d.spec, &inst, &host(&staging, "1.1.0", "riscv64", &all)) {
        Selection::NoFit { reasons, .. } => {
            assert_eq!(reasons.len(), 2, "{reasons:?}");
            assert!(reasons[0].contains("arch never changes"), "{reasons:?}");
        }
        other => panic!("{other:?}"),
    }
    // No installer the host advertises.
    match select(&d.spec, &inst, &host(&staging, "1.1.0", "amd64", &none)) {
        Selection::NoFit { reasons, .. } => assert!(
            reasons.iter().all(|r| r.contains("does not advertise")),
            "{reasons:?}"
        ),
        other => panic!("{other:?}"),
    }
    // The catch-all directive; at its target already.
    assert!(matches!(
        select(&d.spec, &inst, &host(&prod, "1.1.0", "amd64", &all)),
        Selection::AtTarget { .. }
    ));
    assert_eq!(
        select(&d.spec, &inst, &host(&prod, "1.0.3", "amd64", &all)).directive(),
        Some("everyone-else")
    );
    // current_version excludes 0.x hosts: no directive.
    assert_eq!(
        select(&d.spec, &inst, &host(&prod, "0.9.0", "amd64", &all)),
        Selection::Unmatched
    );
    // `*: *` matches every host, even one that sends no labels.
    let nolabels = HostFacts {
        labels: Labels::None,
        ..host(&prod, "1.0.0", "amd64", &all)
    };
    assert_eq!(
        select(&d.spec, &inst, &nolabels).directive(),
        Some("everyone-else")
    );
}

#[test]
fn the_compatibility_rules() {
    let t = |v: &str, arch: Option<&str>, fips: Option<bool>| Target {
        version: v.into(),
        arch: arch.map(String::from),
        fips,
        size: None,
        sha256: None,
    };
    let l = BTreeMap::new();
    let h = |v: &'static str| host(&l, v, "amd64", &[]);
    assert_eq!(
        target_fits(&t("2.0.0", None, None), &h("1.4.0")),
        Ok(()),
        "one major up"
    );
    assert_eq!(
        target_fits(&t("3.0.0", None, None), &h("")),
        Ok(()),
        "nothing installed yet: a first install of any version"
    );
    assert!(
        matches!(
            target_fits(&t("3.0.0", Some("arm64"), None), &h("")),
            Err(Incompatible::Arch { .. })
        ),
        "but never of another arch"
    );
    assert!(
        matches!(
            target_fits(&t("3.0.0", None, None), &h("1.4.0")),
            Err(Incompatible::MajorVersion { .. })
        ),
        "never skip a major"
    );
    assert!(
        matches!(
            target_fits(&t("0.9.0", None, None), &h("1.4.0")),
            Err(Incompatible::MajorVersion { .. })
        ),
        "never below the major"
    );
    assert_eq!(
        target_fits(&t("1.0.0", None, None), &h("1.4.0")),
        Ok(()),
        "down within the major"
    );
    assert!(matches!(
        target_fits(&t("1.5.0", None, None), &h("1.5.0-rc.1")),
        Err(Incompatible::PrereleaseInstall { .. })
    ));
    assert_eq!(
        target_fits(&t("1.5.0-rc.2", None, None), &h("1.4.0")),
        Ok(()),
        "a pre-release named in a directive is explicit"
    );
    assert!(matches!(
        target_fits(&t("1.5.0", Some("arm64"), None), &h("1.4.0")),
        Err(Incompatible::Arch { .. })
    ));
    assert!(matches!(
        target_fits(&t("1.5.0", None, Some(true)), &h("1.4.0")),
        Err(Incompatible::Fips { .. })
    ));
    assert_eq!(
        target_fits(&t("v1.4.0", None, None), &h("1.4.0")),
        Err(Incompatible::Same)
    );
    assert!(matches!(
        target_fits(&t("1.5.0", None, None), &h("banana")),
        Err(Incompatible::NotAVersion(_))
    ));
}

#[test]
fn bad_resources_name_the_field() {
    let cases: &[(&str, &str)] = &[
        (
            &DIRECTIVE.replace("version: 1.1.0", "version: \"1.1.0;rm -rf /\""),
            "spec.directives[1].targets[0].version",
        ),
        (
            &DIRECTIVE.replace(
                "current_version: \">=1.0.0\"",
                "current_version: \"at least one\"",
            ),
            "spec.directives[1].selectors[0].current_version",
        ),
        (
            &DIRECTIVE.replace("name: everyone-else", "name: staging"),
            "spec.directives[1].name",
        ),
        (
            &DIRECTIVE.replace("installers: [script]", "installers: []"),
            "spec.directives[1].installers",
        ),
        (
            &DIRECTIVE.replace("size: 1000", "size: 0"),
            "spec.directives[0].targets[0].size",
        ),
        (
            &DIRECTIVE.replace("\"aaaa", "\"zzzz"),
            "spec.directives[0].targets[0].sha256",
        ),
        (
            &DIRECTIVE.replace("stale_after", "stale_afterwards"),
            "spec",
        ),
    ];
    for (text, field) in cases {
        let e = VersionDirective::from_text(text).unwrap_err().to_string();
        assert!(e.contains(field), "{field}: {e}");
    }
    let inst: &[(&str, &str)] = &[
        (
            "kind: installer\nmetadata: {name: s}\nspec: {type: local-script}\n",
            "spec.local_script",
        ),
        (
            "kind: installer\nmetadata: {name: s}\nspec: {type: local-script, local_script: {script: x, env: {V: \"$(reboot)\"}}}\n",
            "spec.local_script.env.V",
        ),
        (
            "kind: installer\nmetadata: {name: s}\nspec: {type: local-script, local_script: {script: x, env: {V: \"{target.nope}\"}}}\n",
            "spec.local_script.env.V",
        ),
        (
            "kind: installer\nmetadata: {name: s}\nspec: {type: local-script, local_script: {script: x, shell: bash}}\n",
            "spec.local_script.shell",
        ),
        (
            "kind: installer\nmetadata: {name: s}\nspec: {type: package, package: {name: \"-rf\", manager: apt}}\n",
            "spec.package.name",
        ),
        (
            "kind: installer\nmetadata: {name: s}\nspec: {type: tern-update, package: {name: a, manager: apt}}\n",
            "spec.package",
        ),
        (
            "kind: installer\nmetadata: {name: s}\nspec: {type: magic}\n",
            "spec.type",
        ),
    ];
    for (text, field) in inst {
        let e = Installer::from_text(text).unwrap_err().to_string();
        assert!(e.contains(field), "{field}: {e}");
    }
    let ctl: &[(&str, &str)] = &[
        (
            "kind: version_control_config\nspec: {rolling_install: {rate: fast}}\n",
            "spec.rolling_install.rate",
        ),
        (
            "kind: version_control_config\nspec: {rolling_install: {rate: 0/h}}\n",
            "spec.rolling_install.rate",
        ),
        (
            "kind: version_control_config\nspec: {rolling_install: {fault_limit: 101%}}\n",
            "spec.rolling_install.fault_limit",
        ),
        (
            "kind: version_control_config\nspec: {promotion: {approvals: 3}}\n",
            "spec.promotion.approvals",
        ),
        (
            "kind: version_control_config\nspec: {promotion: {strategy: automatic}}\n",
            "spec.promotion.from",
        ),
        (
            "kind: version_control_config\nspec: {timings: {trigger_timeout: 2h, recent: 1h}}\n",
            "spec.timings.trigger_timeout",
        ),
        (
            "kind: version_control_config\nmetadata: {name: other}\nspec: {}\n",
            "metadata.name",
        ),
    ];
    for (text, field) in ctl {
        let e = VersionControlConfig::from_text(text)
            .unwrap_err()
            .to_string();
        assert!(e.contains(field), "{field}: {e}");
    }
    let ok =
        VersionControlConfig::from_text("kind: version_control_config\nspec: {enabled: true}\n")
            .unwrap();
    assert_eq!(ok.metadata.name, CONTROL_NAME);
    assert_eq!(
        Rate::parse(&ok.spec.rolling_install.rate)
            .unwrap()
            .amount
            .of(1000),
        100
    );
}

#[test]
fn amounts_and_rates() {
    assert_eq!(Amount::parse("10"), Some(Amount::Count(10)));
    assert_eq!(Amount::parse("12.5%"), Some(Amount::Percent(1250)));
    assert_eq!(Amount::parse("1%").unwrap().of(10), 1, "a share rounds up");
    assert_eq!(Amount::parse("5%").unwrap().of(100_000), 5000);
    for bad in ["", "%", "-1", "1.234%", "101%", "ten", "1e3"] {
        assert_eq!(Amount::parse(bad), None, "{bad}");
    }
    let r = Rate::parse("20%/h").unwrap();
    assert_eq!(r.per, Duration::from_secs(3600));
    assert_eq!(Rate::parse("10/m").unwrap().amount, Amount::Count(10));
    assert_eq!(Rate::parse("10/s"), None);
}

fn ts(secs: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + secs).unwrap()
}

fn rec<'a>(
    version: &'a str,
    last_seen: i64,
    attempt: Option<&'a Attempt>,
    result: Option<&'a AttemptResult>,
) -> HostRecord<'a> {
    HostRecord {
        version,
        last_seen: ts(last_seen),
        connected_since: ts(-10_000),
        target: Some("1.1.0"),
        attempt,
        result,
    }
}

const T: StateTimings = StateTimings {
    trigger_timeout: Duration::from_secs(900),
    recent: Duration::from_secs(3600),
    offline_after: Duration::from_secs(300),
    settle: Duration::from_secs(120),
};

#[test]
fn every_install_state_at_its_time_edges() {
    let attempt = Attempt {
        id: "a1".into(),
        at: ts(0),
        installer: "script".into(),
        from_version: "1.0.0".into(),
        target_version: "1.1.0".into(),
    };
    let failed = AttemptResult {
        attempt_id: "a1".into(),
        success: false,
        error: "exit status 1".into(),
    };
    let other_failed = AttemptResult {
        attempt_id: "a0".into(),
        ..failed.clone()
    };
    let (a, f, of) = (&attempt, &failed, &other_failed);
    let at = |r: &HostRecord<'_>, now: i64| install_state(r, ts(now), &T);

    // No attempt.
    assert_eq!(
        at(&rec("1.0.0", 0, None, None), 0),
        InstallState::NeedsInstall
    );
    assert_eq!(
        at(&rec("1.1.0", 0, None, None), 0),
        InstallState::VersionParity
    );
    assert_eq!(
        at(
            &HostRecord {
                target: None,
                ..rec("1.0.0", 0, None, None)
            },
            0
        ),
        InstallState::VersionParity
    );
    // Triggered until the trigger timeout, then an implicit fault.
    assert_eq!(
        at(&rec("1.0.0", 899, Some(a), None), 899),
        InstallState::InstallTriggered
    );
    assert_eq!(
        at(&rec("1.0.0", 900, Some(a), None), 900),
        InstallState::ImplicitInstallFault
    );
    // A result for another attempt does not count.
    assert_eq!(
        at(&rec("1.0.0", 10, Some(a), Some(of)), 10),
        InstallState::InstallTriggered
    );
    assert_eq!(
        at(&rec("1.0.0", 10, Some(a), Some(f)), 10),
        InstallState::ExplicitInstallFault
    );
    // On the target: a recent install, then parity once the attempt is old.
    assert_eq!(
        at(&rec("1.1.0", 3599, Some(a), None), 3599),
        InstallState::RecentInstall
    );
    assert_eq!(
        at(&rec("1.1.0", 3600, Some(a), None), 3600),
        InstallState::VersionParity
    );
    // Offline within the window: churned; seen 299 s ago is still online.
    assert_eq!(
        at(&rec("1.0.0", 0, Some(a), None), 299),
        InstallState::InstallTriggered
    );
    assert_eq!(
        at(&rec("1.0.0", 0, Some(a), None), 300),
        InstallState::ChurnedDuringInstall
    );
    // After the window a fault needs an install again (and may be retried).
    assert_eq!(
        at(&rec("1.0.0", 3600, Some(a), Some(f)), 3600),
        InstallState::NeedsInstall
    );
    // Only settled hosts that need an install may be triggered.
    let fresh = HostRecord {
        connected_since: ts(3500),
        ..rec("1.0.0", 3600, None, None)
    };
    assert!(!may_trigger(
        InstallState::NeedsInstall,
        &fresh,
        ts(3600),
        &T
    ));
    assert!(may_trigger(
        InstallState::NeedsInstall,
        &fresh,
        ts(3620),
        &T
    ));
    assert!(!may_trigger(
        InstallState::ImplicitInstallFault,
        &fresh,
        ts(9000),
        &T
    ));
    assert_eq!(InstallState::ALL.len(), 7);
    assert!(
        InstallState::ExplicitInstallFault.is_fault()
            && !InstallState::ChurnedDuringInstall.is_fault()
    );
}

mod passes {
    use super::*;
    use tern_core::directive::pass::*;

    fn control(enabled: bool, fault_limit: &str) -> ControlSpec {
        let text = format!(
            "kind: version_control_config\nspec: {{enabled: {enabled}, rolling_install: {{fault_limit: \"{fault_limit}\", churn_limit: \"1\"}}}}\n"
        );
        VersionControlConfig::from_text(&text).unwrap().spec
    }

    struct Fleet {
        labels: Vec<BTreeMap<String, String>>,
        ids: Vec<String>,
        versions: Vec<&'static str>,
        installers: Vec<String>,
    }

    fn fleet() -> Fleet {
        // 8 hosts: 0-3 staging, 4-6 prod, 7 unlabelled and on 0.9 (no directive).
        let envs = [
            "staging", "staging", "staging", "staging", "prod", "prod", "prod", "",
        ];
        Fleet {
            labels: envs
                .iter()
                .map(|e| {
                    if e.is_empty() {
                        BTreeMap::new()
                    } else {
                        labels(&[("env", e)])
                    }
                })
                .collect(),
            ids: (0..8).map(|i| format!("h{i}")).collect(),
            versions: vec![
                "1.1.0", "1.1.0", "1.2.0", "1.1.0", "1.0.0", "1.1.0", "1.0.0", "0.9.0",
            ],
            installers: vec![
                "tern-update".into(),
                "package".into(),
                "local-script".into(),
            ],
        }
    }

    fn hosts<'a>(f: &'a Fleet, attempts: &'a [Option<Attempt>]) -> Vec<PassHost<'a>> {
        (0..8)
            .map(|i| PassHost {
                facts: HostFacts {
                    labels: Labels::Map(&f.labels[i]),
                    group: "default",
                    version: f.versions[i],
                    arch: "amd64",
                    os: "linux",
                    fips: false,
                    installers: Names::Strings(&f.installers),
                },
                record: HostRecord {
                    version: f.versions[i],
                    last_seen: ts(0),
                    connected_since: ts(-1000),
                    target: None,
                    attempt: attempts[i].as_ref(),
                    result: None,
                },
                hold: false,
            })
            .collect()
    }

    #[test]
    fn a_pass_plans_every_host_and_triggers_within_the_budget() {
        let d = VersionDirective::from_text(DIRECTIVE).unwrap();
        let inst = installers();
        let f = fleet();
        let none: Vec<Option<Attempt>> = vec![None; 8];
        let hs = hosts(&f, &none);
        let out = pass(
            hs.clone(),
            &d.spec,
            &inst,
            &control(true, "1"),
            &T,
            ts(0),
            2,
            &Elsewhere::default(),
        );
        assert_eq!((out.governed, out.unaffected), (7, 1));
        // staging: three on 1.1.0 move to 1.2.0 with the native installer, one is there.
        let staging = Move {
            directive: "staging",
            from: "1.1.0",
            to: "1.2.0",
            installer: "native",
        };
        assert_eq!(out.moves.get(&staging), Some(&3));
        let prod = Move {
            directive: "everyone-else",
            from: "1.0.0",
            to: "1.1.0",
            installer: "script",
        };
        assert_eq!(out.moves.get(&prod), Some(&2));
        assert_eq!(out.states.get(&InstallState::NeedsInstall), Some(&5));
        assert_eq!(out.states.get(&InstallState::VersionParity), Some(&2));
        assert_eq!(out.eligible, 5);
        let hosts_triggered: Vec<&str> = out
            .triggers
            .iter()
            .map(|t| f.ids[t.host].as_str())
            .collect();
        assert_eq!(
            hosts_triggered,
            ["h0", "h1"],
            "the budget, in inventory order"
        );
        assert_eq!(out.host_states[7], None);

        // Disabled: the same plan, nothing triggered.
        let off = pass(
            hs,
            &d.spec,
            &inst,
            &control(false, "1"),
            &T,
            ts(0),
            2,
            &Elsewhere::default(),
        );
        assert_eq!((off.eligible, off.triggers.len()), (5, 0));
        // What the budget allowed is held back, for a dry run (which changes nothing).
        let held: Vec<&str> = off.held.iter().map(|t| f.ids[t.host].as_str()).collect();
        assert_eq!(held, ["h0", "h1"]);
    }

    #[test]
    fn the_notification_view_flags_outdated_and_advised_versions() {
        use tern_core::directive::notice::{VersionNotice, notices, summary};
        let mut d = VersionDirective::from_text(DIRECTIVE).unwrap();
        d.spec.advisories = vec![
            Advisory {
                versions: "<1.1.0".into(),
                kind: AdvisoryKind::Security,
                note: Some("CVE-1".into()),
            },
            // Also matches 1.0.0, but the first advisory speaks for a version.
            Advisory {
                versions: "<1.0.5".into(),
                kind: AdvisoryKind::EndOfLife,
                note: None,
            },
        ];
        d.validate().unwrap();
        let inst = installers();
        let f = fleet();
        let none: Vec<Option<Attempt>> = vec![None; 8];
        let out = pass(
            hosts(&f, &none),
            &d.spec,
            &inst,
            &control(false, "1"),
            &T,
            ts(0),
            0,
            &Elsewhere::default(),
        );
        let n = notices(&d.spec, &out);
        let notice = |v: &str, kind, rec: &str, note: Option<&str>, hosts| VersionNotice {
            version: v.into(),
            kind,
            recommended: Some(rec.into()),
            note: note.map(str::to_string),
            hosts,
        };
        // 0.9.0 runs on the ungoverned host 7: not flagged.
        assert_eq!(
            n,
            [
                notice("1.0.0", NoticeKind::Outdated, "1.1.0", None, 2),
                notice("1.0.0", NoticeKind::Security, "1.1.0", Some("CVE-1"), 2),
                notice("1.1.0", NoticeKind::Outdated, "1.2.0", None, 3),
            ]
        );
        assert_eq!(
            summary(&n, NoticeKind::Security).unwrap(),
            "2 hosts run versions with a security advisory: 1.0.0 (2 hosts, recommended 1.1.0: CVE-1)"
        );
        assert_eq!(summary(&n, NoticeKind::EndOfLife), None);
        // The alerts: only the kinds asked for; a held alert keeps its `since`; a stale
        // active directive adds its own.
        let notification = Notification {
            from: "advice".into(),
            alert_on: vec![NoticeKind::Security, NoticeKind::EndOfLife],
        };
        let raised =
            tern_core::directive::notice::alerts(Some(&notification), &n, None, &[], ts(0));
        let kinds: Vec<&str> = raised.iter().map(|a| a.kind.as_str()).collect();
        assert_eq!(kinds, ["directive_versions_security"]);
        assert_eq!(raised[0].since, ts(0));
        let later = tern_core::directive::notice::alerts(
            Some(&notification),
            &n,
            Some(ts(50)),
            &raised,
            ts(100),
        );
        let kinds: Vec<(&str, Timestamp)> =
            later.iter().map(|a| (a.kind.as_str(), a.since)).collect();
        assert_eq!(
            kinds,
            [
                ("directive_stale", ts(100)),
                ("directive_versions_security", ts(0))
            ]
        );
        // Not stale yet, nothing flagged: nothing holds.
        assert!(
            tern_core::directive::notice::alerts(
                Some(&notification),
                &[],
                Some(ts(200)),
                &later,
                ts(100)
            )
            .is_empty()
        );
        // A hostile advisory never gets stored.
        d.spec.advisories[0].versions = "<1.1.0; rm -rf /".into();
        let err = d.validate().unwrap_err().to_string();
        assert!(err.contains("spec.advisories[0].versions"), "{err}");
    }

    #[test]
    fn held_hosts_are_planned_but_never_chosen() {
        // A dry run already sent to h0 and h1 for this plan: the budget goes to the next.
        let d = VersionDirective::from_text(DIRECTIVE).unwrap();
        let inst = installers();
        let f = fleet();
        let none: Vec<Option<Attempt>> = vec![None; 8];
        let mut hs = hosts(&f, &none);
        hs[0].hold = true;
        hs[1].hold = true;
        let out = pass(
            hs,
            &d.spec,
            &inst,
            &control(true, "1"),
            &T,
            ts(0),
            2,
            &Elsewhere::default(),
        );
        assert_eq!(out.eligible, 5, "held hosts still count as eligible");
        let chosen: Vec<&str> = out
            .triggers
            .iter()
            .map(|t| f.ids[t.host].as_str())
            .collect();
        assert_eq!(chosen, ["h3", "h4"]);
        assert!(out.held.is_empty());
    }

    #[test]
    fn faults_past_the_limit_pause_and_attempts_are_not_repeated() {
        let d = VersionDirective::from_text(DIRECTIVE).unwrap();
        let inst = installers();
        let f = fleet();
        let attempt = |id: &str| Attempt {
            id: id.into(),
            at: ts(-1000),
            installer: "native".into(),
            from_version: "1.1.0".into(),
            target_version: "1.2.0".into(),
        };
        // Two staging hosts were tried 1000 s ago and are still on 1.1.0: implicit faults.
        let mut attempts: Vec<Option<Attempt>> = vec![None; 8];
        attempts[0] = Some(attempt("a0"));
        attempts[1] = Some(attempt("a1"));
        let hs = hosts(&f, &attempts);
        let out = pass(
            hs.clone(),
            &d.spec,
            &inst,
            &control(true, "1"),
            &T,
            ts(0),
            10,
            &Elsewhere::default(),
        );
        assert_eq!(
            out.states.get(&InstallState::ImplicitInstallFault),
            Some(&2)
        );
        assert_eq!(out.paused, Some(Pause::Faults { count: 2, limit: 1 }));
        assert!(out.triggers.is_empty());
        // Under a higher limit it goes on, without the two hosts tried recently.
        let out = pass(
            hs.clone(),
            &d.spec,
            &inst,
            &control(true, "50%"),
            &T,
            ts(0),
            10,
            &Elsewhere::default(),
        );
        assert_eq!(out.paused, None);
        let tried: Vec<&str> = out
            .triggers
            .iter()
            .map(|t| f.ids[t.host].as_str())
            .collect();
        assert_eq!(tried, ["h3", "h4", "h6"]);
        // The other replicas' faults count too: 2 here + 3 elsewhere of 7 + 13 governed
        // is past 20% of 20.
        let elsewhere = Elsewhere {
            governed: 13,
            states: [(InstallState::ExplicitInstallFault, 3)].into(),
        };
        let out = pass(
            hs,
            &d.spec,
            &inst,
            &control(true, "20%"),
            &T,
            ts(0),
            10,
            &elsewhere,
        );
        assert_eq!(out.paused, Some(Pause::Faults { count: 5, limit: 4 }));
        assert!(out.triggers.is_empty());
    }

    #[test]
    fn the_rate_bucket_spreads_installs() {
        let rate = Rate::parse("60/h").unwrap();
        let mut b = RateBucket::default();
        assert_eq!(
            b.fill(&rate, 1000, ts(0)),
            1,
            "one at once when the loop starts"
        );
        b.take(1);
        assert_eq!(b.fill(&rate, 1000, ts(30)), 0);
        assert_eq!(b.fill(&rate, 1000, ts(60)), 1);
        b.take(1);
        // Idle for an hour: at most a minute's worth (at least one).
        assert_eq!(b.fill(&rate, 1000, ts(3660)), 1);
        let fast = Rate::parse("10%/m").unwrap();
        let mut b = RateBucket::default();
        b.fill(&fast, 1000, ts(0));
        b.take(1);
        assert_eq!(
            b.fill(&fast, 1000, ts(6)),
            10,
            "10% of 1000 per minute is 10 per 6 s"
        );
        assert_eq!(
            b.fill(&fast, 1000, ts(6000)),
            100,
            "capped at a minute's worth"
        );
    }
}

#[test]
fn heartbeats_from_any_updater_still_parse_and_facts_are_bounded() {
    use tern_core::wire::Heartbeat;
    // An updater from before the facts, and one from after them (unknown fields).
    let old: Heartbeat =
        serde_json::from_str(r#"{"updater_id": "u", "version": "1.0.0"}"#).unwrap();
    assert!(old.labels.is_empty() && old.installers.is_empty() && old.install_result.is_none());
    assert_eq!(old.check_facts(), Ok(()));
    let new: Heartbeat = serde_json::from_str(
        r#"{"updater_id": "u", "labels": {"env": "prod"}, "arch": "amd64", "install_result": {"attempt_id": "a1"}, "next": 1}"#,
    )
    .unwrap();
    assert_eq!(new.install_result.as_ref().map(|r| r.success), Some(false));
    assert_eq!(new.check_facts(), Ok(()));
    // Serialised without the facts it does not have: old servers see what they knew.
    assert!(!serde_json::to_string(&old).unwrap().contains("labels"));
    let bad = Heartbeat {
        os: "linux; rm".into(),
        ..Heartbeat::default()
    };
    assert!(bad.check_facts().unwrap_err().starts_with("os:"));
}

#[test]
fn instructions_are_checked_before_anything_runs() {
    use tern_core::directive::instruct::{InstallInstruction, render_env};
    let script = Installer::from_text(
        "kind: installer\nmetadata: {name: s}\nspec:\n  type: local-script\n  local_script:\n    env: {VERSION: \"{target.version}\", ARCH: \"x-{target.arch}\"}\n    script: 'echo \"$VERSION\"'\n",
    )
    .unwrap();
    let target = |v: &str| Target {
        version: v.into(),
        arch: Some("amd64".into()),
        fips: None,
        size: None,
        sha256: None,
    };
    let ls = script.spec.local_script.clone().unwrap();
    assert_eq!(
        render_env(&ls.env, &target("1.2.0")).unwrap(),
        [
            ("ARCH".to_string(), "x-amd64".to_string()),
            ("VERSION".into(), "1.2.0".into()),
            ("TERN_TARGET_VERSION".into(), "1.2.0".into()),
        ]
    );
    let bad = render_env(&ls.env, &target("1.1.0;rm -rf /")).unwrap_err();
    assert!(bad.contains("VERSION") && bad.contains("refused"), "{bad}");
    // A server may not set what changes how the shell or the loader starts.
    for name in ["PATH", "LD_PRELOAD", "BASH_ENV", "IFS", "TERN_X", "lower"] {
        let env: BTreeMap<String, String> = [(name.to_string(), "x".to_string())].into();
        assert!(render_env(&env, &target("1.2.0")).is_err(), "{name}");
    }
    let mut i = InstallInstruction {
        attempt_id: "a-1".into(),
        installer_name: "s".into(),
        installer: script.spec.clone(),
        target: target("1.2.0"),
        dry_run: false,
        directive: String::new(),
    };
    assert_eq!(i.check(), Ok(()));
    i.target.version = "1.1.0;rm -rf /".into();
    assert!(i.check().unwrap_err().starts_with("target.version"));
    i.target.version = "1.2.0".into();
    i.attempt_id = "../../etc".into();
    assert!(i.check().unwrap_err().starts_with("attempt_id"));
    // The native installer refuses a target without size and sha256.
    let native =
        Installer::from_text("kind: installer\nmetadata: {name: n}\nspec: {type: tern-update}\n")
            .unwrap();
    let mut n = InstallInstruction {
        attempt_id: "a-2".into(),
        installer_name: "n".into(),
        installer: native.spec,
        target: target("1.2.0"),
        dry_run: false,
        directive: String::new(),
    };
    assert!(n.check().unwrap_err().contains("size and sha256"));
    n.target.size = Some(10);
    n.target.sha256 = Some("ab".repeat(32));
    assert_eq!(n.check(), Ok(()));
    // Either installer first asks the agents' ternd (its stop holds the whole host);
    // a dry run, which changes nothing, does not.
    for mut instruction in [i, n] {
        assert!(instruction_waits_for_agents(&instruction));
        instruction.dry_run = true;
        assert!(!instruction_waits_for_agents(&instruction));
    }
}

#[test]
fn labels_kept_as_sorted_pairs_match_like_a_map() {
    let map = labels(&[("env", "prod"), ("team", "db"), ("zone", "eu-1")]);
    let pairs: Vec<(Box<str>, Box<str>)> = map
        .iter()
        .map(|(k, v)| (k.as_str().into(), v.as_str().into()))
        .collect();
    for key in ["env", "team", "zone", "absent", ""] {
        assert_eq!(
            Labels::Map(&map).get(key),
            Labels::Pairs(&pairs).get(key),
            "{key}"
        );
    }
    assert!(Names::Boxed(&["tern-update".into()]).contains("tern-update"));
    assert!(!Names::Boxed(&["tern-update".into()]).contains("package"));
}

mod releases_controller {
    use super::*;
    use tern_core::directive::releases::*;

    const CONTROL: &str = r#"
kind: version_control_config
spec:
  releases:
    index: https://releases.example/agent/index.json
    arch: [amd64, arm64]
    directives:
      - {name: prod, version: "1.*", selectors: [{labels: {env: prod}}], installers: [native, script]}
      - {name: staging, version: ">=2", selectors: [{labels: {env: staging}}], installers: [native]}
      - {name: future, version: "3.*", selectors: [{labels: {env: lab}}], installers: [script]}
"#;

    fn asset(arch: &str, size: Option<u64>, sha: Option<char>) -> ReleaseAsset {
        ReleaseAsset {
            name: String::new(),
            arch: Some(arch.into()),
            size,
            sha256: sha.map(|c| c.to_string().repeat(64)),
        }
    }

    fn release(tag: &str, assets: Vec<ReleaseAsset>) -> ReleaseInfo {
        ReleaseInfo {
            tag: tag.into(),
            assets,
            ..ReleaseInfo::default()
        }
    }

    #[test]
    fn the_newest_admitted_release_per_directive_with_checked_assets() {
        let c = VersionControlConfig::from_text(CONTROL)
            .unwrap()
            .spec
            .releases
            .unwrap();
        let listed = vec![
            release(
                "v1.2.0",
                vec![
                    asset("amd64", Some(10), Some('a')),
                    asset("arm64", Some(11), Some('b')),
                ],
            ),
            ReleaseInfo {
                prerelease: true,
                ..release("v1.3.0-rc.1", vec![asset("amd64", Some(1), Some('c'))])
            },
            // A security release, built for amd64 only, with a digest but no size.
            ReleaseInfo {
                security: true,
                ..release("v1.2.1", vec![asset("amd64", None, Some('d'))])
            },
            release(
                "v2.0.0",
                vec![
                    asset("amd64", Some(20), Some('e')),
                    asset("arm64", Some(21), Some('F')),
                ],
            ),
            ReleaseInfo {
                draft: true,
                ..release("v2.1.0", vec![asset("amd64", Some(1), Some('e'))])
            },
            release("nightly", vec![]),
            release("v1.9.0+build.7", vec![asset("amd64", Some(1), Some('e'))]),
            // A hostile digest is dropped, not passed on.
            release("v1.1.0", vec![asset("amd64", Some(5), None)]),
        ];
        let out = draft(&c, &listed, ts(0)).unwrap();
        let d = &out.directive;
        d.validate().unwrap();
        assert_eq!(d.metadata.name, RELEASES_DRAFT);
        assert_eq!(d.spec.stale_after, Some(ts(24 * 3600)));
        let names: Vec<&str> = d.spec.directives.iter().map(|x| x.name.as_str()).collect();
        assert_eq!(
            names,
            ["prod", "staging"],
            "future has no release: left out"
        );
        let prod = &d.spec.directives[0];
        // 1.2.1 (not the pre-release, not the build-tagged 1.9.0); only amd64 has an
        // asset, and without a size neither size nor digest is kept.
        assert_eq!(prod.targets.len(), 1, "{:?}", prod.targets);
        let t = &prod.targets[0];
        assert_eq!(
            (t.version.as_str(), t.arch.as_deref()),
            ("1.2.1", Some("amd64"))
        );
        assert_eq!((t.size, t.sha256.as_deref()), (None, None));
        assert_eq!(prod.installers, ["native", "script"]);
        let staging = &d.spec.directives[1];
        let arm = staging
            .targets
            .iter()
            .find(|t| t.arch.as_deref() == Some("arm64"))
            .unwrap();
        assert_eq!(arm.version, "2.0.0", "drafts are never taken");
        assert_eq!(arm.size, Some(21));
        assert_eq!(
            arm.sha256.as_deref(),
            Some("f".repeat(64).as_str()),
            "lower-cased"
        );
        // The security release flags the older versions of its major.
        assert_eq!(d.spec.advisories.len(), 1);
        assert_eq!(d.spec.advisories[0].versions, ">=1.0.0, <1.2.1");
        assert_eq!(d.spec.advisories[0].kind, AdvisoryKind::Security);
        let notes = out.notes.join("\n");
        assert!(notes.contains("\"nightly\""), "{notes}");
        assert!(notes.contains("v1.9.0+build.7"), "{notes}");
        assert!(notes.contains("no asset for arm64"), "{notes}");
        assert!(notes.contains("directive future"), "{notes}");
    }

    #[test]
    fn the_draft_is_rewritten_only_when_it_changes_or_runs_out_of_freshness() {
        let c = VersionControlConfig::from_text(CONTROL)
            .unwrap()
            .spec
            .releases
            .unwrap();
        let listed = |tag: &str| vec![release(tag, vec![asset("amd64", Some(1), Some('a'))])];
        let first = draft(&c, &listed("v1.2.0"), ts(0)).unwrap().directive.spec;
        assert!(needs_write(&c, None, &first, ts(0)));
        // Same content an hour later: kept (its stale_after is a day away).
        let same = draft(&c, &listed("v1.2.0"), ts(3600))
            .unwrap()
            .directive
            .spec;
        assert!(!needs_write(&c, Some(&first), &same, ts(3600)));
        // A new release: written.
        let newer = draft(&c, &listed("v1.2.1"), ts(3600))
            .unwrap()
            .directive
            .spec;
        assert!(needs_write(&c, Some(&first), &newer, ts(3600)));
        // Less than half a day of freshness left: refreshed.
        let late = draft(&c, &listed("v1.2.0"), ts(13 * 3600))
            .unwrap()
            .directive
            .spec;
        assert!(needs_write(&c, Some(&first), &late, ts(13 * 3600)));
    }

    #[test]
    fn nothing_to_draft_is_an_error_not_an_empty_directive() {
        let c = VersionControlConfig::from_text(CONTROL)
            .unwrap()
            .spec
            .releases
            .unwrap();
        let listed = vec![release("v0.9.0", vec![asset("amd64", Some(1), Some('a'))])];
        assert_eq!(
            draft(&c, &listed, ts(0)),
            Err(ReleasesError::NothingMatches { listed: 1 })
        );
    }

    #[test]
    fn the_controller_config_is_validated_with_field_paths() {
        let bad = CONTROL
            .replace("https://releases.example", "http://releases.example")
            .replace("\">=2\"", "\"two\"");
        let err = VersionControlConfig::from_text(&bad)
            .unwrap_err()
            .to_string();
        assert!(err.contains("spec.releases.index"), "{err}");
        assert!(err.contains("allow_http"), "{err}");
        assert!(err.contains("spec.releases.directives[1].version"), "{err}");
    }
}

/// ternctl prints a state as the API's JSON and the docs name it; the metrics label is
/// its snake_case form.
#[test]
fn install_states_read_the_same_in_json_text_and_metrics() {
    for s in InstallState::ALL {
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(json, format!("\"{s}\""));
        let snake: String = s
            .to_string()
            .chars()
            .enumerate()
            .flat_map(|(i, c)| {
                let sep = (i > 0 && c.is_ascii_uppercase()).then_some('_');
                sep.into_iter()
                    .chain(std::iter::once(c.to_ascii_lowercase()))
            })
            .collect();
        assert_eq!(s.as_str(), snake);
    }
}
