//! The agent as the host sees it: the service that runs it (`service_for`), its health
//! (`agent_health`) and its last lines of output after a failed start (`agent_output`).

use std::path::Path;

use crate::ctx::Ctx;
use crate::error::Result;
use crate::links;
use crate::service::{Service, ServiceConfig};
use crate::state::{Spec, UpdateFile};

/// The service for a namespace: the configured one, else systemd with the unit file the
/// version ships, else none (the agent is installed but not managed).
pub(crate) fn service_for(spec: &Spec, version_dir: Option<&Path>) -> Result<Option<Service>> {
    if let Some(path) = &spec.service_config {
        return Ok(Some(Service::new(ServiceConfig::load(path)?)));
    }
    let unit = version_dir.and_then(links::unit_file);
    Ok(unit.and_then(|u| {
        let name = u.file_stem()?.to_string_lossy().into_owned();
        Some(Service::new(ServiceConfig {
            name,
            ..ServiceConfig::default()
        }))
    }))
}

/// What the host sees of the agent: its service not running (an agent that cannot
/// reach its server exits), or running but failing its own health URL, is unhealthy;
/// no service to look at is unknown.
pub(crate) fn agent_health(ctx: &Ctx, file: &UpdateFile) -> tern_core::host_update::Health {
    use tern_core::host_update::Health;
    if file.spec.self_update {
        return crate::self_check::health(&ctx.layout, &file.status);
    }
    let Some(active) = &file.status.active else {
        return Health::Unknown;
    };
    let dir = ctx.layout.version_dir(active);
    let service = match service_for(&file.spec, Some(&dir)) {
        Ok(Some(service)) => service,
        Ok(None) | Err(_) => return Health::Unknown,
    };
    if !service.is_active() {
        return if service.wants_running() {
            Health::Unhealthy(format!(
                "the agent's service {} is not running",
                service.cfg.name
            ))
        } else {
            // Stopped on purpose (a unit neither running nor enabled).
            Health::Unknown
        };
    }
    match &service.cfg.health_url {
        Some(url) if !ctx.http.probe(url) => {
            Health::Unhealthy(format!("the agent's health URL {url} does not answer 2xx"))
        }
        _ => Health::Healthy,
    }
}

/// The agent's last lines of output when the new version itself failed (it did not
/// start or stay healthy), for `last_update.error`.
pub(crate) fn agent_output(spec: &Spec, version_failed: bool) -> Option<String> {
    if !version_failed {
        return None;
    }
    service_for(spec, None).ok().flatten()?.output_tail()
}
