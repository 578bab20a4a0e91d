//! The token a host's heartbeats carry: its own credential, got once by exchanging the
//! join token at ternd's join endpoint and kept in the namespace.

use crate::ctx::Ctx;
use crate::error::Result;
use crate::fsutil::{self, read_trimmed};
use crate::identity;
use crate::log;
use crate::state::Spec;

/// The token heartbeats carry: this host's own credential, fetched once by
/// exchanging the join token (`--join-token-file`) at ternd's join endpoint; or the
/// token itself where ternd predates host credentials (or already gave this updater
/// one, which this host lost: the heartbeat then says what to do).
pub(crate) fn host_token(ctx: &Ctx, spec: &Spec, updater_id: &str) -> Result<Option<String>> {
    let credential = ctx.layout.credential_file();
    if let Some(c) = read_trimmed(&credential) {
        return Ok(Some(c));
    }
    let Some(token) = spec.join_token_file.as_deref().and_then(read_trimmed) else {
        return Ok(None);
    };
    let body = tern_core::api::JoinBody {
        updater_id: updater_id.to_string(),
        host_id: ctx.settings.host_id.clone().unwrap_or_default(),
        hostname: identity::hostname(&ctx.settings),
    };
    match ctx.http.join(&spec.server, &body, &token)? {
        tern_client::Joined::Credential(c) => {
            fsutil::write_atomic(&credential, format!("{c}\n").as_bytes(), 0o600)?;
            log::info(format!(
                "joined ternd: this host's own credential is in {} (the join token is no longer sent)",
                credential.display()
            ));
            Ok(Some(c))
        }
        tern_client::Joined::NotSupported => Ok(Some(token)),
        tern_client::Joined::HasCredential(reason) => {
            log::warn(format!(
                "ternd already gave updater {updater_id} a credential, and {} does not hold it ({}): ask an operator to run `ternctl inventory revoke {updater_id}`, then enable again",
                credential.display(),
                reason.unwrap_or_default()
            ));
            Ok(Some(token))
        }
        tern_client::Joined::Refused(e) => Err(e.into()),
    }
}
