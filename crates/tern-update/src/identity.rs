//! Who this host is to ternd: the updater id (made once and kept in the namespace), and
//! the host id and hostname heartbeats and joins send.

use std::path::Path;

use crate::error::Result;
use crate::fsutil::{self, read_trimmed};
use crate::layout::Layout;
use crate::settings::Settings;

/// Reads the updater id, creating it when missing.
pub(crate) fn updater_id(layout: &Layout) -> Result<String> {
    let path = layout.id_file();
    if let Ok(text) = std::fs::read_to_string(&path) {
        let id = text.trim();
        if id.len() == 36 {
            return Ok(id.to_string());
        }
    }
    let id = crate::random::new_uuid()?;
    fsutil::write_atomic(&path, format!("{id}\n").as_bytes(), 0o644)?;
    Ok(id)
}

/// The hostname ternd knows the host by: the one given, else the kernel's node name.
pub(crate) fn hostname(settings: &Settings) -> String {
    settings.hostname.clone().unwrap_or_else(|| {
        rustix::system::uname()
            .nodename()
            .to_string_lossy()
            .into_owned()
    })
}

/// The host id heartbeats carry: the one given, else `/etc/machine-id`; empty when
/// neither is there.
pub(crate) fn host_id(settings: &Settings) -> String {
    settings
        .host_id
        .clone()
        .or_else(|| read_trimmed(Path::new("/etc/machine-id")))
        .unwrap_or_default()
}
