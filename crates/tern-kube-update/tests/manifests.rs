//! The manifests under deploy/kubernetes/ parse as the Kubernetes objects they claim
//! to be, grant the controller exactly the verbs it uses, and run the binary with
//! flags it accepts.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::PathBuf;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule, Role};
use serde::Deserialize;

fn manifest(name: &str) -> Vec<serde_yaml_ng::Value> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy/kubernetes")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap();
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| serde_yaml_ng::Value::deserialize(d).unwrap())
        .collect()
}

fn of_kind<T: serde::de::DeserializeOwned>(docs: &[serde_yaml_ng::Value], kind: &str) -> Vec<T> {
    docs.iter()
        .filter(|d| d["kind"].as_str() == Some(kind))
        .map(|d| serde_yaml_ng::from_value(d.clone()).unwrap())
        .collect()
}

/// (api group, resource, verb) granted by `rules`.
fn grants(rules: &[PolicyRule]) -> BTreeSet<(String, String, String)> {
    let mut out = BTreeSet::new();
    for r in rules {
        for g in r.api_groups.iter().flatten() {
            for res in r.resources.iter().flatten() {
                for v in &r.verbs {
                    out.insert((g.clone(), res.clone(), v.clone()));
                }
            }
        }
    }
    out
}

fn set(items: &[(&str, &str, &str)]) -> BTreeSet<(String, String, String)> {
    items
        .iter()
        .map(|(g, r, v)| (g.to_string(), r.to_string(), v.to_string()))
        .collect()
}

#[test]
fn the_roles_grant_what_the_controller_uses_and_nothing_more() {
    let rbac = manifest("rbac.yaml");
    let cluster: Vec<ClusterRole> = of_kind(&rbac, "ClusterRole");
    assert_eq!(cluster.len(), 1);
    assert_eq!(
        grants(cluster[0].rules.as_deref().unwrap()),
        set(&[
            ("apps", "deployments", "get"),
            ("apps", "deployments", "list"),
            ("apps", "deployments", "update"),
            ("apps", "statefulsets", "get"),
            ("apps", "statefulsets", "list"),
            ("apps", "statefulsets", "update"),
            ("", "pods", "get"),
            ("", "pods", "list"),
            ("", "pods", "delete"),
        ])
    );
    let roles: Vec<Role> = of_kind(&rbac, "Role");
    assert_eq!(roles.len(), 1);
    assert_eq!(roles[0].metadata.namespace.as_deref(), Some("tern-system"));
    let rules = roles[0].rules.as_deref().unwrap();
    assert_eq!(
        grants(rules),
        set(&[
            ("coordination.k8s.io", "leases", "create"),
            ("coordination.k8s.io", "leases", "get"),
            ("coordination.k8s.io", "leases", "update"),
        ])
    );
    // get and update only on its own Lease.
    for r in rules
        .iter()
        .filter(|r| r.verbs.iter().any(|v| v != "create"))
    {
        assert_eq!(
            r.resource_names.as_deref(),
            Some(&["tern-kube-update".to_string()][..])
        );
    }
}

#[test]
fn the_controller_deployment_runs_the_binary_with_flags_it_accepts() {
    let docs = manifest("controller.yaml");
    let deployments: Vec<Deployment> = of_kind(&docs, "Deployment");
    let spec = deployments[0].spec.as_ref().unwrap();
    assert!(spec.replicas.unwrap() >= 2, "a second replica takes over");
    let pod = spec.template.spec.as_ref().unwrap();
    assert_eq!(
        pod.service_account_name.as_deref(),
        Some("tern-kube-update")
    );
    let c = &pod.containers[0];
    let mut args = c.args.clone().unwrap();
    // The binary parses them (with the env the manifest sets): `--help` after them
    // succeeds only if everything before it is known.
    args.push("--help".into());
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tern-kube-update"))
        .args(&args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let env: Vec<&str> = c.env.iter().flatten().map(|e| e.name.as_str()).collect();
    assert!(
        env.contains(&"TERN_SERVER") && env.contains(&"POD_NAME"),
        "{env:?}"
    );
    // Every file a flag names is on a mounted volume.
    let mounts: Vec<&str> = c
        .volume_mounts
        .iter()
        .flatten()
        .map(|m| m.mount_path.as_str())
        .collect();
    for a in c.args.iter().flatten() {
        if let Some((_, path)) = a.split_once('=').filter(|(k, _)| {
            k.ends_with("-file") || ["--digests", "--trust-root", "--trust-state"].contains(k)
        }) {
            assert!(
                mounts.iter().any(|m| path.starts_with(&format!("{m}/"))),
                "{a}: not under {mounts:?}"
            );
        }
    }
}

/// The image the Deployment runs is built by deploy/kubernetes/Dockerfile (no container
/// builder runs here, so it is read, not built): it builds this crate's binary, starts
/// it as the entrypoint (the Deployment's args begin with `run`), as the user the
/// Deployment's securityContext requires.
#[test]
fn the_dockerfile_builds_the_binary_the_deployment_runs_as_its_user() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/kubernetes/Dockerfile");
    let text = std::fs::read_to_string(&path).unwrap();
    let build = text
        .lines()
        .find(|l| l.starts_with("RUN cargo build"))
        .unwrap();
    assert!(
        build.contains(&format!("-p {}", env!("CARGO_PKG_NAME")))
            && build.contains("--bin tern-kube-update"),
        "{build}"
    );
    let entry = text.lines().find(|l| l.starts_with("ENTRYPOINT")).unwrap();
    let bin = entry.split('"').nth(1).unwrap();
    assert!(bin.ends_with("/tern-kube-update"), "{entry}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("COPY --from=build") && l.ends_with(&format!(" {bin}"))),
        "the entrypoint is the binary copied in"
    );
    let user = text
        .lines()
        .find_map(|l| l.strip_prefix("USER "))
        .unwrap()
        .split(':')
        .next()
        .unwrap()
        .parse::<i64>()
        .unwrap();
    let deployments: Vec<Deployment> = of_kind(&manifest("controller.yaml"), "Deployment");
    let pod = deployments[0]
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap();
    let run_as = pod.security_context.as_ref().unwrap().run_as_user.unwrap();
    assert_eq!(user, run_as);
    let args = pod.containers[0].args.clone().unwrap();
    assert_eq!(args[0], "run");
}
